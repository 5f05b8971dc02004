#!/usr/bin/env bash
# Command-line tests of `merak svm` and `merak bench svm`: bad input ends in
# a one-line error naming file and line (or flag) and exit 1, never a crash;
# a good run prints what the issue asks for and writes a model that predict
# reads back. Usage: svm_cli_test.sh MERAK_BINARY CASE
# liblinear: LIBLINEAR's habits (positional files, -c, CSV headers, feature
#   counts) and model files read both ways with liblinear-tools, when
#   installed.
set -euo pipefail
merak=$1
case_name=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Two separable-ish clusters in LIBSVM and CSV form (generated, no shared data).
python3 - "$work" <<'PY'
import random, sys
random.seed(7)
d = sys.argv[1]
with open(d + "/train.libsvm", "w") as a, open(d + "/train.csv", "w") as b:
    for i in range(120):
        y = 1 if i % 2 else -1
        x = [random.gauss(0.8 * y if j < 3 else 0, 1) for j in range(8)]
        a.write(("+1" if y > 0 else "-1") + " " + " ".join(f"{j+1}:{v:.6f}" for j, v in enumerate(x)) + "\n")
        b.write(str(y) + "," + ",".join(f"{v:.6f}" for v in x) + "\n")
PY

source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"

case "$case_name" in
  select)
    # --select cv: stratified shuffled CV over the grids, the one-SE rule,
    # then the fit on all data with the choice (what the model file holds).
    sel=(svm train "$work/train.libsvm" --penalty mcp --select cv --folds 4 --lambdas 0.2,0.05,0.01
      --thetas 2,4 --seed 3 --json)
    "$merak" "${sel[@]}" --model "$work/sel.model" >"$work/sel.json"
    "$merak" "${sel[@]}" >"$work/sel2.json"
    python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
j = json.load(open(f"{d}/sel.json"))
s = j["selection"]
c = s["candidates"]
assert len(c) == 6 and s["folds"] == 4 and s["seed"] == 3, s
best, pick = c[s["best"]], c[s["chosen"]]
assert all(x["cv_mean"] <= best["cv_mean"] for x in c)
floor = best["cv_mean"] - best["cv_se"]
assert pick["cv_mean"] >= floor, (pick, best)
assert all(pick["cv_mean_nnz"] <= x["cv_mean_nnz"] for x in c if x["cv_mean"] >= floor), c
assert j["lambda"] == pick["lambda"] and j["theta"] == pick["theta"], (j, pick)
model = open(f"{d}/sel.model").read()
assert f"lambda {pick['lambda']:.17g}" in model or f"lambda {pick['lambda']}" in model, model[-200:]
assert json.load(open(f"{d}/sel2.json"))["selection"] == s, "not the same on a second run"
print(f"ok: chose lambda {pick['lambda']} theta {pick['theta']} (cv {pick['cv_mean']:.4f}, "
      f"best {best['cv_mean']:.4f} +- {best['cv_se']:.4f}), the same on a second run")
PY
    expect_error "--thetas: the L1 penalty has no theta" svm train "$work/train.libsvm" --select cv --thetas 1,2
    expect_error "--select must be cv \(got 'grid'\)" svm train "$work/train.libsvm" --select grid
    expect_error "--lambdas: 'x' is not a number" svm train "$work/train.libsvm" --select cv --lambdas 0.1,x
    expect_error "--select cv runs on one machine" svm train "$work/train.libsvm" --select cv --procs 2
    ;;
  liblinear)
    # liblinear-train's habits: options, then DATA [MODEL]; -c C (lambda = 1/(C n)).
    "$merak" svm train -c 2 --json "$work/train.libsvm" "$work/m.model" >"$work/c.json"
    [[ -s $work/m.model ]] || { echo "FAIL: the second argument did not name the model file"; exit 1; }
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert abs(j['lambda'] - 1/(2*120)) < 1e-15, j; print('ok: -c 2 on 120 samples is lambda', j['lambda'])" "$work/c.json"
    expect_error "--lambda excludes -c|-c excludes --lambda" svm train "$work/train.libsvm" -c 2 --lambda 0.1
    # liblinear-predict's order: DATA MODEL OUTPUT.
    "$merak" svm predict "$work/train.libsvm" "$work/m.model" "$work/merak.labels" >/dev/null
    # A CSV header row is skipped.
    { echo "label,a,b,c,d,e,f,g,h"; cat "$work/train.csv"; } >"$work/header.csv"
    "$merak" svm train "$work/header.csv" -c 2 --json >"$work/h.json"
    python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert a['samples'] == 120 and abs(a['objective'] - b['objective']) <= 1e-12 * b['objective'], (a, b); print('ok: the CSV with a header fits as the LIBSVM file')" "$work/h.json" "$work/c.json"
    # Data with more features than the model: refused, or LIBLINEAR's way.
    sed 's/$/ 10:1.5/' "$work/train.libsvm" >"$work/wide.libsvm"
    expect_error "data file '.*wide.libsvm' has 10 features, the model '.*m.model' 8: .*--ignore-extra-features" \
      svm predict "$work/wide.libsvm" "$work/m.model"
    "$merak" svm predict --ignore-extra-features "$work/wide.libsvm" "$work/m.model" "$work/wide.labels" >/dev/null
    cmp "$work/wide.labels" "$work/merak.labels"
    if ! command -v liblinear-predict >/dev/null; then
      echo "skip: liblinear-tools not installed (merak's side checked)"
      exit 0
    fi
    # LIBLINEAR's predict loads merak's model and predicts the same labels.
    liblinear-predict "$work/train.libsvm" "$work/m.model" "$work/ll.labels" >"$work/ll.out"
    cmp "$work/ll.labels" "$work/merak.labels"
    echo "ok: liblinear-predict on merak's model: $(cat "$work/ll.out"), the labels merak predicts"
    # merak reads LIBLINEAR's own model (with a bias feature): the same
    # labels as LIBLINEAR's predict. It has no checksum, hence
    # --skip-checksum. (The other class order, "label -1 1", is tested in
    # tests/svm/model_io_test.cpp.)
    liblinear-train -s 5 -c 1 -B 1 -q "$work/train.libsvm" "$work/ll.model"
    liblinear-predict "$work/train.libsvm" "$work/ll.model" "$work/ll2.labels" >/dev/null
    "$merak" --skip-checksum svm predict "$work/train.libsvm" "$work/ll.model" "$work/m2.labels" \
      >/dev/null 2>&1
    cmp "$work/ll2.labels" "$work/m2.labels"
    echo "ok: merak predicts with LIBLINEAR's model as liblinear-predict does"
    ;;
  train_predict)
    for pen in l1 scad mcp lsp capped-l1; do
      "$merak" svm train --data "$work/train.libsvm" --penalty "$pen" --lambda 0.02 --folds 4 \
        --model "$work/$pen.model" --json >"$work/$pen.json"
      "$merak" svm predict --model "$work/$pen.model" --data "$work/train.csv" --json >"$work/$pen.pred.json"
    done
    "$merak" svm train --data "$work/train.csv" --penalty mcp --workers 4 --model "$work/m.json" --json >"$work/k4.json"
    "$merak" svm predict --model "$work/m.json" --data "$work/train.libsvm" --output "$work/labels" >/dev/null
    python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
for pen in ["l1", "scad", "mcp", "lsp", "capped-l1"]:
    t = json.load(open(f"{d}/{pen}.json"))
    for k in ("objective", "iterations", "nnz", "time_s", "cv_accuracy", "accuracy"):
        assert k in t, f"{pen}: no {k} in {t}"
    assert t["cv_accuracy"] > 0.7, t
    # LSP is fitted by LLA on any shape, from w = 0 unless --lla-start says otherwise.
    if pen == "lsp":
        assert t["nonconvex"] == "lla" and t["lla_start"] == "zero", t
    p = json.load(open(f"{d}/{pen}.pred.json"))
    # The same data in the other format: predict reproduces training accuracy.
    assert abs(p["accuracy"] - t["accuracy"]) < 1e-12, (pen, p, t)
k4 = json.load(open(f"{d}/k4.json"))
assert k4["workers"] == 4 and k4["accuracy"] > 0.7, k4
labels = open(f"{d}/labels").read().split()
assert len(labels) == 120 and set(labels) <= {"1", "-1"}, labels[:5]
print("ok: train, cv, predict for every penalty; workers 4")
PY
    ;;
  path)
    "$merak" svm path --data "$work/train.libsvm" --penalty mcp --lambdas 0.01,0.1,0.03 --folds 4 \
      --json >"$work/path.jsonl"
    "$merak" svm path --data "$work/train.csv" --penalty l1 --lambdas 0.1,0.01 >"$work/path.txt"
    python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/path.jsonl")]
assert [r["lambda"] for r in rows] == [0.1, 0.03, 0.01], rows
for r in rows:
    for k in ("objective", "iterations", "nnz", "accuracy", "cv_accuracy", "cv_mean_nnz", "time_s"):
        assert k in r, (k, r)
    assert r["penalty"] == "mcp" and r["warm"] and r["cv_accuracy"] > 0.7, r
# Smaller lambda: no fewer non-zeros on this data, and a lower objective.
assert rows[0]["objective"] > rows[2]["objective"], rows
lines = open(f"{d}/path.txt").read().splitlines()
assert lines[0].split()[0] == "lambda" and len(lines) == 3, lines
print("ok: path json and text")
PY
    expect_error "--lambdas: 'x' is not a number" svm path --data "$work/train.libsvm" --lambdas 0.1,x
    expect_error "--lambdas: -1 is not a positive number" svm path --data "$work/train.libsvm" --lambdas 0.1,-1
    ;;
  bench_json)
    "$merak" bench svm --n 200 --p 500 --density 0.05 --penalty scad --folds 3 >"$work/b.json"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['benchmark']=='svm' and 'time_s' in d and 'cv_accuracy' in d and d['sparse'] and d['nonconvex']=='lla' and d['lla_start']=='zero', d; print('ok: bench', d['time_s'])" "$work/b.json" ;;
  bad_data)
    printf '+1 1:0.5 2:1\n-1 2:x\n' >"$work/bad.libsvm"
    expect_error "error: $work/bad.libsvm:2: feature value 'x' is not a number" svm train --data "$work/bad.libsvm"
    printf '1,2,3\n-1,2\n' >"$work/bad.csv"
    expect_error "error: $work/bad.csv:2: 2 fields where earlier lines \(or the header\) have 3" svm train --data "$work/bad.csv"
    expect_error "error: cannot open data file '$work/none.libsvm'" svm train --data "$work/none.libsvm" ;;
  bad_flags)
    expect_error "unknown penalty 'ridge'" svm train --data "$work/train.libsvm" --penalty ridge
    expect_error "--theta \(MCP gamma\) must be > 1" svm train --data "$work/train.libsvm" --penalty mcp --theta 0.5
    expect_error "--lambda must be >= 0" svm train --data "$work/train.libsvm" --lambda -1
    expect_error "--folds must be at least 2" svm train --data "$work/train.libsvm" --folds 1
    expect_error "--workers 500 exceeds the 120 samples" svm train --data "$work/train.libsvm" --workers 500
    expect_error "unknown --format 'xml'" svm train --data "$work/train.libsvm" --format xml
    expect_error "--relax must be in \[1, 2\)" svm train --data "$work/train.libsvm" --relax 2.5
    expect_error "--nonconvex must be auto, lla or direct" svm train --data "$work/train.libsvm" --nonconvex x
    expect_error "--lla-start must be best, zero or l1 \(got 'one'\)" svm train --data "$work/train.libsvm" --penalty lsp --lla-start one
    expect_error "--lla-start must be best, zero or l1" bench svm --n 50 --p 20 --penalty lsp --lla-start one
    expect_error "--lla-steps must not be negative" bench svm --n 50 --p 20 --penalty lsp --lla-steps -1 ;;
  bad_model)
    printf 'nr_feature 8\nbias 1\nw\n1\n' >"$work/short.model"
    expect_error "error: model file '$work/short.model' has no checksum .*--skip-checksum loads it anyway" \
      svm predict --model "$work/short.model" --data "$work/train.libsvm"
    expect_error "error: model file '$work/short.model': 1 weights after 'w', expected 9" \
      --skip-checksum svm predict --model "$work/short.model" --data "$work/train.libsvm"
    # A model whose bytes changed after it was written.
    "$merak" svm train --data "$work/train.libsvm" --penalty l1 --model "$work/m.model" >/dev/null
    sed -i 's/^lambda .*/lambda 0.5/' "$work/m.model"
    expect_error "error: model file '$work/m.model' is corrupted: checksum crc32c:[0-9a-f]{8} does not match the recorded" \
      svm predict --model "$work/m.model" --data "$work/train.libsvm"
    "$merak" --skip-checksum svm predict --model "$work/m.model" --data "$work/train.libsvm" >/dev/null 2>"$work/skip.err"
    grep -q "checksums are not verified" "$work/skip.err" || { echo "FAIL: no warning: $(cat "$work/skip.err")"; exit 1; }
    expect_error "error: cannot open model file" svm predict --model "$work/none.model" --data "$work/train.libsvm" ;;
  outputs_37)
    # An output is written only as a regular file: a FIFO, a device (here
    # through a symbolic link, so that a binary without the check replaces
    # the link, never the device) or a directory is refused by name and kept.
    mkfifo "$work/fifo"
    mkdir "$work/dir"
    ln -s /dev/full "$work/full"
    expect_error "error: output '$work/fifo' is a FIFO: only a regular file is written" \
      svm train --data "$work/train.libsvm" --model "$work/fifo"
    [[ -p "$work/fifo" ]] || { echo "FAIL: the FIFO was replaced"; exit 1; }
    expect_error "error: output '$work/dir' is a directory" \
      svm train --data "$work/train.libsvm" --model "$work/dir"
    [[ -d "$work/dir" ]] || { echo "FAIL: the directory was replaced"; exit 1; }
    expect_error "error: output '$work/full' is a character device" \
      svm train --data "$work/train.libsvm" --model "$work/full"
    [[ -L "$work/full" ]] || { echo "FAIL: the link was replaced"; exit 1; }
    "$merak" svm train --data "$work/train.libsvm" --model "$work/m.model" >/dev/null
    expect_error "error: output '$work/fifo' is a FIFO" \
      svm predict --model "$work/m.model" --data "$work/train.libsvm" --output "$work/fifo"
    [[ -p "$work/fifo" ]] || { echo "FAIL: the FIFO was replaced"; exit 1; }
    # A directory that cannot be written (not for root, who writes anyway).
    if (($(id -u) != 0)); then
      mkdir "$work/ro" && chmod 555 "$work/ro"
      expect_error "error: cannot create '$work/ro/m.model.tmp': Permission denied" \
        svm train --data "$work/train.libsvm" --model "$work/ro/m.model"
      [[ ! -e "$work/ro/m.model" ]] || { echo "FAIL: a model was written"; exit 1; }
    fi
    # A CSV starting with a UTF-8 byte-order mark keeps its first sample.
    printf '\xEF\xBB\xBF' >"$work/bom.csv"
    cat "$work/train.csv" >>"$work/bom.csv"
    "$merak" svm predict --model "$work/m.model" --data "$work/bom.csv" --json >"$work/bom.json"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['samples']==120, d; print('ok: BOM', d)" "$work/bom.json" ;;
  *)
    echo "unknown case $case_name"
    exit 2 ;;
esac
