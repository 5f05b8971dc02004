#!/usr/bin/env bash
# LSP fitted four ways on full data sets: the direct ADMM with LSP's prox and
# LLA from each start (--lla-start zero, l1, best), over a theta grid and
# lambda = slope x theta. One JSON line per fit on stdout (merak's `svm train
# --json` plus "method" and "slope"), then one summary line: per method the
# fits that did not converge (the direct ADMM: at its iteration cap; LLA: an
# ADMM run at its cap or a chain not settled within --lla-steps; a fit that
# fails is named on stderr and left out), the geometric-mean objective, the
# total solver time, and for pairs of methods how often each one's objective
# is lower by more than 1%.
# Usage: bench/svm_lsp_methods.sh [MERAK_BINARY] [DATA_DIR]
#   DATASETS (default: heart_scale.libsvm sonar.csv ionosphere.csv),
#   THETAS (default: 3e-4 1e-3 3e-3 0.01 0.03 0.1 0.3 1), SLOPES (0.1 0.03 0.01).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
merak=${1:-$root/build/bin/merak}
data_dir=${2:-$root/data}
datasets=(${DATASETS:-heart_scale.libsvm sonar.csv ionosphere.csv})
thetas=(${THETAS:-0.0003 0.001 0.003 0.01 0.03 0.1 0.3 1})
slopes=(${SLOPES:-0.1 0.03 0.01})
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for data in "${datasets[@]}"; do
  [[ -f "$data_dir/$data" ]] || { echo "skipping $data_dir/$data (missing)" >&2; continue; }
  for theta in "${thetas[@]}"; do
    for slope in "${slopes[@]}"; do
      lambda=$(python3 -c "print($slope * $theta)")
      for m in direct zero l1 best; do
        if [[ $m == direct ]]; then flags=(--nonconvex direct); else flags=(--nonconvex lla --lla-start "$m"); fi
        if ! fit=$("$merak" svm train --data "$data_dir/$data" --penalty lsp --lambda "$lambda" \
          --theta "$theta" "${flags[@]}" --json); then
          echo "failed: $data theta $theta lambda $lambda $m" >&2
          continue
        fi
        python3 -c "import json,sys; d=json.loads(sys.argv[1]); d.update(method='$m', slope=$slope); print(json.dumps(d))" \
          "$fit" | tee -a "$lines"
      done
    done
  done
done
python3 - "$lines" <<'PY'
import collections, json, math, sys
fits = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    d = json.loads(l)
    fits[(d["data"], d["theta"], d["slope"])][d["method"]] = d
methods = ["direct", "zero", "l1", "best"]
full = [f for f in fits.values() if all(m in f for m in methods)]
out = {"benchmark": "svm_lsp_methods", "problems": len(full), "methods": {}}
for m in methods:
    out["methods"][m] = {
        "not_converged": sum(not f[m]["converged"] for f in full),
        "geomean_objective": math.exp(sum(math.log(f[m]["objective"]) for f in full) / max(1, len(full))),
        "time_s": sum(f[m]["time_s"] for f in full),
    }
lower = lambda a, b: sum(f[a]["objective"] < 0.99 * f[b]["objective"] for f in full)
out["lower_by_1pct"] = {f"{a}<{b}": lower(a, b) for a in methods for b in methods if a != b}
print(json.dumps(out))
PY
