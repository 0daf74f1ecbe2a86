"""Every key of the project, built here from one declared list of what determines each result.

A key names a result that may be reused: two runs with equal keys would make the
same result, so the second may take the first's. Each kind of result declares in
:data:`INPUTS` the inputs that determine it; :func:`make_key` refuses a document
with a field more or less than declared, so a key can neither miss an input nor
pick up something that does not change the result (a path, a worker count).

Code identity (:func:`code_identity`) is the *content* of the code that computes a result, one per kind of result:
a hash of the sources of the kernel modules that compute it (:data:`IDENTITY_ROOTS`: difficulty scores, curricula,
cuts, plan nodes) and every module they import, directly or not (:func:`identity_modules`, lazy imports inside
functions included), read from the packages themselves (the same in a checkout, an editable install, a wheel and a
packed archive), each reduced to its syntax tree without docstrings (:func:`canonical_source`: comments, docstrings
and formatting do not compute), plus the versions of the libraries whose arithmetic the results depend on. A
closure may only reach the kernel (:data:`KERNEL`; :class:`KernelImportError` otherwise), so operations code
(config loading, storage, leases, progress, the session, process trees, MLflow, the report, the CLI) is in no key:
a fix there never retrains a study. Each result takes only its own kind's identity: a change to the tree loop
re-keys nodes, not difficulty scores. The git commit stays provenance
(:func:`pipelines.core.provenance.code_version`), recorded on MLflow runs, never keyed.

Not in any key, because they do not change a result: where inputs are read
from or written to (paths, URIs), how many workers and threads build the trees
(the histogram cuts are global, :mod:`pipelines.store.cuts`), how often checkpoints
are written, retries and timeouts.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pipelines.core.errors import LtrError

#: What determines each kind of result (the fields of its key's document).
INPUTS: dict[str, tuple[str, ...]] = {
    # an ingested dataset (its fingerprint): the Parquet schema, the fold layout, and per subset its
    # row count and order-independent sum of row hashes, so chunking and file layout do not matter
    "dataset": ("schema", "folds", "subsets"),
    # what the Airflow DAG ingested a dataset from (its ingest? task): the source's listing (names, sizes,
    # modification times), the output, the ingest and dataset settings and the ingest's format version
    "ingest": ("src", "files", "out", "ingest", "dataset", "format_version"),
    "generate": ("queries", "seed", "shape", "label_noise"),
    # per-query difficulty scores (pipelines.data.scoring)
    "difficulty": ("dataset", "roles", "settings", "metric", "code"),
    # a curriculum's build: its settings, the fold, the difficulty inputs, and the scores' own content
    "curriculum": ("settings", "dataset", "fold", "name", "difficulty", "empty_queries", "scores", "code"),
    # ... of one whose components (its difficulty score, its pacing function) have code (a plug-in's) or settings of
    # their own: those too
    "component_curriculum": (
        "settings",
        "dataset",
        "fold",
        "name",
        "difficulty",
        "empty_queries",
        "scores",
        "code",
        "components",
    ),  # fmt: skip
    # what a plan node knows of a curriculum: its build key and what it built (stages, queries per stage)
    "curriculum_content": ("build", "stages", "dataset"),
    # an MLflow child run of a grid: its name, its path and the key of its last node
    "child": ("name", "path", "last_node"),
    # a fold's global histogram cuts (pipelines.store.cuts)
    "cuts": ("dataset", "fold", "max_bin", "sample_rows", "code"),
    # a plan node's trees and margins (pipelines.plan.trie): its place in the path, and the plan's context
    "node": ("parent", "objective", "objective_code", "data", "t0", "t1", "curriculum", "context"),
    # a node of a grid.seeds repetition (seed offset not 0): the same and its seed offset
    "seeded_node": ("parent", "objective", "objective_code", "data", "t0", "t1", "curriculum", "context", "seed"),
    # the plan's context, shared by every node of a fold
    "context": ("train", "metric", "dataset", "fold", "cuts", "code"),
    # a study (the grid's parent run in MLflow), with and without the code that runs it
    "study": ("grid", "train", "metric", "curriculum", "difficulty", "dataset", "folds"),
    # ... of one whose config sets components' own settings (components.<name>): those too
    "component_study": ("grid", "train", "metric", "curriculum", "difficulty", "dataset", "folds", "components"),
    "grid": ("study", "code"),
    # a self-paced segment's rule (pipelines.kernel.selfpaced): what a node of it knows of its choices, the shares
    # of its selections included (the pacing function's values, not its code)
    "selfpaced": ("rule", "every", "by", "shares", "seed"),
    # a fold's teacher scores (pipelines.data.teacher_scores): the teachers' last nodes, the cross-fitting, the
    # metric, the dataset and the scoring code
    "teacher_scores": ("teachers", "crossfit", "seed", "metric", "dataset", "fold", "code"),
}

#: Libraries whose arithmetic a result depends on (their versions are part of the code identity).
LIBRARIES = ("xgboost", "pyspark", "numpy", "numba", "pyarrow")

#: What the code identity of each kind of result covers: these modules of the kernel and every module of ours they
#: import, directly or not (:func:`identity_modules`). Difficulty scores: the per-query scoring; curricula: ordering
#: and pacing (their key also holds the key of the scores they read); cuts: the sample and XGBoost's sketch; a plan
#: node: the tree loop, the worker's data path and everything they call (objectives, metrics, tree walks, the cuts
#: handed to XGBoost). ``ltr keys --explain`` lists each closure.
IDENTITY_ROOTS: dict[str, tuple[str, ...]] = {
    "difficulty": ("udfs.difficulty",),
    "curriculum": ("udfs.curriculum",),
    "cuts": ("pipelines.kernel.cuts",),
    "node": ("pipelines.kernel.loop",),
    "teacher_scores": ("udfs.teacher",),
}

#: The kernel: the modules whose code decides numbers (:mod:`pipelines.kernel`, and ``udfs``' per-query math).
#: An identity's closure may reach these, the packages above them (their ``__init__`` runs) and
#: :data:`KERNEL_SUPPORT`, nothing else: reaching an operations module is an error (:class:`KernelImportError`),
#: and ``.importlinter``'s contract ``kernel`` forbids the import itself.
KERNEL = (
    "pipelines.kernel",
    "udfs.model",
    "udfs.components",
    "udfs.conventions",
    "udfs.curriculum",
    "udfs.difficulty",
    "udfs.metrics",
    "udfs.objectives",
    "udfs.pairs",
    "udfs.per_query",
    "udfs.schema",
    "udfs.scores",
    "udfs.spark_hashes",
    "udfs.teacher",
    "udfs.trees",
)
#: What the kernel may import of the rest: the exceptions (each with its exit code).
KERNEL_SUPPORT = ("pipelines.core.errors",)

#: The top-level packages whose modules can be in the closure (imports of anything else are libraries).
_OURS = ("pipelines", "udfs")


class KeyDocumentError(LtrError, ValueError):
    """A key document that does not hold exactly the declared inputs (a programming error)."""


class KernelImportError(LtrError, ImportError):
    """A module of the kernel that imports a module of ours outside it (a programming error: operations code
    would then be part of the keys)."""


def in_kernel(name: str) -> bool:
    """Whether module ``name`` may be in a code identity: a kernel module (:data:`KERNEL`), one of
    :data:`KERNEL_SUPPORT`, or a package above one of them."""
    allowed = (*KERNEL, *KERNEL_SUPPORT)
    return any(name == m or name.startswith(m + ".") or m.startswith(name + ".") for m in allowed)


def digest(doc: Any, n: int = 20) -> str:
    """Stable ``n``-hex-digit sha256 of a JSON-able document (sorted keys)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:n]


def make_key(kind: str, doc: Mapping[str, Any], n: int = 20) -> str:
    """The key of a result of ``kind`` from ``doc``, which must hold exactly ``INPUTS[kind]``."""
    want = set(INPUTS[kind])
    got = set(doc)
    if got != want:
        raise KeyDocumentError(
            f"{kind} key: inputs {sorted(got - want)} are not declared and {sorted(want - got)} are "
            "missing (pipelines.core.keys.INPUTS)"
        )
    return digest({"kind": kind, **doc}, n)


# ------------------------------------------------------------ code identity
def _module_source(name: str, base: Path | None = None) -> tuple[str, bytes] | None:
    """(relative path, bytes) of module ``name`` of our packages (``pipelines.core.keys`` ->
    ``pipelines/core/keys.py``, a package -> its ``__init__.py``), read from the installed package or, given ``base``,
    from ``base/<top package>/...``; ``None`` if there is no such module (an imported name that is not a module)."""
    parts = name.split(".")
    top: Any = resources.files(parts[0]) if base is None else base / parts[0]
    for rel, node in (
        ("/".join([*parts, "__init__.py"]), top.joinpath(*parts[1:], "__init__.py")),
        ("/".join(parts) + ".py", top.joinpath(*parts[1:-1], parts[-1] + ".py") if len(parts) > 1 else None),
    ):
        if node is not None and node.is_file():
            return rel, node.read_bytes()
    return None


@functools.lru_cache(maxsize=1024)
def _imported(name: str, rel: str, data: bytes) -> frozenset[str]:
    """The modules of our packages that module ``name`` (file ``rel``) imports anywhere in its source (module level,
    inside functions, under ``TYPE_CHECKING``), with the packages above each (their ``__init__`` runs too)."""
    try:
        tree = ast.parse(data)
    except SyntaxError:
        return frozenset()
    package = name if rel.endswith("__init__.py") else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                mod = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names if a.name != "*"]
        else:
            continue
        for t in targets:
            if t.split(".")[0] in _OURS:
                parts = t.split(".")
                out.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return frozenset(out)


def identity_modules(
    roots: tuple[str, ...] | str | None = None, base: Path | None = None, *, kernel: bool = True
) -> dict[str, tuple[str, bytes]]:
    """The import closure of ``roots`` within our packages: module name -> (relative path, source bytes).

    ``roots``: module names, or a kind of result (:data:`IDENTITY_ROOTS`), or None for every kind's. Follows every
    import of a module of ``pipelines`` or ``udfs`` (``from a.b import c`` counts ``a.b.c`` when it is a module,
    else ``a.b``), and adds each module's parent packages. Read from the installed packages, or from ``base`` (a
    source tree) in tests. ``kernel``: refuse a closure that leaves the kernel (:func:`in_kernel`), naming the
    import (:class:`KernelImportError`).
    """
    roots = _roots(roots)
    seen: dict[str, tuple[str, bytes]] = {}
    todo = [r for root in roots for r in (".".join(root.split(".")[: i + 1]) for i in range(root.count(".") + 1))]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        found = _module_source(name, base)
        if found is None:
            continue  # ``from pipelines.core.keys import digest``: ``...keys.digest`` is not a module
        seen[name] = found
        imported = _imported(name, *found)
        if kernel:
            outside = sorted(m for m in imported if not in_kernel(m) and _module_source(m, base) is not None)
            if outside:
                raise KernelImportError(
                    f"{name} ({found[0]}) is in the kernel and imports {outside[0]}, which is not: operations code "
                    "reaches the kernel as arguments, never as imports (pipelines.core.keys.KERNEL)"
                )
        todo.extend(sorted(imported - set(seen)))
    return seen


def _roots(roots: tuple[str, ...] | str | None) -> tuple[str, ...]:
    """Module names of ``roots`` (a kind of result, every kind's for None, or the names themselves)."""
    if roots is None:
        return tuple(dict.fromkeys(m for ms in IDENTITY_ROOTS.values() for m in ms))
    if isinstance(roots, str):
        return IDENTITY_ROOTS[roots]
    return roots


def _canonical(node: Any) -> Any:
    """A syntax tree as nested lists: node type and its fields, without positions, without the fields that are
    empty or None (so that a field a newer Python adds, such as ``type_params``, changes nothing), and without
    statements that are only a string (docstrings: they do not compute)."""
    if isinstance(node, ast.AST):
        out: list[Any] = [type(node).__name__]
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                value = [
                    v
                    for v in value
                    if not (
                        isinstance(v, ast.Expr) and isinstance(v.value, ast.Constant) and isinstance(v.value.value, str)
                    )
                ]
            if value is None or value == [] or isinstance(value, ast.expr_context):
                continue
            out.append([name, _canonical(value)])
        return out
    if isinstance(node, list):
        return [_canonical(v) for v in node]
    if isinstance(node, (bytes, complex)):
        return [type(node).__name__, repr(node)]
    return node


def canonical_source(data: bytes) -> bytes:
    """What of a Python source computes: its syntax tree without docstrings, comments, positions or formatting,
    serialised (JSON) the same way on every supported Python. A file that does not parse is taken as it is."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return data
    return json.dumps(_canonical(tree), separators=(",", ":"), default=repr).encode()


@functools.lru_cache(maxsize=1024)
def _canonical_digest(data: bytes) -> bytes:
    """sha256 of :func:`canonical_source` (cached by content: tests hash edited copies of the tree many times)."""
    return hashlib.sha256(canonical_source(data)).digest()


def hash_sources(files: list[tuple[str, bytes]]) -> str:
    """sha256 (20 hex digits) over the path and canonical source (:func:`canonical_source`) of each file."""
    h = hashlib.sha256()
    for rel, data in sorted(files):
        h.update(rel.encode() + b"\0" + _canonical_digest(data))
    return h.hexdigest()[:20]


def sources_hash(roots: tuple[str, ...] | str | None = None, base: Path | None = None) -> str:
    """:func:`hash_sources` over the modules of :func:`identity_modules` (``roots``: a kind of result, its modules,
    or None for every kind's)."""
    return hash_sources(list(identity_modules(roots, base).values()))


@functools.lru_cache(maxsize=8)
def source_files(roots: tuple[str, ...] | str = "node") -> dict[str, tuple[str, str]]:
    """The modules of :func:`identity_modules`: module name -> (relative path, sha256 of the file's bytes), for
    another process to compare with its own files (:func:`has_source_files`). Read once a process, as
    :func:`code_identity` is (the driver sends both with every barrier job)."""
    return {name: (rel, hashlib.sha256(data).hexdigest()) for name, (rel, data) in identity_modules(roots).items()}


def has_source_files(files: Mapping[str, tuple[str, str]]) -> bool:
    """Whether every module of ``files`` (another process's :func:`source_files`) is here the same file with the
    same bytes: then the closure that process hashed runs here as it is, and nothing needs to be parsed (a
    barrier task's check of the driver's code, far cheaper than :func:`sources_hash`). False
    says only that the bytes differ somewhere: :func:`code_identity` decides then (a comment may be all)."""
    for name, (rel, sha) in files.items():
        found = _module_source(name)
        if found is None or found[0] != rel or hashlib.sha256(found[1]).hexdigest() != sha:
            return False
    return True


#: The Spark that computes this process's results where it is not this process's PySpark: a Spark Connect
#: client's server (:func:`computing_spark`); None: this process's PySpark.
_server_spark: str | None = None


def computing_spark(version: str | None) -> None:
    """Name the Spark that computes this process's results. A Spark Connect client passes its server's version
    (``spark.version``): every code identity then holds it as ``pyspark``, not the client's own package's, which
    only builds plans (a ``pyspark-client`` 4.2 of a 4.3 server gives the keys of that server's classic sessions,
    and its workers' check compares their PySpark with their own server's). None: this process's PySpark again."""
    global _server_spark
    if version != _server_spark:
        _server_spark = version
        code_identity.cache_clear()
        worker_identity.cache_clear()


def library_versions() -> dict[str, str]:
    """Versions of :data:`LIBRARIES` as installed ('' where one is not: planning works without Spark); ``pyspark``:
    the Spark Connect server's where :func:`computing_spark` named one."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for lib in LIBRARIES:
        if lib == "pyspark" and _server_spark:
            out[lib] = _server_spark
            continue
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:
            # xgboost-cpu installs the `xgboost` module under another distribution name
            try:
                out[lib] = __import__(lib).__version__
            except ImportError:
                out[lib] = ""
    return out


@functools.lru_cache(maxsize=8)
def code_identity(kind: str | None = None) -> dict[str, str]:
    """The content of the code that computes results of ``kind`` (:data:`IDENTITY_ROOTS`; None: of every kind, what
    a grid's parent run records): ``sources`` (:func:`sources_hash` of its kernel closure) and library versions."""
    return {"sources": sources_hash(kind), **library_versions()}


def worker_roots() -> tuple[str, ...]:
    """What a barrier task runs: the tree loop (the nodes' identity) and the module of every built-in objective
    (a plug-in's code is checked by :mod:`pipelines.plugins` when a task loads it)."""
    from udfs.objectives import registry

    modules = {o.module for o in registry.objectives().values() if o.module and not o.plugin}
    return (*IDENTITY_ROOTS["node"], *sorted(modules))


@functools.lru_cache(maxsize=1)
def worker_identity() -> dict[str, str]:
    """:func:`sources_hash` of :func:`worker_roots` and the library versions: what a barrier task compares with
    the driver's (not a key: each node's key holds the nodes' identity and its own objective's code)."""
    return {"sources": sources_hash(worker_roots()), **library_versions()}


def worker_code(driver: Mapping[str, str], files: Mapping[str, tuple[str, str]] | None = None) -> dict[str, str] | None:
    """This process's :func:`worker_identity` where it may differ from ``driver`` (another process's), else None:
    the same library versions and, ``files`` given (that process's :func:`source_files`), the same source bytes
    settle it without parsing the sources. What a barrier task and a Spark Connect server's worker check."""
    if files is not None and library_versions() == {k: v for k, v in driver.items() if k != "sources"}:
        if has_source_files(files):
            return None
    return dict(worker_identity())


def code_differences(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The parts (``sources``, a library) in which two code identities differ, sorted."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def explain() -> dict[str, list[str]]:
    """Kind of result -> the modules its code identity covers (what ``ltr keys --explain`` prints)."""
    return {kind: sorted(identity_modules(kind)) for kind in IDENTITY_ROOTS}


def explain_objectives() -> dict[str, dict[str, Any]]:
    """Python objective -> its code (:func:`objective_code`) and the modules it covers: what a node of that
    objective holds besides the nodes' identity (a plug-in's: its module)."""
    from udfs.objectives import registry

    return {
        name: {
            "sources": objective_code(name),
            "modules": [o.module] if o.plugin else sorted(identity_modules((o.module,))),
        }
        for name, o in registry.objectives().items()
        if o.module is not None
    }


def code_label(code: Mapping[str, str], differing: Iterable[str] = ()) -> str:
    """A code identity in a few characters, for messages: ``sources a1b2c3d4e5f6 (xgboost 3.2.0)``, with the version
    of each library of ``differing`` (:func:`code_differences`) too: ``(xgboost 3.2.0, pyspark 4.3.0)``."""
    libs = ["xgboost", *sorted(k for k in differing if k not in ("sources", "xgboost"))]
    versions = ", ".join(f"{lib} {code.get(lib, '?')}" for lib in libs)
    return f"sources {str(code.get('sources', ''))[:12]} ({versions})"


# ------------------------------------------------------------ keys of results
def train_inputs(train: Any) -> dict[str, Any]:
    """What of a TrainConfig changes trees: its model part, whole (:class:`udfs.model.Model`; the run part and
    the path are in no key of this kind)."""
    from dataclasses import asdict

    doc = asdict(train.model)
    return {**doc, "score_dist_trees": list(doc["score_dist_trees"])}  # a list, as the config holds it


def child_key(name: str, path: str, last_node: str) -> str:
    """The key of an MLflow child run (tagged on the run; a resumed grid continues the run with the same key)."""
    return make_key("child", {"name": name, "path": path, "last_node": last_node})


def cuts_key(dataset: str, fold: int, max_bin: int, sample_rows: int, code: Mapping[str, str] | None = None) -> str:
    """A fold's global histogram cuts (:mod:`pipelines.store.cuts`)."""
    return make_key(
        "cuts",
        {
            "dataset": dataset,
            "fold": fold,
            "max_bin": int(max_bin),
            "sample_rows": int(sample_rows),
            "code": dict(code or code_identity("cuts")),
        },
    )


def plan_context(
    train: Any,
    metric: Any,
    fingerprint: str,
    fold: int,
    code: Mapping[str, str] | None = None,
    cuts_code: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What besides a path determines its trees: every node key of the fold holds it (``code``: the nodes' code
    identity, ``cuts_code``: the cuts', each the installed one when not given)."""
    doc = {
        "train": train_inputs(train),
        "metric": metric.to_dict(),
        "dataset": fingerprint,
        "fold": fold,
        "cuts": cuts_key(fingerprint, fold, train.max_bin, train.cuts_sample_rows, cuts_code),
        "code": dict(code or code_identity("node")),
    }
    make_key("context", doc)  # checks the fields
    return doc


def seed_field(seed: int) -> dict[str, int]:
    """``{"seed": seed}``, or nothing for seed 0: a seed repetition's offset (``grid.seeds``) is written into a
    node's key document, the plan's JSON and a checkpoint's meta only when it is not 0, so that everything of
    seed 0 reads and keys as a path without seeds."""
    return {"seed": seed} if seed else {}


def objective_code(name: str) -> str | None:
    """The code of objective ``name`` as a node's key holds it: :func:`sources_hash` of the closure of the module
    that registers it (:mod:`udfs.objectives.registry`), None for XGBoost's own (its version is in the context's
    code); for a plug-in, :func:`component_code` (its function's identity and its settings). Nodes of other
    objectives do not hold it: changing or adding one objective re-keys only its nodes."""
    from udfs.objectives import registry

    spec = registry.get(name)
    if spec.plugin:
        return component_code(spec.fn, spec.settings())
    if spec.module is None:
        return None
    own = spec.settings()  # a built-in's own settings (components.<name>): only the nodes of it hold them
    return _objective_code(spec.module) + (":" + digest(own) if own else "")


@functools.lru_cache(maxsize=64)
def _objective_code(module: str) -> str:
    return sources_hash((module,))


def component_code(fn: Any, settings: Mapping[str, Any]) -> str:
    """What a result keys a plug-in component by (:mod:`pipelines.plugins`): ``plugin:`` and a digest of its
    function's identity (:func:`function_identity`) and the settings it runs with."""
    return "plugin:" + digest({"code": function_identity(fn), "settings": dict(settings)})


@functools.lru_cache(maxsize=256)  # per function object: a plug-in loaded again after an edit has new ones
def function_identity(fn: Any) -> str:
    """The code of a plug-in's function as the kernel's identity is of a module: a digest of the canonical source
    (:func:`canonical_source`: no docstrings, comments or formatting) of the function and of what it reaches in its
    own module or package (functions, classes and constants it names, followed through theirs; a module of that
    package it names, whole), with the closure of each module of ours (``udfs``, ``pipelines``) it uses. A library
    (numpy...) counts by its name and version. So editing one function of a file re-keys the results of the
    components that reach it, not those of the file's other components."""
    own = (getattr(fn, "__module__", None) or "").split(".")[0]
    parts: dict[str, str] = {}
    _reach(fn, own, parts)
    return hashlib.sha256(json.dumps(sorted(parts.items())).encode()).hexdigest()[:20]


def _reach(obj: Any, own: str, parts: dict[str, str]) -> None:
    """Add ``obj`` (a function, class or module of the plug-in's package) and what it reaches to ``parts``."""
    import inspect
    import textwrap
    import types

    obj = getattr(obj, "py_func", obj)  # a numba dispatcher: its Python function
    name = f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"
    if name in parts:
        return
    if isinstance(obj, types.ModuleType):
        try:
            parts[name] = hashlib.sha256(canonical_source(inspect.getsource(obj).encode())).hexdigest()
        except (OSError, TypeError):
            parts[name] = "?"
        return
    try:
        src = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        src = repr(obj)
    parts[name] = hashlib.sha256(canonical_source(src.encode())).hexdigest()
    codes = []
    if isinstance(obj, types.FunctionType):
        codes = [obj.__code__]
        scope = obj.__globals__
        cells = [c.cell_contents for c in obj.__closure__ or () if _has_contents(c)]
        cells += list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
    elif isinstance(obj, type):
        scope = vars(inspect.getmodule(obj)) if inspect.getmodule(obj) else {}
        cells = []
        for v in vars(obj).values():
            v = getattr(v, "__func__", v)
            if isinstance(v, types.FunctionType):
                codes.append(v.__code__)
    else:
        return
    names: set[str] = set()
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    for v in [scope[n] for n in sorted(names) if n in scope] + cells:
        _reach_value(v, own, parts)


@functools.lru_cache(maxsize=64)
def _ours_code(module: str) -> str:
    """:func:`hash_sources` of the import closure of a module of ours that a plug-in uses: any module (a plug-in may
    call operations code, the report's statistics say), so not held to the kernel as a result's own code is."""
    return hash_sources(list(identity_modules((module,), kernel=False).values()))


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def _reach_value(v: Any, own: str, parts: dict[str, str]) -> None:
    """Follow a value a plug-in's code names: its own package's code, ours, a library (by version), or data."""
    import types

    module = v.__name__ if isinstance(v, types.ModuleType) else getattr(v, "__module__", None)
    top = (module or "").split(".")[0]
    if callable(v) or isinstance(v, types.ModuleType):
        if top == own:
            _reach(v, own, parts)
        elif top in _OURS and module:
            parts[f"ours:{module}"] = _ours_code(module) if _module_source(module) else "?"
        elif top:
            from importlib import metadata

            try:
                parts[f"lib:{top}"] = metadata.version(top)
            except metadata.PackageNotFoundError:
                parts[f"lib:{top}"] = ""
    elif isinstance(v, (bool, int, float, str, bytes, type(None), tuple, frozenset)):
        parts[f"value:{len(parts)}"] = repr(v)
    else:
        parts[f"value:{len(parts)}"] = type(v).__name__


def node_key(
    parent: str | None,
    objective: str,
    objective_code: str | None,
    data: str,
    t0: int,
    t1: int,
    curriculum: str | None,
    context: Mapping[str, Any],
    seed: int = 0,
) -> str:
    """A plan node's trees and margins: its parent, objective and that objective's code (:func:`objective_code`),
    data subset, trees t0..t1, curriculum, context,
    and its seed offset (``grid.seeds``), which enters the key only when it is not 0 (the keys of every node
    but a seed repetition's do not depend on seeds)."""
    doc = {
        "parent": parent,
        "objective": objective,
        "objective_code": objective_code,
        "data": data,
        "t0": t0,
        "t1": t1,
        "curriculum": curriculum,
        "context": dict(context),
    }
    return make_key("seeded_node", {**doc, "seed": seed}) if seed else make_key("node", doc)


def curriculum_content_key(summary: Mapping[str, Any]) -> str:
    """What a plan node keys a curriculum by: its build key and what it built, from its summary."""
    return make_key(
        "curriculum_content",
        {"build": summary.get("key"), "stages": summary.get("stages"), "dataset": summary.get("dataset_fingerprint")},
    )


def curriculum_key(
    settings: Mapping[str, Any],
    dataset: str,
    fold: int,
    name: str,
    difficulty: str,
    empty_queries: str,
    scores: str,
    code: Mapping[str, str] | None = None,
    components: Mapping[str, str] | None = None,
) -> str:
    """A curriculum's build: settings, dataset, fold, name, the difficulty key, the scores' fingerprint and the
    ordering and pacing code (:func:`code_identity` of ``curriculum``); ``components``: the code or settings of the
    difficulty score and pacing function it uses, by name, where they have some
    (:func:`pipelines.plugins.loading.curriculum_components`; in the key only then)."""
    return make_key(
        "component_curriculum" if components else "curriculum",
        {
            **({"components": dict(components)} if components else {}),
            "settings": dict(settings),
            "dataset": dataset,
            "fold": fold,
            "name": name,
            "difficulty": difficulty,
            "empty_queries": empty_queries,
            "scores": scores,
            "code": dict(code or code_identity("curriculum")),
        },
        16,
    )


def difficulty_key(
    dataset: str,
    roles: Mapping[str, Any],
    settings: Mapping[str, Any],
    metric: Mapping[str, Any],
    code: Mapping[str, str] | None = None,
) -> str:
    """Per-query difficulty scores (:func:`pipelines.data.scoring.difficulty_inputs` gives the arguments)."""
    return "sha256:" + make_key(
        "difficulty",
        {
            "dataset": dataset,
            "roles": dict(roles),
            "settings": dict(settings),
            "metric": dict(metric),
            "code": dict(code or code_identity("difficulty")),
        },
        16,
    )


def study_keys(doc: Mapping[str, Any], code: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(study key, grid key): the study without the code that runs it, and with it."""
    study = make_key("component_study" if "components" in doc else "study", doc, 16)
    return study, make_key("grid", {"study": study, "code": dict(code or code_identity())}, 16)


def dataset_key(doc: Mapping[str, Any]) -> str:
    """An ingested dataset's fingerprint (``sha256:`` + 64 hex digits; its document unprefixed by a kind,
    so that datasets ingested before this module keep their fingerprint)."""
    want = set(INPUTS["dataset"])
    if set(doc) != want:
        raise KeyDocumentError(f"dataset key: inputs {sorted(set(doc) ^ want)} differ from the declared ones")
    return "sha256:" + hashlib.sha256(json.dumps(dict(doc), sort_keys=True).encode()).hexdigest()


def ingest_key(doc: Mapping[str, Any]) -> str:
    """What a dataset was ingested from (``sha256:`` + 64 hex digits, unprefixed by a kind like
    :func:`dataset_key`, so that the records of existing deployments keep matching)."""
    want = set(INPUTS["ingest"])
    if set(doc) != want:
        raise KeyDocumentError(f"ingest key: inputs {sorted(set(doc) ^ want)} differ from the declared ones")
    return "sha256:" + hashlib.sha256(json.dumps(dict(doc), sort_keys=True, default=str).encode()).hexdigest()


# ------------------------------------------------------------ explaining a changed key
def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists stay values)."""
    if not isinstance(doc, Mapping):
        return {prefix: doc}
    out: dict[str, Any] = {}
    for k, v in doc.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differences(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 6) -> list[str]:
    """The inputs that differ between two key documents, one ``name: old -> new`` each (``parent`` is
    the parent's key: when only it differs, the cause lies with the parent)."""
    a, b = flatten(old), flatten(new)
    out = []
    for name in sorted(set(a) | set(b)):
        if a.get(name, "<absent>") != b.get(name, "<absent>"):
            out.append(f"{name}: {_short(a.get(name, '<absent>'))} -> {_short(b.get(name, '<absent>'))}")
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


def _short(v: Any) -> str:
    s = json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= 40 else s[:37] + "..."


# ------------------------------------------------------------ fingerprints of contents
def rows_fingerprint(n: int, lo: int | None, hi: int | None) -> str:
    """The fingerprint of a table's rows from its order-independent sums (what
    :func:`pipelines.data.scoring.content_fingerprint` aggregates in Spark).

    Parameters
    ----------
    n
        The row count.
    lo, hi
        The sums over the rows of the low and of the high 32 bits of each row's xxhash64 (None: no row).

    Returns
    -------
    str
        ``sha256:`` + the first 16 hex digits of the sha256 of ``"<n>:<lo>:<hi>"`` (None read as 0).
    """
    return "sha256:" + hashlib.sha256(f"{n}:{lo or 0}:{hi or 0}".encode()).hexdigest()[:16]
