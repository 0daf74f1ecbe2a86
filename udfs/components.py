"""What the three registries of pluggable components share: objectives (:mod:`udfs.objectives.registry`),
difficulty scores (:mod:`udfs.scores`) and pacing functions (:mod:`udfs.curriculum`).

A component has a name (one namespace across the kinds: the config's ``components.<name>`` names one), a function
of a fixed signature, and its own settings, declared once where it is registered (``params=``: their defaults;
``check=``: a function that raises ``ValueError`` for values it cannot run with), which the config may set
(:func:`configure`, from ``components``). The built-ins declare theirs exactly as a plug-in does. The settings a
component runs with are :func:`settings_of`; each result's key holds those of the components it used. No heavy
import: reading a config imports this module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any


class ComponentError(ValueError):
    """A component registered twice, declared wrongly, configured wrongly, or a name no component has."""


#: Signature of each kind's function, for messages.
SIGNATURES = {
    "objective": "(margins, labels, offsets, *, tree, params)",
    "difficulty score": "(labels, features, offsets, *, params)",
    "pacing function": "(stage, stages, *, params)",
}

_CONFIGURED: dict[str, dict[str, Any]] = {}


def check_name(kind: str, name: Any) -> str:
    """``name`` when it is a valid component name (lower-case letters, digits and _, starting with a letter)."""
    ok = isinstance(name, str) and name.replace("_", "").isalnum() and name[:1].isalpha() and name == name.lower()
    if not ok:
        raise ComponentError(f"{kind} name {name!r}: lower-case letters, digits and _, starting with a letter")
    return str(name)


def accepted(fn: Callable[..., Any], kind: str, name: str, positional: int, keywords: tuple[str, ...],
             optional: tuple[str, ...] = ()) -> tuple[str, ...]:  # fmt: skip
    """The ``optional`` keywords ``fn`` takes; :class:`ComponentError` unless it takes ``positional`` positional
    arguments and every one of ``keywords``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise ComponentError(f"{kind} {name!r}: {fn!r} is not a function") from None
    ps = sig.parameters
    pos = [p for p in ps.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in ps.values())
    varkw = any(p.kind is p.VAR_KEYWORD for p in ps.values())
    missing = [n for n in keywords if n not in ps and not varkw]
    if (len(pos) < positional and not varargs) or missing:
        what = getattr(fn, "__qualname__", repr(fn))
        raise ComponentError(f"{kind} {name!r}: {what}{sig} must take {SIGNATURES[kind]}")
    return tuple(n for n in optional if n in ps or varkw)


#: A component's check of its settings: raises ``ValueError`` (its message names the setting) for values it cannot
#: run with (what it returns is not used).
Check = Callable[[Mapping[str, Any]], object]


def own_params(
    kind: str,
    name: str,
    params: Mapping[str, Any] | None,
    reserved: tuple[str, ...] = (),
    check: Check | None = None,
) -> dict:
    """A component's declared settings (their defaults), checked: names are identifiers, values plain data, and
    the defaults pass the component's own ``check``."""
    out = dict(params or {})
    for k, v in out.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ComponentError(f"{kind} {name!r}: setting name {k!r} is not an identifier")
        if k in reserved:
            raise ComponentError(f"{kind} {name!r}: setting {k!r} is a training setting its params hold already")
        if not isinstance(v, (bool, int, float, str)) and v is not None:
            raise ComponentError(f"{kind} {name!r}: setting {k!r} = {v!r}: a default is a number, string or bool")
    if check is not None and not callable(check):
        raise ComponentError(f"{kind} {name!r}: check={check!r} is not a function")
    _run_check(kind, name, check, out, "its defaults")
    return out


def _run_check(kind: str, name: str, check: Check | None, settings: Mapping[str, Any], what: str) -> None:
    """``check(settings)``; its ``ValueError`` (or any error: a check is a plug-in's code too) as a
    :class:`ComponentError` naming the component, in one line."""
    if check is None:
        return
    try:
        check(settings)
    except Exception as e:  # noqa: BLE001 - a plug-in's check may raise anything: one line naming it
        text = " ".join(str(e).split()) or type(e).__name__
        raise ComponentError(f"components.{name} ({kind}, {what}): {text}") from None


def is_plugin(module: str | None) -> bool:
    """A component defined outside this package's own modules (``udfs``) is a plug-in (:mod:`pipelines.plugins`)."""
    return not (module or "").startswith("udfs.")


def configure(params: Mapping[str, Mapping[str, Any]]) -> None:
    """Set every component's settings from the config's ``components`` (checked by the caller against each
    component's declaration: :func:`check_params`); a component not named runs with its defaults."""
    _CONFIGURED.clear()
    _CONFIGURED.update({name: dict(v) for name, v in params.items()})


def configured() -> dict[str, dict[str, Any]]:
    """The settings :func:`configure` set, by component name (what a Spark task is given with the plug-ins)."""
    return {name: dict(v) for name, v in _CONFIGURED.items()}


def settings_of(name: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The settings component ``name`` runs with: its defaults, then the configured values."""
    return {**defaults, **_CONFIGURED.get(name, {})}


def check_params(
    kind: str, name: str, defaults: Mapping[str, Any], given: Any, check: Check | None = None
) -> dict[str, Any]:
    """``given`` (``components.<name>``) checked against the component's declared settings: a mapping, no unknown
    key, each value of its default's type (an int where a float is declared is taken), and the whole passing the
    component's ``check``; the checked dict."""
    if not isinstance(given, Mapping):
        raise ComponentError(f"components.{name}: expected a mapping of settings, got {given!r}")
    out: dict[str, Any] = {}
    for k, v in given.items():
        if k not in defaults:
            known = ", ".join(defaults) or "none"
            raise ComponentError(f"components.{name}.{k}: {kind} {name!r} has no setting {k!r} (its settings: {known})")
        d = defaults[k]
        if isinstance(d, bool) or isinstance(v, bool):
            ok = isinstance(v, bool) and isinstance(d, bool) or d is None
        elif isinstance(d, float):
            ok = isinstance(v, (int, float))
            v = float(v) if ok else v
        elif d is None:
            ok = isinstance(v, (int, float, str)) or v is None
        else:
            ok = isinstance(v, type(d))
        if not ok:
            raise ComponentError(f"components.{name}.{k} = {v!r}: expected a {type(d).__name__} like its default {d!r}")
        out[k] = v
    _run_check(kind, name, check, {**defaults, **out}, "as configured")
    return out
