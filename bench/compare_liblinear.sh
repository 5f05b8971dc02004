#!/usr/bin/env bash
# merak's ADMM SVMs (L1, SCAD, MCP, LSP, capped-L1) against LIBLINEAR -s 5
# (L1-regularised squared-hinge SVM) on the same data and the same folds.
#
# Usage: bench/compare_liblinear.sh [MERAK_BINARY] [DATA_DIR] [FOLDS]
#   MERAK_BINARY  default build/bin/merak
#   DATA_DIR      default data/ of the repository (heart_scale.libsvm, golub.csv,
#                 westbc_nodal.csv, sonar.csv, ionosphere.csv; missing ones
#                 are skipped; DATASETS overrides the list)
#   FOLDS         default 5; sample i (0-based, in file order) is in fold
#                 i mod FOLDS, which is what `merak svm train|path --folds` do.
# Needs liblinear-train / liblinear-predict (Debian liblinear-tools:
# deploy/install-deps.sh installs it) and python3.
#
# Both tools read one file per data set: the features z-scored over the whole
# file (so LIBLINEAR, which does not standardise, sees the same scale merak
# does). Selection, the same rule for every method: each (lambda, theta) or C
# of the grids is scored by its CV accuracy on these folds (no nested CV:
# optimistic for all alike); of those within TOLERANCE (default 0.01, one
# point) of the method's best CV accuracy the one with the fewest mean
# non-zero weights wins (ties: the larger lambda / smaller C). merak scores
# its grid with `merak svm path --folds` (each fold's lambda path
# warm-started); nonconvex penalties also choose theta from a small grid
# (below: SCAD a, MCP gamma and the capped-L1 cap are multiples of lambda).
# The table reports, for the chosen setting, CV accuracy, mean non-zero
# weights per fold fit, the method's best CV accuracy over its grid, and
# seconds per fold fit: "cold" is one `merak svm train --folds` at the chosen
# setting (solver time / folds; LIBLINEAR: the liblinear-train process, which
# includes reading its file), "path" the same fit inside the warm-started
# path; LIBLINEAR's "path" column gives instead its chosen C's training time
# inside one process (bench/liblinear_train_time.py: liblinear.so through
# ctypes, fastest of 5 per fold; LIBLINEAR_INPROC=0 skips it). "s per
# process": the median of 5 whole processes (merak svm train / liblinear-train
# on all rows: start, reading, standardisation where merak does it, the fit),
# what a user waits for. Output: a
# Markdown table on stdout, one JSON line per (data set,
# method) in $OUT (default compare_liblinear.jsonl). Environment: LAMBDAS,
# COSTS (the grids), TOL (merak's --tol, default 1e-4), TOLERANCE, EXTRA
# (more merak flags, e.g. "--nonconvex direct" or "--lla-steps 2"), METHODS
# (default "liblinear l1 scad mcp lsp capped-l1"), SCAD_THETAS, MCP_THETAS,
# LSP_THETAS, CAPPED_THETAS (space-separated theta grids, defaults below),
# LSP_SLOPE_GRID (1: LSP's lambda is grid value x theta, below; 0: the grid).
# CHOSEN=FILE (an OUT file of an earlier run): no grid search; each method is
# run at the setting FILE chose for it on that data set (LIBLINEAR at its C),
# e.g. to time the choices of a long run under an exclusive lock (the CV
# columns are then those of a one-lambda path, i.e. of cold fits).
#
# Repeated stratified CV (the same for every method, LIBLINEAR included):
# SEED=S reorders the rows before the folds are cut, so that fold f holds a
# random share of each class (each class shuffled with seed S, dealt to the
# folds in turn; fold of a row = its new position mod FOLDS, as above).
# CANDS=FILE appends every grid point's score (data, method, setting, seed,
# cv_accuracy, mean_nnz) as one JSON line; COLD=0 skips the cold fits (their
# time only matters once). Run SEED=1..R, then
#   bench/compare_repeated.py FILE   (mean over the R repeats, the same rule).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
merak=${1:-$root/build/bin/merak}
data_dir=${2:-$root/data}
folds=${3:-5}
out=${OUT:-compare_liblinear.jsonl}
# The lambda grid is finer between 0.1 and 0.01, where golub's nonconvex
# fits go from ~4 to ~15 weights; the same for every method.
lambdas=${LAMBDAS:-0.3,0.2,0.15,0.1,0.07,0.06,0.05,0.045,0.04,0.035,0.03,0.025,0.02,0.015,0.01,0.005,0.003,0.001}
costs=(${COSTS:-0.01 0.03 0.1 0.3 1 3 10})
tol=${TOL:-1e-4}  # merak --tol
tolerance=${TOLERANCE:-0.01}
extra=(${EXTRA:-})
datasets=(${DATASETS:-heart_scale.libsvm sonar.csv ionosphere.csv golub.csv westbc_nodal.csv})
seed=${SEED:-}
cands_out=${CANDS:-}
cold=${COLD:-1}
chosen_in=${CHOSEN:-}
methods=(${METHODS:-liblinear l1 scad mcp lsp capped-l1})
# theta grids of the nonconvex penalties (SCAD a, MCP gamma, LSP theta, cap).
# SCAD, MCP and capped-L1 become flat at a multiple of lambda: a lambda, gamma
# lambda, and for capped-L1 the cap, given here as a multiple of lambda
# (--theta-per-lambda: cap = theta * lambda; a fixed cap of 0.3 or 1 lay above
# every standardised golub weight, so capped-L1 was the L1 fit there).
# LSP's theta is a weight scale and its slope at 0 is lambda / theta, where
# the other penalties' is lambda: for LSP the grid's values are that slope
# (LSP's lambda = grid value x theta), so that every method's first LLA step
# is the L1 fit at a grid value. Its theta grid spans the L1-like end
# (theta 1, about the size of the weights on z-scored data) to the L0-like
# end (theta well below every kept weight, the log penalty's usual use as a
# sparsity surrogate). A grid with LSP's lambda itself from the grid and
# theta in {0.03, 0.1, 0.3, 1} never reaches golub's sparsity target
# (docs/results/svm.md, "Solver design choices").
declare -A thetas=([l1]="0" [scad]="${SCAD_THETAS:-2.2 2.5 3 3.7 5}" [mcp]="${MCP_THETAS:-1.2 1.5 2 3 5}"
                   [lsp]="${LSP_THETAS:-0.0003 0.001 0.003 0.01 0.03 0.1 0.3 1}"
                   [capped-l1]="${CAPPED_THETAS:-1.2 1.5 2 3 5}")
declare -A theta_per_lambda=([capped-l1]=1)
declare -A lambda_per_theta=([lsp]=${LSP_SLOPE_GRID:-1})
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

# stratify FILE SEED: reorders FILE's rows in place so that position i mod
# FOLDS is a stratified random fold (each class shuffled with SEED and dealt
# to the folds in turn).
stratify() {
  python3 - "$1" "$2" "$folds" <<'PY'
import random, sys
path, seed, F = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = [l for l in open(path) if l.strip()]
rng = random.Random(seed)
by_class = {}
for l in lines:
    by_class.setdefault(l.split()[0], []).append(l)
order = []
for c in sorted(by_class):
    rng.shuffle(by_class[c])
    order += by_class[c]
# order[k] goes to fold k mod F; fold f fills positions f, f + F, ...
n = len(order)
out = [None] * n
nxt = list(range(F))
for k, l in enumerate(order):
    f = k % F
    out[nxt[f]] = l
    nxt[f] += F
assert all(l is not None for l in out)
open(path, "w").writelines(out)
PY
}

# cand METHOD SETTING_JSON ACC NNZ: one grid point to $cands_out.
cand() {
  [[ -n $cands_out ]] || return 0
  echo "{\"data\":\"${name%.*}\",\"method\":\"$1\",$2,\"seed\":\"${seed:-none}\",\"folds\":$folds,\"cv_accuracy\":$3,\"mean_nnz\":$4}" >>"$cands_out"
}

# split FILE: fold files $work/fold.K.{train,test}.
split_folds() {
  for ((k = 0; k < folds; ++k)); do
    awk -v F="$folds" -v K="$k" '(NR - 1) % F == K' "$1" >"$work/fold.$k.test"
    awk -v F="$folds" -v K="$k" '(NR - 1) % F != K' "$1" >"$work/fold.$k.train"
  done
}

# process_s CMD...: median wall seconds of 5 runs of CMD, a whole process
# (start, reading the file, the fit on all rows), output discarded.
process_s() {
  python3 - "$@" <<'PY'
import subprocess, sys, time
ts = []
for _ in range(5):
    t0 = time.perf_counter()
    subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    ts.append(time.perf_counter() - t0)
print(sorted(ts)[2])
PY
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

# select: reads "score nnz key..." lines on stdin, prints the chosen line
# (fewest nnz within $tolerance of the best score; ties keep the first, so
# feed candidates from the sparsest-regularised end) and the best score.
select_best() {
  python3 -c '
import sys
tol = float(sys.argv[1])
rows = [l.split() for l in sys.stdin if l.strip()]
best = max(float(r[0]) for r in rows)
ok = [r for r in rows if float(r[0]) >= best - tol - 1e-12]
pick = min(ok, key=lambda r: float(r[1]))
print(" ".join(pick), best)' "$tolerance"
}

# chosen_setting METHOD FIELD: FIELD of METHOD's line for this data set in $chosen_in.
chosen_setting() {
  python3 - "$chosen_in" "${name%.*}" "$1" "$2" <<'PY'
import json, sys
path, data, method, field = sys.argv[1:5]
for l in open(path):
    d = json.loads(l)
    if d["data"] == data and d["method"] == method:
        print(d[field]); break
else:
    sys.exit(f"{path}: no {method} line for {data}")
PY
}

printf '| data (n x p) | method | chosen | CV accuracy | mean nnz | best CV acc. (grid) | s per fit cold | s per fit path | s per process |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for name in "${datasets[@]}"; do
  src=$data_dir/$name
  [[ -f $src ]] || { echo "skipping $name (not in $data_dir)" >&2; continue; }
  file=$work/${name%.*}.libsvm
  to_libsvm "$src" "$file"
  [[ -n $seed ]] && stratify "$file" "$seed"
  split_folds "$file"
  n=$(wc -l <"$file")
  p=$(awk '{ for (i = 2; i <= NF; i++) { split($i, a, ":"); if (a[1] + 0 > m) m = a[1] + 0 } } END { print m }' "$file")
  cands=""
  [[ -n $chosen_in ]] && costs=($(chosen_setting liblinear-s5 C))
  [[ " ${methods[*]} " == *" liblinear "* ]] && for c in "${costs[@]}"; do
    read -r acc nnz secs < <(liblinear_cv "$c")
    cands+="$acc $nnz $secs $c"$'\n'
    cand liblinear-s5 "\"C\":$c" "$acc" "$nnz"
  done
  if [[ -n $cands ]]; then
    read -r acc nnz secs c bestacc < <(printf '%s' "$cands" | select_best)
    # The chosen C's training time inside one process (liblinear.so through
    # ctypes: no process start, no file reading), fastest of 5 per fold.
    inproc=null proc=null
    [[ $cold != 0 ]] && proc=$(process_s liblinear-train -s 5 -c "$c" -B 1 -q "$file" "$work/model")
    if [[ $cold != 0 && ${LIBLINEAR_INPROC:-1} != 0 ]]; then
      fold_files=()
      for ((k = 0; k < folds; ++k)); do fold_files+=("$work/fold.$k.train" "$work/fold.$k.test"); done
      read -r inproc iacc innz < <("$root/bench/liblinear_train_time.py" "$c" 5 "${fold_files[@]}" |
        python3 -c "import json,sys; d=json.load(sys.stdin); print(d['train_s'], d['cv_accuracy'], d['mean_nnz'])")
      python3 -c "import sys; sys.exit(abs($iacc - $acc) > 1e-9 or abs($innz - $nnz) > 1e-9)" ||
        echo "warning: ${name%.*}: in-process LIBLINEAR scored $iacc / $innz, liblinear-train $acc / $nnz" >&2
    fi
    printf '| %s (%s x %s) | LIBLINEAR -s 5 | C=%s | %.4f | %.1f | %.4f | %.4f | %s | %s |\n' "${name%.*}" "$n" "$p" "$c" "$acc" "$nnz" "$bestacc" "$secs" \
      "$([[ $inproc == null ]] && echo - || printf 'in-process %.4f' "$inproc")" "$([[ $proc == null ]] && echo - || printf '%.4f' "$proc")"
    echo "{\"data\":\"${name%.*}\",\"method\":\"liblinear-s5\",\"C\":$c,\"cv_accuracy\":$acc,\"mean_nnz\":$nnz,\"best_cv_accuracy\":$bestacc,\"fit_s\":$secs,\"fit_s_inproc\":$inproc,\"process_s\":$proc}" >>"$out"
  fi
  for pen in l1 scad mcp lsp capped-l1; do
    [[ " ${methods[*]} " == *" $pen "* ]] || continue
    cands=""
    pen_thetas=${thetas[$pen]} pen_lambdas=$lambdas
    if [[ -n $chosen_in ]]; then
      pen_lambdas=$(chosen_setting "merak-$pen" lambda)
      [[ $pen != l1 ]] && pen_thetas=$(chosen_setting "merak-$pen" theta)
    fi
    for th in $pen_thetas; do
      theta_flag=()
      [[ $pen != l1 ]] && theta_flag=(--theta "$th")
      [[ -n ${theta_per_lambda[$pen]:-} ]] && theta_flag+=(--theta-per-lambda)
      th_lambdas=$pen_lambdas
      [[ ${lambda_per_theta[$pen]:-0} == 1 && -z $chosen_in ]] &&
        th_lambdas=$(python3 -c "print(','.join('%.6g' % (float(v) * $th) for v in '$pen_lambdas'.split(',')))")
      cands+=$("$merak" svm path --data "$file" --format libsvm --penalty "$pen" "${theta_flag[@]}" \
                 --lambdas "$th_lambdas" --tol "$tol" --folds "$folds" --cv-only --json --log-level warn "${extra[@]}" |
               python3 -c "
import json, sys
for l in sys.stdin:
    d = json.loads(l)
    print(d['cv_accuracy'], d['cv_mean_nnz'], d['cv_time_s'] / $folds, d['lambda'], $th)")$'\n'
    done
    if [[ -n $cands_out ]]; then
      while read -r a z _ l t; do
        [[ -n $a ]] && cand "merak-$pen" "\"lambda\":$l,\"theta\":$t" "$a" "$z"
      done <<<"$cands"
    fi
    read -r acc nnz path_s l th bestacc < <(printf '%s' "$cands" | select_best)
    theta_flag=()
    [[ $pen != l1 ]] && theta_flag=(--theta "$th")
    # The cold fit gets the cap itself: theta * lambda.
    [[ -n ${theta_per_lambda[$pen]:-} ]] && theta_flag=(--theta "$(python3 -c "print($th * $l)")")
    cacc=null cnnz=null secs=0 proc=null
    if [[ $cold != 0 ]]; then
      proc=$(process_s "$merak" svm train --data "$file" --format libsvm --penalty "$pen" --lambda "$l" \
               "${theta_flag[@]}" --tol "$tol" --log-level warn "${extra[@]}")
      j=$("$merak" svm train --data "$file" --format libsvm --penalty "$pen" --lambda "$l" "${theta_flag[@]}" \
            --tol "$tol" --folds "$folds" --json --log-level warn "${extra[@]}")
      read -r cacc cnnz secs < <(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d['cv_accuracy'], d['cv_mean_nnz'], d['cv_time_s'] / $folds)" "$j")
    fi
    chosen="lambda=$l"
    [[ $pen != l1 ]] && chosen+=", theta=$th"
    [[ -n ${theta_per_lambda[$pen]:-} ]] && chosen+=" lambda"
    # The cold fit's accuracy / nnz can differ a little from the path's
    # (another start); the table shows the path's, which chose.
    cold_s=-
    [[ $cold != 0 ]] && cold_s=$(printf '%.4f' "$secs")
    printf '| %s | merak %s | %s | %.4f | %.1f | %.4f | %s | %.4f | %s |\n' "${name%.*}" "$pen" "$chosen" "$acc" "$nnz" "$bestacc" "$cold_s" "$path_s" "$([[ $proc == null ]] && echo - || printf '%.4f' "$proc")"
    echo "{\"data\":\"${name%.*}\",\"method\":\"merak-$pen\",\"lambda\":$l,\"theta\":$th,\"theta_times_lambda\":$([[ -n ${theta_per_lambda[$pen]:-} ]] && echo true || echo false),\"cv_accuracy\":$acc,\"mean_nnz\":$nnz,\"best_cv_accuracy\":$bestacc,\"fit_s\":$secs,\"path_fit_s\":$path_s,\"cold_cv_accuracy\":$cacc,\"cold_mean_nnz\":$cnnz,\"process_s\":$proc}" >>"$out"
  done
done
