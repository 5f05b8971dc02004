#!/usr/bin/env bash
# Shared memory a job leaves behind: jobs of two processes with shared
# rings (pp2) stopped in their first moments must leave no merak-* or
# ucx_shm_posix_* entry in /dev/shm (core/shared_memory.hpp, job/launcher.hpp).
# Real processes, label multiproc. Usage: shm_leak_test.sh MERAK CASE
#
# A job is stopped when a ring appears in /dev/shm (a rank has created its
# name, its peer has not yet opened it) or at 0.05 to 0.6 s:
#   launcher_term  SIGTERM to `merak launch`, 24 times: the launcher passes
#                  it to the ranks and ends by it (status 143)
#   rank_killed    SIGKILL of rank 1 when its ring appears, 8 times: the
#                  launcher names the failed rank and removes what rank 1 left
#   launcher_killed  SIGKILL of `merak launch` (its ranks die with it), 12
#                  times: the next `merak launch` sweeps what they left
#
# A leak is an entry that was not there before, is still there 2 s after the
# jobs ended (a live job unlinks its names within milliseconds), and whose
# creator, where its name says (merak-KIND-pPID-...), is not running: the
# entries of other jobs running beside this test are not counted.
set -euo pipefail
merak=$(realpath "$1")
case_name=$2
work=$(mktemp -d)
# Only this shell removes it: a job's subshell signalled before it runs
# merak must not.
trap '[[ $BASHPID == "$$" ]] && rm -rf "$work"' EXIT
data=$work/text.txt
cat "$(dirname "$0")"/../../README.md "$(dirname "$0")"/../../docs/*.md >"$data"
job=(train --data "$data" --layers 2 --dim 64 --heads 2 --seq 32 --batch 12 --steps 2 --pp 2
  --step-timeout 30)
[[ -d /dev/shm && -w /dev/shm ]] || { echo "skip: no writable /dev/shm"; exit 77; }

entries() { ls -1 /dev/shm | grep -E '^(merak-|ucx_shm_posix_)' | sort || true; }
entries >"$work/before"

# The entries new since the start that outlived their creators.
leaks() {
  sleep 2
  comm -13 "$work/before" <(entries) | while read -r e; do
    if [[ $e =~ ^merak-[a-z]+-p([0-9]+)- ]] && kill -0 "${BASH_REMATCH[1]}" 2>/dev/null; then
      continue
    fi
    echo "$e"
  done
}

# Waits for the background job $1 (at most 20 s); its exit status in $rc.
status_of() {
  rc=0
  for _ in $(seq 400); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$1" 2>/dev/null && { echo "FAIL: the launcher did not end within 20 s"; exit 1; }
  wait "$1" || rc=$?
}

# Spins (bash builtins only: no fork between checks) until a ring of a job
# appears in /dev/shm, the moment a rank holds a name its peer has not yet
# opened, or background job $1 ended, or 20 s passed; with $2, a ring whose
# name ends so ("-1-0": rank 1's to rank 0). Entries there before the test
# are not rings of its jobs.
declare -A old_entry
for e in $(entries); do old_entry[$e]=1; done
until_ring() {
  local t=$((SECONDS + 20)) f
  while kill -0 "$1" 2>/dev/null && ((SECONDS < t)); do
    for f in /dev/shm/merak-ring-*${2:-}; do
      [[ -e $f && -z ${old_entry[${f#/dev/shm/}]:-} ]] && return
    done
  done
  return 0
}

# The pid of background launcher $1's rank $2 (empty if it has none).
rank_pid() {
  local c
  for c in $(pgrep -P "$1" || true); do
    tr '\0' '\n' 2>/dev/null <"/proc/$c/environ" | grep -qx "RANK=$2" && echo "$c"
  done
  return 0
}

# Starts a job in the background (its pid in $pid), stderr to $work/err.
start_job() {
  "$merak" launch --procs 2 "${job[@]}" >/dev/null 2>"$work/err" &
  pid=$!
}

# Stops a job ($1: ring, or seconds) at that moment with signal $2.
stop_job() {
  if [[ $1 == ring ]]; then until_ring "$pid"; else sleep "$1"; fi
  kill "-$2" "$pid" 2>/dev/null || true
}

moments=(ring ring ring ring ring ring 0.05 0.1 0.15 0.2 0.3 0.6)
case $case_name in
  launcher_term)
    for m in "${moments[@]}" "${moments[@]}"; do
      start_job
      stop_job "$m" TERM
      status_of "$pid"
      # 143: ended by SIGTERM; 0: the job finished before the signal.
      if [[ $rc != 143 && $rc != 0 ]]; then
        echo "FAIL: launcher stopped at $m exited $rc, not by SIGTERM (143)"
        cat "$work/err"
        exit 1
      fi
    done
    ;;
  rank_killed)
    for _ in $(seq 8); do
      start_job
      rank=
      for _ in $(seq 200); do
        rank=$(rank_pid "$pid" 1)
        [[ -n $rank ]] && break
        sleep 0.01
      done
      until_ring "$pid" -1-0
      [[ -n $rank ]] && kill -KILL "$rank" 2>/dev/null || true
      status_of "$pid"
      # A ring of another job beside this test may stop rank 1 earlier, so
      # that rank 0 reports first: any one-line failure will do.
      ((rc < 126)) && { [[ $rc == 0 ]] || grep -q "^merak: error: merak launch: rank" "$work/err"; } ||
        { echo "FAIL: the launcher exited $rc without naming a rank"; cat "$work/err"; exit 1; }
    done
    ;;
  launcher_killed)
    ranks=()
    for m in "${moments[@]}"; do
      start_job
      if [[ $m == ring ]]; then until_ring "$pid"; else sleep "$m"; fi
      ranks+=($(pgrep -P "$pid" || true))
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    done
    # The ranks end by the launcher's death signal, later on a loaded
    # machine; until then they may still write into the job's directory.
    # The next launch sweeps what ended processes left.
    for _ in $(seq 200); do
      alive=0
      for r in "${ranks[@]}"; do kill -0 "$r" 2>/dev/null && alive=1; done
      ((alive)) || break
      sleep 0.05
    done
    "$merak" launch --procs 1 version >/dev/null
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac

left=$(leaks)
if [[ -n $left ]]; then
  echo "FAIL: left in /dev/shm:"
  echo "$left"
  exit 1
fi
echo "ok: nothing left in /dev/shm"
