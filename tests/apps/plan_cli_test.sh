#!/usr/bin/env bash
# Command-line tests of `merak plan`: its JSON, published runs scored with
# their own flags, the attention kernels, and bad input refused by name.
# Usage: plan_cli_test.sh MERAK_BINARY CASE
set -euo pipefail
merak=$1
case_name=$2
source "$(dirname "${BASH_SOURCE[0]}")/cli_fixture.sh"

case "$case_name" in
  plan_json)
    "$merak" plan --model gpt --layers 24 --dim 2048 --heads 16 --seq 1024 --vocab 50257 \
      --global-batch-size 64 --devices 16 --nodes 2 --device-type a100-40gb --max-micro-batches 8 \
      --json > "$work/plan.json"
    python3 - "$work/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for k in ("dp", "tp", "pp", "micro_batches", "schedule", "stages", "step_time_s", "tokens_per_s", "mfu"):
    assert k in p, k
assert p["dp"] * p["tp"] * p["pp"] == 16, p
assert len(p["stages"]) == p["pp"]
assert all(s["memory_bytes"] <= 40e9 for s in p["stages"])
assert p["runners_up"] and all(r["step_time_s"] >= p["step_time_s"] for r in p["runners_up"])
assert p["attention"] == "fused", p["attention"]
print("ok:", p["dp"], p["tp"], p["pp"], p["micro_batches"], p["schedule"], p["tokens_per_s"])
PY
    # The same layout priced with first-generation attention kernels: the
    # same bytes, a slower step; the kernel is named in the JSON.
    for k in fused fused-v1; do
      "$merak" plan --model gpt --layers 24 --dim 2048 --heads 16 --seq 1024 --vocab 50257 \
        --global-batch-size 64 --devices 8 --device-type a100-80gb --dp 8 --tp 1 --pp 1 \
        --micro-batch-size 2 --schedule 1f1b --recompute none --attention "$k" --json \
        > "$work/plan_$k.json"
    done
    python3 - "$work/plan_fused.json" "$work/plan_fused-v1.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert (a["attention"], b["attention"]) == ("fused", "fused-v1"), (a["attention"], b["attention"])
assert b["stages"][0]["memory_bytes"] == a["stages"][0]["memory_bytes"]
assert b["step_time_s"] > a["step_time_s"], (a["step_time_s"], b["step_time_s"])
print("ok: fused-v1", a["step_time_s"], b["step_time_s"])
PY
    expect_error "unknown attention kernel 'flash3' \\(fused, fused-v1 or unfused\\)" \
      plan --layers 2 --dim 32 --heads 2 --device-type a100-80gb --attention flash3
    # A Llama: its shape in the plan, its FLOPs Megatron's GQA/SwiGLU count
    # (12 B s l h^2 ((1 + g + s/h) + 1.5 F/h + V/(2 l h))), checked here from
    # the printed rate and step time.
    "$merak" plan --model llama --num-layers 8 --hidden-size 1024 --num-attention-heads 16 \
      --num-query-groups 4 --ffn-hidden-size 2816 --seq-length 1024 --vocab 32000 \
      --global-batch-size 16 --devices 4 --device-type h100-80gb --json > "$work/plan_llama.json"
    python3 - "$work/plan_llama.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["model"].startswith("llama G=4 F=2816"), p["model"]
B, s, l, h, V, g, F = 16, 1024, 8, 1024, 32000, 4 / 16, 2816
flops = 12 * B * s * l * h * h * ((1 + g + s / h) + 1.5 * F / h + V / (2 * l * h))
got = p["tflops_per_device"] * 1e12 * p["step_time_s"] * p["devices"]
assert abs(got / flops - 1) < 1e-6, (got, flops)
print("ok: llama", p["dp"], p["tp"], p["pp"], p["mfu"])
PY
    # A search for this CPU tries the interleaved schedule too; such a plan
    # lists each device's chunks, which cut the model in order: chunk c of
    # device d is virtual stage c x pp + d.
    "$merak" plan --layers 4 --dim 32 --heads 2 --seq 16 --global-batch-size 8 --devices 2 \
      --device-type cpu --pp 2 --dp 1 --tp 1 --json > "$work/plan_cpu.json"
    python3 - "$work/plan_cpu.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
plans = [p] + p["runners_up"]
inter = [q for q in plans if q["schedule"] == "interleaved"]
assert inter, [q["schedule"] for q in plans]
q = inter[0]
assert q["chunks"] == 2 and len(q["stages"]) == 2, q
virtual = [q["stages"][k % 2]["chunks"][k // 2] for k in range(4)]
assert virtual[0]["nodes"][0] == 0, virtual
for a, b in zip(virtual, virtual[1:]):
    assert a["nodes"][1] == b["nodes"][0], virtual
for d in q["stages"]:
    assert d["memory_bytes"] == sum(c["memory_bytes"] for c in d["chunks"]), d
print("ok: the CPU search tries interleaved:", [c["layers"] for c in virtual])
PY
    # Megatron-LM's 22B run with its own flags: it fits 80 GB, memory by
    # category (gradients at their backward peak) adds up to each stage's
    # peak.
    gpt22b=(plan --num-layers 48 --hidden-size 6144 --num-attention-heads 64 --seq-length 2048
      --vocab 51200 --cluster dgx-a100-hdr --schedule 1f1b --attention unfused --pp 1)
    "$merak" "${gpt22b[@]}" --global-batch-size 4 --devices 8 --tp 8 --micro-batch-size 4 \
      --recompute-granularity full --recompute-every-stage --no-sequence-parallel --json \
      > "$work/plan_22b.json"
    # On 32 devices with tp 4, no_shard cannot fit: the searched sharding does.
    "$merak" "${gpt22b[@]}" --global-batch-size 8 --devices 32 --tp 4 --micro-batch-size 1 \
      --recompute full --recompute-every-stage --json > "$work/plan_22b_dp8.json"
    python3 - "$work/plan_22b.json" "$work/plan_22b_dp8.json" <<'PY'
import json, sys
p, q = (json.load(open(f)) for f in sys.argv[1:3])
for plan in (p, q):
    for s in plan["stages"]:
        c = s["memory_bytes_by_category"]
        assert c["gradients_peak"] >= c["gradients"], s
        total = c["parameters"] + c["gradients_peak"] + c["optimizer"] + c["activations_peak"]
        assert total == s["memory_bytes"], s
        assert s["memory_bytes"] <= 80e9, s
assert p["recompute"] == "full" and p["sharding"] == "no_shard" and not p["sequence_parallel"], p
assert q["dp"] == 8 and q["sharding"] != "no_shard", q["sharding"]
print("ok: 22B", p["stages"][0]["memory_bytes"], q["sharding"], q["sequence_parallel"])
PY
    ;;
  plan_errors)
    expect_error "unknown --device-type 'tpu'" plan --device-type tpu --devices 2
    expect_error "\"memory budget\"" plan --layers 24 --dim 2048 --heads 16 --devices 8 --device-type a100-40gb --memory-budget 1000
    expect_error "--devices 2 plans dp/tp/pp" train --data "$work/text.txt" "${tiny[@]}" --devices 2 --dp 2 --steps 1
    expect_error "--normalization LayerNorm: --model llama normalizes with RMSNorm" \
      plan --model llama --normalization LayerNorm --devices 2
    expect_error "--num-query-groups needs --model llama" plan --num-query-groups 2 --devices 2
    expect_error "--data-parallel-sharding-strategy: unknown strategy 'zero9'" \
      plan --data-parallel-sharding-strategy zero9 --devices 2
    expect_error "--use-distributed-optimizer means --data-parallel-sharding-strategy optim" \
      plan --use-distributed-optimizer --data-parallel-sharding-strategy optim_grads --devices 2
    expect_error "--recompute-granularity must be full or selective" \
      plan --recompute-granularity some --devices 2
    expect_error "excludes --no-sequence-parallel" plan --sequence-parallel --no-sequence-parallel --devices 2
    expect_error "--recompute-method block: merak recomputes uniformly" \
      plan --recompute full --recompute-method block --recompute-num-layers 1 --devices 2
    expect_error "--recompute-num-layers must be at least 1 .got 0." \
      plan --recompute full --recompute-method uniform --devices 2
    expect_error "--recompute-num-layers 1 groups the layers full recomputation rebuilds .got --recompute selective." \
      plan --recompute selective --recompute-num-layers 1 --devices 2
    expect_error "--recompute-num-layers must be at least 1 .got -2." \
      train --data "$work/text.txt" "${tiny[@]}" --steps 1 --pp 2 --recompute full --recompute-num-layers -2
    # Megatron-LM's spelling trains: one checkpoint a layer.
    "$merak" train --data "$work/text.txt" "${tiny[@]}" --steps 2 --pp 2 --micro-batches 2 \
      --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
      --metrics "$work/layers.jsonl" > "$work/layers.out" 2>&1
    grep -q '"step":2' "$work/layers.jsonl" || { cat "$work/layers.out"; echo "FAIL: no step 2 with --recompute-num-layers"; exit 1; }
    # The 175B model on one node (tp 8, pp 1): 350 GB of model state a device.
    expect_error "\"memory budget\"" plan --num-layers 96 --hidden-size 12288 --num-attention-heads 96 \
      --seq-length 2048 --vocab 51200 --cluster dgx-a100-hdr --global-batch-size 1 --devices 8 --tp 8 \
      --pp 1 --micro-batch-size 1 --recompute full --recompute-every-stage ;;
  *)
    echo "unknown case $case_name"
    exit 2 ;;
esac
