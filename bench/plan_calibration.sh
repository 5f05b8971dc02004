#!/usr/bin/env bash
# The planner against published runs: Megatron-LM on DGX A100 (Narayanan et
# al., SC'21, Table 1; A100-80GB, 8 per node, NVSwitch, 8 x 200 Gb/s HDR
# InfiniBand per node; V = 51,200, s = 2048). For each row, `merak plan
# --cluster dgx-a100-hdr` scores that row's layout (tp, pp, dp = the rest,
# micro-batches of one sequence, every layer recomputed with one checkpoint
# a layer (--recompute-method uniform --recompute-num-layers 1), attention
# unfused, neither sharded data parallelism nor sequence parallelism (2021),
# the stages waiting for their batched sends and receives between ops, each
# TP rank sending 1/tp of an activation (Megatron-LM's p2p communication and
# its scatter/gather optimization, on by default then), under the A100's
# 80 GB, and for the pipelined rows the interleaved schedule with CHUNKS model
# chunks per device (default 2), as Megatron-LM ran; SCHEDULE=1f1b scores
# them with plain 1F1B instead)
# and prints predicted TFLOP/s per GPU (Megatron's count) beside the
# published one; then it searches freely under the same memory and prints
# the plan it would choose, its prediction, and why (its critical path and
# communication). One set of device and network constants serves every row
# (partition/device.cpp, partition/cluster.cpp; sources in docs/planning.md).
#
# Usage: [SCHEDULE=interleaved|1f1b] [CHUNKS=2] bench/plan_calibration.sh [build/bin/merak]
# Prints one JSON object per row on stdout and the table on stderr.
set -euo pipefail
merak=${1:-build/bin/merak}
schedule=${SCHEDULE:-interleaved}
chunks=${CHUNKS:-2}
# params heads hidden layers tp pp gpus batch published
rows=("1.7B 24 2304 24 1 1 32 512 137"
      "7.5B 32 4096 36 4 1 128 512 142"
      "39.1B 64 8192 48 8 2 512 1536 138"
      "145.6B 96 12288 80 8 8 1536 2304 148"
      "529.6B 128 20480 105 8 35 2520 2520 163"
      "1008B 160 25600 128 8 64 3072 3072 163")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
table=$work/table
for row in "${rows[@]}"; do
  read -r name heads hidden layers tp pp gpus batch published <<<"$row"
  common=(--cluster dgx-a100-hdr --seq 2048 --vocab 51200 --heads "$heads" --dim "$hidden"
          --layers "$layers" --devices "$gpus" --global-batch-size "$batch"
          --attention unfused --recompute-every-stage --max-micro-batches 4096 --json)
  start=$(date +%s.%N)
  given_schedule=(--schedule 1f1b)
  ((pp > 1)) && given_schedule=(--schedule "$schedule" --chunks "$chunks")
  "$merak" plan "${common[@]}" --tp "$tp" --pp "$pp" --micro-batch-size 1 \
    "${given_schedule[@]}" --recompute full --tp-overlap 0 \
    --data-parallel-sharding-strategy no_shard --no-sequence-parallel \
    --no-overlap-p2p-comm --scatter-gather-tensors-in-pipeline \
    --recompute-method uniform --recompute-num-layers 1 >"$work/given.json"
  mid=$(date +%s.%N)
  "$merak" plan "${common[@]}" >"$work/free.json"
  end=$(date +%s.%N)
  python3 - "$name" "$published" "$work/given.json" "$work/free.json" "$start" "$mid" "$end" \
    "$table" <<'PY'
import json, sys
name, published = sys.argv[1], float(sys.argv[2])
given, free = (json.load(open(p)) for p in sys.argv[3:5])
t0, t1, t2 = map(float, sys.argv[5:8])
def layout(p):
    memory = "" if p.get("sharding", "no_shard") == "no_shard" else " " + p["sharding"]
    memory += " sp" if p.get("sequence_parallel") else ""
    return (f"dp{p['dp']} tp{p['tp']} pp{p['pp']} m{p['micro_batches']} {p['schedule']} "
            f"{p['recompute']}{memory}")
speedup = given["step_time_s"] / free["step_time_s"]
out = {"model": name, "published_tflops": published,
       "predicted_tflops": round(given["tflops_per_device"], 1),
       "ratio": round(given["tflops_per_device"] / published, 3),
       "given_layout": layout(given), "given_step_s": round(given["step_time_s"], 3),
       "given_critical_path": given["critical_path"],
       "free_layout": layout(free), "free_step_s": round(free["step_time_s"], 3),
       "free_tflops": round(free["tflops_per_device"], 1), "free_flop_count": free["flop_count"],
       "free_speedup": round(speedup, 3),
       "free_why": {k: free[k] for k in ("pipeline_s", "dp_exposed_s", "optimizer_s",
                                         "tp_allreduce_s", "p2p_s", "dp_allreduce_s")},
       "plan_seconds": {"given": round(t1 - t0, 2), "search": round(t2 - t1, 2)}}
print(json.dumps(out))
with open(sys.argv[8], "a") as f:
    f.write(f"| {name} | {layout(given)} | {published:.0f} | {given['tflops_per_device']:.1f} | "
            f"{given['tflops_per_device'] / published:.2f} | {layout(free)} | {speedup:.2f}x | "
            f"{t2 - t1:.1f} s |\n")
PY
done
{
  echo "| model | published layout | published TFLOP/s | predicted | ratio | free search | its speed-up | search time |"
  echo "|---|---|---|---|---|---|---|---|"
  cat "$table"
} >&2
