#!/usr/bin/env bash
# Training across processes: `merak launch --procs N train ...` places the
# layout's stage actors on the processes (partition/placement.hpp); actors
# message each other over CAF's network layer, TP and replica groups spread
# over processes sum over UCX. Real processes, label multiproc. Usage:
# train_multiproc_test.sh MERAK CASE
#
# Every layout case compares each step's loss and gradient norm (and the
# validation loss) with the same layout in one process to 1e-12 relative
# (lending off on both: the same kernels and thread counts) and with the
# single device to 1e-5:
#   pp2        2 processes x 1 stage each (--dp derived: 1), shifted
#              critical-path schedule with stage-aware recomputation; the
#              activations go through the processes' shared rings
#   tp2        2 processes x 1 TP shard each, 1F1B; the TP partial sums over UCX
#   pp4        4 processes x 1 stage each, GPipe with full recomputation
#   dp2_tp2_pp2_8  8 processes, one actor each (--dp derived: 2), 1F1B
#   dp2_tp2_pp2_2  2 processes x 4 actors (a replica each), sub-pipelined TP
#   llama      dp2_tp2_pp2_8 for a Llama with one K/V head (replicated over
#              the TP shards)
#   bf16       --precision bf16: pp2 (shifted, stage-aware recomputation) and
#              tp2 over 2 processes (bf16 activations and TP sums on the
#              wire) equal the same layout in one process to 1e-12 and the
#              single device in bf16 within 1e-3
#   zb         pp2 over 2 processes with the zb-h1 schedule (split backward)
#              and the shared rings off (tensors over UCX alone): equal to
#              the same in one process and within 1e-5 of the single device
#   interleaved  pp2 x 2 chunks (interleaved 1F1B) over 2 processes (a
#              device's chunks on its process), then over 4 processes with
#              --placement 0,1,2,3 (each chunk alone: the device's chunk 0
#              commands chunk 1 across processes): equal to the same layout
#              in one process and within 1e-5 of the single device
#   pp2_lend   pp2 over 2 processes lending cores between them (shared
#              memory): equal to one process and the single device to 1e-5
#   placement  --placement "1,0" puts stage 0 on process 1; and bad
#              placements are refused naming the group or entry
#   stage_dies SIGKILL of the process of stage 1 (pp2 over 2): rank 0 fails
#              within 5 s naming the stage actor, its process and host
#   shard_dies as stage_dies, for the process of TP shard 1 (tp2 over 2)
#   stage_stops, shard_stops, coordinator_stops  the same with SIGSTOP: the
#              survivor names the silent process within 10 s (heartbeats,
#              --heartbeat-timeout 5), using under a third of a core while
#              it waits
#   coordinator_dies  SIGKILL of rank 0 (pp2 over 2): rank 1 fails within 5 s
#              naming the coordinator, its process and host
#
#   dp2        2 processes x (1 stage): every step's loss, gradient norm and
#              traffic and the validation loss equal the in-process --dp 2
#              run's (lending off on both: the same kernels and thread
#              counts, so equal to 1e-12 relative), and the single device's
#              within 1e-5
#   dp2_pp2    2 processes x 2 stages x 2 micro-batches (two UCX reducer
#              groups per process, one per stage): as dp2, against the
#              in-process --dp 2 --pp 2 run
#   dp3_s2     3 processes with the S2 sparse reducer on the token embedding
#              (untied head): equals the in-process --dp 3 S2 run
#   bad_dp     a job of 2 processes whose layout has 1 actor (or --devices 1)
#              is refused with a message naming the process count and flags
#   devices    --devices 4 over 2 processes: process 0 plans (the plan printed
#              once), every process runs its layout and placement; within
#              1e-5 of the single device
#   restart    pp2 over 2 processes with --max-restarts 1, rank 1 killed
#              mid-run: the launcher restarts the job from the latest
#              checkpoint of --save; every step's loss (one metrics line per
#              step) equals the uninterrupted job's to 1e-12
#   reshard    a sharded checkpoint saved at step 4 by dp2 x tp2 x pp2 over 8
#              processes resumes as pp2 over 2 processes, on the single
#              device, and after `merak ckpt export` on the single device:
#              steps 5-8 within 1e-5 of the uninterrupted single device
#   rank_dies  SIGKILL of rank 1 mid-run: rank 0 fails within seconds with an
#              error naming the peer, and the launcher names rank 1
#   resume     a job that saved at step 4 of 8, resumed by a new job of 2
#              processes and by the in-process --dp 2 run: steps 5-8 equal
#              the uninterrupted job's to 1e-12
#   (hostfile and node_by_hand: one node per "host" sees LOCAL_WORLD_SIZE 1,
#   so --threads 1 gives each rank the thread count of dp2's processes)
#   hostfile   merak launch --hostfile over two "hosts" (localhost and
#              127.0.0.1, reached through tests/apps/local_rsh.sh, which runs
#              the command as sshd would: a shell, a clean environment):
#              equal to the in-process --dp 2 run, as dp2
#   node_by_hand  two `merak node` processes started by hand with a shared
#              port and token: equal to the in-process run
#   torchrun   torchrun's flags: two `merak launch --nnodes 2 --node-rank R
#              --nproc-per-node 1 --rdzv-endpoint HOST:PORT` (one per "host")
#              equal to the in-process --dp 2 run; the launcher's own
#              unknown flags and a bad endpoint are refused by name
#   mpirun     `mpirun -np 2 merak train --dp 2 ...` with no MASTER_ADDR or
#              MASTER_PORT (Open MPI's job id gives the port): equal to the
#              in-process run (skips without mpirun)
#   tls        merak launch --procs 2 --tls-cert/--tls-key/--tls-ca (files
#              from deploy/tls-certs.sh) with --pp 2: the job says its
#              connections are under TLS and equals the in-process run; a
#              hostfile launch forwards the files to its nodes (dp2 equal)
#   bad_hosts  hostfiles and node flags that cannot work are refused naming
#              the file and line or the flag
#   host_fails a host whose merak cannot start: the launcher names that host
#   launcher_dies  SIGKILL of the hostfile launcher mid-run: every node sees
#              its input close and kills its ranks; no process is left
#   job_identity  ranks started by hand with another --seed, --layers,
#              --steps or data file end the job on both ranks before any
#              step, naming the flag and both values; a rank of another job
#              (--job-id) holding the same token is refused, and rank 0 goes
#              on to run with its own rank 1
set -euo pipefail
merak=$(realpath "$1")  # absolute: a case runs from another directory
case_name=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Text of the repository's own documents: tests need no downloaded data.
data=$work/text.txt
cat "$(dirname "$0")"/../../README.md "$(dirname "$0")"/../../docs/*.md >"$data"
rsh=$(cd "$(dirname "$0")" && pwd)/local_rsh.sh
source "$(dirname "$0")/expect_error.sh"
model=(--data "$data" --layers 2 --dim 64 --heads 2 --seq 32 --batch 12 --eval-batches 2
  --lend-cores off --step-timeout 30)

# Compares the metrics files $1 (processes) and $2 (in-process) step by step
# to relative tolerance $3 and $1 with the single-device run $4 to
# $SINGLE_TOL (default 1e-5).
compare() {
  SINGLE_TOL=${SINGLE_TOL:-1e-5} NORM_TOL=${NORM_TOL:-${SINGLE_TOL:-1e-5}} \
  python3 - "$@" <<'EOF'
import json, sys
def rows(p):
    return [json.loads(l) for l in open(p)]
import os
mp, ip, tol, single = rows(sys.argv[1]), rows(sys.argv[2]), float(sys.argv[3]), rows(sys.argv[4])
single_tol = float(os.environ["SINGLE_TOL"])
norm_tol = float(os.environ["NORM_TOL"])  # the gradient norm against the single device
assert len(mp) == len(ip) == len(single) and mp, (len(mp), len(ip), len(single))
def close(a, b, t):
    return abs(a - b) <= t * max(abs(a), abs(b), 1e-12)
for a, b, c in zip(mp, ip, single):
    for k in ("loss", "grad_norm"):
        assert close(a[k], b[k], tol), (a["step"], k, a[k], b[k])
        assert close(a[k], c[k], single_tol if k == "loss" else norm_tol), (a["step"], k, "single device", a[k], c[k])
    if "dp_bytes_per_rank" in b:
        assert a["dp_bytes_per_rank"] == b["dp_bytes_per_rank"] > 0, (a["dp_bytes_per_rank"], b["dp_bytes_per_rank"])
    if "val_loss" in b:
        assert close(a["val_loss"], b["val_loss"], tol), (a["val_loss"], b["val_loss"])
print(f"ok: {len(mp)} steps equal to {tol:g} (last loss {mp[-1]['loss']:.6f}); single device within {single_tol:g}"
      + (f" (gradient norm {norm_tol:g})" if norm_tol != single_tol else ""))
EOF
}

# Compares $work/mp.jsonl (5 steps of dp 2 as processes) with dp 2 in one
# process and with the single device.
compare_dp2_in_process() {
  "$merak" train "${model[@]}" --steps 5 --dp 2 --metrics "$work/ip.jsonl" 2>/dev/null
  "$merak" train "${model[@]}" --steps 5 --metrics "$work/one.jsonl" 2>/dev/null
  compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-12 "$work/one.jsonl"
}

# Runs the layout $1... as processes and in process, and the single device.
run_pair() {
  local procs=$1
  shift
  "$merak" launch --procs "$procs" --timeout 120 train "${model[@]}" --steps 5 --dp "$procs" "$@" \
    --metrics "$work/mp.jsonl" 2>"$work/mp.err" || { cat "$work/mp.err"; exit 1; }
  grep -q "$procs processes (placement " "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
  "$merak" train "${model[@]}" --steps 5 --dp "$procs" "$@" --metrics "$work/ip.jsonl" 2>/dev/null
  "$merak" train "${model[@]}" --steps 5 --metrics "$work/one.jsonl" \
    $([[ " $* " == *" --untied-head "* ]] && echo --untied-head) 2>/dev/null
}

# rank_pid LAUNCHER RANK METRICS MIN_LINES: the pid of the launcher's child
# with RANK once METRICS has MIN_LINES lines (up to 20 s), else empty.
rank_pid() {
  local c
  for _ in $(seq 400); do
    if [[ -s "$3" ]] && (($(wc -l <"$3") >= $4)); then
      for c in $(pgrep -P "$1" || true); do
        tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$c"; return; }
      done
    fi
    sleep 0.05
  done
}

# Runs a layout ($2...) as $1 processes (--dp derived from the processes
# unless given, or $MP_DP if set; --placement $PLACEMENT if set) and in one
# process with --dp $DP, and the single device.
run_layout() {
  local procs=$1
  shift
  "$merak" launch --procs "$procs" --timeout 150 train "${model[@]}" --steps 4 "$@" \
    ${PLACEMENT:+--placement "$PLACEMENT"} ${MP_DP:+--dp "$MP_DP"} \
    --metrics "$work/mp.jsonl" 2>"$work/mp.err" || { cat "$work/mp.err"; exit 1; }
  grep -q "$procs processes (placement " "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
  grep "processes (placement" "$work/mp.err" | sed 's/.*\] //'
  "$merak" train "${model[@]}" --steps 4 --dp "$DP" "$@" --metrics "$work/ip.jsonl" 2>/dev/null
  "$merak" train "${model[@]}" --steps 4 --metrics "$work/one.jsonl" 2>/dev/null
  compare "$work/mp.jsonl" "$work/ip.jsonl" "${TOL:-1e-12}" "$work/one.jsonl"
}
run_layout_tol() {
  TOL=$1 run_layout "${@:2}"
}

case $case_name in
  pp2)
    DP=1 run_layout 2 --pp 2 --micro-batches 3 --schedule shifted --recompute stage-aware \
      --log-level debug
    # The two processes share a host: activations and gradients go through
    # their shared-memory rings (comm/host_ring.hpp), one per direction.
    for r in 0 1; do
      grep -q "process $r: shared rings of .* to 1 and from 1 processes" "$work/mp.err" ||
        { cat "$work/mp.err"; echo "process $r made no shared rings"; exit 1; }
    done
    ;;
  tp2)
    DP=1 run_layout 2 --tp 2 --micro-batches 2 --schedule 1f1b
    ;;
  sp)
    # Sequence parallelism between processes: reduce-scatters and
    # all-gathers over UCX, the same bits as in one process.
    DP=1 run_layout 2 --tp 2 --micro-batches 2 --tp-overlap 1 --sequence-parallel
    DP=2 run_layout 8 --tp 2 --pp 2 --micro-batches 2 --sequence-parallel --use-distributed-optimizer
    # zb-h1: a linear's input all-gathered again for its weight gradient (W).
    DP=1 run_layout 4 --tp 2 --pp 2 --micro-batches 4 --schedule zb-h1 --sequence-parallel
    ;;
  pp4)
    DP=1 run_layout 4 --pp 4 --micro-batches 4 --schedule gpipe --recompute full
    ;;
  dp2_tp2_pp2_8)
    DP=2 run_layout 8 --tp 2 --pp 2 --micro-batches 2 --schedule 1f1b
    ;;
  dp2_tp2_pp2_2)
    DP=2 run_layout 2 --dp 2 --tp 2 --pp 2 --micro-batches 2 --tp-overlap 1 --schedule shifted
    ;;
  llama)
    # One K/V head over tp 2: each process holds a copy, its gradient summed
    # over UCX; the vocabulary split too.
    model+=(--model llama --num-query-groups 1)
    DP=2 run_layout 8 --tp 2 --pp 2 --micro-batches 2 --schedule 1f1b
    ;;
  zb)
    DP=1 run_layout 2 --pp 2 --micro-batches 4 --schedule zb-h1 --shared-rings off
    ;;
  interleaved)
    DP=1 run_layout 2 --pp 2 --chunks 2 --micro-batches 4 --schedule interleaved
    grep -q "pp=2 x 2 chunks" "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    # (4 processes would otherwise derive --dp 2: one device, both its chunks, each)
    DP=1 MP_DP=1 PLACEMENT=0,1,2,3 run_layout 4 --pp 2 --chunks 2 --micro-batches 4 \
      --schedule interleaved
    ;;
  bf16)
    # The last two: the distributed optimizer's bf16 all-gathers (GEMM
    # weights as bf16, the rest exact) between the processes over UCX.
    for layout in "--pp 2 --micro-batches 3 --schedule shifted --recompute stage-aware" \
      "--tp 2 --micro-batches 2" "--dp 2 --micro-batches 2 --use-distributed-optimizer" \
      "--dp 2 --pp 2 --micro-batches 2 --data-parallel-sharding-strategy optim_grads_params --bucket-mb 0.01"; do
      # shellcheck disable=SC2086
      "$merak" launch --procs 2 --timeout 150 train "${model[@]}" --steps 4 $layout \
        --precision bf16 --metrics "$work/mp.jsonl" 2>"$work/mp.err" || { cat "$work/mp.err"; exit 1; }
      grep -q "bf16 (GEMMs: .*2 processes (placement " "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
      # shellcheck disable=SC2086
      "$merak" train "${model[@]}" --steps 4 $layout --precision bf16 --metrics "$work/ip.jsonl" 2>/dev/null
      "$merak" train "${model[@]}" --steps 4 --precision bf16 --metrics "$work/one.jsonl" 2>/dev/null
      # Losses within 1e-3 of the single device; the gradient norm, a sum of
      # squares of bf16-rounded partial products split otherwise over the
      # shards, within one bf16 rounding step (2^-8).
      SINGLE_TOL=1e-3 NORM_TOL=4e-3 compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-12 "$work/one.jsonl"
    done
    ;;
  pp2_lend)
    # Cores lent between the stages of the two processes (shared memory):
    # other thread counts per op, so equal to 1e-5, not bit for bit.
    DP=1 run_layout_tol 1e-5 2 --pp 2 --micro-batches 3 --lend-cores on
    ;;
  placement)
    DP=1 PLACEMENT=1,0 run_layout 2 --pp 2 --micro-batches 2
    grep -q "placement 1,0)" "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    set +e
    "$merak" launch --procs 2 --timeout 60 train "${model[@]}" --steps 1 --tp 4 \
      >"$work/o" 2>"$work/e"
    rc=$?
    set -e
    ((rc == 1)) && grep -q "placement puts the TP shards of replica 0 stage 0 on processes \[0, 0, 1, 1\]" "$work/e" ||
      { echo "FAIL: exit $rc"; cat "$work/e"; exit 1; }
    set +e
    "$merak" launch --procs 2 --timeout 60 train "${model[@]}" --steps 1 --pp 2 --placement 0,3 \
      >"$work/o" 2>"$work/e"
    rc=$?
    set -e
    ((rc == 1)) && grep -q "placement entry 2 ('3') is not a process rank in \[0, 2)" "$work/e" ||
      { echo "FAIL: exit $rc"; cat "$work/e"; exit 1; }
    echo "ok: a placement override runs, uneven groups and bad entries are refused"
    ;;
  dp2)
    run_pair 2
    compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-12 "$work/one.jsonl"
    ;;
  optim)
    # The distributed optimizer over 2 processes: the same run in one
    # process bit for bit, the unsharded run within 1e-6 holding twice the
    # moments, and its checkpoint resumed on one device.
    opt=(--steps 6 --dp 2 --use-distributed-optimizer --bucket-mb 0.01)
    "$merak" launch --procs 2 --timeout 120 train "${model[@]}" "${opt[@]}" --save "$work/ck" \
      --save-interval 3 --metrics "$work/mp.jsonl" 2>"$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    # (saving too: the moments' all-gather counts in dp_bytes_per_rank)
    "$merak" train "${model[@]}" "${opt[@]}" --save "$work/ck_ip" --save-interval 3 \
      --metrics "$work/ip.jsonl" 2>/dev/null
    "$merak" train "${model[@]}" --steps 6 --dp 2 --bucket-mb 0.01 --metrics "$work/plain.jsonl" 2>/dev/null
    "$merak" train "${model[@]}" --steps 6 --metrics "$work/one.jsonl" 2>/dev/null
    compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-12 "$work/one.jsonl"
    "$merak" train "${model[@]}" --steps 6 --load "$work/ck/step_00000003" \
      --metrics "$work/resumed.jsonl" 2>"$work/e" || { cat "$work/e"; exit 1; }
    python3 - "$work/mp.jsonl" "$work/plain.jsonl" "$work/one.jsonl" "$work/resumed.jsonl" <<'EOF2'
import json, sys
mp, plain, one, resumed = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
for a, b in zip(mp, plain):
    assert abs(a["loss"] - b["loss"]) <= 1e-6 * b["loss"], (a["step"], a["loss"], b["loss"])
    m, n = a["memory_bytes"], b["memory_bytes"]
    assert m["parameters"] == n["parameters"] and n["optimizer"] == 2 * n["parameters"], (m, n)
    assert abs(m["optimizer"] - n["optimizer"] / 2) <= 0.05 * n["optimizer"] / 2, (m, n)
assert [r["step"] for r in resumed] == [4, 5, 6], resumed
for a, b in zip(resumed, one[3:]):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * b["loss"], (a["step"], a["loss"], b["loss"])
print(f"ok: optim over 2 processes within 1e-6 of no_shard, moments {mp[-1]['memory_bytes']['optimizer']} "
      f"of {plain[-1]['memory_bytes']['optimizer']} bytes; its checkpoint resumes on one device")
EOF2
    ;;
  optim_grads)
    # Gradient shards (ZeRO-2) over 2 processes, two micro-batches: each
    # micro-batch's buckets reduce-scattered over UCX, the same bits as in one
    # process, the single device within 1e-5; each rank holds about half the
    # gradient bytes of one replica (no bucket copies, no whole gradients).
    run_pair 2 --micro-batches 2 --data-parallel-sharding-strategy optim_grads --bucket-mb 0.01
    compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-12 "$work/one.jsonl"
    python3 - "$work/mp.jsonl" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    m = r["memory_bytes"]
    assert abs(m["gradients"] - m["parameters"] / 2) <= 0.05 * m["parameters"] / 2, m
    assert abs(m["optimizer"] - m["parameters"]) <= 0.05 * m["parameters"], m
print(f"ok: gradients {rows[-1]['memory_bytes']['gradients']} bytes for {rows[-1]['memory_bytes']['parameters']} of parameters")
EOF2
    # The all-gather of updated values behind the next forward, over UCX.
    run_pair 2 --micro-batches 2 --data-parallel-sharding-strategy optim_grads --bucket-mb 0.01 \
      --overlap-param-gather
    grep -q "overlap-param-gather" "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-6 "$work/one.jsonl"
    ;;
  optim_grads_params)
    # Parameter shards (ZeRO-3) over 2 processes with TP 2 in each: every
    # node's buckets all-gathered over UCX just before it runs, the same
    # bits as in one process, the single device within 1e-5; between steps
    # each rank holds about half the values, and the validation forwards run
    # on both replicas.
    run_pair 2 --tp 2 --micro-batches 2 --data-parallel-sharding-strategy optim_grads_params \
      --bucket-mb 0.01 --eval-interval 3 --eval-batches 2
    compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-12 "$work/one.jsonl"
    "$merak" train "${model[@]}" --steps 5 --eval-interval 3 --eval-batches 2 \
      --metrics "$work/one.jsonl" 2>/dev/null
    python3 - "$work/mp.jsonl" "$work/one.jsonl" <<'EOF2'
import json, sys
rows, one = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
vals = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
want = [(r["step"], r["val_loss"]) for r in one if "val_loss" in r]
assert vals and len(vals) == len(want), (vals, want)
for (s, a), (t, b) in zip(vals, want):
    assert s == t and abs(a - b) <= 1e-5 * b, (s, a, b)
m = rows[-1]["memory_bytes"]
# A rank's slices (its gradient shards' size, half its TP shard's values)
# and the buckets gathered at once: less than the TP shard's whole values.
assert abs(m["optimizer"] - 2 * m["gradients"]) <= 0.05 * m["optimizer"], m
assert m["gradients"] < m["parameters"] < 2 * m["gradients"], m
print(f"ok: optim_grads_params over 2 processes, {m['parameters']} bytes of values a rank, validation equal")
EOF2
    # With pp 2: the replicas of a stage run the scheduler's fixed order.
    run_pair 2 --pp 2 --micro-batches 3 --data-parallel-sharding-strategy optim_grads_params \
      --bucket-mb 0.01
    compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-12 "$work/one.jsonl"
    ;;
  optim_grads_reshard | optim_grads_params_reshard)
    # Saved by 4 processes under gradient shards (each writes its moments'
    # pieces) or parameter shards (its values' pieces too), resumed by 2
    # processes as pp 2 without sharding, and by one device: both continue
    # the single device's run within 1e-5.
    strategy=${case_name%_reshard}
    "$merak" launch --procs 4 --timeout 150 train "${model[@]}" --steps 6 --dp 4 \
      --data-parallel-sharding-strategy "$strategy" --bucket-mb 0.01 --save "$work/ck" \
      --save-interval 3 2>"$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    "$merak" launch --procs 2 --timeout 150 train "${model[@]}" --steps 6 --pp 2 \
      --micro-batches 2 --load "$work/ck/step_00000003" --metrics "$work/pp.jsonl" \
      2>"$work/pp.err" || { cat "$work/pp.err"; exit 1; }
    "$merak" train "${model[@]}" --steps 6 --load "$work/ck/step_00000003" \
      --metrics "$work/resumed.jsonl" 2>"$work/e" || { cat "$work/e"; exit 1; }
    "$merak" train "${model[@]}" --steps 6 --metrics "$work/one.jsonl" 2>/dev/null
    python3 - "$work/pp.jsonl" "$work/resumed.jsonl" "$work/one.jsonl" "$strategy" <<'EOF2'
import json, sys
pp, resumed, one = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
for run in (pp, resumed):
    assert [r["step"] for r in run] == [4, 5, 6], run
    for a, b in zip(run, one[3:]):
        assert abs(a["loss"] - b["loss"]) <= 1e-5 * b["loss"], (a["step"], a["loss"], b["loss"])
print(f"ok: {sys.argv[4]} over 4 processes resumed as pp 2 over 2 processes and on one device")
EOF2
    ;;
  dp2_pp2)
    run_pair 2 --pp 2 --micro-batches 2
    compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-12 "$work/one.jsonl"
    ;;
  dp3_s2)
    run_pair 3 --untied-head --sparse-reducer s2 --sketch-ratio 0.5
    # S2 estimates the mean: the in-process run is the reference, exactly;
    # the single device only loosely (the sketch's error).
    python3 - "$work/mp.jsonl" "$work/ip.jsonl" <<'EOF'
import json, sys
mp = [json.loads(l) for l in open(sys.argv[1])]
ip = [json.loads(l) for l in open(sys.argv[2])]
assert len(mp) == len(ip) == 5
for a, b in zip(mp, ip):
    assert abs(a["loss"] - b["loss"]) <= 1e-12 * abs(b["loss"]), (a["loss"], b["loss"])
    assert a["sparse_union_rows"] == b["sparse_union_rows"] > 0
    assert a["dp_bytes_per_rank"] == b["dp_bytes_per_rank"]
print("ok: S2 over 3 processes equals the in-process S2 run")
EOF
    ;;
  bad_dp)
    set +e
    "$merak" launch --procs 2 --timeout 60 train "${model[@]}" --steps 2 --dp 1 >"$work/o" 2>"$work/e"
    rc=$?
    set -e
    ((rc == 1)) || { echo "FAIL: exit $rc"; cat "$work/e"; exit 1; }
    grep -q "2 processes but the layout dp=1 x pp=1 x tp=1 has only 1 actors" "$work/e" ||
      { cat "$work/e"; exit 1; }
    set +e
    "$merak" launch --procs 2 --timeout 60 train "${model[@]}" --steps 2 --devices 1 >"$work/o" 2>"$work/e"
    rc=$?
    set -e
    ((rc == 1)) && grep -q "devices 1 is fewer than the job's 2 processes" "$work/e" || { cat "$work/e"; exit 1; }
    set +e
    "$merak" launch --procs 0 train "${model[@]}" >"$work/o" 2>"$work/e"
    rc=$?
    set -e
    ((rc == 1)) && grep -q "procs must be at least 1 (got 0)" "$work/e" || { cat "$work/e"; exit 1; }
    echo "ok: bad layouts of a job are refused by name"
    ;;
  devices)
    # Process 0 plans, prints the plan once, and every process runs its
    # choice and placement.
    "$merak" launch --procs 2 --timeout 150 train "${model[@]}" --steps 4 --devices 4 \
      --metrics "$work/mp.jsonl" 2>"$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    (($(grep -c "^plan: " "$work/mp.err") == 1)) || { cat "$work/mp.err"; exit 1; }
    grep -q "2 processes (placement " "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    "$merak" train "${model[@]}" --steps 4 --metrics "$work/one.jsonl" 2>/dev/null
    compare "$work/mp.jsonl" "$work/mp.jsonl" 0 "$work/one.jsonl"
    grep -m1 "info\] model" "$work/mp.err"
    ;;
  stage_dies | shard_dies | coordinator_dies | stage_stops | shard_stops | coordinator_stops)
    victim_rank=1 layout=(--pp 2 --micro-batches 2) coordinate="(dp=0, pp=1, tp=0)"
    [[ $case_name == coordinator_* ]] && victim_rank=0
    [[ $case_name == shard_* ]] && layout=(--tp 2) coordinate="(dp=0, pp=0, tp=1)"
    signal=KILL bound=5 what=stopped
    [[ $case_name == *_stops ]] && signal=STOP bound=10 what="has answered no heartbeat"
    "$merak" launch --procs 2 --timeout 100 train "${model[@]}" --layers 4 --dim 128 --steps 100000 \
      "${layout[@]}" --metrics "$work/m.jsonl" >"$work/o" 2>"$work/e" &
    lpid=$!
    victim=$(rank_pid "$lpid" "$victim_rank" "$work/m.jsonl" 1)
    [[ -n "$victim" ]] || { echo "FAIL: no rank $victim_rank in training"; cat "$work/e"; kill "$lpid"; exit 1; }
    [[ -n "${KEEP_LOG:-}" ]] && trap "cp $work/e $KEEP_LOG; rm -rf $work" EXIT
    survivor=$(pgrep -P "$lpid" | grep -vx "$victim" | head -1)
    start=$(date +%s.%N)
    kill -$signal "$victim"
    # named: the survivor's own error line (the launcher gives it 5 s before
    # killing it) names the role, the process and its host.
    if [[ $case_name != coordinator_* ]]; then
      named() { grep "merak: error: " "$work/e" | grep -F "$coordinate" |
        grep -F "process 1 on $(hostname) (127.0.0.1)" | grep -qF "$what"; }
    else
      named() { grep -qF "merak: error: process 1: the coordinator (process 0 on $(hostname) (127.0.0.1)) $what" "$work/e"; }
    fi
    if [[ $signal == STOP ]]; then  # the survivor's CPU time over 2 s of waiting
      cpu() { awk '{print $14 + $15}' "/proc/$survivor/stat"; }
      c0=$(cpu)
      sleep 2
      c1=$(cpu)
      python3 -c "import os,sys; used=(int(sys.argv[2])-int(sys.argv[1]))/os.sysconf('SC_CLK_TCK')/2; assert used < 0.34, used; print(f'ok: the survivor used {used:.0%} of a core while waiting')" "$c0" "$c1" ||
        { kill -KILL "$victim"; exit 1; }
    fi
    for _ in $(seq $((bound * 10))); do
      named && break
      sleep 0.1
    done
    python3 -c "import sys,time; t=time.time()-float(sys.argv[1]); assert t < $bound, t; print(f'ok: named {t:.2f} s after SIG$signal of rank $victim_rank')" "$start" ||
      { kill -KILL "$victim"; cat "$work/e"; exit 1; }
    set +e
    wait "$lpid"
    rc=$?
    set -e
    ((rc == 1)) || { echo "FAIL: exit $rc"; cat "$work/e"; exit 1; }
    named || { echo "FAIL: the role, process or host is not named"; cat "$work/e"; exit 1; }
    grep "merak: error: " "$work/e" | head -1
    # The launcher names the silent rank, not only the one that noticed,
    # and quotes the line of the one that failed.
    if [[ $signal == STOP ]]; then
      grep -qF "merak: error: merak launch: rank $victim_rank was stopped (SIGSTOP or a debugger) when rank $((1 - victim_rank)) failed with exit code 1: " "$work/e" ||
        { echo "FAIL: the launcher does not name the stopped rank"; cat "$work/e"; exit 1; }
      grep "merak launch: " "$work/e"
    fi
    ;;
  restart)
    job=(train "${model[@]}" --layers 4 --dim 128 --steps 30 --pp 2 --micro-batches 2 --save-interval 5)
    "$merak" launch --procs 2 --timeout 150 "${job[@]}" --save "$work/ck1" --metrics "$work/whole.jsonl" \
      2>"$work/e1" || { cat "$work/e1"; exit 1; }
    "$merak" launch --procs 2 --timeout 150 --max-restarts 1 "${job[@]}" --save "$work/ck2" \
      --metrics "$work/m.jsonl" >"$work/o" 2>"$work/e" &
    lpid=$!
    victim=$(rank_pid "$lpid" 1 "$work/m.jsonl" 7)
    [[ -n "$victim" ]] || { echo "FAIL: no rank 1 mid-run"; cat "$work/e"; kill "$lpid"; exit 1; }
    kill -KILL "$victim"
    killed_after=$(wc -l <"$work/m.jsonl")
    wait "$lpid" || { echo "FAIL: the restarted job failed"; cat "$work/e"; exit 1; }
    grep -q "restarting the job (1 of 1) from the latest checkpoint in $work/ck2" "$work/e" ||
      { echo "FAIL: no restart from the checkpoint"; cat "$work/e"; exit 1; }
    grep "restarting the job" "$work/e"
    # The second attempt resumed from a checkpoint taken before the kill.
    resumed=$(sed -n "s|.*resumed from '$work/ck2/step_0*\([0-9]*\)' at step .*|\1|p" "$work/e" | head -1)
    [[ -n "$resumed" ]] && ((resumed >= 5 && resumed <= killed_after)) ||
      { echo "FAIL: resumed at step '${resumed}', killed after $killed_after"; cat "$work/e"; exit 1; }
    echo "ok: resumed at step $resumed"
    python3 - "$work/whole.jsonl" "$work/m.jsonl" "$killed_after" <<'EOF2'
import json, sys
whole, run = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert [r["step"] for r in run] == list(range(1, 31)), [r["step"] for r in run]
for a, b in zip(run, whole):
    for k in ("loss", "grad_norm"):
        assert abs(a[k] - b[k]) <= 1e-12 * abs(b[k]), (a["step"], k, a[k], b[k])
assert abs(run[-1]["val_loss"] - whole[-1]["val_loss"]) <= 1e-12 * whole[-1]["val_loss"]
print(f"ok: killed after step {sys.argv[3]}, restarted from its checkpoint: 30 steps equal "
      f"the uninterrupted job's (last loss {run[-1]['loss']:.6f})")
EOF2
    ;;
  reshard)
    run8=(train "${model[@]}" --steps 8)
    "$merak" launch --procs 8 --timeout 150 "${run8[@]}" --tp 2 --pp 2 --micro-batches 2 \
      --save "$work/ck" --save-interval 4 2>"$work/e" || { cat "$work/e"; exit 1; }
    ck4=$work/ck/step_00000004
    "$merak" ckpt inspect "$ck4" >"$work/inspect.json"
    python3 - "$work/inspect.json" <<'EOF2'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "sharded" and j["layout"].startswith("dp=2 pp=2 tp=2 processes=8"), j["layout"]
assert len(j["files"]) == 4 and j["metadata"]["merak.step"] == "4", j["files"]
print(f"ok: {j['checkpoint']}: {j['parameters']} parameters in {len(j['files'])} shard files, {j['layout']}")
EOF2
    "$merak" "${run8[@]}" --metrics "$work/one.jsonl" 2>/dev/null
    "$merak" launch --procs 2 --timeout 150 "${run8[@]}" --pp 2 --micro-batches 2 --load "$ck4" \
      --metrics "$work/pp2.jsonl" 2>"$work/e" || { cat "$work/e"; exit 1; }
    "$merak" "${run8[@]}" --load "$ck4" --metrics "$work/single.jsonl" 2>"$work/e" || { cat "$work/e"; exit 1; }
    "$merak" ckpt export "$ck4" "$work/exported" >/dev/null
    "$merak" "${run8[@]}" --load "$work/exported" --metrics "$work/exported.jsonl" 2>"$work/e" ||
      { cat "$work/e"; exit 1; }
    python3 - "$work/one.jsonl" "$work/pp2.jsonl" "$work/single.jsonl" "$work/exported.jsonl" <<'EOF2'
import json, sys
one, *runs = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
for name, run in zip(("pp2 over 2 processes", "single device", "exported"), runs):
    assert [r["step"] for r in run] == [5, 6, 7, 8], (name, run)
    for a, b in zip(run, one[4:]):
        assert abs(a["loss"] - b["loss"]) <= 1e-5 * b["loss"], (name, a["step"], a["loss"], b["loss"])
assert [r["loss"] for r in runs[1]] == [r["loss"] for r in runs[2]]
print("ok: the dp2 x tp2 x pp2 checkpoint continues as pp2 over 2 processes and on the single "
      "device (also exported) within 1e-5 of the uninterrupted run")
EOF2
    ;;
  rank_dies)
    "$merak" launch --procs 2 --timeout 100 train "${model[@]}" --layers 4 --dim 128 --steps 100000 \
      --dp 2 --metrics "$work/m.jsonl" >"$work/o" 2>"$work/e" &
    lpid=$!
    victim=$(rank_pid "$lpid" 1 "$work/m.jsonl" 1)
    [[ -n "$victim" ]] || { echo "FAIL: no rank 1 process in training"; cat "$work/e"; kill "$lpid"; exit 1; }
    start=$(date +%s.%N)
    kill -KILL "$victim"
    set +e
    wait "$lpid"
    rc=$?
    set -e
    python3 -c "import sys,time; t=time.time()-float(sys.argv[1]); assert t < 20, t; print(f'ok: the job ended {t:.2f} s after rank 1 was killed')" "$start"
    ((rc == 1)) || { echo "FAIL: exit $rc"; cat "$work/e"; exit 1; }
    grep -qE "rank 1|process 1 " "$work/e" || { echo "FAIL: rank 1 not named"; cat "$work/e"; exit 1; }
    grep "merak: error" "$work/e" | head -3
    ;;
  hostfile)
    printf '%s@localhost  # rank 0 here\n127.0.0.1 slots=1\n' "$(id -un)" >"$work/hosts"
    # From $work with relative paths: the nodes start in $HOME (as under
    # sshd) and must run the command in the launcher's directory.
    (cd "$work" && RSH_LOG=rsh.log "$merak" launch --hostfile hosts --rsh "bash $rsh" --env HOME \
      --timeout 120 train "${model[@]/#$work\//}" --steps 5 --dp 2 --threads 1 --metrics mp.jsonl) \
      2>"$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    grep -q "2 processes (placement 0,1)" "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    [[ "$(sort "$work/rsh.log" | tr '\n' ' ')" == "127.0.0.1 $(id -un)@localhost " ]] ||
      { echo "FAIL: hosts reached:"; cat "$work/rsh.log"; exit 1; }
    compare_dp2_in_process
    ;;
  mpirun)
    command -v mpirun >/dev/null || { echo "skip: no mpirun"; exit 77; }
    root=()
    [[ $(id -u) == 0 ]] && root=(--allow-run-as-root)
    env -u MASTER_ADDR -u MASTER_PORT mpirun "${root[@]}" --oversubscribe --bind-to none -np 2 \
      "$merak" train "${model[@]}" --steps 5 --dp 2 --threads 1 --metrics "$work/mp.jsonl" \
      >"$work/mp.out" 2>"$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    grep -q "dp=2 tp=1 pp=1.*2 processes" "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    compare_dp2_in_process
    ;;
  torchrun)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    tr=(launch --nnodes 2 --nproc_per_node 1 --rdzv-endpoint "127.0.0.1:$port" --token tr --timeout 120)
    "$merak" "${tr[@]}" --node-rank 1 train "${model[@]}" --steps 5 --threads 1 2>"$work/n1.err" &
    n1=$!
    "$merak" "${tr[@]}" --node-rank 0 train "${model[@]}" --steps 5 --threads 1 \
      --metrics "$work/mp.jsonl" 2>"$work/n0.err" || { cat "$work/n0.err" "$work/n1.err"; exit 1; }
    wait "$n1" || { cat "$work/n1.err"; exit 1; }
    grep -q "dp=2 tp=1 pp=1.*2 processes" "$work/n0.err" || { cat "$work/n0.err"; exit 1; }
    compare_dp2_in_process
    expect_error "merak launch: unknown flag '--nnode'; did you mean '--nnodes'\?" \
      launch --nnode 2 train --data "$data"
    expect_error "merak launch: --rdzv-endpoint 'node0' is not HOST:PORT" \
      launch --nnodes 2 --rdzv-endpoint node0 --token t train --data "$data"
    expect_error "merak launch: --node-rank 2 is not in 0..1" \
      launch --nnodes 2 --node-rank 2 --rdzv-endpoint node0:29500 --token t train --data "$data"
    ;;
  tls)
    bash "$(dirname "$0")/../../deploy/tls-certs.sh" "$work/pki" job >/dev/null
    tls=(--tls-cert "$work/pki/job.pem" --tls-key "$work/pki/job.key" --tls-ca "$work/pki/ca.pem")
    "$merak" launch --procs 2 "${tls[@]}" --timeout 150 train "${model[@]}" --steps 4 --pp 2 \
      --micro-batches 2 --metrics "$work/mp.jsonl" 2>"$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    grep -q "2 processes (placement 0,1; actor and bootstrap connections under TLS)" "$work/mp.err" ||
      { cat "$work/mp.err"; exit 1; }
    "$merak" train "${model[@]}" --steps 4 --pp 2 --micro-batches 2 --metrics "$work/ip.jsonl" 2>/dev/null
    "$merak" train "${model[@]}" --steps 4 --metrics "$work/one.jsonl" 2>/dev/null
    compare "$work/mp.jsonl" "$work/ip.jsonl" 1e-12 "$work/one.jsonl"
    printf 'localhost\n127.0.0.1\n' >"$work/hosts"
    "$merak" launch --hostfile "$work/hosts" --rsh "bash $rsh" --env HOME "${tls[@]}" --timeout 120 \
      train "${model[@]}" --steps 5 --dp 2 --threads 1 --metrics "$work/mp.jsonl" 2>"$work/mp.err" ||
      { cat "$work/mp.err"; exit 1; }
    grep -q "connections under TLS" "$work/mp.err" || { cat "$work/mp.err"; exit 1; }
    compare_dp2_in_process
    ;;
  node_by_hand)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    node=(--world-size 2 --master-addr 127.0.0.1 --master-port "$port" --token by-hand --timeout 120)
    "$merak" node --first-rank 1 "${node[@]}" train "${model[@]}" --steps 5 --dp 2 --threads 1 2>"$work/n1.err" &
    n1=$!
    "$merak" node --first-rank 0 "${node[@]}" train "${model[@]}" --steps 5 --dp 2 --threads 1 \
      --metrics "$work/mp.jsonl" 2>"$work/n0.err" || { cat "$work/n0.err" "$work/n1.err"; exit 1; }
    wait "$n1" || { cat "$work/n1.err"; exit 1; }
    compare_dp2_in_process
    ;;
  job_identity)
    port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
    one=(train "${model[@]}" --steps 2 --pp 2)
    # Both ranks fail with the same line; $1: the expected text, then rank
    # 1's extra flags.
    differ() {
      local want=$1 p
      shift
      p=$(port)
      RANK=0 WORLD_SIZE=2 MASTER_PORT=$p MERAK_JOB_TOKEN=t timeout 60 "$merak" "${one[@]}" \
        >"$work/r0.out" 2>&1 &
      local r0=$!
      RANK=1 WORLD_SIZE=2 MASTER_PORT=$p MERAK_JOB_TOKEN=t timeout 60 "$merak" "${one[@]}" "$@" \
        >"$work/r1.out" 2>&1 && { echo "FAIL: rank 1 ran with $*"; exit 1; }
      wait "$r0" && { echo "FAIL: rank 0 ran beside a rank with $*"; exit 1; }
      for r in 0 1; do
        grep -q "error: rank 1 was started with other settings than rank 0: $want" "$work/r$r.out" ||
          { echo "FAIL: rank $r's message for $*:"; cat "$work/r$r.out"; exit 1; }
        grep -q "step 1" "$work/r$r.out" && { echo "FAIL: rank $r trained"; exit 1; }
      done
      return 0
    }
    differ "--seed is '7' on rank 1 and '1337' on rank 0" --seed 7
    differ "--layers is '3' on rank 1 and '2' on rank 0" --layers 3
    differ "--steps is '9' on rank 1 and '2' on rank 0" --steps 9
    head -c 20000 "$data" >"$work/other.txt"
    differ "--data (contents) is '20000 bytes" --data "$work/other.txt"
    # Another job's rank on this job's port, with the same token.
    p=$(port)
    node=(--world-size 2 --master-addr 127.0.0.1 --master-port "$p" --token shared --timeout 120)
    "$merak" node --first-rank 0 --job-id job-a "${node[@]}" "${one[@]}" --metrics "$work/a.jsonl" \
      >"$work/n0.out" 2>&1 &
    n0=$!
    "$merak" node --first-rank 1 --job-id job-b "${node[@]}" "${one[@]}" >"$work/nb.out" 2>&1 &&
      { echo "FAIL: job-b's rank joined job-a"; exit 1; }
    grep -q "refused this process: this process belongs to job 'job-b', rank 0 runs job 'job-a'" \
      "$work/nb.out" || { echo "FAIL: job-b's rank:"; cat "$work/nb.out"; exit 1; }
    "$merak" node --first-rank 1 --job-id job-a "${node[@]}" "${one[@]}" >"$work/n1.out" 2>&1 ||
      { echo "FAIL: job-a's own rank 1:"; cat "$work/n1.out"; exit 1; }
    wait "$n0" || { echo "FAIL: job-a's rank 0:"; cat "$work/n0.out"; exit 1; }
    [[ $(wc -l <"$work/a.jsonl") -ge 2 ]] || { echo "FAIL: job-a wrote no metrics"; exit 1; }
    ;;
  resume)
    run8=(train "${model[@]}" --steps 8 --dp 2)
    "$merak" launch --procs 2 --timeout 120 "${run8[@]}" --save "$work/ck" --save-interval 4 \
      --metrics "$work/whole.jsonl" 2>"$work/e" || { cat "$work/e"; exit 1; }
    "$merak" launch --procs 2 --timeout 120 "${run8[@]}" --load "$work/ck/step_00000004" \
      --metrics "$work/mp.jsonl" 2>"$work/e" || { cat "$work/e"; exit 1; }
    "$merak" "${run8[@]}" --load "$work/ck/step_00000004" --metrics "$work/ip.jsonl" 2>"$work/e" ||
      { cat "$work/e"; exit 1; }
    python3 - "$work/whole.jsonl" "$work/mp.jsonl" "$work/ip.jsonl" <<'EOF2'
import json, sys
whole, mp, ip = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert [r["step"] for r in whole] == list(range(1, 9)), whole
for name, run in (("processes", mp), ("in process", ip)):
    assert [r["step"] for r in run] == list(range(5, 9)), (name, run)
    for a, b in zip(run, whole[4:]):
        for k in ("loss", "grad_norm"):
            assert abs(a[k] - b[k]) <= 1e-12 * abs(b[k]), (name, a["step"], k, a[k], b[k])
    assert abs(run[-1]["val_loss"] - whole[-1]["val_loss"]) <= 1e-12 * whole[-1]["val_loss"]
print(f"ok: resumed at step 4 by 2 processes and in process, steps 5-8 equal the whole job's "
      f"(last loss {whole[-1]['loss']:.6f})")
EOF2
    ;;
  bad_hosts)
    # refused TEXT ARGS...: merak ARGS fails with an error that contains TEXT.
    refused() { expect_error "$(printf '%s' "$1" | sed 's/[][\\.*^$(){}+?|]/\\&/g')" "${@:2}"; }
    cmd=(train "${model[@]}" --steps 1 --dp 2)
    printf 'a\nb slots=0\n' >"$work/h1"
    refused "$work/h1:2: slots must be a whole number from 1 to 4096 (got '0')" \
      launch --hostfile "$work/h1" "${cmd[@]}"
    printf 'a slot=2\n' >"$work/h2"
    refused "$work/h2:1: unknown field 'slot=2'" launch --hostfile "$work/h2" "${cmd[@]}"
    printf 'a\n\nb\na slots=2\n' >"$work/h3"
    refused "$work/h3:4: host a is listed twice (first on line 1)" \
      launch --hostfile "$work/h3" "${cmd[@]}"
    printf '# nobody\n\n' >"$work/h4"
    refused "$work/h4: the hostfile names no host" launch --hostfile "$work/h4" "${cmd[@]}"
    refused "$work/none: cannot open the hostfile" launch --hostfile "$work/none" "${cmd[@]}"
    printf 'localhost\n' >"$work/h5"
    printf 'localhost\nsome-other-host.invalid\n' >"$work/h6"
    refused "$work/h6:2: host some-other-host.invalid cannot reach rank 0 at localhost" \
      launch --hostfile "$work/h6" "${cmd[@]}"
    refused "--env NO_SUCH_VARIABLE_HERE: no such variable here" \
      launch --hostfile "$work/h5" --env NO_SUCH_VARIABLE_HERE "${cmd[@]}"
    refused "needs --master-port (rank 0's port)" node --world-size 2 "${cmd[@]}"
    refused "do not fit --world-size 2" node --procs 2 --first-rank 1 --world-size 2 \
      --master-port 1 "${cmd[@]}"
    MERAK_JOB_TOKEN= refused "needs the same --token (or MERAK_JOB_TOKEN) on every host" \
      node --world-size 2 --master-port 1 "${cmd[@]}"
    refused "no command given" node --procs 1
    for flags in "--procs 2 --hostfile $work/h5" "--master-port 5" "--rsh ssh"; do
      expect_error "excludes --hostfile|requires --hostfile" launch $flags "${cmd[@]}"
    done
    echo "ok: bad hostfiles and node flags are refused by file, line and flag"
    ;;
  host_fails)
    printf 'localhost\n127.0.0.1\n' >"$work/hosts"
    set +e
    "$merak" launch --hostfile "$work/hosts" --rsh "bash $rsh" --remote-merak /nonexistent/merak \
      --timeout 60 train "${model[@]}" --steps 2 --dp 2 >"$work/o" 2>"$work/e"
    rc=$?
    set -e
    ((rc == 1)) && grep -qE "merak launch: host (localhost|127.0.0.1) \(rank [01]\) failed with exit code 127" "$work/e" ||
      { echo "FAIL: exit $rc"; cat "$work/e"; exit 1; }
    grep "merak launch" "$work/e"
    set +e
    "$merak" launch --hostfile "$work/hosts" --rsh "bash $rsh" --remote-dir /nonexistent/dir \
      --timeout 60 train "${model[@]}" --steps 2 --dp 2 >"$work/o" 2>"$work/e"
    rc=$?
    set -e
    ((rc == 1)) && grep -q "merak node on .*: cannot enter /nonexistent/dir: No such file or directory" "$work/e" &&
      grep -qE "merak launch: host .* failed with exit code 1" "$work/e" ||
      { echo "FAIL: exit $rc"; cat "$work/e"; exit 1; }
    grep "cannot enter" "$work/e" | head -1
    ;;
  launcher_dies)
    printf 'localhost\n127.0.0.1\n' >"$work/hosts"
    marker=$work/m.jsonl
    "$merak" launch --hostfile "$work/hosts" --rsh "bash $rsh" --timeout 100 train "${model[@]}" \
      --layers 4 --dim 128 --steps 100000 --dp 2 --metrics "$marker" >"$work/o" 2>"$work/e" &
    lpid=$!
    for _ in $(seq 150); do
      [[ -s "$marker" ]] && break
      sleep 0.2
    done
    [[ -s "$marker" ]] || { echo "FAIL: the job did not start training"; cat "$work/e"; kill "$lpid"; exit 1; }
    (($(pgrep -f -- "$marker" | wc -l) >= 4)) || { echo "FAIL: expected 2 nodes and 2 ranks"; pgrep -af -- "$marker"; exit 1; }
    kill -KILL "$lpid"
    wait "$lpid" 2>/dev/null || true
    start=$(date +%s)
    while pgrep -f -- "$marker" >/dev/null; do
      if (($(date +%s) - start > 20)); then
        echo "FAIL: processes left 20 s after the launcher died:"
        pgrep -af -- "$marker"
        pkill -KILL -f -- "$marker"
        exit 1
      fi
      sleep 0.2
    done
    echo "ok: every node and rank ended $(($(date +%s) - start)) s after the launcher was killed"
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
