#!/usr/bin/env bash
# The prepared GPU check: one short run on a GPU box (7 minutes on a 16-core
# H200 box, 2026-11-30; docs/benchmarks.md "GPU box") that builds the
# extensions, runs the batcher and trainer test suites against CUDA,
# measures the steady-state worker scaling curve with the default Lost
# Cities network, trains a few iterations of configs/lost_cities.yaml on the
# GPU, measures the batcher and the service's own ceiling, and times colour
# renaming on the GPU against plain training steps, times PPO self-play
# waves in float32 against bfloat16 on the service, and measures the
# self-play stage's games/s and the label jobs' with 1 and STAGE_WORKERS
# (12,15) workers. Two more steps, not in the default
# list: `cutoffs` (traverser.bench --cutoffs with the forwards on the
# device: a worker's CPU a node with value cutoffs against playout cutoffs)
# and `recipe` (configs/lost_cities.yaml with every phase budgeted by wall
# clock and squeezed into RECIPE_S seconds; its agents come back as
# $OUT/recipe_run.tar, a run directory of strategy nets to judge on the CPU
# with agents.evaluate). Each step
# runs under its own time limit and writes $OUT/<step>.txt (at most 8
# files); a failed step is reported and the next
# one still runs. The exit status is 1 if any step failed.
#
#   bash scripts/gpu_check.sh                               # DEVICE=cuda
#   DEVICE=cpu WORKERS=1,2 QUICK=1 bash scripts/gpu_check.sh   # the same steps, small, on a CPU box
#   STEPS="tests scaling" TESTS=tests/test_batcher.py WORKERS=12,15 FIF="1 2" bash scripts/gpu_check.sh
#       # some steps only; the scaling curve once per batcher --forwards-in-flight value
#   STEPS="cutoffs recipe" RECIPE_S=360 bash scripts/gpu_check.sh
#       # value against playout cutoffs, then the recipe in 6 minutes: labels for a third of
#       # it, pretraining for a sixth, CFR through the batcher, PPO self-play for the last third
#   STEPS=scaling WORKERS=12,15 ADV="float32 float16 float32 float16" bash scripts/gpu_check.sh
#       # the scaling curve once per answer dtype, in the order given (alternate to see drift);
#       # the ceiling once per distinct answer dtype
#   STEPS="scaling ceiling" WORKERS=12,15 SHM="on off on off" bash scripts/gpu_check.sh
#       # rows and answers through shared memory (on, the default) or the socket (off), alternating
#
# Needs the project's Python dependencies (scripts/install.sh, or wheels
# installed beforehand where nothing can be fetched). Builds in place.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
DEVICE=${DEVICE:-cuda}
WORKERS=${WORKERS:-1,4,8,12,15}
QUICK=${QUICK:-0}
PY=${PYTHON:-python3}
TRAIN_WORKERS=${TRAIN_WORKERS:-12}
STEPS=${STEPS:-tests scaling train bench ceiling augment selfplay stages}      # the build always runs
STAGE_WORKERS=${STAGE_WORKERS:-12,15}
TESTS=${TESTS:-tests/test_batcher.py tests/test_batcher_robustness.py tests/test_trainer.py tests/test_memory.py tests/test_symmetry.py}
FIF=${FIF:-default}
ADV=${ADV:-float32}
SHM=${SHM:-on}
RECIPE_S=${RECIPE_S:-360}
has() { [[ " $STEPS " == *" $1 "* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
failed=()

step() {  # step NAME LIMIT_S CMD...: CMD under a time limit, output in $OUT/NAME.txt
    local name=$1 limit=$2
    shift 2
    echo "== $name ($(date +%T), limit ${limit}s): $*"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >>"$OUT/$name.txt" 2>&1
    local rc=$?
    tail -n "${TAIL:-12}" "$OUT/$name.txt" | cut -c1-400
    echo "-- $name: exit $rc after $((SECONDS - t0)) s"
    [ "$rc" -eq 0 ] || failed+=("$name")
}

if [ "$QUICK" = 1 ]; then
    window=(--warmup-s 1 --window-s 2); iters=2; trav=200; ws=(--set train.warm_start_games=20
        --set train.warm_start_worlds=4 --set train.warm_start_steps=50); tests=(-k "device or infer_matches or smoke")
else
    window=(--warmup-s 4 --window-s 6); iters=4; trav=4000; ws=(--set train.warm_start_games=400
        --set train.warm_start_worlds=16 --set train.warm_start_steps=1000); tests=()
fi

{
    "$PY" -c "import torch, sys; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
    echo "cores $(nproc)"
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.draw --format=csv 2>/dev/null || true
    "$PY" -c "import zmq, msgpack, yaml, numpy; print('zmq', zmq.zmq_version(), 'pyzmq', zmq.__version__, 'numpy', numpy.__version__)"
} 2>&1 | tee "$OUT/env.txt"

step build 240 "$PY" setup.py -q build_ext --inplace

# the robustness suites with their batchers (and the trainer's devices: auto) on $DEVICE
jobs=$(( $(nproc) > 8 ? 8 : 1 ))
xdist=()
[ "$jobs" -gt 1 ] && "$PY" -c "import xdist" 2>/dev/null && xdist=(-n "$jobs")
export DEEPCFR_TEST_DEVICE=$DEVICE
# shellcheck disable=SC2086
has tests && step tests 240 "$PY" -m pytest -q --maxfail=10 -p no:cacheprovider "${xdist[@]}" "${tests[@]}" $TESTS

if has scaling; then
    n=0
    rm -rf /tmp/gpu_check_scaling_json && mkdir -p /tmp/gpu_check_scaling_json
    for f in $FIF; do
        fif=()
        [ "$f" = default ] || fif=(--forwards-in-flight "$f")
        for a in $ADV; do
            for s in $SHM; do
                n=$((n + 1))
                shm=(); [ "$s" = off ] && shm=(--no-shm)
                step scaling 200 "$PY" -m benchmarks.scaling --workers "$WORKERS" --device "$DEVICE" "${window[@]}" \
                    "${fif[@]}" "${shm[@]}" --adv-dtype "$a" --out "/tmp/gpu_check_scaling_$n"
                cp "/tmp/gpu_check_scaling_$n.json" "/tmp/gpu_check_scaling_json/${n}_fif${f}_${a}_shm$s.json" \
                    2>/dev/null
            done
        done
    done
    tar -C /tmp/gpu_check_scaling_json -cf "$OUT/scaling_json.tar" .     # one file back, whatever the count
fi

# a few iterations of the GPU config: warm start, traversal through the batcher, training, evaluation
rm -rf /tmp/gpu_check_run
has train && step train 240 "$PY" -m trainer --config configs/lost_cities.yaml --run-dir /tmp/gpu_check_run \
    --set train.device="$DEVICE" --set service.batcher_device="$DEVICE" --set service.workers="$TRAIN_WORKERS" \
    --set train.iterations=$iters --set train.traversals=$trav "${ws[@]}" --set eval.every=0 \
    --set eval.lc_games=200 --set eval.exploiter_games=0 --set run.progress=false --set run.checkpoint_every=0 \
    --set train.time_limit_s=0 --set train.selfplay_budget_s=0
has train && "$PY" - >>"$OUT/train.txt" 2>&1 <<'EOF'
import json
for line in open("/tmp/gpu_check_run/metrics.jsonl"):
    m = json.loads(line)
    keys = [k for k in m if k.startswith(("iteration", "time_", "wall", "nodes", "queries", "vs_", "adv_loss",
                                         "strategy_loss", "samples", "batcher"))]
    print({k: (round(m[k], 4) if isinstance(m[k], float) else m[k]) for k in keys})
EOF

has bench && step bench 120 "$PY" -m batcher.bench --device "$DEVICE" --json --seconds 4
has bench && step end_to_end 240 "$PY" -m benchmarks.end_to_end --device "$DEVICE" --json --workers 1
if has ceiling; then
    for a in $(printf '%s\n' $ADV | awk '!seen[$0]++'); do      # once per answer dtype and shm setting
        for s in $(printf '%s\n' $SHM | awk '!seen[$0]++'); do
            shm=(); [ "$s" = off ] && shm=(--no-shm)
            step ceiling 120 "$PY" -m benchmarks.scaling --ceiling --device "$DEVICE" "${window[@]}" --adv-dtype "$a" \
                "${shm[@]}" --set rollouts=1 --set rollout_resample=false --out "/tmp/gpu_check_ceiling_${a}_$s"
        done
    done
fi

# train.augment_colours on the device: the renaming as tensors there, and training steps with and without it
# (into bench.txt, to keep $OUT at 8 files)
has augment && step bench 120 "$PY" -m studies.lc_augment --device "$DEVICE" --games 50 --steps 200

# PPO self-play waves on the device in float32 and in bfloat16 (train.selfplay_autocast), from the train
# step's agent (into bench.txt as well)
if has selfplay && has train; then
    sp=(); [ "$QUICK" = 1 ] && sp=(--games 16 --critic-waves 1)
    step bench 240 "$PY" -m benchmarks.lc_selfplay /tmp/gpu_check_run --speed-waves 4 --device "$DEVICE" \
        --workers "$TRAIN_WORKERS" "${sp[@]}"
fi

# the self-play stage on the service at steady state: games/s played by 1 and by STAGE_WORKERS workers
# through the batcher on the device, the update's own rate on the device, and what limits each point
# (into scaling.txt)
if has stages && has train; then
    sg=(--games 2048 --warmup-s 5 --window-s 15); [ "$QUICK" = 1 ] && sg=(--games 64 --warmup-s 2 --window-s 4)
    step scaling 300 "$PY" -m benchmarks.scaling --stage selfplay --workers "1,$STAGE_WORKERS" --agent /tmp/gpu_check_run \
        --device "$DEVICE" --out /tmp/gpu_check_stage_selfplay "${sg[@]}"
    lg=(--games 240 --worlds 64); [ "$QUICK" = 1 ] && lg=(--games 6 --worlds 4)
    step scaling 300 "$PY" -m benchmarks.scaling --stage labels --workers "1,$STAGE_WORKERS" \
        --out /tmp/gpu_check_stage_labels "${lg[@]}"
fi

# the GPU recipe in RECIPE_S seconds, every phase by wall clock: labels on every core (a label worker a
# core) for a third, the pretraining for a sixth, CFR through the batcher and TRAIN_WORKERS workers, PPO
# self-play for the last third, then a short final evaluation (the agents are judged on the CPU box:
# recipe_run.tar)
if has recipe; then
    rm -rf /tmp/gpu_check_recipe
    rq=(); [ "$QUICK" = 1 ] && rq=(--set train.warm_start_worlds=4 --set train.traversals=200 --set eval.lc_games=20)
    step recipe $((RECIPE_S + 120)) "$PY" -m trainer --config configs/lost_cities.yaml --run-dir /tmp/gpu_check_recipe \
        --set train.device="$DEVICE" --set service.batcher_device="$DEVICE" --set service.workers="$TRAIN_WORKERS" \
        --set service.label_workers="$(nproc)" --set train.time_limit_s="$RECIPE_S" \
        --set train.warm_start_budget_s=$((RECIPE_S / 3)) \
        --set train.warm_start_pretrain_budget_s=$((RECIPE_S / 6)) --set train.selfplay_budget_s=$((RECIPE_S / 3)) \
        --set eval.every=0 --set eval.lc_games=200 --set eval.exploiter_games=0 --set run.progress=false "${rq[@]}"
    # the strategy nets of the final agent, CFR's agent and the prior, as a run directory (a few MB)
    "$PY" - /tmp/gpu_check_recipe "$OUT/recipe_run.tar" >>"$OUT/recipe.txt" 2>&1 <<'EOF'
import json, sys, tarfile, tempfile
from pathlib import Path
import torch
from agents.checkpoint import BEFORE_SELFPLAY, PRIOR, latest_checkpoint
run, out = Path(sys.argv[1]), sys.argv[2]
with tempfile.TemporaryDirectory() as tmp:
    d = Path(tmp) / "recipe_run"
    (d / "checkpoints").mkdir(parents=True)
    final = latest_checkpoint(run)
    for src in (final, run / "checkpoints" / PRIOR, run / "checkpoints" / BEFORE_SELFPLAY):
        if src is None or not src.exists():
            print("recipe_run.tar: missing", src)
            continue
        ck = torch.load(src, map_location="cpu", weights_only=True)
        keep = {k: ck[k] for k in ("format", "config", "iteration", "net_spec") if k in ck}
        torch.save({**keep, "nets": {"strategy": ck["nets"]["strategy"]}}, d / "checkpoints" / src.name)
    if final is not None:
        (d / "checkpoints" / "latest").write_text(final.name)
    if (run / "metrics.jsonl").exists():
        (d / "metrics.jsonl").write_bytes((run / "metrics.jsonl").read_bytes())
    with tarfile.open(out, "w") as t:
        t.add(d, arcname="recipe_run")
for line in open(run / "metrics.jsonl"):
    m = json.loads(line)
    print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in m.items()
           if k.startswith(("iteration", "time_", "wall", "nodes", "warm_start_games", "selfplay_", "vs_",
                            "adv_heldout", "batcher")) and not isinstance(v, (list, dict))})
EOF
fi

# value cutoffs against playout cutoffs, in process, the forwards on the device
has cutoffs && step cutoffs 150 "$PY" -m traverser.bench --cutoffs --rounds "$([ "$QUICK" = 1 ] && echo 1 || echo 2)" \
    --scale "$([ "$QUICK" = 1 ] && echo 0.05 || echo 0.25)" --device "$DEVICE"

echo "== done ($(date +%T)); failed steps: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
