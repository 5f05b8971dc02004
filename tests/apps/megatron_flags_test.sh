#!/usr/bin/env bash
# Megatron-LM's flag names on `merak train` and `merak plan`: aliases give
# the same runs as merak's names, the interleaved schedule's virtual
# pipeline flags and AdamW's hyper-parameters reach the runtime, and what
# does not split is refused naming the flags.
# Usage: megatron_flags_test.sh MERAK_BINARY CASE
set -euo pipefail
merak=$1
case_name=$2
source "$(dirname "${BASH_SOURCE[0]}")/cli_fixture.sh"

case "$case_name" in
  names)
    # Megatron-LM's flag names are aliases; --micro-batch-size is a size.
    # The same run under both names gives the same numbers.
    "$merak" train --data "$work/text.txt" --layers 1 --dim 16 --heads 2 --seq 8 --batch 4 --steps 2 \
      --grad-clip 0.5 --pp 2 --micro-batches 4 --log-level warn --metrics "$work/ours.jsonl"
    "$merak" train --data "$work/text.txt" --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
      --seq-length 8 --global-batch-size 4 --train-iters 2 --clip-grad 0.5 \
      --pipeline-model-parallel-size 2 --micro-batch-size 1 --log-level warn --metrics "$work/megatron.jsonl"
    python3 - "$work/ours.jsonl" "$work/megatron.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
# Threads may sum float gradients in another order between two runs: 1e-6.
for x, y in zip(a, b, strict=True):
    for k in ("loss", "grad_norm"):
        assert abs(x[k] - y[k]) <= 1e-6 * abs(x[k]), (k, x, y)
print("ok: Megatron's names train the same run:", [round(x["loss"], 6) for x in b])
PY
    expect_error "error: --micro-batch-size 3: the batch 2 is not a whole number of micro-batches" \
      train --data "$work/text.txt" "${tiny[@]}" --micro-batch-size 3 --steps 1
    expect_error "--micro-batch(es|-size) excludes --micro-batch(-size|es)" \
      train --data "$work/text.txt" "${tiny[@]}" --micro-batch-size 1 --micro-batches 2
    expect_error "error: --micro-batch-size needs --dp" \
      plan --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --batch 8 \
      --devices 2 --micro-batch-size 2
    help=$("$merak" plan --help)  # whole first: grep -q stops reading at its match
    grep -q -- "--tensor-model-parallel-size" <<<"$help" ||
      { echo "FAIL: plan lacks --tensor-model-parallel-size"; exit 1; } ;;
  virtual_pipeline)
    # Megatron-LM's interleaved schedule: layers per virtual stage, or
    # virtual stages per rank, give the same run as --schedule interleaved
    # --chunks 2.
    mega=(--data "$work/text.txt" --num-layers 4 --hidden-size 16 --num-attention-heads 2
      --seq-length 8 --global-batch-size 4 --train-iters 2 --pipeline-model-parallel-size 2
      --micro-batch-size 1)
    "$merak" train "${mega[@]}" --schedule interleaved --chunks 2 --metrics "$work/il.jsonl" \
      2>"$work/il.err"
    "$merak" train "${mega[@]}" --num-layers-per-virtual-pipeline-stage 1 \
      --metrics "$work/vpp.jsonl" 2>"$work/vpp.err"
    "$merak" train "${mega[@]}" --num-virtual-stages-per-pipeline-rank 2 \
      --metrics "$work/vpr.jsonl" 2>/dev/null
    grep -q "pp=2 x 2 chunks.*schedule interleaved" "$work/vpp.err" || { cat "$work/vpp.err"; exit 1; }
    python3 - "$work/il.jsonl" "$work/vpp.jsonl" "$work/vpr.jsonl" <<'PY'
import json, sys
a, b, c = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
for x, y, z in zip(a, b, c, strict=True):
    assert abs(x["loss"] - y["loss"]) <= 1e-6 * abs(x["loss"]), (x, y)
    assert abs(x["loss"] - z["loss"]) <= 1e-6 * abs(x["loss"]), (x, z)
print("ok: Megatron's virtual pipeline flags train the interleaved run")
PY
    # AdamW's hyper-parameters reach the single device's optimizer and the
    # stage actors' alike, and change the run.
    adam=(--adam-beta1 0.5 --adam-beta2 0.9 --adam-eps 1e-4)
    "$merak" train --data "$work/text.txt" --num-layers 4 --hidden-size 16 \
      --num-attention-heads 2 --seq-length 8 --global-batch-size 4 --train-iters 2 "${adam[@]}" \
      --metrics "$work/adam1.jsonl" 2>/dev/null
    "$merak" train "${mega[@]}" "${adam[@]}" --metrics "$work/adam2.jsonl" 2>/dev/null
    "$merak" train "${mega[@]}" --metrics "$work/adam0.jsonl" 2>/dev/null
    python3 - "$work/adam1.jsonl" "$work/adam2.jsonl" "$work/adam0.jsonl" <<'PY'
import json, sys
a, b, c = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert abs(a[1]["loss"] - b[1]["loss"]) <= 1e-5 * abs(a[1]["loss"]), (a, b)
assert abs(b[1]["loss"] - c[1]["loss"]) > 1e-4 * abs(c[1]["loss"]), (b, c)
print("ok: --adam-beta1/2 and --adam-eps reach both optimizers:", b[1]["loss"], c[1]["loss"])
PY
    expect_error "num-layers-per-virtual-pipeline-stage 3: --num-layers 4 does not split into --pipeline-model-parallel-size 2 x virtual stages of 3 layers" \
      train "${mega[@]}" --num-layers-per-virtual-pipeline-stage 3
    expect_error "num-layers-per-virtual-pipeline-stage 2 with --num-layers 4 over --pipeline-model-parallel-size 2 gives one chunk a stage" \
      train "${mega[@]}" --num-layers-per-virtual-pipeline-stage 2
    expect_error "virtual pipeline flags run the interleaved schedule: drop --schedule zb-h1" \
      train "${mega[@]}" --num-layers-per-virtual-pipeline-stage 1 --schedule zb-h1
    expect_error "num-layers-per-virtual-pipeline-stage 2 needs --pipeline-model-parallel-size 2 or more \\(not given\\)" \
      plan --num-layers 8 --hidden-size 64 --num-attention-heads 2 --seq-length 32 \
      --global-batch-size 8 --devices 2 --device-type a100-80gb --num-layers-per-virtual-pipeline-stage 2
    "$merak" plan --num-layers 8 --hidden-size 64 --num-attention-heads 2 --seq-length 32 \
      --global-batch-size 8 --devices 2 --device-type a100-80gb --pp 2 \
      --num-layers-per-virtual-pipeline-stage 2 --json > "$work/vpp_plan.json"
    python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); assert (p["schedule"], p["chunks"]) == ("interleaved", 2), p' \
      "$work/vpp_plan.json" ;;
  *)
    echo "unknown case $case_name"
    exit 2 ;;
esac
