#!/usr/bin/env bash
# Side-by-side training speed: `merak bench gpt` against the same GPT step in
# PyTorch (bench/pytorch_gpt.py, Debian python3-torch, best of 1 and 2 threads).
#
# Usage: bench/compare_pytorch.sh        (env: STEPS=20 measured steps, WARMUP=2,
#                                         PRECISION=fp32|bf16|both, default both)
#
# Prints one JSON object per precision: {"precision": p, "merak": {...},
# "pytorch": {...}, "speedup": x} where speedup = merak tokens_per_s /
# pytorch tokens_per_s; bf16 is merak --precision bf16 against PyTorch under
# torch.autocast("cpu", dtype=torch.bfloat16). With both, a last object
# with the bf16/fp32 speed ratios and merak's peak-memory ratio.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-2}"
PRECISION="${PRECISION:-both}"
MERAK="build/bin/merak"
PYTHON="/usr/bin/python3"  # the Debian interpreter that has python3-torch

die() { echo "compare_pytorch: error: $*" >&2; exit 1; }

[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "STEPS must be a positive integer (got '$STEPS')"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer (got '$WARMUP')"
case "$PRECISION" in
  fp32 | bf16) precisions=("$PRECISION") ;;
  both) precisions=(fp32 bf16) ;;
  *) die "PRECISION must be fp32, bf16 or both (got '$PRECISION')" ;;
esac
[[ -x "$MERAK" ]] || die "$repo_root/$MERAK not found; build it first (cmake --build build)"
[[ -x "$PYTHON" ]] || die "$PYTHON not found; install PyTorch with: apt-get install python3-torch"
"$PYTHON" -c 'import torch' 2>/dev/null \
  || die "$PYTHON cannot import torch; install it with: apt-get install python3-torch"

shape=(--layers 6 --dim 384 --heads 6 --seq 256 --batch 8 --steps "$STEPS" --warmup-steps "$WARMUP")

results=()
for precision in "${precisions[@]}"; do
  echo "compare_pytorch: merak bench gpt --precision $precision (${STEPS} steps)..." >&2
  merak_json="$("$MERAK" bench gpt "${shape[@]}" --precision "$precision" --json | tail -n 1)" \
    || die "merak bench gpt failed"

  echo "compare_pytorch: pytorch --precision $precision (${STEPS} steps, threads 1 and 2)..." >&2
  torch_json="$("$PYTHON" bench/pytorch_gpt.py "${shape[@]}" --precision "$precision" \
    --threads best | tail -n 1)" || die "bench/pytorch_gpt.py failed"

  results+=("$(PRECISION="$precision" MERAK_JSON="$merak_json" TORCH_JSON="$torch_json" \
    "$PYTHON" -c '
import json, os, sys
m = json.loads(os.environ["MERAK_JSON"])
t = json.loads(os.environ["TORCH_JSON"])
if m.get("params") != t.get("params"):
    print("compare_pytorch: warning: parameter counts differ: merak %s, pytorch %s"
          % (m.get("params"), t.get("params")), file=sys.stderr)
print(json.dumps({"precision": os.environ["PRECISION"], "merak": m, "pytorch": t,
                  "speedup": m["tokens_per_s"] / t["tokens_per_s"]}))
')")
  echo "${results[-1]}"
done

if [[ ${#results[@]} == 2 ]]; then
  A="${results[0]}" B="${results[1]}" "$PYTHON" -c '
import json, os
a, b = json.loads(os.environ["A"]), json.loads(os.environ["B"])
print(json.dumps({
    "merak_bf16_over_fp32": b["merak"]["tokens_per_s"] / a["merak"]["tokens_per_s"],
    "pytorch_bf16_over_fp32": b["pytorch"]["tokens_per_s"] / a["pytorch"]["tokens_per_s"],
    "merak_bf16_peak_rss_over_fp32": b["merak"]["peak_rss_mb"] / a["merak"]["peak_rss_mb"]}))
'
fi
