#!/usr/bin/env bash
# Predicted vs measured step time of several plans on this machine: the
# planner's cost model (a measured CPU profile) and event simulator against
# `merak train` running the same plan on the actor runtime.
#
# Usage: bench/plan_validation.sh [build/bin/merak] [data] [steps]
# Prints one JSON object per plan: predicted and measured step time (median
# of the steps after the first two) and the ratio.
set -euo pipefail
merak=${1:-build/bin/merak}
data=${2:-data/moby_dick.txt}
steps=${3:-8}
model=(--layers 6 --dim 384 --heads 6 --seq 256)
batch=8
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# dp tp pp micro-batches schedule recompute tp-overlap
# (interleaved: 2 chunks a device, the default of both commands)
plans=("1 1 1 1 1f1b none 0" "2 1 1 1 1f1b none 0" "1 1 2 8 1f1b none 0" "1 2 1 1 1f1b none 0"
       "1 2 1 1 1f1b none 2" "1 1 2 8 1f1b full 0" "2 1 2 4 1f1b none 0" "1 1 4 8 shifted full 0"
       "1 1 2 8 interleaved none 0" "1 1 2 4 interleaved none 0" "1 1 2 8 interleaved full 0")
# PLANS="0 3 5" runs only those (0-based) entries, to keep each timed run short.
sel=${PLANS:-$(seq -s' ' 0 $((${#plans[@]} - 1)))}
for i in $sel; do
  p=${plans[$i]}
  read -r dp tp pp m sched rc ov <<<"$p"
  devices=$((dp * tp * pp))
  pred=$("$merak" plan --model gpt "${model[@]}" --global-batch-size $batch --devices $devices \
    --device-type cpu --dp "$dp" --tp "$tp" --pp "$pp" --micro-batches "$m" --max-micro-batches "$m" \
    --schedule "$sched" --recompute "$rc" --tp-overlap "$ov" --json)
  extra=()
  ((devices * m > 1)) && extra=(--dp "$dp" --tp "$tp" --pp "$pp" --micro-batches "$m"
                                --schedule "$sched" --recompute "$rc" --tp-overlap "$ov")
  "$merak" train --data "$data" "${model[@]}" --batch $batch --steps "$steps" "${extra[@]}" \
    --metrics "$work/m.jsonl" --log-level warn >/dev/null 2>&1
  python3 - "$p" "$pred" "$work/m.jsonl" <<'PY'
import json, statistics, sys
plan, pred = sys.argv[1], json.loads(sys.argv[2])
m = [json.loads(l) for l in open(sys.argv[3])][2:]
measured = statistics.median(x["step_s"] for x in m)
print(json.dumps({"plan": plan, "predicted_s": round(pred["step_time_s"], 4),
                  "predicted_parts": {k: round(pred.get(k, 0), 4) for k in ("pipeline_s", "dp_exposed_s", "optimizer_s")},
                  "measured_s": round(measured, 4),
                  "ratio": round(pred["step_time_s"] / measured, 3)}))
PY
done
