#!/usr/bin/env bash
# Training layouts under the collectives' sequence check
# (MERAK_CHECK_COLLECTIVES=1): every rank of every group issues the same
# collectives, sizes and tags in the same order, in one process and over
# two (a mismatch fails the run naming both calls). Usage: MERAK
set -euo pipefail
merak=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$(dirname "$0")"/../../README.md >"$work/text.txt"
export MERAK_CHECK_COLLECTIVES=1
model=(--data "$work/text.txt" --layers 2 --dim 64 --heads 2 --seq 32 --batch 8 --steps 3
  --eval-batches 1)
layouts=("--dp 2 --tp 2 --micro-batches 2 --data-parallel-sharding-strategy optim_grads_params --bucket-mb 0.05"
  "--dp 2 --pp 2 --micro-batches 4 --data-parallel-sharding-strategy optim_grads_params --bucket-mb 0.05"
  "--dp 2 --pp 2 --micro-batches 4 --use-distributed-optimizer --overlap-param-gather"
  "--dp 2 --tp 2 --sequence-parallel --tp-overlap 2 --micro-batches 2"
  "--dp 2 --untied-head --sparse-reducer s2 --sketch-ratio 0.5")
for l in "${layouts[@]}"; do
  # shellcheck disable=SC2086
  "$merak" train "${model[@]}" $l 2>"$work/e" || { echo "FAIL: $l"; cat "$work/e"; exit 1; }
  echo "ok: $l"
done
if "$merak" launch --help >/dev/null 2>&1; then
  "$merak" launch --procs 2 --timeout 120 train "${model[@]}" --dp 2 --pp 2 --micro-batches 4 \
    --data-parallel-sharding-strategy optim_grads_params --bucket-mb 0.05 2>"$work/e" ||
    { echo "FAIL: over 2 processes"; cat "$work/e"; exit 1; }
  echo "ok: over 2 processes"
fi
