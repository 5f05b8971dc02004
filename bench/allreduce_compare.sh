#!/usr/bin/env bash
# Dense ring all-reduce over UCX against Open MPI's MPI_Allreduce, N = 2, on
# 4, 16 and 64 MiB buffers, over shared memory and over TCP loopback; then the
# ring's bytes per rank for N = 2..8. Prints one JSON object per run (the
# output of `merak bench allreduce`), runs interleaved over REPS repetitions
# so that a busy machine hurts both methods alike.
# Usage: bench/allreduce_compare.sh MERAK_BINARY [REPS] [ITERS]
#   shared memory: UCX_TLS unset for the ring (every rank on one host: the
#                  transport asks for posix,cma,self with cma from 1 MiB, or
#                  posix,self when cma is unusable; docs/comm-transport.md);
#                  Open MPI's default (ob1/vader)
#   tcp:           UCX_TLS=tcp,self for the ring; --mca pml ob1 --mca btl tcp,self
set -euo pipefail
merak=$1
reps=${2:-3}
iters=${3:-20}
for rep in $(seq 1 "$reps"); do
  for rows in 1024 4096 16384; do  # x 1024 columns x 4 bytes: 4, 16, 64 MiB
    env -u UCX_TLS "$merak" bench allreduce --procs 2 --method dense --rows $rows --cols 1024 --iters "$iters"
    "$merak" bench allreduce --procs 2 --method mpi --rows $rows --cols 1024 --iters "$iters"
    UCX_TLS=tcp,self "$merak" bench allreduce --procs 2 --method dense --rows $rows --cols 1024 --iters "$iters"
    UCX_TLS=tcp,self "$merak" bench allreduce --procs 2 --method mpi --rows $rows --cols 1024 --iters "$iters" \
      --mpi-args "--mca pml ob1 --mca btl tcp,self"
  done
done
for procs in 2 3 4 5 6 7 8; do
  "$merak" bench allreduce --procs $procs --method dense --rows 1000 --cols 1001 --iters 3
done
