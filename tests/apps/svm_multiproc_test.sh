#!/usr/bin/env bash
# Consensus ADMM across processes: `merak svm train --procs K` starts K
# `merak svm worker` processes on loopback (CAF's network layer, job token),
# or waits for workers started by hand with --listen. Real processes, label
# multiproc. Usage: svm_multiproc_test.sh MERAK_BINARY CASE
#
#   objective_l1, objective_mcp  K = 2, 4 processes: the same iterations and
#       objective as the in-process actors (--workers K, same maths), and
#       within 1e-3 relative of the single-machine objective; the model file
#       predicts as the fit reported
#   scad         K = 2: equals the in-process consensus (whose stationarity
#                tests/svm/consensus_test.cpp checks), within 2% of one machine
#   bad_token    a worker with the wrong token is refused with a message that
#                says so; the consensus side names the rank that never joined
#   never_joins  no worker comes: a bounded wait naming the missing ranks
#   worker_killed  SIGKILL of rank 2 mid-fit ends the fit within seconds with
#                an error naming worker 2; no worker process is left behind
#   worker_hangs rank 1 stopped (SIGSTOP) mid-fit: the phase timeout names it
#   listen_presharded  --listen with two workers started here, each reading
#                a file of its own rows (--presharded): the --procs 2 result;
#                svm path over such workers is refused by name;
#                with --folds such workers are refused by name
#   folds        --procs K --folds F (K = 2, 3): each worker process takes its
#                block of every fold's training and held-out rows; the same CV
#                accuracy, mean non-zeros and mean iterations as the in-process
#                --workers K --folds F, and the same final fit; another
#                shard count gives different fold fits (the comparison has teeth)
#   path         svm path --procs 2 [--folds 3] [--cv-only]: every lambda's point
#                equals svm train --procs 2 at that lambda (same workers reused)
#   tls          --procs 2 with --tls-cert/--tls-key/--tls-ca (files from
#                deploy/tls-certs.sh): the same iterations and objective as in
#                clear; a worker whose certificate another CA signed is
#                refused in the TLS handshake, naming it; an incomplete set
#                of TLS flags is refused naming what is missing
#   bad_flags    flag errors are one line and exit 1 (--folds 1, --folds beyond
#                the samples, svm path --listen without --procs, --cv-only
#                without --folds, a theta out of range at one lambda)
set -euo pipefail
merak=$1
case_name=$2
work=$(mktemp -d)
pids=()
# Starts a fit that never converges on its own (tolerance 1e-300) on $1
# worker processes with --timeout-s $2, writing $3.out and $3.err; sets cpid
# (the consensus side), victim (the worker process of rank $4) and start.
start_endless_fit() {
  "$merak" svm train --data "$work/train.libsvm" --penalty mcp --procs "$1" --tol 1e-300 \
    --max-iter 100000000 --timeout-s "$2" >"$3.out" 2>"$3.err" &
  cpid=$!
  pids+=("$cpid")
  sleep 2
  victim=""
  for c in $(pgrep -P "$cpid"); do
    if tr '\0' '\n' <"/proc/$c/environ" | grep -qx "RANK=$4"; then victim=$c; fi
  done
  [[ -n "$victim" ]] || { echo "FAIL: no rank $4 process under $cpid"; cat "$3.err"; exit 1; }
  start=$(date +%s.%N)
}

# The fit started by start_endless_fit ends with exit 1 within $1 s of start
# (stderr in $2.err; $3 says what happened at start).
expect_failed_within() {
  local rc
  set +e
  wait "$cpid"
  rc=$?
  set -e
  python3 -c "import sys,time; t=time.time()-float(sys.argv[1]); assert t < float(sys.argv[2]), t; print(f'ok: the fit ended {t:.2f} s {sys.argv[3]}')" "$start" "$1" "$3"
  ((rc == 1)) || { echo "FAIL: exit $rc"; cat "$2.err"; exit 1; }
}

# Waits for the consensus side ($cpid): it must exit 1 with the grep pattern
# $2 in its stderr file $1.
consensus_fails_with() {
  local rc
  set +e
  wait "$cpid"
  rc=$?
  set -e
  ((rc == 1)) || { echo "FAIL: consensus side exit $rc"; cat "$1"; exit 1; }
  grep -q "$2" "$1" || { echo "FAIL: consensus side's error:"; cat "$1"; exit 1; }
}

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# gen_data FILE ROWS FEATURES INFORMATIVE SHIFT SEED: two overlapping
# clusters (generated, no shared data): the first INFORMATIVE features have
# mean +-SHIFT by class, the others are noise; labels alternate.
gen_data() {
  python3 - "$@" <<'PY'
import random, sys
path, n, p, k, shift, seed = sys.argv[1], *map(int, sys.argv[2:4]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
random.seed(seed)
with open(path, "w") as a:
    for i in range(n):
        y = 1 if i % 2 else -1
        x = [random.gauss(shift * y if j < k else 0, 1) for j in range(p)]
        a.write(("+1" if y > 0 else "-1") + " " + " ".join(f"{j+1}:{v:.6f}" for j, v in enumerate(x)) + "\n")
PY
}
gen_data "$work/train.libsvm" 120 8 3 0.8 7

source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"

# compare PENALTY TOL_SINGLE K...: --procs K against --workers K and one machine.
compare() {
  local pen=$1 tol=$2
  shift 2
  "$merak" svm train --data "$work/train.libsvm" --penalty "$pen" --lambda 0.02 --nonconvex direct \
    --json >"$work/single.json"
  for k in "$@"; do
    "$merak" svm train --data "$work/train.libsvm" --penalty "$pen" --lambda 0.02 --procs "$k" \
      --model "$work/procs$k.model" --json >"$work/procs$k.json"
    "$merak" svm train --data "$work/train.libsvm" --penalty "$pen" --lambda 0.02 --workers "$k" \
      --json >"$work/actors$k.json"
    "$merak" svm predict --model "$work/procs$k.model" --data "$work/train.libsvm" --json \
      >"$work/pred$k.json"
    python3 - "$work" "$k" "$tol" <<'PY'
import json, sys
d, k, tol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = json.load(open(f"{d}/single.json"))
p = json.load(open(f"{d}/procs{k}.json"))
a = json.load(open(f"{d}/actors{k}.json"))
q = json.load(open(f"{d}/pred{k}.json"))
assert p["procs"] == k and p["transport"] == "caf-io" and p["samples"] == 120 and p["features"] == 8, p
assert p["converged"] and a["converged"], (p, a)
# The same maths in the same order: same iterations, objective to rounding.
assert p["iterations"] == a["iterations"], (p, a)
assert abs(p["objective"] - a["objective"]) <= 1e-9 * abs(a["objective"]), (p, a)
rel = abs(p["objective"] - s["objective"]) / abs(s["objective"])
assert rel <= tol, (rel, p, s)
assert abs(q["accuracy"] - p["accuracy"]) < 1e-12, (q, p)
print(f"ok: {p['penalty']} procs {k}: objective {p['objective']:.8g} (actors {a['objective']:.8g}, "
      f"one machine {s['objective']:.8g}, rel {rel:.1e}), {p['iterations']} iterations, {p['time_s']:.2f} s")
PY
  done
}

case "$case_name" in
  objective_l1) compare l1 1e-3 2 4 ;;
  objective_mcp) compare mcp 1e-3 2 4 ;;
  scad) compare scad 0.02 2 ;;
  tls)
    certs=$(dirname "${BASH_SOURCE[0]}")/../../deploy/tls-certs.sh
    bash "$certs" "$work/pki" job >/dev/null
    bash "$certs" "$work/rogue" job >/dev/null
    tls=(--tls-cert "$work/pki/job.pem" --tls-key "$work/pki/job.key" --tls-ca "$work/pki/ca.pem")
    fit=(svm train --data "$work/train.libsvm" --penalty mcp --lambda 0.02 --procs 2 --json)
    "$merak" "${fit[@]}" >"$work/clear.json"
    "$merak" "${fit[@]}" "${tls[@]}" >"$work/tls.json"
    python3 - "$work" <<'PY'
import json, sys
c = json.load(open(f"{sys.argv[1]}/clear.json"))
t = json.load(open(f"{sys.argv[1]}/tls.json"))
assert t["procs"] == 2 and t["converged"], t
assert t["iterations"] == c["iterations"] and t["objective"] == c["objective"], (t, c)
print(f"ok: under TLS {t['iterations']} iterations, objective {t['objective']:.10g} as in clear "
      f"({t['time_s']:.2f} s against {c['time_s']:.2f} s)")
PY
    "$merak" svm train --data "$work/train.libsvm" --procs 2 --listen 127.0.0.1 --token good \
      "${tls[@]}" --timeout-s 4 >"$work/c.out" 2>"$work/c.err" &
    cpid=$!
    pids+=("$cpid")
    for _ in $(seq 100); do grep -q "waiting for" "$work/c.err" && break; sleep 0.05; done
    port=$(grep -o '127\.0\.0\.1:[0-9]*' "$work/c.err" | head -n 1 | cut -d: -f2)
    [[ -n "$port" ]] || { echo "FAIL: no port in: $(cat "$work/c.err")"; exit 1; }
    expect_error "svm worker 1: TLS handshake with the consensus side at 127.0.0.1:$port failed: .*certificate verify failed" \
      svm worker --connect "127.0.0.1:$port" --rank 1 --world 2 --token good \
      --data "$work/train.libsvm" --tls-cert "$work/rogue/job.pem" --tls-key "$work/rogue/job.key" \
      --tls-ca "$work/rogue/ca.pem"
    consensus_fails_with "$work/c.err" "did not join"
    expect_error "merak svm: TLS needs --tls-cert, --tls-key and --tls-ca together: the key and the CA are missing" \
      svm train --data "$work/train.libsvm" --procs 2 --tls-cert "$work/pki/job.pem"
    chmod 644 "$work/pki/job.key"
    expect_error "svm worker: TLS key '.*job.key' may be read by group or others \(mode 0644\)" \
      svm worker --connect 127.0.0.1:1 --rank 0 --world 1 --data "$work/train.libsvm" "${tls[@]}"
    ;;
  bad_token)
    "$merak" svm train --data "$work/train.libsvm" --procs 2 --listen 127.0.0.1 --token good \
      --timeout-s 4 >"$work/c.out" 2>"$work/c.err" &
    cpid=$!
    pids+=("$cpid")
    for _ in $(seq 100); do grep -q "waiting for" "$work/c.err" && break; sleep 0.05; done
    port=$(grep -o '127\.0\.0\.1:[0-9]*' "$work/c.err" | head -n 1 | cut -d: -f2)
    [[ -n "$port" ]] || { echo "FAIL: no port in: $(cat "$work/c.err")"; exit 1; }
    "$merak" svm worker --connect "127.0.0.1:$port" --rank 0 --world 2 --token good \
      --data "$work/train.libsvm" >/dev/null 2>"$work/w0.err" &
    pids+=("$!")
    expect_error "svm worker 1: the consensus side at 127.0.0.1:$port refused this process: wrong job token" \
      svm worker --connect "127.0.0.1:$port" --rank 1 --world 2 --token bad --data "$work/train.libsvm"
    # A right token for a rank already taken is refused too.
    expect_error "refused it: rank 0 has already joined" \
      svm worker --connect "127.0.0.1:$port" --rank 0 --world 2 --token good --data "$work/train.libsvm"
    consensus_fails_with "$work/c.err" \
      "svm worker 1 did not join the consensus side at 127.0.0.1:$port within 4000 ms (refused: rank 0: rank 0 has already joined; 127.0.0.1:[0-9]*: wrong job token)"
    echo "ok: $(tail -n 1 "$work/c.err")"
    ;;
  never_joins)
    start=$(date +%s.%N)
    expect_error "svm workers 0, 1, 2 did not join the consensus side at 127.0.0.1:[0-9]+ within 1000 ms" \
      svm train --procs 3 --listen 127.0.0.1 --timeout-s 1
    python3 -c "import sys,time; t=time.time()-float(sys.argv[1]); assert t < 10, t; print(f'ok: gave up after {t:.1f} s')" "$start"
    # The figure is the time left when the connection attempts began: up to
    # a few ms under the 500 on a loaded machine.
    expect_error "svm worker 0: the consensus side at 127.0.0.1:1 not reachable within (4[0-9][0-9]|500) ms" \
      svm worker --connect 127.0.0.1:1 --rank 0 --world 1 --token t --data "$work/train.libsvm" --timeout-s 0.5
    ;;
  worker_killed)
    start_endless_fit 4 30 "$work/k" 2
    kill -9 "$victim"
    expect_failed_within 10 "$work/k" "after the SIGKILL"
    grep -Eq "error: svm worker 2 (failed in '[a-z]+' of iteration [0-9]+: it went down|went down before the fit started)" "$work/k.err" ||
      { echo "FAIL: the error does not name worker 2:"; cat "$work/k.err"; exit 1; }
    grep -m1 "svm worker 2" "$work/k.err"
    sleep 0.5
    if pgrep -P "$cpid" >/dev/null; then echo "FAIL: worker processes left"; exit 1; fi
    ;;
  worker_hangs)
    start_endless_fit 2 2 "$work/h" 1
    pids+=("$victim")
    kill -STOP "$victim"
    expect_failed_within 15 "$work/h" "after the SIGSTOP"
    grep -Eq "error: svm worker 1 did not answer '[a-z]+' of iteration [0-9]+ within 2000 ms" "$work/h.err" ||
      { echo "FAIL: the error does not name worker 1:"; cat "$work/h.err"; exit 1; }
    grep -m1 "svm worker 1" "$work/h.err"
    sleep 0.5
    if kill -0 "$victim" 2>/dev/null; then echo "FAIL: the stopped worker is still there"; exit 1; fi
    ;;
  listen_presharded)
    head -n 60 "$work/train.libsvm" >"$work/part0.libsvm"
    tail -n 60 "$work/train.libsvm" >"$work/part1.libsvm"
    # Runs `merak svm ARGS... --procs 2 --listen 127.0.0.1 --token tok`
    # (stdout to $1, stderr to $2) in the background ($cpid) with two
    # presharded workers of part0/part1.
    with_presharded() {
      local out=$1 err=$2
      shift 2
      "$merak" svm "$@" --procs 2 --listen 127.0.0.1 --token tok >"$out" 2>"$err" &
      cpid=$!
      pids+=("$cpid")
      for _ in $(seq 100); do grep -q "waiting for" "$err" && break; sleep 0.05; done
      port=$(grep -o '127\.0\.0\.1:[0-9]*' "$err" | head -n 1 | cut -d: -f2)
      [[ -n "$port" ]] || { echo "FAIL: no port in: $(cat "$err")"; exit 1; }
      for r in 0 1; do
        MERAK_JOB_TOKEN=tok RANK=$r WORLD_SIZE=2 "$merak" svm worker --connect "127.0.0.1:$port" \
          --presharded --data "$work/part$r.libsvm" 2>/dev/null &
        pids+=("$!")
      done
    }
    with_presharded "$work/listen.json" "$work/c.err" train --penalty mcp --lambda 0.02 --json
    wait "$cpid"
    "$merak" svm train --data "$work/train.libsvm" --penalty mcp --lambda 0.02 --procs 2 \
      --json >"$work/procs.json"
    # A warm path without folds continues on the rows the workers joined
    # with: it runs on presharded workers, as over workers of the whole file.
    with_presharded "$work/lpath.jsonl" "$work/lp.err" path --penalty l1 --lambdas 0.05,0.01 --json
    wait "$cpid"
    "$merak" svm path --data "$work/train.libsvm" --penalty l1 --lambdas 0.05,0.01 --procs 2 \
      --json >"$work/ppath.jsonl"
    python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
l = json.load(open(f"{d}/listen.json"))
p = json.load(open(f"{d}/procs.json"))
assert l["samples"] == 120 and l["features"] == 8 and l["procs"] == 2, l
assert l["iterations"] == p["iterations"] and abs(l["objective"] - p["objective"]) <= 1e-12, (l, p)
print(f"ok: --listen with presharded workers: objective {l['objective']:.8g}, {l['iterations']} iterations, as --procs 2")
lp = [json.loads(x) for x in open(f"{d}/lpath.jsonl")]
pp = [json.loads(x) for x in open(f"{d}/ppath.jsonl")]
assert [x["lambda"] for x in lp] == [0.05, 0.01] and all(x["warm"] for x in lp), lp
for a, b in zip(lp, pp):
    assert a["iterations"] == b["iterations"] and abs(a["objective"] - b["objective"]) <= 1e-12, (a, b)
print(f"ok: warm path over presharded workers: {[x['iterations'] for x in lp]} iterations, as --procs 2")
PY
    # Runs the same with ARGS, expecting the error $2 (stderr to $1).
    presharded_refused() {
      local err=$1 want=$2
      shift 2
      with_presharded /dev/null "$err" "$@"
      consensus_fails_with "$err" "$want"
      echo "ok: $(grep -m1 'failed in' "$err")"
    }
    # A presharded worker holds its rows once and cannot select rows again:
    # a cold path is refused by name at its second lambda, and --folds too.
    presharded_refused "$work/lc.err" \
      "lambda 0.01: svm worker [01] failed in 'select': selecting rows again (svm path --cold, or a warm path's fit that must start cold) needs workers that read the whole data file; this one holds only its own rows (--presharded)" \
      path --penalty l1 --lambdas 0.05,0.01 --cold
    presharded_refused "$work/cf.err" \
      "svm worker [01] failed in 'select': --folds needs workers that read the whole data file; this one holds only its own rows (--presharded)" \
      train --penalty l1 --folds 3
    ;;
  folds)
    for k in 2 3; do
      "$merak" svm train --data "$work/train.libsvm" --penalty l1 --lambda 0.02 --tol 1e-3 --procs "$k" \
        --folds 4 --json >"$work/procs$k.json"
      "$merak" svm train --data "$work/train.libsvm" --penalty l1 --lambda 0.02 --tol 1e-3 --workers "$k" \
        --folds 4 --json >"$work/actors$k.json"
    done
    python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
for k in (2, 3):
    p = json.load(open(f"{d}/procs{k}.json"))
    a = json.load(open(f"{d}/actors{k}.json"))
    assert p["procs"] == k and p["folds"] == 4 and p["samples"] == 120, p
    # The same rows per worker and fold: the same fold fits (iterations and
    # non-zeros) and the same held-out predictions.
    assert p["cv_accuracy"] == a["cv_accuracy"], (p, a)
    assert abs(p["cv_mean_nnz"] - a["cv_mean_nnz"]) < 1e-9, (p, a)
    assert abs(p["cv_mean_iterations"] - a["cv_mean_iterations"]) < 1e-9, (p, a)
    assert p["iterations"] == a["iterations"], (p, a)
    assert abs(p["objective"] - a["objective"]) <= 1e-9 * abs(a["objective"]), (p, a)
    assert 0.5 < p["cv_accuracy"] < 1.0, p
    print(f"ok: procs {k}, 4 folds: cv_accuracy {p['cv_accuracy']:.4f}, mean nnz {p['cv_mean_nnz']:.1f}, "
          f"mean iterations {p['cv_mean_iterations']:.1f} (in-process: {a['cv_accuracy']:.4f}, "
          f"{a['cv_mean_nnz']:.1f}, {a['cv_mean_iterations']:.1f}); cv {p['cv_time_s']:.2f} s")
# Other shards give other fold fits, so the equalities above have teeth.
p2, a3 = json.load(open(f"{d}/procs2.json")), json.load(open(f"{d}/actors3.json"))
assert p2["cv_mean_iterations"] != a3["cv_mean_iterations"], (p2, a3)
print(f"ok: 2 and 3 shards differ (mean iterations {p2['cv_mean_iterations']:.1f}, {a3['cv_mean_iterations']:.1f})")
PY
    ;;
  path)
    # svm path --procs 2 --cold: one cold consensus fit per lambda on the
    # same two worker processes (and with --folds every lambda scored per
    # fold); each point equals svm train --procs 2 at that lambda alone.
    "$merak" svm path --data "$work/train.libsvm" --penalty mcp --theta 2 --lambdas 0.01,0.05 \
      --tol 1e-3 --procs 2 --folds 3 --cold --json >"$work/path.jsonl"
    "$merak" svm path --data "$work/train.libsvm" --penalty mcp --theta 2 --lambdas 0.05,0.01 \
      --tol 1e-3 --procs 2 --folds 3 --cv-only --cold --json >"$work/cv.jsonl"
    for l in 0.05 0.01; do
      "$merak" svm train --data "$work/train.libsvm" --penalty mcp --theta 2 --lambda $l --tol 1e-3 \
        --procs 2 --folds 3 --json >"$work/train$l.json"
    done
    python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
path = [json.loads(l) for l in open(f"{d}/path.jsonl")]
cv = [json.loads(l) for l in open(f"{d}/cv.jsonl")]
assert [p["lambda"] for p in path] == [0.05, 0.01], path  # largest first
assert [p["lambda"] for p in cv] == [0.05, 0.01], cv
for p, c in zip(path, cv):
    t = json.load(open(f"{d}/train{p['lambda']:g}.json"))
    assert p["procs"] == 2 and p["warm"] is False, p
    assert p["iterations"] == t["iterations"] and p["nnz"] == t["nnz"], (p, t)
    assert abs(p["objective"] - t["objective"]) <= 1e-12 * abs(t["objective"]), (p, t)
    for k in ("cv_accuracy", "cv_mean_nnz"):
        assert p[k] == t[k] and c[k] == t[k], (k, p, c, t)
    assert "objective" not in c, c
    print(f"ok: lambda {p['lambda']}: objective {p['objective']:.8g}, {p['iterations']} iterations, "
          f"cv {p['cv_accuracy']:.4f} / {p['cv_mean_nnz']:.2f} nnz, as svm train --procs 2")
assert path[0]["objective"] != path[1]["objective"]
PY
    ;;
  lla_wide)
    # More features than samples: nonconvex consensus fits run LLA (weighted
    # L1 runs on the same workers), over processes as over worker actors.
    gen_data "$work/wide.libsvm" 40 200 4 0.9 11
    for m in procs workers; do
      "$merak" svm train --data "$work/wide.libsvm" --penalty mcp --lambda 0.05 --theta 2 --$m 2 \
        --folds 4 --json >"$work/lla_$m.json"
      "$merak" svm train --data "$work/wide.libsvm" --penalty mcp --lambda 0.05 --theta 2 --$m 2 \
        --nonconvex direct --json >"$work/direct_$m.json"
    done
    "$merak" svm train --data "$work/wide.libsvm" --penalty mcp --lambda 0.05 --theta 2 --json \
      >"$work/single.json"
    # LSP at theta 0.01: --lla-start reaches the consensus loop over processes.
    for st in zero best; do
      for m in procs workers; do
        "$merak" svm train --data "$work/wide.libsvm" --penalty lsp --lambda 0.005 --theta 0.01 \
          --$m 2 --lla-start $st --json >"$work/lsp_${st}_$m.json"
      done
    done
    python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
p, w, s = (json.load(open(f"{d}/{n}.json")) for n in ("lla_procs", "lla_workers", "single"))
dp, dw = (json.load(open(f"{d}/direct_{n}.json")) for n in ("procs", "workers"))
assert p["nonconvex"] == w["nonconvex"] == s["nonconvex"] == "lla", (p, w, s)
assert dp["nonconvex"] == dw["nonconvex"] == "direct", (dp, dw)
# The same rows per worker and fold, the same maths: processes = actors.
assert p["iterations"] == w["iterations"], (p, w)
assert abs(p["objective"] - w["objective"]) <= 1e-9 * abs(w["objective"]), (p, w)
assert p["cv_accuracy"] == w["cv_accuracy"] and abs(p["cv_mean_nnz"] - w["cv_mean_nnz"]) < 1e-9, (p, w)
assert dp["iterations"] != p["iterations"], (dp, p)
# LLA by consensus follows the single machine's LLA (MCP: 1e-3).
assert abs(p["objective"] - s["objective"]) <= 1e-3 * s["objective"], (p, s)
lsp = {(st, m): json.load(open(f"{d}/lsp_{st}_{m}.json")) for st in ("zero", "best") for m in ("procs", "workers")}
for (st, m), r in lsp.items():
    assert r["nonconvex"] == "lla" and r["lla_start"] == st, r
for st in ("zero", "best"):
    a, b = lsp[(st, "procs")], lsp[(st, "workers")]
    assert a["iterations"] == b["iterations"] and abs(a["objective"] - b["objective"]) <= 1e-9 * b["objective"], (a, b)
# best also runs the chain from the L1 fit at lambda, which ends lower here.
z, bst = lsp[("zero", "procs")], lsp[("best", "procs")]
assert bst["objective"] < 0.9 * z["objective"], (z, bst)
print(f"ok: wide MCP by consensus LLA over 2 processes: objective {p['objective']:.8g} "
      f"({p['iterations']} iterations, = 2 worker actors; single machine {s['objective']:.8g}); "
      f"direct {dp['objective']:.8g}")
PY
    ;;
  path_warm)
    # svm path --procs 2 (warm, the default): every fold's rows and then all
    # rows walk the grid, each consensus fit continuing from the last one's
    # state. L1 is convex: each point must reach the single-machine path's
    # objective (1e-3 relative, the consensus test's bound) and converge,
    # and the walk must take fewer iterations than the cold fits in all.
    lambdas=0.1,0.03,0.01,0.003
    "$merak" svm path --data "$work/train.libsvm" --penalty l1 --lambdas $lambdas --tol 1e-4 \
      --procs 2 --folds 3 --json >"$work/warm.jsonl"
    "$merak" svm path --data "$work/train.libsvm" --penalty l1 --lambdas $lambdas --tol 1e-4 \
      --procs 2 --folds 3 --cold --json >"$work/cold.jsonl"
    "$merak" svm path --data "$work/train.libsvm" --penalty l1 --lambdas $lambdas --tol 1e-6 \
      --max-iter 50000 --folds 3 --json >"$work/local.jsonl"
    "$merak" svm path --data "$work/train.libsvm" --penalty l1 --lambdas $lambdas --procs 2 \
      --folds 3 --cv-only --json >"$work/warm_cv.jsonl"
    python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
warm, cold, local, cv = ([json.loads(l) for l in open(f"{d}/{n}.jsonl")]
                         for n in ("warm", "cold", "local", "warm_cv"))
assert [p["lambda"] for p in warm] == [0.1, 0.03, 0.01, 0.003], warm
for w, c, s, v in zip(warm, cold, local, cv):
    assert w["warm"] is True and c["warm"] is False and w["procs"] == 2, (w, c)
    assert w["converged"], w
    rel = abs(w["objective"] - s["objective"]) / s["objective"]
    assert rel <= 1e-3, ("warm consensus vs single machine", w, s)
    assert 0 <= w["cv_accuracy"] <= 1 and w["folds"] == 3, w
    # --cv-only walks the same fold paths.
    assert v["cv_accuracy"] == w["cv_accuracy"] and v["cv_mean_nnz"] == w["cv_mean_nnz"], (v, w)
    print(f"ok: lambda {w['lambda']}: objective {w['objective']:.8g} (single machine "
          f"{s['objective']:.8g}), {w['iterations']} iterations (cold {c['iterations']})")
its_warm = sum(p["iterations"] for p in warm)
its_cold = sum(p["iterations"] for p in cold)
assert its_warm < its_cold, (its_warm, its_cold)
print(f"ok: {its_warm} iterations warm against {its_cold} cold on all rows")
PY
    # Capped fits carry their state on: 300 fits at one lambda, 10
    # iterations each, from a rho1 far from balanced (rho changes on the
    # last iteration of a fit must not leave the workers behind), end at the
    # single-machine optimum.
    "$merak" svm path --data "$work/train.libsvm" --penalty l1 --rho1 20 --max-iter 10 \
      --lambdas "$(python3 -c "print(','.join(['0.01'] * 300))")" --procs 2 --json >"$work/capped.jsonl"
    "$merak" svm train --data "$work/train.libsvm" --penalty l1 --lambda 0.01 --tol 1e-6 \
      --max-iter 50000 --json >"$work/single.json"
    # A walk whose every fit must start cold (LSP by the direct ADMM, which
    # `auto` does not pick for LSP, with theta = lambda: the prox's rho
    # threshold 1/lambda grows down the grid) equals the cold path.
    for mode in warm cold; do
      flag=()
      [[ $mode == cold ]] && flag=(--cold)
      "$merak" svm path --data "$work/train.libsvm" --penalty lsp --theta 1 --theta-per-lambda \
        --nonconvex direct --lambdas 0.3,0.03,0.01 --procs 2 --folds 3 ${flag[@]+"${flag[@]}"} --json >"$work/lsp_$mode.jsonl"
    done
    python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
last = [json.loads(l) for l in open(f"{d}/capped.jsonl")][-1]
single = json.load(open(f"{d}/single.json"))
rel = abs(last["objective"] - single["objective"]) / single["objective"]
assert rel <= 1e-3, ("capped warm walk", last, single)
print(f"ok: 300 capped warm fits end at {last['objective']:.8g} (single machine {single['objective']:.8g})")
warm, cold = ([json.loads(l) for l in open(f"{d}/lsp_{m}.jsonl")] for m in ("warm", "cold"))
for w, c in zip(warm, cold):
    for k in ("objective", "iterations", "nnz", "cv_accuracy", "cv_mean_nnz"):
        assert w[k] == c[k], (k, w, c)
print(f"ok: LSP walk restarted at every lambda = the cold path ({[w['iterations'] for w in warm]} iterations)")
PY
    ;;
  bad_flags)
    expect_error "--workers \(actor workers in this process\) and --procs \(worker processes\) exclude each other" \
      svm train --data "$work/train.libsvm" --procs 2 --workers 2
    expect_error "--folds must be at least 2 \(got 1\)" svm train --data "$work/train.libsvm" --procs 2 --folds 1
    expect_error "svm worker [01] failed in 'select': --folds 500 exceeds the 120 samples" \
      svm train --data "$work/train.libsvm" --procs 2 --folds 500
    expect_error "--listen needs --procs K" svm path --data "$work/train.libsvm" --listen 127.0.0.1:7000
    expect_error "--cv-only needs --folds F" svm path --data "$work/train.libsvm" --procs 2 --cv-only
    expect_error "lambda 0.1: .*" svm path --data "$work/train.libsvm" --penalty scad --theta 10 \
      --theta-per-lambda --lambdas 0.3,0.1 --procs 2
    expect_error "--listen needs --procs K" svm train --listen 127.0.0.1:7000
    expect_error "--listen '127.0.0.1:x': expected HOST:PORT" svm train --procs 2 --listen 127.0.0.1:x
    expect_error "--connect '127.0.0.1': expected HOST:PORT" svm worker --connect 127.0.0.1 --data "$work/train.libsvm"
    MERAK_JOB_TOKEN= expect_error "svm worker 0: no job token \(pass --token or set MERAK_JOB_TOKEN\)" \
      svm worker --connect 127.0.0.1:9 --rank 0 --world 2 --data "$work/train.libsvm"
    expect_error "svm worker 1: cannot open data file" svm worker --connect 127.0.0.1:9 --rank 1 --world 2 \
      --token t --data "$work/none.libsvm"
    expect_error "svm worker processes ended before all 2 joined .*: rank [01] failed with exit code 1" \
      svm train --data "$work/none.libsvm" --procs 2
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
