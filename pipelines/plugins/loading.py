"""Where plug-ins come from, and only there: files and modules named by ``--plugin`` or a config file's
``plugins:`` list, and installed packages' entry points in the group ``ltr.plugins``.

:func:`load` imports them in this process and returns a :class:`PluginSet`, what a Spark task is given to load
the same plug-ins where it runs (:func:`activate`: a file plug-in travels as its bytes, so a cluster's executors
run exactly the driver's file, as ``--py-files`` would ship it; a module or an entry point must be installed
there, as ``ltr pack``'s environment installs them). Every error is one line naming the plug-in and the fix
(:class:`PluginError`, exit code 2).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import linecache
import logging
import os
import re
import sys
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.core.errors import UserError, crosses_tasks
from udfs import components
from udfs.components import ComponentError

log = logging.getLogger(__name__)

#: The entry-point group installed packages register their plug-ins in.
GROUP = "ltr.plugins"


@crosses_tasks
class PluginError(UserError):
    """A plug-in that cannot be loaded, clashes, is configured wrongly or returns what it must not (exit 2)."""


@dataclass(frozen=True)
class Source:
    """Where one plug-in module came from: ``kind`` (``file``, ``module``, ``entry point``), ``ref`` (the absolute
    path, the module name, or ``name = value`` of the entry point), the module it is loaded as, a file's bytes
    (what a Spark task loads) and, for an installed package, its distribution and version."""

    kind: str
    ref: str
    module: str
    text: bytes | None = None
    package: str | None = None
    version: str | None = None

    @property
    def label(self) -> str:
        """The plug-in as messages name it (the file's path, the module, the package)."""
        return self.ref if self.kind != "entry point" else f"{self.ref} ({self.package} {self.version})"


@dataclass(frozen=True)
class PluginSet:
    """The plug-ins of a run: their sources, every component's settings (the config's ``components``) and what each
    plug-in component's code is on the driver (:func:`pipelines.core.keys.component_code`), which a task compares
    with its own. Picklable: it travels in a Spark task's closure."""

    sources: tuple[Source, ...] = ()
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    codes: Mapping[str, str] = field(default_factory=dict)

    @functools.cached_property
    def digest(self) -> str:
        """What identifies this set in a process (:func:`activate` loads a set once; it asks in every task and, for
        a plug-in difficulty score, every batch: hashed once a process)."""
        h = hashlib.sha256()
        for s in self.sources:
            h.update(f"{s.kind}\0{s.ref}\0{s.module}\0".encode() + (s.text or b""))
        h.update(repr(sorted((k, sorted(v.items())) for k, v in self.params.items())).encode())
        h.update(repr(sorted(self.codes.items())).encode())
        return h.hexdigest()


_OWNER: dict[str, Source] = {}  # component name -> the source that registered it
_ACTIVE: list[str] = []  # digest of the set activate() loaded last
_CURRENT: list[PluginSet] = []  # the set this process's config loaded (what its tasks load)


def registries() -> dict[str, dict[str, Any]]:
    """Kind -> registry (name -> component), the built-in objectives imported first (so a clash is the plug-in's)."""
    from udfs.curriculum import PACINGS
    from udfs.objectives import registry
    from udfs.scores import SCORES

    return {"objective": registry.objectives(), "difficulty score": dict(SCORES), "pacing function": dict(PACINGS)}


def component(name: str) -> tuple[str, Any] | None:
    """(kind, component) of the component called ``name`` of any kind; None if there is none."""
    for kind, reg in registries().items():
        if name in reg:
            return kind, reg[name]
    return None


def _module_name(path: Path) -> str:
    """The module a file plug-in is loaded as: ``ltr_plugin_<stem>`` (never a name a package of the user has)."""
    stem = re.sub(r"\W", "_", path.stem)
    return f"ltr_plugin_{stem}"


def one_line(e: BaseException) -> str:
    """A plug-in's exception message on one line (its own newlines would break the one-line error)."""
    return " ".join(str(e).split())


def _files_named(message: str, failed: Source) -> str:
    """``message`` with the module names of file plug-ins (``ltr_plugin_<stem>``, which the registries name as a
    component's source) replaced by their files: those that registered a component, and ``failed`` (unloaded
    again). A clash names the files the user wrote."""
    files = {s.module: s.ref for s in (*_OWNER.values(), failed) if s.kind == "file"}
    return re.sub(r"\bltr_plugin_\w+\b", lambda m: files.get(m.group(0), m.group(0)), message)


def _fail(source: Source, e: BaseException) -> PluginError:
    """A plug-in that raised while importing: one line with the exception and the line of the plug-in."""
    label, path = source.label, source.ref if source.kind == "file" else None
    if isinstance(e, ComponentError):
        return PluginError(f"plugin {label}: {_files_named(one_line(e), source)}")
    where = ""
    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if path and os.path.abspath(f.filename) == path] or frames[-1:]
    if isinstance(e, SyntaxError):
        where = ""  # its message holds the line
    elif mine:
        where = f" (line {mine[-1].lineno}: {(mine[-1].line or '').strip()})"
    return PluginError(
        f"plugin {label} failed to import: {type(e).__name__}: {one_line(e)}{where}; fix it and check it with "
        f"`ltr plugins --check --plugin {label}`"
    )


def _import(source: Source) -> None:
    """Import ``source`` in this process (a file from its bytes, a module or an entry point by name)."""
    try:
        if source.kind == "file":
            old = sys.modules.get(source.module)
            if (
                old is not None
                and getattr(old, "__ltr_plugin_text__", None) == source.text
                and old.__file__ == source.ref
            ):
                return  # loaded already: the same file, the same bytes
            if old is not None:
                unload(source.module)
            spec = importlib.util.spec_from_loader(source.module, loader=None, origin=source.ref)
            assert spec is not None
            module = importlib.util.module_from_spec(spec)
            module.__file__ = source.ref
            module.__ltr_plugin_text__ = source.text  # type: ignore[attr-defined]
            sys.modules[source.module] = module
            # its source as inspect reads it, where the file is not (an executor): the identity reads the same text
            lines = (source.text or b"").decode("utf-8", "replace").splitlines(keepends=True)
            linecache.cache[source.ref] = (len(source.text or b""), None, lines, source.ref)
            try:
                code = compile(source.text or b"", source.ref, "exec")
                exec(code, module.__dict__)  # noqa: S102 (the user's own plug-in, named on their command line)
            except BaseException:
                # what it registered before it failed goes too: a load of the fixed file in this process (a notebook,
                # a test) would otherwise find its own half-registered components and refuse them as a clash
                unload(source.module)
                raise
        else:
            importlib.import_module(source.module)
    except PluginError:
        raise
    except KeyboardInterrupt:  # Ctrl-C, wherever it lands: ltr stops as it does for Ctrl-C
        raise
    except BaseException as e:  # anything the plug-in raises, sys.exit() and GeneratorExit too: one line naming it
        raise _fail(source, e) from None
    for name, (_, comp) in plugin_components().items():
        if comp.module == source.module:
            _OWNER[name] = source


def unload(module: str) -> None:
    """Remove every component a plug-in module registered (a file loaded again after an edit, a test's plug-in)."""
    from udfs.curriculum import ANTI, PACINGS, STRATEGIES
    from udfs.objectives import registry
    from udfs.scores import SCORES

    for reg in (registry._REGISTRY, SCORES, PACINGS):  # noqa: SLF001 (the registries' own unregistering)
        for name in [n for n, c in reg.items() if getattr(c, "module", None) == module]:
            reg.pop(name)
            if reg is SCORES:  # a difficulty score's strategy of the same name goes with it, and its anti-curriculum
                for s in (name, ANTI + name):  # theirs only: a built-in strategy of that name orders by another score
                    if s in STRATEGIES and STRATEGIES[s].score == name:
                        STRATEGIES.pop(s)
            _OWNER.pop(name, None)
    sys.modules.pop(module, None)
    if any(s.module == module for s in current().sources):
        _CURRENT.clear()  # the run's plug-ins are no longer what this process has loaded
    _ACTIVE.clear()


def loaded_modules() -> set[str]:
    """The modules of every plug-in component registered in this process."""
    return {str(c.module) for _, c in plugin_components().values()}


def file_source(ref: str) -> Source:
    """The :class:`Source` of a file plug-in (its bytes read now); :class:`PluginError` when it cannot be read."""
    path = Path(ref).expanduser()
    if not path.is_file():
        raise PluginError(
            f"plugin {ref}: no such file; --plugin takes a Python file (my_plugin.py) or an importable module "
            "(my_package.plugins)"
        )
    path = path.resolve()
    try:
        text = path.read_bytes()
    except OSError as e:
        raise PluginError(f"plugin {ref}: cannot read it: {e.strerror}") from None
    return Source("file", str(path), _module_name(path), text)


def module_source(ref: str) -> Source:
    """The :class:`Source` of a module plug-in (``my_package.plugins``), with its distribution's version."""
    if not all(part.isidentifier() for part in ref.split(".")):
        raise PluginError(
            f"plugin {ref!r}: neither a file (no such file) nor a module name; --plugin takes a Python file "
            "(my_plugin.py) or an importable module (my_package.plugins)"
        )
    package, version = _distribution(ref.split(".")[0])
    return Source("module", ref, ref, None, package, version)


def _distribution(top: str) -> tuple[str | None, str | None]:
    from importlib import metadata

    for dist in metadata.packages_distributions().get(top, []):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None, None


def entry_point_sources() -> list[Source]:
    """The installed packages' plug-ins: entry points of the group ``ltr.plugins`` (``name = module``)."""
    from importlib import metadata

    out = []
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
        module = ep.value.split(":")[0].strip()
        dist = getattr(ep, "dist", None)
        out.append(
            Source(
                "entry point",
                f"{ep.name} = {ep.value}",
                module,
                None,
                dist.name if dist else None,
                dist.version if dist else None,
            )
        )
    return out


def sources_of(refs: Iterable[str], entry_points: bool = True) -> list[Source]:
    """The sources of ``refs`` (files or modules) and, with ``entry_points``, of the installed packages."""
    out = [file_source(r) if r.endswith(".py") or os.sep in r or Path(r).is_file() else module_source(r) for r in refs]
    return out + (entry_point_sources() if entry_points else [])


def load(refs: Iterable[str] = (), params: Mapping[str, Any] | None = None, *, entry_points: bool = True) -> PluginSet:
    """Import the plug-ins of ``refs`` and (``entry_points``) the installed ones, set every component's settings
    from ``params`` (the config's ``components``, checked), and return the :class:`PluginSet` a Spark task loads."""
    from udfs.objectives import registry

    registry.objectives()  # the built-ins first (they load lazily): a plug-in that takes one's name is the one refused
    sources = sources_of(refs, entry_points)
    for s in sources:
        _import(s)
    return configure(tuple(sources), params or {})


def configure(sources: tuple[Source, ...], params: Mapping[str, Any]) -> PluginSet:
    """Check the config's ``components`` against the components' declared settings, set them, return the
    :class:`PluginSet`."""
    if not isinstance(params, Mapping):
        raise PluginError(f"components: expected a mapping of component name -> settings, got {params!r}")
    from pipelines.core.keys import component_code

    checked: dict[str, dict[str, Any]] = {}
    for name, given in params.items():
        found = component(name)
        if found is None:
            plugins = ", ".join(sorted(_OWNER)) or "none loaded"
            raise PluginError(
                f"components.{name}: no component is called {name!r} (plug-ins: {plugins}); load the plug-in "
                f"with {_sources_hint()}"
            )
        kind, comp = found
        try:
            checked[name] = components.check_params(kind, name, comp.defaults, given, comp.check)
        except ComponentError as e:
            raise PluginError(str(e)) from None
    components.configure(checked)
    _check_names()
    modules = {s.module for s in sources}
    codes = {n: component_code(c.fn, c.settings()) for n, (_, c) in plugin_components().items() if c.module in modules}
    return PluginSet(sources, checked, codes)


def use_components(settings: Mapping[str, Any]) -> None:
    """Make ``settings`` (a config's ``components``) what this process and its Spark tasks run every component with:
    checked, configured, and in the plug-in set the tasks load (:func:`current`). What computes a result's key from
    a config calls it, so that a config loaded without :func:`pipelines.plugins.run_config.load_run_config` (the
    API's :func:`pipelines.core.config.load_config`) keys and trains with its own settings, never another's."""
    pset = current()
    if {n: dict(v) for n, v in pset.params.items()} == {n: dict(v) for n, v in settings.items()}:
        if components.configured() == {n: dict(v) for n, v in settings.items()}:
            return
    set_current(configure(pset.sources, settings))


def _sources_hint() -> str:
    from pipelines.core.config import PLUGIN_SOURCES

    return PLUGIN_SOURCES


def _check_names() -> None:
    """One name, one component: a plug-in's name may not be another kind's (``components.<name>`` names one)."""
    seen: dict[str, str] = {}
    for kind, reg in registries().items():
        for name, comp in reg.items():
            other = seen.get(name)
            if other is not None and getattr(comp, "plugin", False):
                raise PluginError(
                    f"plugin {_OWNER[name].label if name in _OWNER else comp.module}: {kind} {name!r} has the name of "
                    f"the {other} {name!r}; rename it"
                )
            seen.setdefault(name, kind)


def plugin_components() -> dict[str, tuple[str, Any]]:
    """Name -> (kind, component) of every plug-in component loaded in this process."""
    return {n: (kind, c) for kind, reg in registries().items() for n, c in reg.items() if getattr(c, "plugin", False)}


def owner(name: str) -> Source | None:
    """The source that registered component ``name`` (None: a built-in)."""
    return _OWNER.get(name)


def activate(plugins: PluginSet | None) -> None:
    """Load ``plugins`` in this process (a Spark task's Python worker) once, and check that each plug-in
    component's code is the driver's (:class:`PluginError` naming the component otherwise)."""
    if plugins is None or (_ACTIVE and _ACTIVE[-1] == plugins.digest):
        return
    wanted = {s.module for s in plugins.sources}
    for module in sorted(loaded_modules() - wanted):  # a reused Python worker: exactly the driver's plug-ins
        unload(module)
    for s in plugins.sources:
        _import(s)
    components.configure(plugins.params)
    from pipelines.core.keys import component_code

    here = plugin_components()
    for name, code in plugins.codes.items():
        if name not in here:
            raise PluginError(f"plugin component {name!r} is not loaded on this executor: install its package there")
        _, comp = here[name]
        mine = component_code(comp.fn, comp.settings())
        if mine != code:
            where = owner(name)
            raise PluginError(
                f"plugin component {name!r} ({where.label if where else comp.module}) on this executor is not the "
                f"driver's (code {mine[:19]}, the driver's {code[:19]}): install the same version on every machine"
            )
    _ACTIVE[:] = [plugins.digest]


def current() -> PluginSet:
    """The plug-ins this process loaded with its config (:func:`load_config`): what its Spark tasks load."""
    return _CURRENT[-1] if _CURRENT else PluginSet()


def set_current(plugins: PluginSet) -> None:
    """Make ``plugins`` what this process's Spark tasks load (:func:`current`)."""
    _CURRENT[:] = [plugins]


def describe() -> list[dict[str, Any]]:
    """Every component (built-in and plug-in): kind, name, whether a plug-in, its source file, its identity (what
    the keys of the results that use it hold), a difficulty score's kind of difficulty (``difficulty``: oracle,
    label_free or model) and, for an installed plug-in, its package and version."""
    import inspect

    from pipelines.core import keys
    from udfs.difficulty import difficulty_frame

    rows = []
    for kind, reg in registries().items():
        for name, comp in sorted(reg.items()):
            fn = getattr(comp, "fn", None)
            if getattr(comp, "plugin", False):
                identity = keys.component_code(fn, comp.settings())
            elif kind == "objective":
                identity = keys.objective_code(name) or f"XGBoost {keys.library_versions().get('xgboost', '?')}"
            elif kind == "difficulty score" and fn is None:
                identity = keys.code_identity("difficulty")["sources"]  # a column of the dataset's scores
                fn = difficulty_frame
            else:
                identity = keys.code_identity("curriculum")["sources"]
            try:
                source = inspect.getsourcefile(fn) if fn is not None else None
            except TypeError:
                source = None
            src = owner(name)
            rows.append(
                {
                    "kind": kind,
                    "name": name,
                    "plugin": bool(getattr(comp, "plugin", False)),
                    "source": src.ref if src and src.kind == "file" else source or getattr(comp, "builtin", None) or "",
                    "module": getattr(comp, "module", None),
                    "identity": identity,
                    "settings": comp.settings() if hasattr(comp, "settings") else {},
                    **({"difficulty": comp.kind} if kind == "difficulty score" else {}),
                    **({"package": src.package, "version": src.version} if src and src.package else {}),
                }
            )
    return rows


def curriculum_components(strategy: str, pacing: str) -> dict[str, str]:
    """The components a curriculum of ``strategy`` and ``pacing`` uses (its difficulty score, its pacing function)
    that its key must hold besides the built-in code, name -> code: a plug-in's
    :func:`pipelines.core.keys.component_code` (its code and settings), a built-in's own settings (``settings:``
    and their digest) where it has some. A curriculum of built-ins without settings holds none."""
    from pipelines.core.keys import component_code, digest
    from udfs.curriculum import PACINGS, STRATEGIES
    from udfs.scores import SCORES

    used: list[Any] = []
    score = STRATEGIES[strategy].score if strategy in STRATEGIES else None
    if score is not None:
        used.append(SCORES[score])
    if pacing and pacing in PACINGS and STRATEGIES[strategy].shares is None:
        used.append(PACINGS[pacing])
    return {
        c.name: component_code(c.fn, c.settings()) if c.plugin else "settings:" + digest(c.settings())
        for c in used
        if c.plugin or c.settings()
    }


def plugin_tags(names: Iterable[str]) -> dict[str, str]:
    """MLflow tags of the plug-in components among ``names``: ``ltr.plugin.<name>`` -> its kind, source path,
    identity and (installed) package version, as JSON; nothing for a built-in."""
    import json

    from pipelines.core.keys import component_code

    out = {}
    loaded = plugin_components()
    for name in sorted(set(names)):
        if name not in loaded:
            continue
        kind, comp = loaded[name]
        src = owner(name)
        doc = {
            "kind": kind,
            "source": src.ref if src else comp.module,
            "identity": component_code(comp.fn, comp.settings()),
            "settings": comp.settings(),
            **({"package": src.package, "version": src.version} if src and src.package else {}),
        }
        out[f"ltr.plugin.{name}"] = json.dumps(doc, sort_keys=True)
    return out


def used_plugins(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The plug-in components among ``names`` as :func:`plugin_tags` describes them, by name (what an output's
    ``config.json`` records)."""
    import json

    return {k.removeprefix("ltr.plugin."): json.loads(v) for k, v in plugin_tags(names).items()}
