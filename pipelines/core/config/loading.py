"""Loading a config: YAML files and ``--set`` overrides into the typed sections of :mod:`.schema`.

* A run's configuration is ``conf/default.yaml`` (written from the declarations, every key with its default;
  a test keeps the two equal), or another file (any subset of the keys), then ``--set section.key=value``
  overrides, the value read as YAML (``--set grid.trees=200``, ``--set spark.conf={"spark.a": "b"}``).
* An unknown or misspelt key anywhere (a section, a nested section, an extra curriculum, a ``--set``) is an
  error naming its full path and the closest known key (``grid.extra_curricula.paced.strateg``: did you mean
  ``...strategy``?), in one line; the CLI exits 2. Values are checked against the field types (``"200"`` is not
  an int, ``"0.3"`` not a number), then by each section's declarations (:mod:`.fields`).
* Keys that moved (:data:`MOVED`) are read at their new place for one release, with one deprecation line each.

Dataset descriptions (feature count, label range, feature roles) live in ``conf/datasets/<name>.yaml`` and load
into :class:`~pipelines.core.config.schema.DatasetSpec`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from pipelines.core.config.fields import ConfigError, from_dict, unknown_key
from pipelines.core.config.schema import PLUGIN_SOURCES, Config, CurriculumConfig, DatasetSpec, ExtraCurriculum
from udfs.curriculum import PACINGS

log = logging.getLogger(__name__)

#: The project's root in a source checkout (``conf/`` and ``jobs/`` are there).
_ROOT = Path(__file__).resolve().parents[3]


def conf_dir() -> Path:
    """The ``conf/`` directory: ``$LTR_CONF_DIR``, the source checkout's, or the installed copy."""
    env = os.environ.get("LTR_CONF_DIR")
    if env:
        return Path(env)
    here = _ROOT / "conf"
    if here.is_dir():
        return here
    installed = Path(sys.prefix) / "share" / "ltr" / "conf"
    if installed.is_dir():
        return installed
    raise ConfigError("cannot find the conf/ directory; set LTR_CONF_DIR to the project's conf/")


def jobs_dir() -> Path:
    """The ``jobs/`` scripts spark-submit runs: ``$LTR_JOBS_DIR``, the source checkout's, or the installed copy
    (``<prefix>/share/ltr/jobs``: a DAG file copied to Airflow's dags folder finds them there)."""
    env = os.environ.get("LTR_JOBS_DIR")
    if env:
        return Path(env)
    here = _ROOT / "jobs"
    if (here / "grid.py").is_file():
        return here
    installed = Path(sys.prefix) / "share" / "ltr" / "jobs"
    if (installed / "grid.py").is_file():
        return installed
    raise ConfigError("cannot find the jobs/ scripts; set LTR_JOBS_DIR to the project's jobs/")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:  # one line: where, and what the parser found
        at, what = _yaml_problem(e)
        raise ConfigError(f"{path}{at}: invalid YAML: {what}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _yaml_problem(e: yaml.YAMLError) -> tuple[str, str]:
    """(``":line:column"`` or ``""``, what the parser found): a YAML error as one line."""
    mark = getattr(e, "problem_mark", None)
    at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    return at, getattr(e, "problem", None) or " ".join(str(e).split())


def _check_values(value: Any, where: str, seen: tuple[int, ...] = ()) -> None:
    """A config's values as YAML read them: a tree (a self-referencing alias, ``&a [*a]``, would make every
    consumer of the config recurse without end) of finite numbers (``.nan`` and ``.inf`` pass every bound check a
    setting has). :class:`ConfigError` naming the key otherwise."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if isinstance(value, (dict, list)):
        if id(value) in seen:
            raise ConfigError(f"{where}: the value refers to itself (a YAML alias inside its own anchor)")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            _check_values(v, f"{where}.{k}" if isinstance(value, dict) else f"{where}[{k}]", (*seen, id(value)))


#: What an override's key may hold: section, key and (in free-form mappings) names, joined by dots.
_KEY = re.compile(r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=value"`` -> (["a", "b"], value read as YAML)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set grid.trees=200")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"--set {text!r}: empty key")
    if not _KEY.fullmatch(key):
        raise ConfigError(f"--set {text!r}: a key is names of letters, digits, _ and - joined by dots, got {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        at, what = _yaml_problem(e)
        where = f" (at {at[1:]} of the value)" if at else ""
        raise ConfigError(f"--set {text!r}: value is not valid YAML: {what}{where}") from None
    _check_values(value, f"--set {key}")
    return key.split("."), value


def _section_keys(tp: Any) -> dict[str, Any] | None:
    """Key -> type of a section type (a config dataclass, or an extra curriculum's settings); None for a value."""
    if tp is ExtraCurriculum:
        tp = CurriculumConfig
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return {f.name: hints[f.name] for f in dataclasses.fields(tp)}
    return None


#: Config keys that moved, old -> new: each old key is read for one release, with a one-line deprecation warning
#: (CHANGELOG.md, "Unreleased"). ``plugins.params`` moves every component's settings below it.
MOVED = {
    "train.sigmoid_gamma": "components.sigmoid_pairwise.gamma",
    "train.stochastic_noise": "components.noisy_lambdamart.noise",
    "train.stochastic_anneal": "components.noisy_lambdamart.anneal",
    "train.blend_schedule": "components.blend.schedule",
    "train.blend_at": "components.blend.at",
    "train.blend_width": "components.blend.width",
    "curriculum.root_n": "components.root_n.n",
    "selfpaced.root_n": "components.root_n.n",
    "plugins.params": "components",
}


def moved_key(path: str) -> str | None:
    """The key that old key ``path`` (or a key below ``plugins.params``) is now; None for a key that did not move."""
    for old, new in MOVED.items():
        if path == old or path.startswith(old + ".") and old == "plugins.params":
            return new + path[len(old) :]
    return None


def _deprecated(where: str, old: str, new: str) -> None:
    log.warning("%s: %s is now %s; the old key is read until the next release (CHANGELOG.md)", where, old, new)


def move_keys(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` (a config file's) with every key of :data:`MOVED` at its new place, each said in one deprecation
    warning (``where``: the file). An old key and its new one both set to different values is refused
    (:class:`ConfigError`)."""
    out = json.loads(json.dumps(data))
    for old, new in MOVED.items():
        section, _, name = old.partition(".")
        holder = out.get(section)
        if not isinstance(holder, dict) or name not in holder:
            continue
        value = holder.pop(name)
        _deprecated(where, old, new)
        if old == "plugins.params":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: plugins.params: expected a mapping of component name -> settings")
            for comp, settings in value.items():
                for k, v in settings.items() if isinstance(settings, dict) else [("", settings)]:
                    _put(out, f"components.{comp}" + (f".{k}" if k else ""), v, old, where)
        else:
            _put(out, new, value, old, where)
    return out


def _move_extra_root_n(data: dict[str, Any], where: str) -> None:
    """An extra curriculum's ``root_n`` (an old key; ``data``: a config with its overrides) dropped with a
    deprecation warning where it is the value ``components.root_n.n`` holds, else refused: the root_n pacing's n is
    one setting for every curriculum now, which one curriculum may not change for the others."""
    default = PACINGS["root_n"].defaults["n"]
    components = data.get("components")
    root_n = components.get("root_n") if isinstance(components, dict) else None
    n = root_n.get("n", default) if isinstance(root_n, dict) else default
    grid = data.get("grid")
    extras = grid.get("extra_curricula") if isinstance(grid, dict) else None
    for name, extra in extras.items() if isinstance(extras, dict) else ():
        if isinstance(extra, dict) and "root_n" in extra:
            value = extra.pop("root_n")
            if value != n:
                raise ConfigError(
                    f"{where}: grid.extra_curricula.{name}.root_n = {value}: the root_n pacing's n is one setting "
                    f"for every curriculum now, components.root_n.n ({n}); set that, or use another pacing function"
                )
            _deprecated(where, f"grid.extra_curricula.{name}.root_n", "components.root_n.n")


def _put(data: dict[str, Any], path: str, value: Any, old: str, where: str) -> None:
    """Set ``path`` of ``data`` to ``value`` moved there from ``old``; refused when ``path`` holds another value."""
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: {old} moves to {path}, and {part} there is not a mapping")
    if last in node and node[last] != value:
        raise ConfigError(f"{where}: {old} = {value!r} and {path} = {node[last]!r}: {old} is now {path}; keep one")
    node[last] = value


def apply_overrides(data: dict[str, Any], overrides: list[str], cls: type | None = None) -> dict[str, Any]:
    """Return a copy of ``data`` with ``--set`` overrides applied (keys checked against ``cls``, default Config).

    Below a mapping of sections the next part of the key names an entry (``--set
    grid.extra_curricula.paced.stages=6``); below a free-form mapping (``spark.conf``) the rest of the key
    is one entry: ``--set spark.conf.spark.executor.memory=2g``.

    Raises
    ------
    ConfigError
        A malformed override, or an unknown key (its full path and the closest known one).
    """
    out = json.loads(json.dumps(data))  # deep copy of plain data
    for text in overrides:
        path, value = parse_override(text)
        new = moved_key(".".join(path)) if (cls or Config) is Config else None
        if new is not None:
            _deprecated(f"--set {text!r}", ".".join(path), new)
            path = new.split(".")
        if (cls or Config) is Config and path[0] == "plugins":
            raise ConfigError(
                f"--set {text!r}: plug-ins are loaded only from {PLUGIN_SOURCES}; --set (and an Airflow run's conf) "
                "may only choose, by name, components already loaded, and set their settings (components.<name>)"
            )
        node: dict[str, Any] = out
        keys = _section_keys(cls or Config)
        i = 0
        while keys is not None:  # always: a value ends the walk (break) or is refused
            part, where = path[i], ".".join(path[: i + 1])
            if part not in keys:
                raise ConfigError(f"--set {text!r}: {unknown_key(where, list(keys))}")
            ftp = keys[part]
            if i == len(path) - 1:
                node[part] = value
                break
            if typing.get_origin(ftp) is dict:
                entry_type = typing.get_args(ftp)[1]
                if typing.get_origin(entry_type) is dict and i + 2 < len(path):  # a mapping of mappings: one value
                    entry = node.setdefault(part, {}).setdefault(path[i + 1], {})
                    if not isinstance(entry, dict):
                        raise ConfigError(f"--set {text!r}: '{where}.{path[i + 1]}' is not a mapping")
                    entry[".".join(path[i + 2 :])] = value
                    break
                if _section_keys(entry_type) is None or i + 2 == len(path):  # a free-form mapping, or a whole entry
                    node.setdefault(part, {})[".".join(path[i + 1 :])] = value
                    break
                node, keys, i = node.setdefault(part, {}), None, i + 1  # then into the entry named path[i]
                if not isinstance(node, dict):
                    raise ConfigError(f"--set {text!r}: '{where}' is not a mapping")
                ftp = entry_type
                part, where = path[i], ".".join(path[: i + 1])
            keys = _section_keys(ftp)
            if keys is None:
                raise ConfigError(f"--set {text!r}: '{where}' is a value, not a section")
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {text!r}: '{where}' is not a section")
            node, i = nxt, i + 1
    return out


def config_data(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> tuple[Path, dict]:
    """(the file, its data with ``overrides`` applied): a config before it is checked. A config file's
    ``plugins: [...]`` (a list) is short for ``plugins: {load: [...]}``; its relative paths are the file's."""
    p = Path(path) if path else conf_dir() / "default.yaml"
    data = _read_yaml(p)
    if isinstance(data.get("plugins"), list):
        data["plugins"] = {"load": data["plugins"]}
    load = data.get("plugins", {}).get("load") if isinstance(data.get("plugins"), dict) else None
    if isinstance(load, list):
        data["plugins"]["load"] = [_relative_to(p, x) for x in load]
    for key, value in data.items():
        _check_values(value, f"{p}: {key}")
    data = apply_overrides(move_keys(data, str(p)), list(overrides or []))
    _move_extra_root_n(data, str(p))
    return p, data


def _relative_to(config: Path, ref: Any) -> Any:
    """A plug-in file named by a config file: relative to that file's folder (a module name stays as it is)."""
    if isinstance(ref, str) and ref.endswith(".py") and not Path(ref).is_absolute():
        return str((config.parent / ref).resolve())
    return ref


def config_of(path: Path, data: Mapping[str, Any]) -> Config:
    """The frozen Config of ``data`` (read from ``path``: its name prefixes an error)."""
    try:
        return from_dict(Config, data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> Config:
    """Load ``path`` (default ``conf/default.yaml``), apply ``overrides``, return the frozen Config (components are
    looked up in the registries as they are: :func:`pipelines.plugins.load_config` loads the plug-ins first)."""
    return config_of(*config_data(path, overrides))


def dataset_presets() -> dict[str, DatasetSpec]:
    """Every ``conf/datasets/<name>.yaml``, by name."""
    return {p.stem: load_dataset_spec(p.stem) for p in sorted((conf_dir() / "datasets").glob("*.yaml"))}


def load_dataset_spec(name: str) -> DatasetSpec:
    """Load ``conf/datasets/<name>.yaml``."""
    d = conf_dir() / "datasets"
    p = d / f"{name}.yaml"
    if not p.is_file():
        known = sorted(x.stem for x in d.glob("*.yaml"))
        raise ConfigError(f"unknown dataset '{name}': no {p}; known datasets: {', '.join(known)}")
    data = _read_yaml(p)
    data.setdefault("name", name)
    try:
        return from_dict(DatasetSpec, data)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
