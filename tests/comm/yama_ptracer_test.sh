#!/usr/bin/env bash
# Yama ptrace_scope 1 (Ubuntu's default), played by an LD_PRELOAD shim as this
# kernel has none: a rank that runs over cma declares any process of its user
# a permitted tracer (as UCX's cma component does at ucp_init, whatever
# UCX_TLS says) and every rank withdraws the declaration by the time it exits;
# a rank that runs without cma (MERAK_UCX_CMA=0) withdraws it right after
# ucp_init. Usage: yama_ptracer_test.sh DRIVER SHIM cma|nocma
set -euo pipefail
driver=$1
shim=$2
mode=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo 1 >"$work/scope"
env=(LD_PRELOAD="$shim" MERAK_TEST_YAMA_SCOPE_FILE="$work/scope" MERAK_TEST_PRCTL_LOG="$work/log")
[[ $mode == nocma ]] && env+=(MERAK_UCX_CMA=0)
env "${env[@]}" "$driver" allreduce 2
python3 - "$work/log" "$mode" <<'PY'
import collections, sys
calls = collections.defaultdict(list)
for line in open(sys.argv[1]):
    pid, arg = map(int, line.split())
    calls[pid].append(arg)
print({pid: a for pid, a in calls.items()})
if sys.argv[2] == "cma":
    assert len(calls) == 2, f"expected PR_SET_PTRACER calls from the 2 ranks: {dict(calls)}"
for pid, args in calls.items():
    if sys.argv[2] == "cma":
        assert -1 in args, f"rank {pid} never declared a tracer: {args}"
    assert args[-1] == 0, f"rank {pid} exits with the declaration in place: {args}"
print(f"ok ({sys.argv[2]}): {len(calls)} ranks declared a tracer, none exits with it declared")
PY
