"""Keys (pipelines.core.keys): each key changes exactly when an input that determines its result does, the code
identity is the computing code's content (not git), and a changed key says which input changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.core import keys
from pipelines.core.config import TrainConfig
from pipelines.plan.paths import parse_path
from pipelines.plan.trie import build_plan
from pipelines.testing.processes import ROOT
from udfs.metrics import NdcgSpec

pytestmark = pytest.mark.slow(minutes=2.5)  # ltr train in a copy of the repository, three times

CODE = {"sources": "s0", "xgboost": "3.2.0", "pyspark": "4.1.0", "numpy": "2.3.0", "numba": "0.62", "pyarrow": "21"}


def _node_keys(
    train: TrainConfig = TrainConfig(),
    metric: NdcgSpec = NdcgSpec(),
    data: str = "sha256:d1",
    fold: int = 1,
    code: dict | None = None,
    cur: str = "c1",
) -> list[str]:
    ctx = keys.plan_context(train, metric, data, fold, code or CODE)
    paths = [parse_path("mse:4,lambdamart:6", "a"), parse_path("lambdamart@q.0:4,lambdamart:6", "b")]
    return [n.key for n in build_plan(paths, fold=fold, context=ctx, curriculum_keys={"q": cur}).nodes]


#: (what changes, changed node keys?) - every input of a plan node, and what must not re-key it
NODE_CASES = [
    ("eta", dict(train=TrainConfig(eta=0.1)), True),
    ("leaves", dict(train=TrainConfig(leaves=8)), True),
    ("max_bin (the cuts)", dict(train=TrainConfig(max_bin=64)), True),
    ("cuts sample (the cuts)", dict(train=TrainConfig(cuts_sample_rows=1000)), True),
    ("seed", dict(train=TrainConfig(seed=3)), True),
    ("objective setting k", dict(train=TrainConfig(k=5)), True),
    ("metric ties", dict(metric=NdcgSpec(ties="worst")), True),
    ("metric cutoff", dict(metric=NdcgSpec(k=5)), True),
    ("dataset", dict(data="sha256:d2"), True),
    ("fold", dict(fold=2), True),
    ("computing code", dict(code={**CODE, "sources": "s1"}), True),
    ("xgboost version", dict(code={**CODE, "xgboost": "3.1.0"}), True),
    ("numba version", dict(code={**CODE, "numba": "0.61"}), True),
    ("curriculum content", dict(cur="c2"), True),
    ("workers", dict(train=TrainConfig(workers=3)), False),
    ("threads", dict(train=TrainConfig(nthread=7)), False),
    ("checkpoint interval", dict(train=TrainConfig(checkpoint_every=3)), False),
    ("retries, timeouts", dict(train=TrainConfig(job_retries=4, tracker_timeout=5)), False),
    ("the train command's own path", dict(train=TrainConfig(path="mse:1")), False),
    ("codes in a file", dict(train=TrainConfig(codes_in_memory_gib=0)), False),
    ("who reads the rows", dict(train=TrainConfig(read="spark")), False),
]


@pytest.mark.parametrize("what,change,rekeys", NODE_CASES, ids=[c[0] for c in NODE_CASES])
def test_node_keys_change_exactly_with_what_changes_the_trees(what, change, rekeys):
    base, other = _node_keys(), _node_keys(**change)
    if rekeys:
        if what == "curriculum content":  # only the nodes on the curriculum, and the nodes after them
            assert base[:2] == other[:2] and base[2:] != other[2:] and not set(base[2:]) & set(other[2:])
        else:
            assert not set(base) & set(other), what
    else:
        assert base == other, what


def test_a_component_s_own_setting_re_keys_exactly_the_results_that_use_the_component():
    """``components.<name>``: a setting of one objective re-keys that objective's nodes (and what follows them),
    not another path's; a pacing function's setting re-keys the curricula paced by it, not the others. (Its
    settings once were ``train.*`` fields, in every node's key: any edit retrained the whole study.)"""
    from pipelines.plugins.loading import curriculum_components
    from tests.helpers import component_settings

    def plan(setting: dict) -> dict[str, list[str]]:
        paths = [parse_path("mse:4,lambdamart:6", "a"), parse_path("blend:10", "b"), parse_path("mse:4,blend:6", "c")]
        with component_settings(**setting):
            built = build_plan(paths, fold=1, context=keys.plan_context(TrainConfig(), NdcgSpec(), "d", 1, CODE))
        return {name: list(chain) for name, chain in built.chains.items()}

    base, edited = plan({}), plan({"blend": {"at": 7}})
    assert base["a"] == edited["a"]  # mse, lambdamart: untouched
    assert base["c"][0] == edited["c"][0] and base["c"][1] != edited["c"][1]  # the shared mse node is reused
    assert base["b"] != edited["b"]
    assert plan({"blend": {"at": 40}}) == base  # a setting at its default is the default

    assert curriculum_components("q_nrel", "linear") == {} and curriculum_components("q_nrel", "") == {}
    root = curriculum_components("q_nrel", "root_n")
    with component_settings(root_n={"n": 3.0}):
        assert curriculum_components("q_nrel", "root_n") != root
        assert curriculum_components("q_nrel", "linear") == {}


def test_the_other_keys_change_exactly_with_their_inputs():
    d = dict(dataset="sha256:d1", roles={"bm25": 110}, settings={"x": 1}, metric=NdcgSpec().to_dict(), code=CODE)
    base = keys.difficulty_key(**d)
    for k, v in (
        ("dataset", "sha256:d2"),
        ("roles", {"bm25": 111}),
        ("settings", {"x": 2}),
        ("metric", NdcgSpec(k=5).to_dict()),
        ("code", {**CODE, "sources": "s1"}),
    ):
        assert keys.difficulty_key(**{**d, k: v}) != base, k
    c = dict(
        settings={"fraction": 0.25},
        dataset="sha256:d1",
        fold=1,
        name="q",
        difficulty=base,
        empty_queries="last",
        scores="sha256:s",
    )
    cbase = keys.curriculum_key(**c)
    for k, v in (
        ("settings", {"fraction": 0.5}),
        ("dataset", "x"),
        ("fold", 2),
        ("name", "r"),
        ("difficulty", "y"),
        ("empty_queries", "exclude"),
        ("scores", "z"),
    ):
        assert keys.curriculum_key(**{**c, k: v}) != cbase, k
    summary = {"key": cbase, "stages": [{"stage": 0, "queries": 10}], "dataset_fingerprint": "sha256:d1"}
    assert keys.curriculum_content_key(summary) != keys.curriculum_content_key(
        {**summary, "stages": [{"stage": 0, "queries": 11}]}
    )  # rebuilt with another content: another key
    assert keys.curriculum_content_key(summary) == keys.curriculum_content_key({**summary, "dataset": "/moved"})
    cuts = keys.cuts_key("sha256:d1", 1, 256, 200_000, CODE)
    assert (
        len(
            {
                cuts,
                keys.cuts_key("sha256:d2", 1, 256, 200_000, CODE),
                keys.cuts_key("sha256:d1", 2, 256, 200_000, CODE),
                keys.cuts_key("sha256:d1", 1, 64, 200_000, CODE),
                keys.cuts_key("sha256:d1", 1, 256, 10, CODE),
                keys.cuts_key("sha256:d1", 1, 256, 200_000, {**CODE, "sources": "s1"}),
            }
        )
        == 6
    )
    doc = {
        "grid": {"trees": 10},
        "train": keys.train_inputs(TrainConfig()),
        "metric": {},
        "curriculum": {},
        "difficulty": {},
        "dataset": "sha256:d1",
        "folds": [1],
    }
    study, grid = keys.study_keys(doc, CODE)
    assert keys.study_keys(doc, {**CODE, "sources": "s1"}) == (
        study,
        keys.study_keys(doc, {**CODE, "sources": "s1"})[1],
    )
    assert keys.study_keys(doc, {**CODE, "sources": "s1"})[1] != grid
    assert keys.study_keys({**doc, "train": keys.train_inputs(TrainConfig(workers=4))}, CODE) == (study, grid)
    assert keys.study_keys({**doc, "folds": [1, 2]}, CODE)[0] != study


def test_a_key_document_must_hold_exactly_the_declared_inputs():
    with pytest.raises(keys.KeyDocumentError, match=r"inputs \['workers'\] are not declared and \[\] are missing"):
        keys.make_key("cuts", {"dataset": "d", "fold": 1, "max_bin": 2, "sample_rows": 3, "code": {}, "workers": 2})
    with pytest.raises(keys.KeyDocumentError, match=r"\['code'\] are missing"):
        keys.make_key("cuts", {"dataset": "d", "fold": 1, "max_bin": 2, "sample_rows": 3})


def test_differences_name_the_changed_inputs():
    a = {"context": {"train": {"eta": 0.05}, "code": CODE}, "t0": 0}
    b = {"context": {"train": {"eta": 0.1}, "code": {**CODE, "sources": "s1"}}, "t0": 0}
    assert keys.differences(a, b) == ['context.code.sources: "s0" -> "s1"', "context.train.eta: 0.05 -> 0.1"]


def test_code_identity_is_the_installed_sources_and_library_versions():
    ident = keys.code_identity()
    assert set(ident) == {"sources", *keys.LIBRARIES} and len(ident["sources"]) == 20
    import xgboost

    assert ident["xgboost"] == xgboost.__version__


def test_a_connect_client_s_keys_name_its_server_s_spark_not_its_own_package():
    import pyspark

    node = keys.code_identity("node")
    assert node["pyspark"] == pyspark.__version__
    try:
        keys.computing_spark("4.9.1")  # a server's Spark other than this process's PySpark
        assert keys.code_identity("node") == {**node, "pyspark": "4.9.1"}
        assert keys.worker_identity()["pyspark"] == "4.9.1"  # what the server's workers are compared with
    finally:
        keys.computing_spark(None)
    assert keys.code_identity("node") == node


def test_a_code_label_shows_the_libraries_that_differ():
    code = {"sources": "0123456789abcdef0123", "xgboost": "3.2.0", "pyspark": "4.3.0", "numpy": "2.3.1"}
    assert keys.code_label(code) == "sources 0123456789ab (xgboost 3.2.0)"
    assert keys.code_label(code, ["pyspark", "sources"]) == "sources 0123456789ab (xgboost 3.2.0, pyspark 4.3.0)"


# ------------------------------------------------------------ in a copy of the repository, with git
def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True
    )


def _train(repo: Path, data: str, work: Path) -> dict:
    """``ltr train`` run by the code of ``repo`` (its packages first on the path): the trees it built."""
    out = work / "model"
    env = {**os.environ, "PYTHONPATH": str(repo)}  # quick JVMs: SPARK_SUBMIT_OPTS (tests/conftest.py)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.app.cli",
            "train",
            "--data",
            data,
            "--fold",
            "1",
            "--path",
            "mse:2,lambdamart:2",
            "--out",
            str(out),
            "--master",
            "local[1]",
            "--set",
            f"work_dir={work}",
            "--set",
            "train.leaves=4",
            "--set",
            "train.max_bin=16",
            "--set",
            "train.score_dist_trees=[1]",
            "--set",
            "spark.shuffle_partitions=1",
            "--set",
            "spark.ui=false",
            "--log-level",
            "WARNING",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "_train.json").read_text())


def test_a_docs_commit_resumes_and_every_edit_of_the_computing_code_retrains(small_dataset, tmp_path):
    """In a git copy of the repository: train; commit a README change, a statement of the report, of the CLI and of
    operations modules (outside the kernel), edit a comment and a docstring of udfs/ without committing -> nothing
    retrained; edit a statement of udfs/ without committing -> retrained (git HEAD, the old key, saw neither the
    README commit as harmless nor an uncommitted edit after another as a change: the tree was already dirty).

    A fourth training (a second uncommitted statement, retrained again) was dropped: it showed what the third
    shows, at 43 s of CI; ``test_code_identity_changes_with_what_computes`` covers each kind of edit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    # __pycache__ too: numba's kernel caches there stay valid in the copy (copytree keeps each file's mtime, which
    # with its size is what numba checks) and go stale with the edits below, as in the repository. Without them
    # each training subprocess compiled every kernel it ran again: 12 s of this test's 39 here.
    for name in ("pipelines", "udfs", "conf"):
        shutil.copytree(ROOT / name, repo / name)
    shutil.copy(ROOT / "README.md", repo / "README.md")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "copy")
    work = tmp_path / "work"

    def trees_built() -> int:
        return int(_train(repo, small_dataset, work)["training"]["trees"])

    assert trees_built() == 4
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nA typo fixed.\n")
    # a report fix, a CLI fix, and fixes to operations code the kernel is handed (progress, session, storage,
    # leases, the barrier job, config loading): none is in a key
    for rel in (
        "pipelines/report/render.py",
        "pipelines/app/cli.py",
        "pipelines/core/spark_progress.py",
        "pipelines/core/session.py",
        "pipelines/core/storage.py",
        "pipelines/core/config/schema.py",
        "pipelines/store/lease.py",
        "pipelines/execution/barrier_job.py",
    ):
        (repo / rel).write_text((repo / rel).read_text() + "\n_A_FIX = 1\n")
    _git(repo, "commit", "-q", "-am", "docs, a report fix, a CLI fix, operations fixes")
    target = repo / "udfs" / "metrics.py"
    text = target.read_text()
    assert '"""' in text and "\n#" in text
    target.write_text(text.replace('"""', '"""A docstring edited. ', 1) + "\n# a comment, not committed\n")
    assert trees_built() == 0  # documentation only: same code identity, the checkpoints are reused
    target.write_text(target.read_text() + "\n_EDITED = 1  # a statement, not committed\n")
    assert trees_built() == 4


# ------------------------------------------------------------ code identity: what computes, not how it reads
BASE = '''"""A module."""
import numpy as np

LIMIT = 10  # a comment


def gain(label, k=LIMIT):
    """The gain of a label."""
    return (2 ** label - 1) / np.log2(k + 1)
'''

SAME = {
    "a comment": BASE.replace("# a comment", "# another comment\n# and a second line"),
    "a docstring": BASE.replace('"""The gain of a label."""', '"""Exponential gain.\n\n    More text."""'),
    "the module docstring removed": BASE.replace('"""A module."""\n', ""),
    "a string statement": BASE.replace("LIMIT = 10", 'LIMIT = 10\n"""The cut-off."""'),
    "reformatting": BASE.replace(
        "return (2 ** label - 1) / np.log2(k + 1)", "return (\n        (2**label - 1)\n        / np.log2(k + 1)\n    )"
    ).replace("def gain(label, k=LIMIT):", "def gain(\n    label,\n    k=LIMIT,\n):"),
}

CHANGED = {
    "a constant": BASE.replace("LIMIT = 10", "LIMIT = 11"),
    "a constant's type": BASE.replace("LIMIT = 10", "LIMIT = 10.0"),
    "an operator": BASE.replace("2 ** label - 1", "2 ** label + 1"),
    "a statement": BASE.replace("    return", "    label = label + 0\n    return"),
    "a default": BASE.replace("k=LIMIT", "k=5"),
    "a name": BASE.replace("np.log2", "np.log"),
}


@pytest.mark.parametrize("what", sorted(SAME))
def test_code_identity_ignores_what_does_not_compute(what):
    assert keys.canonical_source(SAME[what].encode()) == keys.canonical_source(BASE.encode()), what
    files = [("udfs/metrics.py", BASE.encode()), ("udfs/__init__.py", b"")]
    other = [("udfs/metrics.py", SAME[what].encode()), ("udfs/__init__.py", b"")]
    assert keys.hash_sources(other) == keys.hash_sources(files)


@pytest.mark.parametrize("what", sorted(CHANGED))
def test_code_identity_changes_with_what_computes(what):
    files = [("udfs/metrics.py", BASE.encode())]
    assert keys.hash_sources([("udfs/metrics.py", CHANGED[what].encode())]) != keys.hash_sources(files), what


def test_code_identity_reads_the_closure_s_python_sources_only(tmp_path):
    """The identity hashes the modules the roots import: a README beside them changes nothing, a module the roots do
    not import changes nothing, a file moved to another name does (its path is hashed)."""
    pkg = tmp_path / "udfs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(BASE)
    (pkg / "root.py").write_text("from udfs.m import f\n")
    (pkg / "unused.py").write_text("X = 1\n")

    def ident() -> str:
        return keys.hash_sources(list(keys.identity_modules(("udfs.root",), tmp_path, kernel=False).values()))

    base = ident()
    assert set(keys.identity_modules(("udfs.root",), tmp_path, kernel=False)) == {"udfs", "udfs.root", "udfs.m"}
    (pkg / "README.md").write_text("# notes")
    (pkg / "m.py").write_text(SAME["a docstring"])
    (pkg / "unused.py").write_text("X = 2\n")
    assert ident() == base
    (pkg / "m.py").rename(pkg / "n.py")
    (pkg / "root.py").write_text("from udfs.n import f\n")
    assert ident() != base


def test_a_kernel_module_that_imports_operations_code_is_refused(tmp_path):
    """A closure that leaves the kernel would put operations code in the keys: it is an error naming the import
    (the import contract ``kernel`` of .importlinter refuses the same import before any test runs)."""
    pkg = tmp_path / "udfs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "uris.py").write_text("X = 1\n")
    (pkg / "metrics.py").write_text("import numpy as np\nfrom udfs.conventions import NdcgSpec\n")
    (pkg / "conventions.py").write_text("class NdcgSpec:\n    pass\n")
    assert set(keys.identity_modules(("udfs.metrics",), tmp_path)) == {"udfs", "udfs.metrics", "udfs.conventions"}
    (pkg / "conventions.py").write_text("from udfs.uris import X\n")
    with pytest.raises(keys.KernelImportError, match=r"udfs.conventions \(udfs/conventions.py\).* imports udfs.uris"):
        keys.identity_modules(("udfs.metrics",), tmp_path)


#: What each kind of result's identity must cover (a subset: the closures are derived from imports).
MUST_COVER = {
    "difficulty": {"udfs.difficulty", "udfs.metrics", "udfs.per_query"},
    "curriculum": {"udfs.curriculum"},
    "cuts": {"pipelines.kernel.cuts", "udfs.spark_hashes"},
    "teacher_scores": {"udfs.teacher", "udfs.metrics", "udfs.per_query", "udfs.spark_hashes"},
    "node": {
        "pipelines.kernel.loop",
        "pipelines.kernel.matrices",
        "pipelines.kernel.cuts",
        "udfs.objectives.registry",
        "udfs.metrics",
        "udfs.trees",
    },
}


def test_each_kind_of_result_is_keyed_by_its_own_kernel_code():
    """Each closure stays in the kernel (identity_modules raises otherwise) and covers what computes that kind of
    result; the closures differ, so an edit of one kind's code keeps the others' keys."""
    explained = keys.explain()
    assert set(explained) == set(MUST_COVER) == set(keys.IDENTITY_ROOTS)
    for kind, must in MUST_COVER.items():
        assert must <= set(explained[kind]), (kind, must - set(explained[kind]))
        assert all(keys.in_kernel(m) for m in explained[kind]), kind
    assert "udfs.objectives.registry" not in explained["difficulty"] and "udfs.difficulty" not in explained["node"]
    # no objective's own code is in the nodes' identity: each node holds its own objective's (objective_code)
    assert not any(
        m.startswith("udfs.objectives.") for m in explained["node"] if not m.endswith((".registry", ".settings"))
    )
    assert len({keys.code_identity(kind)["sources"] for kind in explained}) == len(explained)


#: (file, the kinds of result whose key an edited statement there changes). Operations code first: a fix there
#: keeps every key (it used to re-key every result: config, progress, session, storage, leases, the barrier job).
IDENTITY_TABLE = [
    ("pipelines/core/config/schema.py", set()),
    ("pipelines/core/spark_progress.py", set()),
    ("pipelines/core/proctree.py", set()),
    ("pipelines/core/session.py", set()),
    ("pipelines/core/storage.py", set()),
    ("pipelines/core/keys.py", set()),
    ("pipelines/store/lease.py", set()),
    ("pipelines/store/checkpoints.py", set()),
    ("pipelines/store/cuts.py", set()),
    ("pipelines/execution/barrier_job.py", set()),
    ("pipelines/execution/events.py", set()),
    ("pipelines/data/curricula.py", set()),
    ("pipelines/data/scoring.py", set()),
    ("pipelines/data/dataset.py", set()),
    ("pipelines/plan/trie.py", set()),
    ("pipelines/worker/rows.py", set()),
    ("udfs/atomic.py", set()),
    ("udfs/uris.py", set()),
    ("pipelines/report/render.py", set()),
    ("pipelines/app/cli.py", set()),
    ("pipelines/app/airflow.py", set()),
    ("pipelines/tracking/runs.py", set()),
    ("pipelines/study/design.py", set()),
    ("pipelines/data/ingest/job.py", set()),  # ingest changes the dataset's content fingerprint, which is keyed
    # the kernel: exactly the kinds that run the edited code
    ("pipelines/kernel/loop.py", {"node"}),
    ("pipelines/kernel/matrices.py", {"node"}),
    ("pipelines/kernel/cuts.py", {"cuts", "node"}),
    ("udfs/objectives/registry.py", {"node"}),
    ("udfs/objectives/noisy_lambdamart.py", set()),  # in the key of its own nodes only (objective_code)
    ("udfs/model.py", {"node"}),
    ("udfs/trees.py", {"node"}),
    ("udfs/metrics.py", {"node", "difficulty", "teacher_scores"}),
    ("udfs/difficulty.py", {"difficulty"}),
    ("udfs/per_query.py", {"difficulty", "teacher_scores"}),
    ("udfs/teacher.py", {"teacher_scores"}),
    ("udfs/pairs.py", {"node", "teacher_scores"}),
    ("pipelines/kernel/selfpaced.py", {"node"}),
    ("pipelines/data/teacher_scores.py", set()),
    ("pipelines/study/teachers.py", set()),
    ("udfs/curriculum.py", {"curriculum"}),
    ("udfs/scores.py", {"curriculum"}),
    ("udfs/spark_hashes.py", {"cuts", "node", "teacher_scores"}),
]


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory):
    """A copy of ``pipelines/`` and ``udfs/``; its code identity is the installed one."""
    root = tmp_path_factory.mktemp("src")
    for name in ("pipelines", "udfs"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    assert keys.sources_hash(base=root) == keys.sources_hash()
    return root


def _identities(base: Path) -> dict[str, str]:
    return {kind: keys.sources_hash(kind, base) for kind in keys.IDENTITY_ROOTS}


@pytest.mark.parametrize(("rel", "changes"), IDENTITY_TABLE, ids=[r for r, _ in IDENTITY_TABLE])
def test_an_edit_re_keys_exactly_the_results_its_code_computes(source_copy, rel, changes):
    base = _identities(source_copy)
    path = source_copy / rel
    text = path.read_text()
    try:
        path.write_text(text + "\n_EDITED = 1\n")
        now = _identities(source_copy)
        assert {kind for kind in base if now[kind] != base[kind]} == changes
        path.write_text(text.replace('"""', '"""A docstring edited. ', 1))
        assert _identities(source_copy) == base  # documentation never re-keys
    finally:
        path.write_text(text)


def test_no_operations_module_is_in_any_key(source_copy):
    """Every module of ours outside the kernel: an edited statement keeps every kind's key."""
    base = _identities(source_copy)
    ops = sorted(
        p
        for p in [*source_copy.glob("pipelines/**/*.py"), *source_copy.glob("udfs/*.py")]
        if not keys.in_kernel(".".join(p.relative_to(source_copy).with_suffix("").parts).removesuffix(".__init__"))
    )
    assert len(ops) > 80
    edited = []
    try:
        for p in ops:
            edited.append((p, p.read_text()))
            p.write_text(edited[-1][1] + "\n_EDITED = 1\n")
        assert _identities(source_copy) == base
    finally:
        for p, text in edited:
            p.write_text(text)


def _objective_codes(base: Path) -> dict[str, str]:
    """Each Python objective's code as :func:`keys.objective_code` hashes it, read from the tree ``base``."""
    from udfs.objectives import registry

    return {
        name: keys.sources_hash((o.module,), base) for name, o in registry.objectives().items() if o.module is not None
    }


#: (objective module edited, the objectives whose nodes it re-keys)
OBJECTIVE_TABLE = [
    ("udfs/objectives/noisy_lambdamart.py", {"noisy_lambdamart"}),
    ("udfs/objectives/sigmoid_pairwise.py", {"sigmoid_pairwise"}),
    ("udfs/objectives/mse.py", {"mse", "blend"}),
    ("udfs/objectives/lambdamart.py", {"lambdamart", "ranknet", "blend", "noisy_lambdamart", "selgb"}),
    (
        "udfs/objectives/pairwise.py",
        {"lambdamart", "ranknet", "blend", "noisy_lambdamart", "sigmoid_pairwise", "selgb"},
    ),
    ("udfs/objectives/blend.py", {"blend"}),
    ("udfs/objectives/selgb.py", {"selgb"}),
]


@pytest.mark.parametrize(("rel", "changes"), OBJECTIVE_TABLE, ids=[r for r, _ in OBJECTIVE_TABLE])
def test_an_objective_s_edit_re_keys_only_the_nodes_that_use_it(source_copy, rel, changes):
    base, kinds = _objective_codes(source_copy), _identities(source_copy)
    path = source_copy / rel
    text = path.read_text()
    try:
        path.write_text(text + "\n_EDITED = 1\n")
        now = _objective_codes(source_copy)
        assert {name for name in base if now[name] != base[name]} == changes
        assert _identities(source_copy) == kinds  # not the nodes' identity, nor any other kind's
    finally:
        path.write_text(text)


def test_a_new_objective_re_keys_no_existing_node(source_copy, tmp_path):
    """A new objective is a new file in udfs/objectives/ (registered there, no other file edited): every existing
    objective's code and every kind's identity stay, and a plan's nodes keep their keys."""
    base, kinds = _objective_codes(source_copy), _identities(source_copy)
    new = source_copy / "udfs/objectives/listnet.py"
    new.write_text(
        "from udfs.objectives.registry import objective\n\n\n"
        "@objective('listnet')\ndef listnet(m, y, offsets, *, tree, params):\n    return m - y, m * 0 + 1\n"
    )
    try:
        assert _objective_codes(source_copy) == base and _identities(source_copy) == kinds
    finally:
        new.unlink()
    # and in this process: registering one more objective leaves the plan's keys as they were
    from udfs.objectives import registry

    ctx = keys.plan_context(TrainConfig(), NdcgSpec(), "sha256:d", 1, CODE, CODE)
    paths = [parse_path("mse:4,lambdamart:6", "a"), parse_path("noisy_lambdamart:5", "b")]
    before = [n.key for n in build_plan(paths, fold=1, context=ctx).nodes]
    registry.objective("listnet_test_only")(lambda m, y, o, *, tree, params: None)
    try:
        assert [n.key for n in build_plan(paths, fold=1, context=ctx).nodes] == before
    finally:
        registry._REGISTRY.pop("listnet_test_only")


def test_the_kernel_is_declared_once_the_import_contract_holds_the_same_modules():
    """``keys.KERNEL`` (what a code identity may cover) and the ``kernel`` contract of ``.importlinter`` (what may not
    import operations code) list the same modules: one added to one list only (udfs.teacher was, by hand, to both)
    would be keyed without the contract's guard, or guarded without being keyed."""
    import configparser

    ini = configparser.ConfigParser()
    ini.read(ROOT / ".importlinter")
    contract = ini["importlinter:contract:kernel"]["source_modules"].split()
    assert sorted(contract) == sorted(keys.KERNEL)
