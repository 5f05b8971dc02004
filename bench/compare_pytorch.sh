#!/usr/bin/env bash
# Side-by-side training speed: `merak bench gpt` against the same GPT step in
# PyTorch (bench/pytorch_gpt.py, Debian python3-torch, best of 1 and 2 threads).
#
# Usage: bench/compare_pytorch.sh        (env: STEPS=20 measured steps, WARMUP=2)
#
# Prints one JSON object: {"merak": {...}, "pytorch": {...}, "speedup": x}
# where speedup = merak tokens_per_s / pytorch tokens_per_s.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-2}"
MERAK="build/bin/merak"
PYTHON="/usr/bin/python3"  # the Debian interpreter that has python3-torch

die() { echo "compare_pytorch: error: $*" >&2; exit 1; }

[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "STEPS must be a positive integer (got '$STEPS')"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer (got '$WARMUP')"
[[ -x "$MERAK" ]] || die "$repo_root/$MERAK not found; build it first (cmake --build build)"
[[ -x "$PYTHON" ]] || die "$PYTHON not found; install PyTorch with: apt-get install python3-torch"
"$PYTHON" -c 'import torch' 2>/dev/null \
  || die "$PYTHON cannot import torch; install it with: apt-get install python3-torch"

shape=(--layers 6 --dim 384 --heads 6 --seq 256 --batch 8 --steps "$STEPS" --warmup-steps "$WARMUP")

echo "compare_pytorch: merak bench gpt (${STEPS} steps)..." >&2
merak_json="$("$MERAK" bench gpt "${shape[@]}" --json | tail -n 1)" \
  || die "merak bench gpt failed"

echo "compare_pytorch: pytorch (${STEPS} steps, threads 1 and 2)..." >&2
torch_json="$("$PYTHON" bench/pytorch_gpt.py "${shape[@]}" --threads best | tail -n 1)" \
  || die "bench/pytorch_gpt.py failed"

MERAK_JSON="$merak_json" TORCH_JSON="$torch_json" "$PYTHON" - <<'EOF'
import json, os
m = json.loads(os.environ["MERAK_JSON"])
t = json.loads(os.environ["TORCH_JSON"])
if m.get("params") != t.get("params"):
    import sys
    print("compare_pytorch: warning: parameter counts differ: merak %s, pytorch %s"
          % (m.get("params"), t.get("params")), file=sys.stderr)
print(json.dumps({"merak": m, "pytorch": t,
                  "speedup": m["tokens_per_s"] / t["tokens_per_s"]}))
EOF
