#!/usr/bin/env bash
# `merak bench allreduce` end to end: the launcher starts real processes,
# prints one JSON object with the transport's byte count; a bad flag is a
# one-line error. Usage: bench_allreduce_test.sh MERAK_BINARY CASE
set -euo pipefail
merak=$1
case_name=$2

check_json() {  # $1: JSON, $2: procs, $3: method, $4: n*d
  python3 - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
P, method, nd = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
for k in ("bytes_per_rank", "time_ms", "encode_ms", "comm_ms", "decode_ms", "time_min_ms",
          "time_max_ms", "rel_error", "rows", "cols", "procs", "method", "transport", "ucx_tls"):
    assert k in j, f"missing {k}: {j}"
assert j["procs"] == P and j["method"] == method, j
if method == "dense":
    ring = 2 * (P - 1) / P * nd * 4
    # the ring plus the codec's small shape header, counted by the transport
    assert ring <= j["bytes_per_rank"] <= ring + 4096, (j["bytes_per_rank"], ring)
    assert j["rel_error"] < 1e-6, j
print("ok", j["method"], j["transport"], j["bytes_per_rank"], j["time_ms"])
PY
}

case "$case_name" in
  dense_ucx)
    for P in 2 3; do
      out=$("$merak" bench allreduce --procs $P --method dense --rows 300 --cols 17 --iters 3 --json)
      check_json "$out" $P dense $((300 * 17))
    done ;;
  dense_inproc)
    out=$("$merak" bench allreduce --procs 4 --transport inproc --method dense --rows 300 --cols 17 --iters 3)
    check_json "$out" 4 dense $((300 * 17)) ;;
  bad_method)
    if err=$("$merak" bench allreduce --method nope 2>&1); then echo "accepted a bad method"; exit 1; fi
    echo "$err" | grep -q "nope" || { echo "error does not name the method: $err"; exit 1; } ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
