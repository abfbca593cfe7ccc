#!/usr/bin/env bash
# The prepared GPU check (issue 6): the batcher's CUDA path and the worker
# scaling curve with the default Lost Cities network. One short run, about
# 5 minutes on a 16-core GPU box; results land in $OUT (default gpu_out/).
#
#   bash scripts/gpu_check.sh            # DEVICE=cuda, workers 1,2,4,8,16
#   DEVICE=cpu WORKERS=1,2 bash scripts/gpu_check.sh   # the same steps on a CPU box
#
# Needs the project's Python dependencies (scripts/install.sh, or pyzmq
# carried as a wheel where nothing can be fetched) and builds the extensions
# in place.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
DEVICE=${DEVICE:-cuda}
WORKERS=${WORKERS:-1,2,4,8,16}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee "$OUT/env.txt"
nproc | tee -a "$OUT/env.txt"
"$PY" setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1
echo "== batcher: rows/s of the service vs a raw forward ($DEVICE)"
"$PY" -m batcher.bench --device "$DEVICE" --json --seconds 4 --workers 1 | tee "$OUT/batcher_bench.json"
echo "== scaling: workers $WORKERS ($DEVICE)"
"$PY" -m benchmarks.scaling --workers "$WORKERS" --device "$DEVICE" --warmup-s 3 --window-s 5 --out "$OUT/scaling" | tee "$OUT/scaling.txt"
echo "== the service's own ceiling (null forward, 1 worker)"
"$PY" -m benchmarks.scaling --ceiling --device "$DEVICE" --out "$OUT/ceiling" | tee "$OUT/ceiling.txt"
