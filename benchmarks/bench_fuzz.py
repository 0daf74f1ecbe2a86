"""The long fuzz run: the properties of :mod:`pipelines.testing.fuzz` (the LETOR parser, the path syntax, the config
loader, the plug-in boundary) on many more random inputs than the tests draw, each target for ``--examples`` inputs.

    python -m benchmarks.bench_fuzz [--examples 20000] [--targets letor,letor_roundtrip,paths,overrides,files,plugins]
                                    [--seed 0] [--out bench-out/fuzz]

Per target: the inputs tried, the seconds, what the inputs came to (LETOR: rows, skipped and quarantined lines;
paths and configs: parsed or refused), and the first failing example Hypothesis found and shrank (none: the
property held on every input). Output: ``<out>/bench_fuzz.json`` and a table on stdout; exit 1 if a property failed.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings

from pipelines.testing import fuzz

ROOT = Path(__file__).resolve().parent.parent


def targets() -> dict[str, tuple[Any, Callable[[Any], Any]]]:
    """name -> (strategy, property returning what the input came to)."""

    def block(lines: list[bytes]) -> dict[str, int]:
        return fuzz.check_letor_block(lines)

    def roundtrip(row: Any) -> str:
        fuzz.check_letor_roundtrip(row)
        return "read back"

    return {
        "letor": (fuzz.letor_lines(), block),
        "letor_roundtrip": (fuzz.letor_rows(), roundtrip),
        "paths": (fuzz.path_texts(), lambda t: "parsed" if fuzz.check_path(t) else "refused"),
        "overrides": (fuzz.overrides(), lambda s: "loaded" if fuzz.check_overrides(s) else "refused"),
        "files": (fuzz.config_files(), lambda t: "loaded" if fuzz.check_config_file(t) else "refused"),
        "plugins": (fuzz.plugin_sources(), lambda t: "passed" if fuzz.check_plugin(t) else "refused"),
    }


def run(name: str, strategy: Any, prop: Callable[[Any], Any], examples: int, at: int) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    tried = [0]

    @seed(at)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(strategy)
    def check(x: Any) -> None:
        tried[0] += 1
        out = prop(x)
        if isinstance(out, dict):
            counts.update(out)
        else:
            counts[str(out)] += 1

    t0 = time.perf_counter()
    failure = None
    try:
        check()
    except Exception as e:  # the shrunk failing example is in the message Hypothesis adds
        failure = "".join(traceback.format_exception_only(type(e), e)).strip()[-3000:]
    return {"target": name, "inputs": tried[0], "seconds": round(time.perf_counter() - t0, 1),
            "outcomes": dict(counts), "failure": failure}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=20_000)
    p.add_argument("--targets", default="letor,letor_roundtrip,paths,overrides,files,plugins")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "bench-out" / "fuzz"))
    args = p.parse_args()
    all_targets = targets()
    results = []
    for name in args.targets.split(","):
        strategy, prop = all_targets[name]
        r = run(name, strategy, prop, args.examples, args.seed)
        results.append(r)
        print(f"{name}: {r['inputs']:,} inputs in {r['seconds']} s, {r['outcomes']}; "
              f"{'FAILED: ' + r['failure'] if r['failure'] else 'held'}", flush=True)  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_fuzz.json").write_text(json.dumps({"examples": args.examples, "seed": args.seed,
                                                     "results": results}, indent=2))  # fmt: skip
    print(f"\n{'target':<16} {'inputs':>8} {'s':>7}  outcome")
    for r in results:
        print(f"{r['target']:<16} {r['inputs']:>8,} {r['seconds']:>7}  {'FAILED' if r['failure'] else 'held'} "
              f"{r['outcomes']}")  # fmt: skip
    return 1 if any(r["failure"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
