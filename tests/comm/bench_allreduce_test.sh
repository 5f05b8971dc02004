#!/usr/bin/env bash
# `merak bench allreduce` end to end: the launcher starts real processes,
# prints one JSON object with the transport's byte count; a bad flag is a
# one-line error. Usage: bench_allreduce_test.sh MERAK_BINARY CASE
set -euo pipefail
merak=$1
case_name=$2

check_json() {  # $1: JSON, $2: procs, $3: method, $4: n*d, [$5: doubling: all-reduce by recursive doubling]
  python3 - "$1" "$2" "$3" "$4" "${5:-ring}" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
P, method, nd, alg = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
for k in ("bytes_per_rank", "time_ms", "encode_ms", "comm_ms", "decode_ms", "time_min_ms",
          "time_max_ms", "rel_error", "rows", "cols", "procs", "method", "transport", "ucx_tls"):
    assert k in j, f"missing {k}: {j}"
assert j["procs"] == P and j["method"] == method, j
if method == "dense" and alg == "doubling":
    # rank 0: the whole buffer in each of log2(p2) rounds, and once more when
    # it returns the result to a folded rank (P > p2); plus the shape header
    p2 = 1
    while p2 * 2 <= P:
        p2 *= 2
    sent = (p2.bit_length() - 1 + (1 if P > p2 else 0)) * nd * 4
    assert sent <= j["bytes_per_rank"] <= sent + 4096, (j["bytes_per_rank"], sent)
    assert j["rel_error"] < 1e-6, j
elif method == "dense":
    ring = 2 * (P - 1) / P * nd * 4
    # the ring plus the codec's small shape header, counted by the transport
    assert ring <= j["bytes_per_rank"] <= ring + 4096, (j["bytes_per_rank"], ring)
    assert j["rel_error"] < 1e-6, j
print("ok", j["method"], j["transport"], j["bytes_per_rank"], j["time_ms"])
PY
}

case "$case_name" in
  dense_ucx)
    # MERAK_DOUBLING_KB: all-reduces of at most that many KiB by recursive
    # doubling (0: the ring); the buffer is 20 KB.
    for P in 2 3; do
      out=$(MERAK_DOUBLING_KB=0 "$merak" bench allreduce --procs $P --method dense --rows 300 --cols 17 --iters 3 --json)
      check_json "$out" $P dense $((300 * 17))
      out=$(MERAK_DOUBLING_KB=64 "$merak" bench allreduce --procs $P --method dense --rows 300 --cols 17 --iters 3 --json)
      check_json "$out" $P dense $((300 * 17)) doubling
    done ;;
  dense_inproc)
    for P in 3 4; do
      out=$(MERAK_DOUBLING_KB=0 "$merak" bench allreduce --procs $P --transport inproc --method dense --rows 300 --cols 17 --iters 3)
      check_json "$out" $P dense $((300 * 17))
      out=$(MERAK_DOUBLING_KB=64 "$merak" bench allreduce --procs $P --transport inproc --method dense --rows 300 --cols 17 --iters 3)
      check_json "$out" $P dense $((300 * 17)) doubling
    done
    # The gradient on huge pages (a condition of the measurement): same bytes and result.
    out=$(MERAK_DOUBLING_KB=0 MERAK_BENCH_HUGE_PAGES=1 "$merak" bench allreduce --procs 3 --transport inproc --method dense --rows 300 --cols 17 --iters 3)
    check_json "$out" 3 dense $((300 * 17)) ;;
  halves)
    # --op reduce-scatter | all-gather | all-gather-bf16: the ring's halves,
    # each rank's result checked against every rank's gradient (the bf16
    # gather's against the others' slices rounded); (P-1)/P of the buffer
    # sent (in bf16: half the bytes).
    check_half() {  # $1: JSON, $2: procs, $3: op, $4: n*d
      python3 - "$@" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
P, op, nd = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
assert j["op"] == op and j["method"] == op and j["procs"] == P, j
half = (P - 1) / P * nd * (2 if op == "all-gather-bf16" else 4)  # bf16: 2 bytes an element
assert abs(j["bytes_per_rank"] - half) <= 4 * P, (j["bytes_per_rank"], half)
assert j["rel_error"] < 1e-6, j
print("ok", op, P, j["transport"], j["bytes_per_rank"], j["time_ms"])
PY
    }
    for op in reduce-scatter all-gather all-gather-bf16; do
      for P in 2 3; do
        check_half "$("$merak" bench allreduce --procs $P --op $op --rows 300 --cols 17 --iters 3)" $P $op $((300 * 17))
      done
      check_half "$("$merak" bench allreduce --procs 4 --transport inproc --op $op --rows 301 --cols 7 --iters 2)" 4 $op $((301 * 7))
    done
    if err=$("$merak" bench allreduce --op all-gather --method s2 2>&1); then echo "accepted s2 for all-gather"; exit 1; fi
    echo "$err" | grep -q -- "--op all-gather runs with --method dense (the ring) or mpi, not 's2'" ||
      { echo "error does not name --op and --method: $err"; exit 1; }
    if err=$("$merak" bench allreduce --op all-gather-bf16 --method mpi 2>&1); then echo "accepted mpi for all-gather-bf16"; exit 1; fi
    echo "$err" | grep -q -- "--op all-gather-bf16 runs with --method dense (the ring), not 'mpi'" ||
      { echo "error does not name --op and --method: $err"; exit 1; }
    if command -v mpirun >/dev/null; then
      for op in reduce-scatter all-gather; do
        out=$("$merak" bench allreduce --procs 2 --op $op --method mpi --rows 300 --cols 17 --iters 2)
        python3 -c "import json,sys; j=json.loads(sys.argv[1]); assert j['op'] == '$op' and j['rel_error'] < 1e-6, j; print('ok mpi', j['op'])" "$(tail -1 <<<"$out")"
      done
    fi ;;
  bad_method)
    if err=$("$merak" bench allreduce --method nope 2>&1); then echo "accepted a bad method"; exit 1; fi
    echo "$err" | grep -q "nope" || { echo "error does not name the method: $err"; exit 1; } ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
