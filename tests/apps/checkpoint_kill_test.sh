#!/usr/bin/env bash
# A kill at any point of a save leaves `latest` on a complete checkpoint.
# strace's fault injection SIGKILLs the training process (pp2 on actors, a
# sharded checkpoint per step) at the N-th fsync or rename of a thread (the
# calls a save makes durable and publishes with; N = 1..10, so every shard
# file, the index, the directory and latest of several saves), while it
# re-saves step 4 over a run that already has checkpoints of steps 1-4 and
# whose latest names step 4 (resumed from its step 2, saving every 2 steps):
# the window where the checkpoint latest names is replaced by a new one of
# the same step.
# After every kill: `merak ckpt inspect` must read the checkpoint latest
# names (or its .old), and a run resumed from it must train on. Skips (77)
# without strace. Usage: checkpoint_kill_test.sh MERAK [TRAIN FLAGS...]
# (the flags added to the layout, e.g. a sharded optimizer whose replicas
# each write their moments' pieces; --pp among them replaces pp 2).
set -euo pipefail
merak=$(realpath "$1")
shift
command -v strace >/dev/null || { echo "skip: no strace"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat "$(dirname "$0")"/../../README.md >"$work/text.txt"
# pp 2 unless the flags give --pp.
pp=(--pp 2)
[[ " $* " == *" --pp "* ]] && pp=()
run=(train --data "$work/text.txt" --layers 1 --dim 32 --heads 2 --seq 16 --batch 4
  "${pp[@]}" --micro-batches 2 --eval-batches 1 --step-timeout 30 "$@")
"$merak" "${run[@]}" --steps 4 --save "$work/base" --save-interval 1 2>/dev/null
kills=0
for call in fsync,fdatasync rename,renameat,renameat2; do
  for n in $(seq 10); do
    rm -rf "$work/ck"
    cp -r "$work/base" "$work/ck"
    set +e
    strace -f -qq -o /dev/null -e trace="$call" -e inject="$call:signal=KILL:when=$n" \
      "$merak" "${run[@]}" --steps 4 --load "$work/ck/step_00000002" --save "$work/ck" --save-interval 2 \
      >/dev/null 2>"$work/e" &
    wait $! 2>/dev/null  # the shell's own "Killed" line, not the test's output
    rc=$?
    set -e
    ((rc != 0)) && kills=$((kills + 1))
    "$merak" ckpt inspect "$work/ck" >"$work/i.json" 2>"$work/ie" ||
      { echo "FAIL: after a kill at $call #$n: $(cat "$work/ie")"; ls -R "$work/ck"; exit 1; }
    step=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metadata']['merak.step'])" "$work/i.json")
    ((step >= 2 && step <= 4)) || { echo "FAIL: latest at step $step after $call #$n"; exit 1; }
    # The checkpoint it names resumes: one more step.
    "$merak" "${run[@]}" --steps $((step + 1)) --load "$work/ck" >/dev/null 2>"$work/e" ||
      { echo "FAIL: resuming after $call #$n: $(cat "$work/e")"; exit 1; }
  done
done
((kills > 0)) || { echo "FAIL: no injection killed the run"; exit 1; }
echo "ok: $kills of 20 runs killed at an fsync or rename (#1-10 of a thread); latest named a complete checkpoint after each"
