#!/usr/bin/env bash
# `merak node` processes started one by one on one host, rank 0 on a
# loopback address (docs/launch.md): each states one process here, but the
# whole job shares the host, so each rank starts with OpenMP's short spin
# and its share of the cores (job/openmp_spin.hpp), as under `merak launch
# --procs 2`. Real processes, label multiproc. Usage: node_host_test.sh MERAK
#   every rank of the pair has GOMP_SPINCOUNT=1000 in its environment, and
#   20 steps of --dp 2 take at most 3 times as long as under merak launch
#   --procs 2, plus 2 s
set -euo pipefail
merak=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=$work/text.txt
cat "$(dirname "$0")"/../../README.md "$(dirname "$0")"/../../docs/*.md >"$data"
job=(train --data "$data" --layers 2 --dim 64 --heads 2 --seq 32 --batch 12 --steps 20 --dp 2
  --eval-batches 1 --step-timeout 60)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
node=(--world-size 2 --master-addr 127.0.0.1 --master-port "$port" --token node-host --timeout 120)

# The GOMP_SPINCOUNT of the rank that node $1 started (empty if none).
spin_of() {
  local c
  for c in $(pgrep -P "$1" || true); do
    tr '\0' '\n' 2>/dev/null <"/proc/$c/environ" | sed -n 's/^GOMP_SPINCOUNT=//p'
  done
  return 0
}

start=$EPOCHREALTIME
"$merak" node --first-rank 1 "${node[@]}" "${job[@]}" 2>"$work/n1.err" &
n1=$!
"$merak" node --first-rank 0 "${node[@]}" "${job[@]}" 2>"$work/n0.err" &
n0=$!
spins=
for _ in $(seq 200); do
  s0=$(spin_of "$n0") s1=$(spin_of "$n1")
  [[ -n $s0 && -n $s1 ]] && { spins="$s0 $s1"; break; }
  kill -0 "$n0" 2>/dev/null || break
  sleep 0.01
done
wait "$n0" || { cat "$work/n0.err" "$work/n1.err"; exit 1; }
wait "$n1" || { cat "$work/n1.err"; exit 1; }
nodes=$(python3 -c "print(round($EPOCHREALTIME - $start, 2))")
start=$EPOCHREALTIME
"$merak" launch --procs 2 "${job[@]}" 2>"$work/l.err" || { cat "$work/l.err"; exit 1; }
launch=$(python3 -c "print(round($EPOCHREALTIME - $start, 2))")
echo "two nodes: ${nodes} s (GOMP_SPINCOUNT of the ranks: ${spins:-unset}); launch --procs 2: ${launch} s"
[[ $spins == "1000 1000" ]] || { echo "FAIL: the ranks' GOMP_SPINCOUNT is '${spins}', not 1000"; exit 1; }
if python3 -c "import sys; sys.exit(not $nodes > 3 * $launch + 2)"; then
  echo "FAIL: two nodes take ${nodes} s, more than 3 x ${launch} + 2 s"
  exit 1
fi
echo ok
