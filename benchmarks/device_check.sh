#!/usr/bin/env bash
# The checks run on a lent GPU machine (the device tool's `run`, 2026-11-26, fourteenth session):
#   1. PPO training throughput at the default job's PPO settings with at least 8192
#      environments: the deepsets, episode and device encoders (issue #22, item 1);
#   2. the issue #21 target sweep (examples/sweep_edge_10k.toml: 10,000 platforms x 3 weights
#      x every baseline + the exact optimum) on the GPU backend in one process, stopped at
#      SWEEP_S seconds if unfinished and measured from its finished shards
#      (scripts/sweep_progress.py; `--resume` would finish it to the same table).
#   0. (added 2026-11-30, forty-seventh session) the simulator's chunk on the GPU
#      (`bench_cost.py --chunk-sizes`): the rows behind `hetjax.cost.ACCELERATOR_CHUNK`, now
#      that `hj.evaluate` defaults to it there; steps 1 and 2 then run at that default (the
#      earlier loans' numbers were at chunk 1024).
# Results land in $OUT (cost_chunk_gpu.json, train_gpu_8192.json, train_gpu_32768.json,
# sweep_gpu.json).
# The image lacks gymnax and gymnasium: their wheels travel in .whl (carry: [".whl"]).
set -u
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
timeout "${CHUNK_S:-150}" python3 benchmarks/bench_cost.py --chunk-sizes 8192,65536 \
    --chunk-batches 16384,65536,262144 --chunk-only --quick --out-dir "$OUT" \
    && mv "$OUT/cost_chunk.json" "$OUT/cost_chunk_gpu.json"
timeout "${TRAIN_S:-190}" python3 benchmarks/bench_train.py --num-envs 8192 \
    --encoders deepsets episode device --settings default --repeats 2 --seeds \
    && cp benchmarks/results/train.json "$OUT/train_gpu_8192.json"
timeout "${TRAIN2_S:-70}" python3 benchmarks/bench_train.py --num-envs 32768 \
    --encoders device --settings default --repeats 2 --seeds \
    && cp benchmarks/results/train.json "$OUT/train_gpu_32768.json"
rm -rf /tmp/sweep_gpu
start=$(date +%s.%N)
timeout "${SWEEP_S:-280}" python3 -m hetjax.cli sweep examples/sweep_edge_10k.toml \
    --out /tmp/sweep_gpu --workers 1 --no-figures > "$OUT/sweep_gpu.log" 2>&1
rc=$?
elapsed=$(python3 -c "import time; print(time.time() - $start)")
echo "sweep rc=$rc elapsed=$elapsed"
tail -5 "$OUT/sweep_gpu.log"
python3 scripts/sweep_progress.py /tmp/sweep_gpu --elapsed "$elapsed" --json "$OUT/sweep_gpu.json"
