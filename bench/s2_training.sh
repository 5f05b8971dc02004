#!/usr/bin/env bash
# The sparse gradient codecs in data-parallel training (issue 4, "In
# training"; results in docs/s2-reducer.md): the same GPT, seed and data
# trained with the token embedding's gradient reduced densely (none), by coo,
# by union and by S2 at several sketch ratios, with and without error
# feedback. Writes every run's metrics.jsonl under OUT_DIR and prints one JSON
# summary on stdout: per run the final validation loss and its gap to the
# dense run, the mean per-step relative error of the codec's result
# (--measure-sparse-error), the data-parallel bytes per rank and step, the
# union's rows; per suite and error-feedback setting the smallest sketch ratio
# from which every larger ratio of the sweep ends within 2% of dense.
#
# Usage: bench/s2_training.sh [MERAK_BINARY] [DATA] [OUT_DIR]
#   MERAK_BINARY  default build/bin/merak
#   DATA          default data/moby_dick.txt (deploy/get-data.sh)
#   OUT_DIR       default s2_training_runs
# Environment:
#   STEPS    steps per run (default 300)
#   RATIOS   S2 sketch ratios for the words suite (default "0.005 0.01 0.02 0.05 0.1")
#   SUITES   "words bytes" (default both): words = vocabulary 8192 hashed
#            words, dp 2; bytes = byte-level (vocabulary 256), dp 4
#   THREADS  compute threads (default 2)
#   BASELINES  0: skip the none/coo/union runs (already in OUT_DIR: add
#            sketch ratios to an earlier sweep); default 1
# Both suites use an untied LM head (--untied-head): with the head tied to the
# embedding, the embedding's gradient is dense (every row gets the softmax's
# gradient) and there is nothing for a sparse codec to skip.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
merak=${1:-$root/build/bin/merak}
data=${2:-$root/data/moby_dick.txt}
out=${3:-s2_training_runs}
steps=${STEPS:-300}
ratios=(${RATIOS:-0.005 0.01 0.02 0.05 0.1})
suites=(${SUITES:-words bytes})
threads=${THREADS:-2}
baselines=${BASELINES:-1}
mkdir -p "$out"

run() {  # suite name args...
  local suite=$1 name=$2
  shift 2
  local m="$out/$suite-$name.jsonl"
  echo "[s2_training] $suite $name" >&2
  "$merak" train --data "$data" --steps "$steps" --threads "$threads" --untied-head \
    --eval-interval $((steps / 10)) --eval-batches 8 --seed 1337 --metrics "$m" "$@" \
    >/dev/null 2>"$out/$suite-$name.log" ||
    { echo "[s2_training] $suite $name failed: see $out/$suite-$name.log" >&2; exit 1; }
}

for suite in "${suites[@]}"; do
  case $suite in
    words)
      common=(--tokenizer words --vocab 8192 --layers 2 --dim 64 --heads 4 --seq 32 --batch 16
              --lr 2e-3 --dp 2)
      sweep=("${ratios[@]}") ;;
    bytes)
      common=(--tokenizer bytes --vocab 256 --layers 2 --dim 64 --heads 4 --seq 32 --batch 16
              --lr 2e-3 --dp 4)
      sweep=(0.1 0.5) ;;
    *) echo "unknown suite '$suite' (expected words or bytes)" >&2; exit 1 ;;
  esac
  if [[ $baselines == 1 ]]; then
    run "$suite" none "${common[@]}"
    run "$suite" coo "${common[@]}" --sparse-reducer coo --measure-sparse-error
    run "$suite" union "${common[@]}" --sparse-reducer union --measure-sparse-error
  fi
  for y in "${sweep[@]}"; do
    for ef in off on; do
      run "$suite" "s2-y$y-ef$ef" "${common[@]}" --sparse-reducer s2 --sketch-ratio "$y" \
        --error-feedback "$ef" --measure-sparse-error
    done
  done
done

python3 - "$out" "${suites[@]}" <<'EOF'
import json, sys, glob, os
out, suites = sys.argv[1], sys.argv[2:]
# The embedding (V, C) and the replicas P of each suite: the dense ring sends
# 2(P-1)/P * V*C*4 bytes per rank for it, the rest of the buckets are the same
# in every run of a suite, so the embedding's own bytes are a difference.
shape = {"words": (8192, 64, 2), "bytes": (256, 64, 4)}
summary = {"runs": [], "smallest_ratio_within_2pct": {}}
for suite in suites:
    V, C, P = shape[suite]
    dense_emb = 2 * (P - 1) / P * V * C * 4
    def load(name):
        with open(os.path.join(out, f"{suite}-{name}.jsonl")) as f:
            return [json.loads(l) for l in f if l.strip()]
    dense = load("none")
    dense_val = dense[-1]["val_loss"]
    dense_bytes = sum(l.get("dp_bytes_per_rank", 0) for l in dense) / len(dense)
    names = ["none", "coo", "union"] + sorted(
        (os.path.basename(p)[len(suite) + 1:-6] for p in glob.glob(os.path.join(out, f"{suite}-s2-*.jsonl"))),
        key=lambda n: (n.endswith("on"), float(n.split("-")[1][1:])))
    best = {}
    for name in names:
        lines = load(name)
        errs = [l["sparse_rel_error"] for l in lines if "sparse_rel_error" in l]
        b = sum(l.get("dp_bytes_per_rank", 0) for l in lines) / len(lines)
        val = lines[-1]["val_loss"]
        r = {"suite": suite, "run": name, "steps": lines[-1]["step"],
             "val_loss": round(val, 4), "val_vs_dense_pct": round(100 * (val / dense_val - 1), 2),
             "val_curve": [[l["step"], round(l["val_loss"], 4)] for l in lines if "val_loss" in l],
             "mean_rel_error": round(sum(errs) / len(errs), 4) if errs else None,
             "dp_bytes_per_rank": round(b), "bytes_vs_dense": round(b / dense_bytes, 4),
             "embedding_bytes_per_rank": round(b - dense_bytes + dense_emb),
             "embedding_bytes_vs_dense": round((b - dense_bytes + dense_emb) / dense_emb, 4),
             "union_rows": round(sum(l.get("sparse_union_rows", 0) for l in lines) / len(lines), 1)}
        summary["runs"].append(r)
        if name.startswith("s2-"):
            y, ef = float(name.split("-")[1][1:]), name.split("-")[2][2:]
            best.setdefault(f"{suite} ef {ef}", []).append((y, val <= 1.02 * dense_val))
    # The smallest ratio from which every larger ratio of the sweep holds.
    for key, pts in best.items():
        smallest = None
        for y, ok in sorted(pts, reverse=True):
            if not ok:
                break
            smallest = y
        summary["smallest_ratio_within_2pct"][key] = smallest
print(json.dumps(summary, indent=1))
EOF
