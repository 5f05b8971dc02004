#!/usr/bin/env bash
# Runs deploy/slurm-train.sbatch under a real Slurm on this one host:
# starts munged (if not running), slurmctld and slurmd with a throw-away
# configuration, submits the script as a 2-task job (one node, 1 core per
# task, a small model, 5 steps) and checks that both tasks trained together
# and wrote the metrics. Stops the daemons it started. Needs root and
# Debian's slurm-wlm and munge (apt-get install slurm-wlm); not part of CI.
# Usage: deploy/check-slurm.sh [MERAK_BINARY]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
merak=$(realpath "${1:-$root/build/bin/merak}")
for c in slurmctld slurmd sbatch munged; do
  command -v "$c" >/dev/null || { echo "check-slurm: $c is missing (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
[[ $(id -u) == 0 ]] || { echo "check-slurm: run as root (it starts slurmd)" >&2; exit 1; }
work=$(mktemp -d /tmp/merak-slurm-XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
[[ -n "${KEEP:-}" ]] && trap - EXIT

munge_works() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_works; then
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- munged
  for _ in $(seq 100); do munge_works && break; sleep 0.1; done
  munge_works || { echo "check-slurm: munged did not start (see /var/log/munge/munged.log)" >&2; exit 1; }
  pids+=($(pgrep -x munged))
fi
host=$(hostname -s)
cpus=$(nproc)
mkdir -p "$work/spool" "$work/state" "$work/log"
cat >"$work/slurm.conf" <<CONF
ClusterName=merakcheck
SlurmctldHost=$host
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
SlurmUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=check Nodes=$host Default=YES MaxTime=30 State=UP
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$work/log/ctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$work/log/d.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  sinfo -h -o %T 2>/dev/null | grep -qE "^idle" && break
  sleep 0.2
done
sinfo -h -o %T | grep -qE "^idle" || { echo "check-slurm: the node did not come up"; cat "$work"/log/*; exit 1; }

# The repository's own text as training data; a model small enough for 2 cores.
cat "$root/README.md" "$root"/docs/*.md >"$work/text.txt"
start=$(date +%s.%N)
(cd "$work" && MERAK="$merak" DATA="$work/text.txt" STEPS=5 LAYERS=2 DIM=64 HEADS=2 SEQ=32 \
  METRICS="$work/metrics.jsonl" sbatch --wait --nodes=1 --ntasks=2 --ntasks-per-node=2 \
  --cpus-per-task=1 --time=10 --output="$work/job.out" "$root/deploy/slurm-train.sbatch") ||
  { echo "check-slurm: the job failed"; cat "$work/job.out"; exit 1; }
secs=$(python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.1f}')" "$start")
grep -q "dp=2 tp=1 pp=1.*2 processes" "$work/job.out" || { echo "check-slurm: not a 2-process job:"; cat "$work/job.out"; exit 1; }
lines=$(wc -l <"$work/metrics.jsonl")
[[ $lines == 5 ]] || { echo "check-slurm: $lines metrics lines, expected 5"; cat "$work/job.out"; exit 1; }
grep "processes (placement" "$work/job.out" | sed 's/.*\] //'
tail -n 1 "$work/metrics.jsonl"
echo "ok: sbatch deploy/slurm-train.sbatch ran 2 tasks as one job (no MASTER_ADDR/MASTER_PORT set) in $secs s"
