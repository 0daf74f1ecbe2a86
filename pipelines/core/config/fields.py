"""How a config section declares its settings, as data, and what that declaration drives.

Each field of a section is declared once with :func:`setting`: its default, its description, and its bounds or
choices (:class:`Setting`). From that one declaration come the checks when the section is made
(:class:`Section`: one line naming the key's full path, its ``ltr`` flag where it has one, and the value; exit 2),
the generated config reference and ``conf/default.yaml`` (:mod:`pipelines.app.reference`), and the type check of
every value read from YAML or ``--set`` (:func:`from_dict`). A check that relates two fields, or asks a registry
(a strategy's name, a pacing function's), is a section's :meth:`Section.check`, and says what it checks in the
declaration of the fields it reads (``checks=``), so the reference shows it too.

Why not pydantic (v2 is in the lock, through MLflow and Airflow): its errors are several lines per failure in its
own words ("1 validation error for ...", "Input should be ..."), which every message here would have to be
rewritten from, and its coercion is lax where this one is strict (``"200"`` is not an int here, a bool is not a
number); the type check below is 60 lines that the fuzz tests (:mod:`pipelines.testing.fuzz`) hold to one-line
errors.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

from pipelines.core.errors import UserError

T = TypeVar("T")


class ConfigError(UserError):
    """Invalid configuration: the message names the key, the source and the fix."""


@dataclass(frozen=True)
class Setting:
    """What a config field declares besides its type and default: its description and its checks.

    ``choices``: the values it may take; ``min``/``max`` (inclusive) and ``above``/``below`` (exclusive): its
    bounds (``None`` passes them: a setting typed ``int | None`` means "the dataset's"); ``each``: the bounds hold
    for each item of a list; ``why``: what a bound or the choices mean, said in its messages; ``flag``: the ``ltr``
    flag that sets it, named in its messages; ``checks``: what its section's :meth:`Section.check` checks of it
    besides."""

    doc: str
    choices: tuple[str, ...] | None = None
    min: float | None = None
    max: float | None = None
    above: float | None = None
    below: float | None = None
    each: bool = False
    why: str = ""
    flag: str = ""
    checks: tuple[str, ...] = ()

    def rules(self) -> tuple[str, ...]:
        """The declared checks as the reference states them: ``one of a, b``, ``in (0, 1]``, ``>= 1 (why)``."""
        out = []
        if self.choices is not None:
            out.append(f"one of {', '.join(self.choices)}" + (f" ({self.why})" if self.why else ""))
        bound = self.bound()
        if bound:
            out.append(("each " if self.each else "") + bound + (f" ({self.why})" if self.why else ""))
        return (*out, *self.checks)

    def bound(self) -> str:
        """``>= 1``, ``> 0``, ``in (0, 1]``, ...: the bounds as text ("" for none)."""
        lo = ("[", self.min) if self.min is not None else ("(", self.above) if self.above is not None else None
        hi = ("]", self.max) if self.max is not None else (")", self.below) if self.below is not None else None
        if lo and hi:
            return f"in {lo[0]}{_num(lo[1])}, {_num(hi[1])}{hi[0]}"
        if lo:
            return f"{'>=' if lo[0] == '[' else '>'} {_num(lo[1])}"
        if hi:
            return f"{'<=' if hi[0] == ']' else '<'} {_num(hi[1])}"
        return ""

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (``must be ..., got ...``), None if nothing."""
        if self.choices is not None and value not in self.choices:
            what = f" ({self.why})" if self.why else ""
            return f"must be one of {', '.join(self.choices)}{what}, got {value!r}"
        if not self.bound():
            return None
        for v in value if self.each and isinstance(value, list) else [value]:
            if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if (
                (self.min is not None and not v >= self.min)
                or (self.max is not None and not v <= self.max)
                or (self.above is not None and not v > self.above)
                or (self.below is not None and not v < self.below)
            ):
                what = f" ({self.why})" if self.why else ""
                each = "each " if self.each else ""
                return f"must {each}be {self.bound()}{what}, got {value!r}"
        return None


def _num(x: float | None) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def setting(
    default: Any = dataclasses.MISSING,
    doc: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    choices: Sequence[str] | None = None,
    min: float | None = None,  # noqa: A002 - the bound's name in the declarations
    max: float | None = None,  # noqa: A002
    above: float | None = None,
    below: float | None = None,
    each: bool = False,
    why: str = "",
    flag: str = "",
    checks: Sequence[str] = (),
) -> Any:
    """A config field: its default (or ``factory`` for a mutable one), description and checks (:class:`Setting`)."""
    meta = {
        "setting": Setting(
            doc, tuple(choices) if choices is not None else None, min, max, above, below, each, why, flag,
            tuple(checks),
        )
    }  # fmt: skip
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


#: The declarations of section types that cannot declare their own (:func:`declare`).
_DECLARED_ELSEWHERE: dict[type, dict[str, Setting]] = {}


def declare(cls: type, settings: Mapping[str, Setting]) -> dict[str, Setting]:
    """Declare the settings of a section whose type is not a :class:`Section`: one from ``udfs``
    (:class:`udfs.conventions.NdcgSpec`), which imports nothing of ``pipelines``. :func:`from_dict` runs their
    checks before it makes the type, and the reference reads them as any section's."""
    _DECLARED_ELSEWHERE[cls] = dict(settings)
    return _DECLARED_ELSEWHERE[cls]


def declared(cls: type) -> dict[str, Setting]:
    """Field name -> its :class:`Setting`, of a section (a field without one: an empty declaration)."""
    if cls in _DECLARED_ELSEWHERE:
        return _DECLARED_ELSEWHERE[cls]
    return {f.name: f.metadata.get("setting", Setting("")) for f in dataclasses.fields(cast(Any, cls))}


def key_name(where: str, name: str, setting: Setting, flags: bool = True) -> str:
    """``section.name`` and, where the setting has a flag and ``flags``, `` (--flag)``: a key as messages name it."""
    key = f"{where}.{name}" if where else name
    return f"{key} ({setting.flag})" if flags and setting.flag else key


def check_declared(cls: type, values: Mapping[str, Any], where: str, flags: bool = True) -> None:
    """Every declared check of ``cls``'s fields on ``values`` (a section's, or the part of one that an extra
    curriculum sets); :class:`ConfigError` at the first that fails, in one line."""
    for name, s in declared(cls).items():
        if name in values:
            problem = s.problem(values[name])
            if problem:
                raise ConfigError(f"{key_name(where, name, s, flags)} {problem}")


class Section:
    """A config section (a frozen dataclass deriving from it): its declared checks run when it is made, then its
    own :meth:`check` (what relates fields or asks a registry). ``SECTION``: its key in the config."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(cast(Any, self))}
        check_declared(type(self), values, self.SECTION)
        self.check()

    def check(self) -> None:
        """The section's checks beyond its fields' declarations (none here)."""


# ------------------------------------------------------------------ the type check
def unknown_key(path: str, known: Sequence[str]) -> str:
    """The one-line message of an unknown config key: its full ``path`` and the closest of the ``known`` keys
    of its section (:func:`difflib.get_close_matches`), else all of them: ``unknown config key
    'grid.extra_curricula.paced.strateg'; did you mean 'grid.extra_curricula.paced.strategy'?`` (or ``...; known
    keys here: a, b``)."""
    parent, _, name = path.rpartition(".")
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f"unknown config key '{path}'; did you mean '{parent + '.' if parent else ''}{close[0]}'?"
    return f"unknown config key '{path}'; known keys here: {', '.join(known)}"


def unknown_name(kind: str, name: str, known: Sequence[str]) -> str:
    """``unknown objective 'lambamart'; did you mean 'lambdamart'? (one of: ...)``: a component's name that its
    registry does not hold, the closest registered name (:func:`difflib.get_close_matches`) and all of them."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} {name!r}{hint} (one of: {', '.join(known)})"


def type_name(tp: Any) -> str:
    """A type as messages name it."""
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against type ``tp`` (recursively) and return it in that type. A type with a classmethod
    ``from_config(value, where)`` makes its values itself (:class:`pipelines.core.config.ExtraCurriculum`)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(value, a, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}: {value!r} is not a {type_name(tp)}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping (section), got {value!r}")
        return from_dict(tp, value, where)
    if hasattr(tp, "from_config"):
        return tp.from_config(value, where)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        kt, vt = args or (str, Any)
        return {coerce(k, kt, f"{where}.{k}"): coerce(v, vt, f"{where}.{k}") for k, v in value.items()}
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        et = args[0] if args else Any
        items = [coerce(v, et, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # YAML reads 4g as str, but 8 as int: both are fine strings
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    raise ConfigError(f"{where}: unsupported config type {type_name(tp)}")


def from_dict(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types raise ConfigError."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cast(Any, cls))]  # cls is a dataclass (the callers' sections)
    kwargs = {}
    for k, v in data.items():
        path = f"{where}.{k}" if where else str(k)
        if k not in names:
            raise ConfigError(unknown_key(path, names))
        kwargs[k] = coerce(v, hints[k], path)
    if cls in _DECLARED_ELSEWHERE:
        check_declared(cls, kwargs, where)
    try:
        return cls(**kwargs)
    except ConfigError:  # the section's own checks: they name the key's path and value
        raise
    except (TypeError, ValueError) as e:  # missing fields, or the checks of a type from udfs (NdcgSpec)
        raise ConfigError(f"{where or cls.__name__}: {e}") from None
