#!/usr/bin/env bash
# Side-by-side training speed: `merak bench gpt` against the same training
# step in PyTorch (bench/pytorch_gpt.py, Debian python3-torch, best of 1 and 2
# threads), for the GPT-2 or the Llama family.
#
# Usage: bench/compare_pytorch.sh              (env: MODEL=gpt|llama, default gpt;
#                                               STEPS=20 measured steps, WARMUP=2,
#                                               PRECISION=fp32|bf16|both, default both;
#                                               MERAK=path of the merak binary,
#                                               default build/bin/merak)
#   MODEL=llama STEPS=20 bench/compare_pytorch.sh
#
# Shapes (B sequences of T tokens, byte vocabulary):
#   gpt:   L6 C384 NH6 T256 B8
#   llama: L6 C384 NH6, 2 key/value groups, SwiGLU width 1024, T256 B8
#
# Prints one JSON object per precision: {"precision": p, "model": family,
# "merak": {...}, "pytorch": {...}, "speedup": x, "gemm_rate_share": s,
# "gemm_time_share": g} where speedup = merak tokens_per_s / pytorch
# tokens_per_s; gemm_rate_share = merak's step GFLOP/s / the GEMM GFLOP/s
# merak measures on the model's own shapes in the same run (the "step >= 75%
# of the model's GEMM rate" figure); gemm_time_share = the share of merak's
# step spent in its linear layers (forward + backward, from --profile). bf16
# is merak --precision bf16 against PyTorch under torch.autocast("cpu",
# dtype=torch.bfloat16). With both, a last object with the bf16/fp32 speed
# ratios and merak's peak-memory ratio.
set -euo pipefail

die() { echo "compare_pytorch: error: $*" >&2; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# A relative MERAK is a path from where the script was started; the default
# is the repository's build.
MERAK="${MERAK:-$repo_root/build/bin/merak}"
[[ "$MERAK" == /* ]] || MERAK="$PWD/$MERAK"
cd "$repo_root"

MODEL="${MODEL:-gpt}"
STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-2}"
PRECISION="${PRECISION:-both}"
PYTHON="/usr/bin/python3"  # the Debian interpreter that has python3-torch

[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "STEPS must be a positive integer (got '$STEPS')"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer (got '$WARMUP')"
case "$PRECISION" in
  fp32 | bf16) precisions=("$PRECISION") ;;
  both) precisions=(fp32 bf16) ;;
  *) die "PRECISION must be fp32, bf16 or both (got '$PRECISION')" ;;
esac
case "$MODEL" in
  gpt | llama) ;;
  *) die "MODEL must be gpt or llama (got '$MODEL')" ;;
esac
[[ -x "$MERAK" ]] || die "MERAK: $MERAK is not an executable; build it (deploy/build.sh) or set MERAK=/path/to/merak"
[[ -x "$PYTHON" ]] || die "$PYTHON not found; install PyTorch with: apt-get install python3-torch"
"$PYTHON" -c 'import torch' 2>/dev/null \
  || die "$PYTHON cannot import torch; install it with: apt-get install python3-torch"

shape=(--layers 6 --dim 384 --heads 6 --seq 256 --batch 8 --steps "$STEPS" --warmup-steps "$WARMUP")
if [[ "$MODEL" == llama ]]; then
  shape+=(--model llama --num-query-groups 2 --ffn-hidden-size 1024)
fi

results=()
for precision in "${precisions[@]}"; do
  echo "compare_pytorch: $MODEL: merak bench gpt --precision $precision (${STEPS} steps)..." >&2
  merak_json="$("$MERAK" bench gpt "${shape[@]}" --precision "$precision" --profile --json \
    | tail -n 1)" || die "MERAK: $MERAK bench gpt failed"

  echo "compare_pytorch: $MODEL: pytorch --precision $precision (${STEPS} steps, threads 1 and 2)..." >&2
  torch_json="$("$PYTHON" bench/pytorch_gpt.py "${shape[@]}" --precision "$precision" \
    --threads best | tail -n 1)" || die "bench/pytorch_gpt.py failed"

  results+=("$(PRECISION="$precision" MODEL="$MODEL" MERAK_JSON="$merak_json" \
    TORCH_JSON="$torch_json" "$PYTHON" -c '
import json, os, sys
m = json.loads(os.environ["MERAK_JSON"])
t = json.loads(os.environ["TORCH_JSON"])
if m.get("params") != t.get("params"):
    print("compare_pytorch: warning: parameter counts differ: merak %s, pytorch %s"
          % (m.get("params"), t.get("params")), file=sys.stderr)
out = {"precision": os.environ["PRECISION"], "model": os.environ["MODEL"], "merak": m,
       "pytorch": t, "speedup": m["tokens_per_s"] / t["tokens_per_s"]}
# merak measures the GEMM rate of the precision of the step (sgemm for fp32,
# bf16 GEMMs for bf16) on the shapes of the model; the share equals merak
# step_share_of_gemm_rate, named as the target states it.
gemm = m.get("bf16_gemm_gflops" if m.get("precision") == "bf16" else "sgemm_gflops", 0)
if gemm and "gflops" in m:
    out["gemm_rate_share"] = m["gflops"] / gemm
prof = m.get("profile_per_step", {}).get("linear")
if prof and m.get("step_s"):
    out["gemm_time_share"] = (prof["forward_ms"] + prof["backward_ms"]) / (m["step_s"] * 1e3)
print(json.dumps(out))
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
