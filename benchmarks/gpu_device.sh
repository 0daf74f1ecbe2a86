#!/usr/bin/env bash
# Runs benchmarks/bench_gpu.py on a lent GPU machine whose python3 has neither XGBoost nor PySpark and
# no network (this workplace's device tool; see benchmarks/RESULTS.md, "GPU training").
#
#   bash benchmarks/gpu_device.sh stage1             # carry .gpu1: stash it, unpack the Python parts, check
#   bash benchmarks/gpu_device.sh stage2 [ARGS...]   # carry .gpu2: rebuild XGBoost, verify it, run the benchmark
#
# Payload (ignored folders made on the developer's machine, one per call: a call carries at most 64 MiB):
#   .gpu1/pylibs.tar.xz            the xgboost 3.2.0 wheel (manylinux_2_28_x86_64, the CUDA build) unpacked
#                                  without lib/libxgboost.so, plus pyspark 4.3.0's Python files (no jars:
#                                  nothing here starts a JVM) and py4j, for the module-level imports
#   .gpu1/libxgboost.so.xz.part0   libxgboost.so from that wheel, xz-compressed, first part
#   .gpu2/libxgboost.so.xz.part1   second part
# Stage 2 checks every file of the rebuilt package against the wheel's RECORD (sha256) before use.
# Environment: OUT (results folder, absolute), PY (interpreter, default python3), SITE, STASH, BENCH_TIMEOUT (s),
# SRC (stage 2: the folder holding the code to run, default the working tree).
set -euo pipefail
OUT=${OUT:-/tmp/gpu-out}
PY=${PY:-python3}
SITE=${SITE:-/tmp/site}
STASH=${STASH:-/tmp/gpu-stash}
mkdir -p "$OUT" "$SITE" "$STASH"

case "${1:-}" in
stage1)
    cp .gpu1/* "$STASH"/
    "$PY" - "$STASH/pylibs.tar.xz" "$SITE" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    t.extractall(sys.argv[2], filter="data") if hasattr(tarfile, "data_filter") else t.extractall(sys.argv[2])
EOF
    { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true; nproc; free -g | head -2; "$PY" -V; } 2>&1 | tee "$OUT/stage1.txt"
    PYTHONPATH="$SITE" "$PY" - <<'EOF' 2>&1 | tee -a "$OUT/stage1.txt"
import importlib, time
for m in ("numpy", "scipy", "pandas", "pyarrow", "numba", "yaml", "pyspark", "py4j"):
    mod = importlib.import_module(m)
    print(m, getattr(mod, "__version__", "?"), mod.__file__)
import numba, numpy as np
print("numba njit:", numba.njit(lambda a: a.sum())(np.arange(10)))
from pipelines.data.generate import mslr_queries, simulate_batch
t0 = time.perf_counter()
_, n, _ = mslr_queries(512, 1)
labels, X = simulate_batch(np.random.default_rng(0), n[:256])
print(f"simulate_batch: {X.shape[0]} rows in {time.perf_counter() - t0:.2f} s")
EOF
    ls -la "$STASH"
    ;;
stage2)
    shift
    part0=$STASH/libxgboost.so.xz.part0
    [ -f "$part0" ] || part0=.gpu1/libxgboost.so.xz.part0
    if [ ! -f "$part0" ] || [ ! -d "$SITE/xgboost" ]; then
        echo "stage 1's files are gone (a fresh machine?): run stage1 again first" >&2
        exit 3
    fi
    "$PY" - "$part0" .gpu2/libxgboost.so.xz.part1 "$SITE" <<'EOF'
import base64, hashlib, lzma, pathlib, sys, time
t0 = time.perf_counter()
site = pathlib.Path(sys.argv[3])
so = site / "xgboost/lib/libxgboost.so"
so.write_bytes(lzma.decompress(b"".join(pathlib.Path(p).read_bytes() for p in sys.argv[1:3])))
bad = 0
for line in (site / "xgboost-3.2.0.dist-info/RECORD").read_text().splitlines():
    path, digest, _ = line.rsplit(",", 2)
    if not digest:
        continue
    want = digest.split("=", 1)[1]
    got = base64.urlsafe_b64encode(hashlib.sha256((site / path).read_bytes()).digest()).rstrip(b"=").decode()
    bad += got != want
    if got != want:
        print("RECORD mismatch:", path)
print(f"xgboost rebuilt and checked against its RECORD in {time.perf_counter() - t0:.1f} s: {bad} mismatches")
sys.exit(1 if bad else 0)
EOF
    export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
    "$PY" -c "import xgboost as x; print('xgboost', x.__version__, x.__file__, 'USE_CUDA', x.build_info().get('USE_CUDA'))"
    # SRC: a snapshot of the code to measure (e.g. `git archive` of a commit), instead of the working tree
    cd "${SRC:-.}"
    [ -f COMMIT ] && echo "code: $(cat COMMIT)"
    timeout "${BENCH_TIMEOUT:-420}" "$PY" -u -m benchmarks.bench_gpu --out "$OUT" "$@" 2>&1 | tee "$OUT/log.txt"
    ;;
*)
    echo "usage: $0 stage1 | stage2 [bench_gpu ARGS...]" >&2
    exit 2
    ;;
esac
