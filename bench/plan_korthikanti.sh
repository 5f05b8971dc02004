#!/usr/bin/env bash
# The planner against the four GPT models of Korthikanti et al. (2022),
# "Reducing Activation Recomputation in Large Transformer Models" (sequence
# 2048, vocabulary 51200, tp 8, one replica, micro-batch 1 but 22B's 4, 1F1B,
# unfused attention and no TP overlap, the stages waiting for their sends
# and receives between ops, which scatter/gather without sequence
# parallelism, as run in 2022) on dgx-a100-hdr (A100
# 80 GB), under no, full (every stage) and selective recomputation with
# sequence parallelism (full as Megatron-LM's --recompute-method uniform
# --recompute-num-layers 1: one checkpoint a layer). Prints one JSON line per run: the first stage's
# bytes by category (with the budget lifted, so every figure prints), the
# planner's verdict under the device's own memory, and its step time beside
# the paper's (Table 5, end-to-end iteration time; none without
# recomputation, which the paper did not run).
# Usage: bench/plan_korthikanti.sh [MERAK]
# (docs/results/planner-memory.md, docs/results/planning.md)
set -euo pipefail
merak=${1:-$(dirname "$0")/../build/bin/merak}
#      name  layers hidden heads batch devices pp micro-batch-size, then the
#      published step times in seconds: full recomputation, selective + SP
runs=("22B   48  6144  64   4   8   1 4 1.42 1.10"
      "175B  96  12288 96   64  64  8 1 18.13 13.75"
      "530B  105 20480 128  280 280 35 1 49.05 37.83"
      "1T    128 25600 160  512 512 64 1 94.42 71.49")
for run in "${runs[@]}"; do
  read -r name layers hidden heads batch devices pp mbs full_s selective_s <<<"$run"
  for rc in none full selective; do
    args=(plan --cluster dgx-a100-hdr --num-layers "$layers" --hidden-size "$hidden"
      --num-attention-heads "$heads" --seq-length 2048 --vocab 51200 --global-batch-size "$batch"
      --devices "$devices" --tp 8 --pp "$pp" --dp 1 --micro-batch-size "$mbs" --schedule 1f1b
      --attention unfused --tp-overlap 0 --recompute "$rc" --no-overlap-p2p-comm
      --scatter-gather-tensors-in-pipeline)
    published=null
    case $rc in
      full) args+=(--recompute-every-stage --recompute-method uniform --recompute-num-layers 1
                   --no-sequence-parallel) published=$full_s ;;
      selective) args+=(--sequence-parallel) published=$selective_s ;;
      none) args+=(--no-sequence-parallel) ;;
    esac
    verdict=fits
    "$merak" "${args[@]}" >/dev/null 2>&1 || verdict=refused
    "$merak" "${args[@]}" --memory-budget 100000000000000 --json | python3 -c '
import json, sys
name, rc, verdict, published = sys.argv[1:5]
published = None if published == "null" else float(published)
plan = json.load(sys.stdin)
c = plan["stages"][0]["memory_bytes_by_category"]
state = c["parameters"] + c["gradients"] + c["optimizer"]
print(json.dumps({"model": name, "recompute": rc, "state_gb": round(state / 1e9, 1),
                  "activations_gb": round(c["activations_peak"] / 1e9, 1),
                  "peak_gb": round(plan["stages"][0]["memory_bytes"] / 1e9, 1),
                  "verdict": verdict, "step_s": round(plan["step_time_s"], 3),
                  "published_s": published,
                  "ratio": round(plan["step_time_s"] / published, 3) if published else None}))
' "$name" "$rc" "$verdict" "$published"
  done
done
