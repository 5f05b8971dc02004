#!/usr/bin/env bash
# The planner's choice against a grid of hand-chosen plans, measured on this
# machine: for each device count, `merak train --devices N` (the plan
# `merak plan --devices N --device-type cpu` chooses) and hand-chosen
# dp/tp/pp/micro-batches/schedule/overlap layouts of the same N actor
# devices, a few steps each; tokens/s from the median step after the first two.
#
# Usage: bench/plan_grid.sh [build/bin/merak] [data] [steps]
#   DEVICES="2 4" (default) picks the device counts, to keep each timed run short.
# Prints one JSON object per run, then one per device count with the
# planner's rank and its throughput against the best hand-chosen plan.
set -euo pipefail
merak=${1:-build/bin/merak}
data=${2:-data/moby_dick.txt}
steps=${3:-6}
model=(--layers 6 --dim 384 --heads 6 --seq 256)
batch=8
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# dp tp pp micro-batches schedule recompute tp-overlap
grid_2=("2 1 1 1 1f1b none 0" "1 1 2 2 1f1b none 0" "1 1 2 4 1f1b none 0" "1 1 2 8 1f1b none 0"
        "1 1 2 8 gpipe none 0" "1 2 1 1 1f1b none 0" "1 2 1 1 1f1b none 2")
grid_4=("4 1 1 1 1f1b none 0" "2 1 2 2 1f1b none 0" "2 1 2 4 1f1b none 0" "1 1 4 4 1f1b none 0"
        "1 1 4 8 1f1b none 0" "2 2 1 1 1f1b none 0" "1 2 2 4 1f1b none 0" "1 2 2 4 1f1b none 2")
measure() {  # label, train args... -> one JSON line
  local label=$1
  shift
  rm -f "$work/m.jsonl"
  "$merak" train --data "$data" "${model[@]}" --batch $batch --steps "$steps" "$@" \
    --metrics "$work/m.jsonl" --log-level warn >/dev/null 2>&1
  python3 - "$label" "$work/m.jsonl" <<'PY'
import json, statistics, sys
m = [json.loads(l) for l in open(sys.argv[2])][2:]
s = statistics.median(x["step_s"] for x in m)
print(json.dumps({"plan": sys.argv[1], "step_s": round(s, 4), "tokens_per_s": round(8 * 256 / s, 1)}))
PY
}
for n in ${DEVICES:-2 4}; do
  echo "{\"devices\": $n, \"uptime\": \"$(uptime)\"}"
  chosen=$("$merak" plan --model gpt "${model[@]}" --global-batch-size $batch --devices "$n" \
    --device-type cpu --json | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p["dp"],p["tp"],p["pp"],p["micro_batches"],p["schedule"],p["recompute"],p["tp_overlap"])')
  {
    measure "planner: $chosen" --devices "$n"
    eval "grid=(\"\${grid_$n[@]}\")"
    for p in "${grid[@]}"; do
      read -r dp tp pp m sched rc ov <<<"$p"
      measure "$p" --dp "$dp" --tp "$tp" --pp "$pp" --micro-batches "$m" --schedule "$sched" \
        --recompute "$rc" --tp-overlap "$ov"
    done
  } | tee "$work/runs.jsonl"
  python3 - "$n" "$work/runs.jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[2])]
planner, hand = runs[0], runs[1:]
best = max(hand, key=lambda r: r["tokens_per_s"])
order = sorted(runs, key=lambda r: -r["tokens_per_s"])
print(json.dumps({"devices": int(sys.argv[1]), "planner": planner["plan"],
                  "planner_tokens_per_s": planner["tokens_per_s"],
                  "best_hand_chosen": best["plan"], "best_tokens_per_s": best["tokens_per_s"],
                  "planner_vs_best": round(planner["tokens_per_s"] / best["tokens_per_s"], 3),
                  "planner_rank": order.index(planner) + 1, "of": len(runs)}))
PY
done
