#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build in
# Release, get the Moby Dick corpus, and train a small byte-level GPT on it,
# writing metrics and checkpoints under runs/quickstart.
# Override the run with environment variables, e.g. STEPS=2000 ./deploy/quickstart.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
./deploy/install-deps.sh --data
./deploy/build.sh
./deploy/get-data.sh
run=${RUN_DIR:-runs/quickstart}
mkdir -p "$run"
./build/bin/merak train --data data/moby_dick.txt \
  --layers "${LAYERS:-4}" --dim "${DIM:-256}" --heads "${HEADS:-4}" --seq "${SEQ:-128}" \
  --batch "${BATCH:-16}" --steps "${STEPS:-300}" --lr "${LR:-1e-3}" --eval-interval "${EVAL:-100}" \
  --save "$run/checkpoints" --save-interval "${SAVE_INTERVAL:-100}" --metrics "$run/metrics.jsonl"
echo "quickstart: metrics in $run/metrics.jsonl, checkpoints in $run/checkpoints"
