"""The ``ltr`` command line: one subcommand per pipeline step.

Every subcommand takes the common options ``--conf`` (YAML, default
``conf/default.yaml``), ``--set section.key=value`` (repeatable), ``--master``
and ``--log-level``. Flags of a subcommand are shorthands for ``--set``
(``ltr ingest --strict`` is ``--set ingest.strict=true``). The same code runs
under ``spark-submit`` through the thin scripts in ``jobs/``.

Exit codes: 0 success, 2 bad input or configuration (the message says what to
fix), 1 an unexpected error (with its traceback in the log).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from pipelines.app import flags, stop
from pipelines.core.config import (
    Config,
    DatasetSpec,
    dataset_presets,
    load_dataset_spec,
)
from pipelines.core.errors import LtrError, StorageError, UserError, storage_failure
from pipelines.core.layout import Layout
from pipelines.core.secrets import RedactingFormatter, redact

log = logging.getLogger("ltr")


class UsageError(UserError):
    """A command-line mistake (exit code 2)."""


# ------------------------------------------------------------- parsing
#: ``--log-level``'s choices and help (every command's).
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
LOG_HELP = "the level of ltr's own log messages on stderr (Spark's own: spark.log_level)"


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("common options")
    g.add_argument("--conf", metavar="PATH", help="YAML config (default: conf/default.yaml)")
    g.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        dest="overrides",
        help="override a config value, e.g. --set ingest.chunk_bytes=8388608 (repeatable)",
    )
    g.add_argument("--master", metavar="URL", help="Spark master (default: spark-submit's, else local[*])")
    g.add_argument(
        "--remote",
        metavar="URL",
        help="run on Spark Connect: sc://HOST:PORT of a server, or local[N] for one in this process "
        "(default: $SPARK_REMOTE, else a classic session)",
    )
    g.add_argument(
        "--plugin",
        metavar="FILE_OR_MODULE",
        action="append",
        default=[],
        dest="plugins",
        help="load a plug-in (a Python file or an importable module: pipelines.plugins) (repeatable)",
    )
    g.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help=LOG_HELP)


def build_parser() -> argparse.ArgumentParser:
    """The ``ltr`` command line: one subcommand per step (``ltr COMMAND --help``), each bound to its ``cmd_*``."""
    parser = argparse.ArgumentParser(prog="ltr", description="Curriculum and continuation learning-to-rank on Spark.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("generate", help="write a synthetic LETOR dataset shaped like MSLR-WEB30K, Istella or Yahoo")
    p.add_argument("--out", help="output folder (default: <work_dir>/letor)")
    flags.add(p, "generate")
    _common(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("ingest", help="LETOR text -> partitioned Parquet with a manifest")
    p.add_argument(
        "--src", required=True, help="MSLR-style folder (Fold*/), one-fold folder (train.txt ...) or one file"
    )
    p.add_argument("--out", required=True, help="dataset directory to write (replaced atomically)")
    flags.add(p, "ingest")
    _common(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("difficulty", help="per-query difficulty scores (n_rel, NDCG of BM25 / PageRank, ...)")
    p.add_argument("--data", required=True, help="dataset written by `ltr ingest`")
    p.add_argument("--out", required=True, help="directory for the scores (replaced atomically)")
    p.add_argument("--dataset", help="take the feature roles from conf/datasets/<NAME>.yaml instead of the manifest")
    flags.add(p, "difficulty")
    _common(p)
    p.set_defaults(func=cmd_difficulty)

    p = sub.add_parser("curriculum", help="select the training queries of each curriculum stage")
    p.add_argument("--data", required=True, help="dataset written by `ltr ingest`")
    p.add_argument("--difficulty", required=True, help="scores written by `ltr difficulty`")
    p.add_argument("--fold", type=int, required=True, help="the fold whose training split to use (MSLR: 1..5)")
    flags.add(p, "curriculum")
    p.add_argument("--out", required=True, help="directory for the curriculum (replaced atomically)")
    _common(p)
    p.set_defaults(func=cmd_curriculum)

    p = sub.add_parser("train", help="distributed XGBoost on Spark along a training path")
    p.add_argument("--data", required=True, help="dataset written by `ltr ingest`")
    p.add_argument("--fold", type=int, required=True, help="the fold whose training split to use (MSLR: 1..5)")
    p.add_argument(
        "--curriculum",
        action="append",
        default=[],
        metavar="DIR",
        help="curriculum written by `ltr curriculum` (repeatable; referenced by its strategy name)",
    )
    flags.add(p, "train")
    p.add_argument("--out", required=True, help="model directory (replaced atomically)")
    _common(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("grid", help="the experiment grid over folds, tracked in MLflow (resumable)")
    p.add_argument("--folds", help="comma-separated folds (default: grid.folds)")
    flags.add(p, "grid")
    p.add_argument(
        "--plan", action="store_true", help="print every fold's plan of nodes (trees, state) and exit without training"
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="run up to N ready plan nodes as concurrent Spark jobs (default 1: one job per fold)",
    )
    p.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="KEY",
        help="train only this plan node (repeatable; its parent must be done): a retry or scheduler task; "
        "a key the plan does not hold is an error (exit 2)",
    )
    p.add_argument(
        "--unit",
        action="append",
        default=[],
        metavar="FOLD:INDEX",
        help="train the INDEX-th unit (0-based, `ltr grid --plan` order) of fold FOLD's plan, its keys "
        "computed here, by the code that trains (repeatable): what a scheduler task passes",
    )
    p.add_argument(
        "--fold",
        action="append",
        type=int,
        default=[],
        metavar="F",
        help="train only fold F of the study (grid.folds), under the study's one parent run "
        "(repeatable): one scheduler task per fold",
    )
    p.add_argument(
        "--setup-only",
        action="store_true",
        help="find or create the study's parent run, compute difficulty and every fold's curricula, "
        "train nothing; prints the parent run id as JSON",
    )
    p.add_argument(
        "--result",
        metavar="PATH",
        help="also write the summary (parent run id, experiment, tracking URI, folds, finished) as JSON to "
        "PATH (any path pyarrow writes): how a scheduler learns the parent run in cluster deploy mode",
    )
    p.add_argument(
        "--new-parent",
        action="store_true",
        help="start a new MLflow parent run where an unfinished grid of this study was started by "
        "other code (without it: refused)",
    )
    _common(p)
    p.set_defaults(func=cmd_grid)

    p = sub.add_parser("report", help="tables and figures of a grid, from MLflow")
    p.add_argument("--experiment", help="existing MLflow experiment (default: grid.experiment); never created")
    p.add_argument("--run-id", help="the grid's parent run (default: the experiment's latest FINISHED grid)")
    flags.add(p, "report")
    _common(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("run", help="the main job: generate, ingest, difficulty, curricula, grid, report")
    p.add_argument("--src", help="ingest this LETOR folder instead of generating one")
    flags.add(p, "run")
    _common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "pack",
        help="the project's environment as a relocatable archive for spark-submit --archives",
        description="Build a fresh virtual environment with this interpreter, install the project from its source "
        "tree non-editable with the lock file (-c constraints.txt; uv where installed, else pip), pack it "
        "with venv-pack and remove it. Use it as: spark-submit --archives ltr-env.tar.gz#env --conf "
        "spark.pyspark.python=./env/bin/python jobs/<step>.py ... The archive holds no Python "
        "interpreter: its bin/python links to the base interpreter it was built with, which must exist "
        "at the same path on every executor (or at --python-prefix), on the same OS and architecture.",
    )
    p.add_argument("--out", required=True, help="archive to write (.tar.gz or .tgz); its directory must exist")
    p.add_argument("--source", help="the project's source tree (default: the checkout `ltr` runs from)")
    p.add_argument("--constraints", help="lock file for pip -c (default: <source>/constraints.txt)")
    p.add_argument(
        "--python-prefix",
        metavar="PREFIX",
        help="prefix of the executors' interpreter if it differs from here (e.g. /usr for /usr/bin/python3)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave out files matching this venv-pack pattern, relative to the environment (repeatable), "
        "e.g. 'lib/python3.*/site-packages/pyspark/jars/*' where the cluster's Spark has the jars",
    )
    p.add_argument("--compress-level", type=int, default=4, help="gzip level 0-9 (default 4)")
    p.add_argument(
        "--with-plugin",
        action="append",
        default=[],
        dest="plugin_packages",
        metavar="PACKAGE",
        help="also install this plug-in package (a requirement or a path; its entry points in the group "
        "ltr.plugins are loaded on the executors without --plugin) (repeatable)",
    )
    p.add_argument(
        "--installer",
        default="auto",
        help="what installs the project and the lock: uv, pip, or auto (default: uv where installed, else pip)",
    )
    p.add_argument(
        "--no-compile",
        dest="compile_bytecode",
        action="store_false",
        help="do not byte-compile the environment: built faster and smaller, the executors compile what they import",
    )
    p.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help=LOG_HELP)
    p.set_defaults(func=cmd_pack)

    p = sub.add_parser(
        "jvm-archive",
        help="write Spark's class archive now: later driver JVMs start in about half the time",
        description="Write the class-data sharing archive of Spark's classes for this Java and these Spark jars "
        "(about 190 MB under $LTR_JVM_CACHE, default ~/.cache/ltr/jvm; written once). A local session that "
        "ltr starts uses it, and starts writing it in the background when it is missing; give it to a "
        "spark-submit driver with --driver-java-options <the printed option>. LTR_CLASS_ARCHIVE=off turns "
        "it off.",
    )
    p.add_argument("--force", action="store_true", help="write it again even if it exists")
    p.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help=LOG_HELP)
    p.set_defaults(func=cmd_jvm_archive)

    p = sub.add_parser(
        "server",
        help="start, show or stop a Spark Connect server on this machine that later commands use",
        description="A Spark Connect server kept running for the config's work_dir, bound to 127.0.0.1, on "
        "spark.master (default local[*]) with the Spark properties a classic session would have; every later "
        "ltr command on that work_dir connects to it (spark.remote: auto) instead of starting a JVM of its own. "
        "Its record and log: <work_dir>/connect/. status exits 0 when it runs, 3 when not, 75 while it starts.",
    )
    p.add_argument(
        "action", choices=["start", "status", "stop"], help="start it (or name the running one), show it, stop it"
    )
    p.add_argument("--port", type=int, default=0, help="start: the port (default: a free one)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    _common(p)
    p.set_defaults(func=cmd_server)

    p = sub.add_parser(
        "keys",
        help="the code identity of each kind of result (difficulty, curriculum, cuts, node)",
        description="Each kind of result is keyed by the kernel code that computes it (pipelines.kernel and udfs' "
        "per-query math): an edit elsewhere (config, storage, progress, the report, the CLI) retrains nothing. "
        "Prints each kind's identity (a hash of its modules' syntax trees, and library versions).",
    )
    p.add_argument("--explain", action="store_true", help="also list the modules each identity covers")
    p.add_argument(
        "--verify",
        metavar="DIR",
        help="instead, check every node's checkpoints, the folds' cuts and the plan records under DIR (a work_dir "
        "or its checkpoints/) against the checksums they were written with, without changing anything: one line for "
        "each that fails and what a run that needs it does again; exit 1 when one fails",
    )
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--log-level", default="WARNING", choices=LOG_LEVELS, help=LOG_HELP)
    p.add_argument(
        "--plugin",
        metavar="FILE_OR_MODULE",
        action="append",
        default=[],
        dest="plugins",
        help="load a plug-in first: its objectives' identities are listed too (repeatable)",
    )
    p.set_defaults(func=cmd_keys)

    p = sub.add_parser(
        "plugins",
        help="list every component (objectives, difficulty scores, pacing functions): built-in and plug-in",
        description="Lists each component with its kind, where it comes from, its identity (what the keys of the "
        "results that use it hold) and its own settings as configured (components.<name>.<setting>). Plug-ins "
        "come from --plugin FILE_OR_MODULE, a config file's plugins: list and installed packages' entry points (group "
        "ltr.plugins). --check runs each plug-in on a small synthetic "
        "batch (a one-document query and one without a relevant document among them): wrong shapes, dtypes, "
        "non-finite values, negative hessians or a score per row exit 2 naming the plug-in.",
    )
    _common(p)
    p.add_argument("--check", action="store_true", help="run each plug-in on the synthetic batch")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(func=cmd_plugins)
    return parser


def resolve_config(args: argparse.Namespace, command: str, check: bool = True) -> Config:
    """The run's typed config: ``--conf`` (default ``conf/default.yaml``), then ``--set`` overrides, then the
    ``command``'s config flags that were given (:mod:`pipelines.app.flags`), then ``--master``.

    Raises
    ------
    ConfigError
        An unknown key or a value of the wrong type (exit code 2).
    """
    from pipelines.plugins.run_config import load_run_config

    overrides = list(args.overrides) + flags.overrides(args, command)
    if args.master:
        overrides.append(f"spark.master={json.dumps(args.master)}")
    if getattr(args, "remote", None):
        overrides.append(f"spark.remote={json.dumps(args.remote)}")
    cfg = load_run_config(args.conf, overrides, getattr(args, "plugins", []), check=check)
    check_paths(cfg)
    return cfg


def check_paths(cfg: Config) -> None:
    """The config's training paths name loaded objectives (before any Spark job: a plug-in's objective that was not
    loaded is an error here, in one line, not in a worker)."""
    from pipelines.plan.paths import parse_path

    for name, text in [("train.path", cfg.train.path), *cfg.grid.extra_paths.items()]:
        if text:
            parse_path(text, name)


def _session(cfg: Config):
    from pipelines.app.jvm import use_class_archive
    from pipelines.app.server import session_config
    from pipelines.core.session import build_session, jvm_master

    spark_cfg = session_config(cfg)  # spark.remote: auto -> $SPARK_REMOTE, the work_dir's server, else classic
    use_class_archive(jvm_master(spark_cfg))
    return build_session(spark_cfg)


# ------------------------------------------------------------ commands
def cmd_generate(args: argparse.Namespace) -> int:
    """``ltr generate``: synthetic LETOR files shaped like ``--shape``'s dataset (default folder
    ``<work_dir>/letor``); exit code 0."""
    from pipelines.data.generate import generate

    cfg = resolve_config(args, "generate")
    out = args.out or Layout.of(cfg).letor
    g = cfg.generate
    s = generate(out, g.queries, g.seed, g.workers, g.shape, g.label_noise)
    log.info("wrote %s: %d %s-shaped queries, %d rows", s.out, s.queries, s.shape, s.rows)
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    """``ltr ingest``: LETOR text to the Parquet dataset, bad lines counted or refused (``--strict``); exit code 0."""
    from pipelines.core.outputs import claim_output
    from pipelines.data.ingest import ingest, line_spec
    from pipelines.data.ingest.quarantine import quarantine_dir

    cfg = resolve_config(args, "ingest")
    spec = _ingest_preset(args, cfg.dataset)
    line_spec(spec, cfg.ingest)  # feature count and label range, checked before Spark starts
    with claim_output(args.out, quarantine_dir(args.out)):  # before the JVM: another ingest there is refused at once
        m = ingest(_session(cfg), args.src, args.out, spec, cfg.ingest)
    log.info(
        "dataset %s: %d rows, %d queries, %d quarantined lines, layout %s, %s",
        args.out,
        m["rows"],
        m["queries"],
        m["quarantine"]["lines"],
        m["layout"],
        m["fingerprint"],
    )
    return 0


def _ingest_preset(args: argparse.Namespace, configured: str) -> DatasetSpec:
    """The dataset preset an ingest uses, said in one line: the one asked for (``--dataset``, ``--set
    dataset=``, a ``--conf`` file), else the one the files look like, else the default config's."""
    from pipelines.data.ingest import IngestError, detect_preset, discover

    asked = args.dataset or args.conf or any(o.split("=", 1)[0].strip() == "dataset" for o in args.overrides)
    try:
        layout = discover(args.src)
    except IngestError:
        layout = None  # the ingest itself says what is wrong with --src
    presets = dataset_presets()
    found = detect_preset(layout, {n: p.n_features for n, p in presets.items()}) if layout else None
    if asked or found is None:
        name, how = configured, "as asked" if asked else "the default config's; nothing in the files names a preset"
        if asked and found and found[0] != configured:
            log.warning("the files look like dataset %s (%s), but dataset %s was asked for", found[0], found[1], name)
    else:
        name, how = found[0], f"detected from the {found[1]}"
    spec = presets.get(name) or load_dataset_spec(name)  # an unknown name: ConfigError listing the known ones
    log.info("dataset preset %s (%s): %s; conf/datasets/%s.yaml", name, how, spec.description, name)
    return spec


def cmd_difficulty(args: argparse.Namespace) -> int:
    """``ltr difficulty``: one row of difficulty scores per stored query; exit code 0."""
    from pipelines.core.outputs import claim_output
    from pipelines.data.scoring import run_difficulty

    overrides = []
    if args.dataset:  # roles of a named dataset config
        spec = load_dataset_spec(args.dataset)
        overrides += [
            f"difficulty.bm25_feature={spec.bm25_feature}",
            f"difficulty.pagerank_feature={spec.pagerank_feature}",
        ]
    args.overrides = overrides + list(args.overrides)
    cfg = resolve_config(args, "difficulty")
    with claim_output(args.out):
        run_difficulty(_session(cfg), args.data, args.out, cfg.difficulty, cfg.metric)
    return 0


def cmd_curriculum(args: argparse.Namespace) -> int:
    """``ltr curriculum``: the stages of one curriculum for one fold, or ``--check`` of a built one; exit code 0."""
    from pipelines.core.outputs import claim_output
    from pipelines.data.curricula import build_curriculum, check_curriculum
    from pipelines.data.dataset import open_dataset

    cfg = resolve_config(args, "curriculum")
    ds = open_dataset(args.data)
    ds.subsets(args.fold, "train")  # settings, fold and labels checked before Spark starts
    check_curriculum(cfg.curriculum, ds, cfg.difficulty.empty_queries)
    with claim_output(args.out):
        s = build_curriculum(
            _session(cfg),
            args.data,
            args.difficulty,
            args.fold,
            cfg.curriculum,
            args.out,
            empty_queries=cfg.difficulty.empty_queries,
        )
    for st in s["stages"]:
        log.info(
            "stage %d: %d queries, %d documents%s",
            st["stage"],
            st["queries"],
            st["documents"],
            f", labels {st['label_filter']}" if st["label_filter"] else "",
        )
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """``ltr train``: one training path on one fold, distributed over barrier workers, from its checkpoints; exit 0."""
    from pipelines.app.train import cuts_ahead, run_train
    from pipelines.core.outputs import claim_output

    cfg = resolve_config(args, "train")
    checkpoints = Layout.of(cfg).checkpoints
    with claim_output(args.out):
        with cuts_ahead(args.data, [args.fold], cfg.train, checkpoints):  # while the JVM starts
            spark = _session(cfg)
        train = cfg.train
        run_train(
            spark,
            args.data,
            args.fold,
            train.path,
            args.curriculum,
            train,
            cfg.metric,
            args.out,
            checkpoints,
            cfg.selfpaced,
        )
    return 0


def cmd_grid(args: argparse.Namespace) -> int:
    """``ltr grid``: the study (every fold, path and child run), or ``--plan``, ``--setup-only`` or one unit; exit 0."""
    from pipelines.app.grid import run_grid
    from pipelines.app.train import cuts_ahead

    overrides = []
    if args.folds:
        try:
            folds = [int(x) for x in args.folds.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--folds {args.folds!r}: expected comma-separated fold numbers, e.g. 1,2,3") from None
        overrides.append(f"grid.folds={json.dumps(folds)}")
    args.overrides = overrides + list(args.overrides)
    cfg = resolve_config(args, "grid")
    if args.parallel < 1:
        raise UsageError(f"--parallel must be >= 1, got {args.parallel}")
    if args.plan:
        from pipelines.study.design import show_plan

        print(show_plan(cfg))
        return 0
    if (args.unit or args.node) and args.setup_only:
        raise UsageError("--setup-only trains nothing: it takes no --unit or --node")
    if args.unit and args.fold:
        raise UsageError("--unit FOLD:INDEX names its fold: give no --fold with it")
    units = []
    for text in args.unit:
        try:
            fold, index = (int(x) for x in text.split(":"))
        except ValueError:
            raise UsageError(f"--unit {text!r}: expected FOLD:INDEX, e.g. 1:0") from None
        units.append((fold, index))
    folds = list(dict.fromkeys([*args.fold, *(f for f, _ in units)]))
    layout = Layout.of(cfg)  # its data: grid.data, else <work_dir>/dataset, as the grid reads it
    with cuts_ahead(layout.data, folds or list(cfg.grid.folds), cfg.train, layout.checkpoints):
        spark = _session(cfg)  # the folds' cuts meanwhile (a scheduler's grid_setup: ready for its units)
    g = run_grid(
        spark,
        cfg,
        folds=folds or None,
        parallel=args.parallel,
        only=args.node or None,
        units=units or None,
        new_parent=args.new_parent,
        setup_only=args.setup_only,
        resume_hint=redact("ltr " + " ".join(sys.argv[1:])) if sys.argv[1:] else "ltr grid",
    )
    summary = {k: g[k] for k in ("parent_run_id", "experiment", "tracking_uri", "folds", "finished")}
    if args.setup_only:
        print(json.dumps(summary))
    if not (units or args.node):  # a scheduler's one unit prints nothing more
        from pipelines.report.mlflow_view import ui_lines
        from pipelines.tracking.runs import Tracker

        print(ui_lines(Tracker.for_config(cfg, g["experiment"], create=False), g["parent_run_id"]), file=sys.stderr)
    if args.result:  # a scheduler reads the parent run id here when the driver's output does not reach it
        from pipelines.core.storage import write_file_atomic

        write_file_atomic(args.result, json.dumps({**summary, "trees_built": g["trees_built"]}).encode())
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``ltr report``: a grid's tables and figures from MLflow (:func:`pipelines.report.build_report`); exit code 0."""

    from pipelines.app.run import build_report
    from pipelines.report import open_tracker
    from pipelines.report.mlflow_view import ui_lines

    if args.run_id is not None and not args.run_id.strip():  # a scheduler's template that found no parent
        raise UsageError(
            "--run-id is empty: give the grid's parent run id (what `ltr grid --setup-only` prints), "
            "or leave --run-id out to report the experiment's latest FINISHED grid"
        )
    cfg = resolve_config(args, "report")
    out = Layout.of(cfg).report
    # an existing experiment only: a mistyped --experiment is an error (exit 2), never a new empty one
    tracker = open_tracker(cfg, args.experiment)
    r = build_report(cfg, tracker, out, args.run_id)
    log.info("report: %s%s", os.path.join(r["out"], "report.html"), " (unfinished grid)" if r["problems"] else "")
    print(ui_lines(tracker, r["parent"], report=True), file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """``ltr run``: generate -> ingest -> difficulty -> curricula + grid (MLflow) -> report, each step only when its
    output is not fresh (:func:`pipelines.app.run.run_study`); exit code 0."""
    from pipelines.app.run import run_study

    run_study(resolve_config(args, "run"), args.src)
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    """A relocatable archive of the project's environment (see :mod:`pipelines.app.pack`)."""
    from pipelines.app.pack import pack

    r = pack(
        args.out,
        source=args.source,
        constraints=args.constraints,
        python_prefix=args.python_prefix,
        exclude=tuple(args.exclude),
        compress_level=args.compress_level,
        installer=args.installer,
        compile_bytecode=args.compile_bytecode,
        plugins=tuple(args.plugin_packages),
    )
    print(
        json.dumps(
            {
                "out": r.out,
                "bytes": r.bytes,
                "python": r.python,
                "packages": r.packages,
                "installer": r.installer,
                "seconds": round(r.seconds, 1),
            }
        )
    )
    return 0


def cmd_jvm_archive(args: argparse.Namespace) -> int:
    """Spark's class archive (see :mod:`pipelines.app.jvm`): written unless it exists (``--force``: again)."""
    import time

    from pipelines.app.jvm import NoJavaError, build_class_archive, class_archive, java_option

    archive = class_archive()
    if archive is None:
        raise NoJavaError()
    t0 = time.perf_counter()
    written = args.force or not archive.exists()
    if written:
        build_class_archive(archive)
    info = {"archive": str(archive), "bytes": archive.stat().st_size, "written": written}
    print(json.dumps({**info, "seconds": round(time.perf_counter() - t0, 1), "java_option": java_option(archive)}))
    return 0


def cmd_server(args: argparse.Namespace) -> int:
    """``ltr server start|status|stop`` (:mod:`pipelines.app.server`); status exits 3 when no server runs, 75 while
    one starts."""
    from pipelines.app import server

    cfg = resolve_config(args, "server")
    rec: dict[str, Any] | None
    if args.action == "start":
        rec = server.start(cfg, port=args.port)
        text = "runs already" if rec.pop("already", False) else "started"
        line = f"Spark Connect server {text} at {rec['url']} (pid {rec['pid']}, {rec['master']}; log {rec['log']})"
    elif args.action == "status":
        rec = server.running(cfg.work_dir)
        up = server.starting(cfg.work_dir) if rec is None else None
        if rec:
            line = (
                f"Spark Connect server running at {rec['url']} (pid {rec['pid']}, {rec['master']}, "
                f"up {time.time() - rec['started']:.0f} s)"
            )
        elif up:
            line = f"Spark Connect server starting at {up['url']} (pid {up['pid']}, {up['master']}; log {up['log']})"
        else:
            line = f"no Spark Connect server runs for work_dir {cfg.work_dir}"
        print(json.dumps(rec or up or {}) if args.json else line)
        return 0 if rec else 75 if up else 3
    else:
        rec = server.stop(cfg)
        line = f"Spark Connect server stopped (pid {rec['pid']})" if rec else "no Spark Connect server was running"
    print(json.dumps(rec or {}) if args.json else line)
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    """Each kind of result's code identity (:func:`pipelines.core.keys.code_identity`), with ``--explain`` the
    modules it covers (:func:`pipelines.core.keys.explain`)."""
    if args.verify:
        return _verify_checkpoints(args.verify)
    from pipelines.core import keys
    from pipelines.plugins.loading import load

    load(args.plugins)  # and the installed ones: their objectives' identities too
    explained = keys.explain()
    doc = {
        kind: {
            "sources": keys.code_identity(kind)["sources"],
            "roots": list(keys.IDENTITY_ROOTS[kind]),
            **({"modules": mods} if args.explain else {}),
        }
        for kind, mods in explained.items()
    }
    objectives = {
        name: d if args.explain else {"sources": d["sources"]} for name, d in keys.explain_objectives().items()
    }
    libraries = {k: v for k, v in keys.code_identity().items() if k != "sources"}
    if args.json:
        print(json.dumps({"kinds": doc, "objectives": objectives, "libraries": libraries}, indent=2))
        return 0
    for kind, d in doc.items():
        print(f"{kind}: sources {d['sources']} ({len(explained[kind])} modules from {', '.join(d['roots'])})")
        for m in d.get("modules", []):
            print(f"    {m}")
    print("a node also holds the code of its objective:")
    for name, d in objectives.items():
        print(f"  {name}: sources {d['sources']}")
        for m in d.get("modules", []):
            print(f"      {m}")
    print("libraries: " + ", ".join(f"{k} {v or '-'}" for k, v in libraries.items()))
    return 0


def _verify_checkpoints(where: str) -> int:
    """``ltr keys --verify DIR``: :meth:`~pipelines.store.checkpoints.CheckpointStore.audit` of every node under
    ``DIR/checkpoints`` (or ``DIR``); 0 when every node's newest checkpoint is intact, else 1."""
    import pyarrow.fs as pafs

    from pipelines.store.checkpoints import CheckpointStore
    from pipelines.store.cuts import check_cuts
    from udfs.uris import resolve

    root = where.rstrip("/")
    fs, path = resolve(root)
    if fs.get_file_info(f"{path}/checkpoints").type == pafs.FileType.Directory:
        root = f"{root}/checkpoints"
    elif fs.get_file_info(path).type != pafs.FileType.Directory:
        raise UsageError(f"--verify {redact(where)}: no such directory")
    store = CheckpointStore(root)
    nodes, corrupt = store.node_keys(), 0
    for key in nodes:
        newest, intact, problems = store.audit(key)
        for line in problems:
            print(line)
        if problems:
            corrupt += 1
            again = f"from its checkpoint at tree {intact}" if intact is not None else "from its start"
            print(
                f"node {key}: a run that needs it sets {len(problems)} checkpoint(s) aside and trains it again {again}"
            )
    cuts, records, changed = store.cuts_keys(), store.plan_records(), 0
    for key in cuts:
        why = check_cuts(root, key)
        if why is not None:
            changed += 1
            print(f"{why}: a run that needs them sets them aside and computes them again")
    for path in records:
        why = store.read_record(path)[1]
        if why is not None:
            changed += 1
            print(f"plan record {why}: ltr grid --plan does not use it; the next run writes it again")
    print(
        f"{len(nodes)} nodes checked under {redact(root)}: {corrupt} with a checkpoint that changed on disk; "
        f"{len(cuts)} cuts and {len(records)} plan records: {changed} changed"
    )
    return 1 if corrupt or changed else 0


def cmd_plugins(args: argparse.Namespace) -> int:
    """Every component with its kind, source, identity and own settings as configured (``components.<name>``:
    :func:`pipelines.plugins.loading.describe`); with
    ``--check`` each plug-in runs on the synthetic batch first (exit 2 on the first that fails)."""
    from pipelines.plugins.loading import describe

    resolve_config(args, "plugins", check=args.check)
    rows = describe()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        origin = f"{r['source']}" + (f" ({r['package']} {r['version']})" if r.get("package") else "")
        settings = " ".join(f"{k}={json.dumps(v)}" for k, v in r["settings"].items())
        print(f"{r['kind']:<16} {r['name']:<{width}}  {'plug-in ' if r['plugin'] else 'built-in'}  "
              f"{r.get('difficulty', ''):<10}  {r['identity'] or '-':<29} {origin}"
              + (f"  settings: {settings}" if settings else ""))  # fmt: skip
    n = sum(r["plugin"] for r in rows)
    print(
        f"{len(rows)} components, {n} from plug-ins" + (f"; {n} checked on the synthetic batch" if args.check else "")
    )
    return 0


# ---------------------------------------------------------------- main
class _StderrHandler(logging.StreamHandler):
    """Writes each record to ``sys.stderr`` as it is at that moment, not as it was when logging was set up:
    whoever calls :func:`main` in-process (pytest's capture, an Airflow task) may swap and close it later."""

    @property
    def stream(self):
        """``sys.stderr`` at the moment of the call."""
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it; the property always reads sys.stderr
        """Ignored: the handler always writes to the current ``sys.stderr``."""


def setup_logging(level: str) -> None:
    """Log ``level`` and above to the current ``sys.stderr`` with times; py4j's chatter at WARNING."""
    handler = _StderrHandler()  # every line with credentials masked (pipelines.core.secrets)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler], force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)


def save_trace(command: str, error: BaseException | None = None) -> str:
    """Write the traceback being handled (with the Spark/Python trace of the failed task, and ``error``'s
    ``detail``: a task's trace that came back as text) to a file under the temporary directory and return its path:
    the console keeps one line."""
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix=f"ltr-{command}-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write(redact(traceback.format_exc()))
        detail = getattr(error, "detail", "")
        if detail:
            f.write("\nwhere it happened:\n" + redact(str(detail)))
    log.debug("full trace in %s", path)
    return path


#: The commands whose training commits checkpoints as it goes: stopped, they keep them, and run again resume.
RESUMED_FROM_CHECKPOINTS = frozenset({"train", "grid", "run"})


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ltr`` and of every ``jobs/*.py`` script; returns the exit code."""
    from pipelines.core import threads

    threads.apply()  # before this process loads an OpenMP runtime (XGBoost's, numba's): they read it once
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    func: Callable[[argparse.Namespace], int] = args.func
    restore = stop.install()
    try:
        try:
            return func(args)
        except BaseException:
            if stop.stopping():  # whatever the exception became on its way up (a cancelled Spark job's error)
                raise stop.Stopped() from None
            raise
    except LtrError as e:  # one line; exit 2 (the user's to fix), 75 (busy: retry later), 74 (storage) or 1
        # The line below is the one the user reads; logged at ERROR as well, the message stood twice on the same
        # stderr (the log and the print), in a terminal and in an Airflow task's log alike.
        log.debug("%s: %s", type(e).__name__, e)
        where = f" (full trace: {save_trace(args.command, e)})" if e.exit_code in (1, StorageError.exit_code) else ""
        print(redact(f"ltr {args.command}: error: {e}{where}"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        log.error("interrupted")
        return 130
    except stop.Stopped:
        stop.clean_up()
        kept = (
            "the trees it checkpointed are kept, and the same command resumes from them"
            if args.command in RESUMED_FROM_CHECKPOINTS
            else "the output it was writing was not kept"
        )
        print(f"ltr {args.command}: stopped (SIGTERM); {kept}", file=sys.stderr)
        return 143
    except Exception as e:
        cause = storage_failure(str(e))
        if cause is not None:  # a full disk, a read-only or vanished directory: one line, exit 74, not a traceback
            trace = save_trace(args.command, e)
            print(
                redact(f"ltr {args.command}: error: the storage failed: {cause} (full trace: {trace})"), file=sys.stderr
            )
            return StorageError.exit_code
        log.exception("ltr %s failed with an unexpected error", args.command)
        return 1
    finally:
        restore()


if __name__ == "__main__":  # python -m pipelines.app.cli
    sys.exit(main())
