#!/usr/bin/env bash
# The planner against published FULL_SHARD (ZeRO-3) runs: MosaicML's MPT
# throughput tables (llm-foundry, scripts/train/benchmarking/README.md,
# 2023): pure FSDP, no tensor or pipeline parallelism, sequence 2048,
# vocabulary 50368, bf16, flash attention. Each run's layout as published
# (dp = GPUs, the micro-batch size and gradient accumulation giving the
# global batch), scored under optim_grads_params and, for comparison, under
# optim at the same layout; the budget lifted so every row prints. A100 rows
# on dgx-a100-hdr (the tables' "1600 Gbps node-node interconnect (RoCE)",
# 8 x 200 Gb/s a node), H100 rows on dgx-h100-ndr (the table states no
# network). Prints one JSON line per run with the predicted and published
# tokens per second.
# Usage: bench/plan_fsdp.sh [MERAK]   (docs/results/planning.md)
set -euo pipefail
merak=${1:-$(dirname "$0")/../build/bin/merak}
#      name       cluster       layers hidden heads gpus mbs global recompute published_tokens_per_s
runs=("mpt-70b-a100 dgx-a100-hdr 80 8192 64 64 8 2048 full 26274"
      "mpt-30b-a100 dgx-a100-hdr 48 7168 56 8  3 504  full 7330"
      "mpt-70b-h100 dgx-h100-ndr 80 8192 64 64 8 2048 full 66523"
      "mpt-13b-h100 dgx-h100-ndr 40 5120 40 64 2 128  none 307209")
for run in "${runs[@]}"; do
  read -r name cluster layers hidden heads gpus mbs batch rc published <<<"$run"
  for sharding in optim_grads_params optim; do
    args=(plan --cluster "$cluster" --num-layers "$layers" --hidden-size "$hidden"
      --num-attention-heads "$heads" --seq-length 2048 --vocab 50368 --global-batch-size "$batch"
      --devices "$gpus" --tp 1 --pp 1 --dp "$gpus" --micro-batch-size "$mbs" --schedule 1f1b
      --recompute "$rc" --no-sequence-parallel --data-parallel-sharding-strategy "$sharding"
      --memory-budget 100000000000000 --json)
    [[ $rc == full ]] && args+=(--recompute-every-stage)
    "$merak" "${args[@]}" | python3 -c '
import json, sys
name, sharding, published = sys.argv[1], sys.argv[2], float(sys.argv[3])
plan = json.load(sys.stdin)
print(json.dumps({"run": name, "sharding": sharding, "step_s": round(plan["step_time_s"], 3),
                  "tokens_per_s": round(plan["tokens_per_s"]), "published_tokens_per_s": published,
                  "ratio": round(plan["tokens_per_s"] / published, 3)}))
' "$name" "$sharding" "$published"
  done
done
