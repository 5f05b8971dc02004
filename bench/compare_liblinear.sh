#!/usr/bin/env bash
# merak's ADMM SVMs (L1, SCAD, MCP, LSP, capped-L1) against LIBLINEAR -s 5
# (L1-regularised squared-hinge SVM) on the same data and the same folds.
#
# Usage: bench/compare_liblinear.sh [MERAK_BINARY] [DATA_DIR] [FOLDS]
#   MERAK_BINARY  default build/bin/merak
#   DATA_DIR      default ../shared/data (heart_scale.libsvm, golub.csv,
#                 westbc_nodal.csv, sonar.csv, ionosphere.csv; missing ones
#                 are skipped)
#   FOLDS         default 5; sample i (0-based, in file order) is in fold
#                 i mod FOLDS, which is what `merak svm train --folds` does.
# Needs liblinear-train / liblinear-predict (Debian liblinear-tools:
# deploy/install-deps.sh --bench) and python3.
#
# Both tools read one file per data set: the features z-scored over the whole
# file (so LIBLINEAR, which does not standardise, sees the same scale merak
# does). Each tool picks its regularisation from a small grid by the CV
# accuracy on these folds (no nested CV: optimistic for both alike; ties go
# to the sparser fit), and the
# table reports CV accuracy, mean non-zero weights per fold fit, and mean
# seconds per fold fit (merak: solver time; LIBLINEAR: the liblinear-train
# process, which includes reading its file). Output: a Markdown table on
# stdout, one JSON line per (data set, method) in $OUT (default
# compare_liblinear.jsonl). Environment: LAMBDAS, COSTS (the grids), TOL
# (merak's --tol, default 1e-4).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
merak=${1:-$root/build/bin/merak}
data_dir=${2:-$root/../shared/data}
folds=${3:-5}
out=${OUT:-compare_liblinear.jsonl}
lambdas=(${LAMBDAS:-0.001 0.003 0.01 0.03 0.1})
costs=(${COSTS:-0.01 0.03 0.1 0.3 1 3})
tol=${TOL:-1e-4}  # merak --tol
command -v liblinear-train >/dev/null || { echo "liblinear-train not found (apt-get install liblinear-tools)" >&2; exit 1; }
[[ -x $merak ]] || { echo "merak binary '$merak' not found (build first)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: >"$out"

# to_libsvm IN OUT: z-scored LIBSVM text from LIBSVM or CSV (label first).
to_libsvm() {
  python3 - "$1" "$2" <<'PY'
import sys, math
src, dst = sys.argv[1], sys.argv[2]
rows, labels, p = [], [], 0
for line in open(src):
    line = line.strip()
    if not line:
        continue
    if src.endswith(".csv"):
        f = line.split(",")
        labels.append(f[0]); x = {j + 1: float(v) for j, v in enumerate(f[1:])}
    else:
        f = line.split()
        labels.append(f[0]); x = {int(t.split(":")[0]): float(t.split(":")[1]) for t in f[1:]}
    rows.append(x); p = max(p, max(x) if x else 0)
n = len(rows)
mean = [0.0] * (p + 1); sq = [0.0] * (p + 1)
for x in rows:
    for j, v in x.items():
        mean[j] += v / n; sq[j] += v * v / n
sd = [math.sqrt(max(sq[j] - mean[j] ** 2, 0.0)) for j in range(p + 1)]
with open(dst, "w") as o:
    for lab, x in zip(labels, rows):
        feats = []
        for j in range(1, p + 1):
            if sd[j] <= 1e-12:
                continue
            v = (x.get(j, 0.0) - mean[j]) / sd[j]
            if v != 0:
                feats.append("%d:%.9g" % (j, v))
        o.write(("+1" if float(lab) > 0 else "-1") + " " + " ".join(feats) + "\n")
PY
}

# split FILE: fold files $work/fold.K.{train,test}.
split_folds() {
  for ((k = 0; k < folds; ++k)); do
    awk -v F="$folds" -v K="$k" '(NR - 1) % F == K' "$1" >"$work/fold.$k.test"
    awk -v F="$folds" -v K="$k" '(NR - 1) % F != K' "$1" >"$work/fold.$k.train"
  done
}

# liblinear_cv C: prints "accuracy mean_nnz mean_seconds".
liblinear_cv() {
  local c=$1 right=0 total=0 nnz=0 secs=0
  for ((k = 0; k < folds; ++k)); do
    local t0 t1
    t0=$(date +%s.%N)
    liblinear-train -s 5 -c "$c" -B 1 -q "$work/fold.$k.train" "$work/model" >/dev/null
    t1=$(date +%s.%N)
    secs=$(python3 -c "print($secs + $t1 - $t0)")
    liblinear-predict "$work/fold.$k.test" "$work/model" "$work/pred" >/dev/null
    right=$((right + $(paste -d' ' "$work/pred" <(cut -d' ' -f1 "$work/fold.$k.test") |
                       awk '{ if ($1 + 0 == $2 + 0) r++ } END { print r + 0 }')))
    total=$((total + $(wc -l <"$work/fold.$k.test")))
    # Weights follow the line "w"; the last one is the bias.
    nnz=$((nnz + $(awk 'f { w[n++] = $1 } /^w$/ { f = 1 } END { c = 0; for (i = 0; i < n - 1; i++) if (w[i] + 0 != 0) c++; print c }' "$work/model")))
  done
  python3 -c "print($right / $total, $nnz / $folds, $secs / $folds)"
}

printf '| data (n x p) | method | best lambda / C | CV accuracy | mean nnz | s per fit |\n'
printf '|---|---|---|---|---|---|\n'
for name in heart_scale.libsvm sonar.csv ionosphere.csv golub.csv westbc_nodal.csv; do
  src=$data_dir/$name
  [[ -f $src ]] || { echo "skipping $name (not in $data_dir)" >&2; continue; }
  file=$work/${name%.*}.libsvm
  to_libsvm "$src" "$file"
  split_folds "$file"
  n=$(wc -l <"$file")
  p=$(awk '{ for (i = 2; i <= NF; i++) { split($i, a, ":"); if (a[1] + 0 > m) m = a[1] + 0 } } END { print m }' "$file")
  best=""
  for c in "${costs[@]}"; do
    read -r acc nnz secs < <(liblinear_cv "$c")
    # C ascends: on a tie in accuracy the earlier (sparser) fit wins.
    if [[ -z $best ]] || python3 -c "import sys; sys.exit(0 if $acc > ${best%% *} else 1)"; then best="$acc $nnz $secs $c"; fi
  done
  read -r acc nnz secs c <<<"$best"
  printf '| %s (%s x %s) | LIBLINEAR -s 5 | C=%s | %.4f | %.1f | %.4f |\n' "${name%.*}" "$n" "$p" "$c" "$acc" "$nnz" "$secs"
  echo "{\"data\":\"${name%.*}\",\"method\":\"liblinear-s5\",\"C\":$c,\"cv_accuracy\":$acc,\"mean_nnz\":$nnz,\"fit_s\":$secs}" >>"$out"
  for pen in l1 scad mcp lsp capped-l1; do
    best=""
    for l in "${lambdas[@]}"; do
      j=$("$merak" svm train --data "$file" --format libsvm --penalty "$pen" --lambda "$l" --tol "$tol" --folds "$folds" --json --log-level warn)
      read -r acc nnz secs < <(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d['cv_accuracy'], d['cv_mean_nnz'], d['cv_time_s'] / $folds)" "$j")
      # lambda ascends: on a tie in accuracy the later (sparser) fit wins.
      if [[ -z $best ]] || python3 -c "import sys; sys.exit(0 if $acc >= ${best%% *} else 1)"; then best="$acc $nnz $secs $l"; fi
    done
    read -r acc nnz secs l <<<"$best"
    printf '| %s | merak %s | lambda=%s | %.4f | %.1f | %.4f |\n' "${name%.*}" "$pen" "$l" "$acc" "$nnz" "$secs"
    echo "{\"data\":\"${name%.*}\",\"method\":\"merak-$pen\",\"lambda\":$l,\"cv_accuracy\":$acc,\"mean_nnz\":$nnz,\"fit_s\":$secs}" >>"$out"
  done
done
