#!/usr/bin/env bash
# One pass of the embedding-like sweep (docs/s2-reducer.md, "Results"):
# n = 50,000 x d = 256, N = 2 processes over UCX, at each row density and row
# setting (scan, known rows) dense once, then coo, union and s2 at every
# sketch ratio, each run with every build given in turn (label=path), so
# builds and methods interleave within the pass. One JSON line per run
# (merak bench allreduce) with "build" added. Run it inside one
# `flock -x /tmp/merak-cpu.lock` section per pass.
# With MPI=1 (the default) each density also runs Open MPI's MPI_Allreduce on
# the same buffers (--method mpi; over TCP, i.e. UCX_TLS=tcp,self, with
# Open MPI's TCP btl), the anchor of the table.
# Usage: [ITERS=11] [DENSITIES="0.01 0.05"] [RATIOS="0.001 ... 0.05"] [ROWS="scan known"]
#        [MPI=0|1] [UCX_TLS=tcp,self] bench/allreduce_s2_pass.sh label=MERAK [label=MERAK ...]
set -euo pipefail
iters=${ITERS:-11}
densities=${DENSITIES:-"0.01 0.05"}
ratios=${RATIOS:-"0.001 0.002 0.005 0.01 0.02 0.05"}
rowsets=${ROWS:-"scan known"}
mpi=${MPI:-1}
mpiargs=()
case "${UCX_TLS:-}" in tcp*) mpiargs=(--mpi-args "--mca pml ob1 --mca btl tcp,self") ;; esac
common=(bench allreduce --procs 2 --rows 50000 --cols 256 --iters "$iters")
each_build() {
  for b in "${builds[@]}"; do
    "${b#*=}" "${common[@]}" "$@" | sed "s/^{/{\"build\":\"${b%%=*}\",/"
  done
}
builds=("$@")
for x in $densities; do
  each_build --method dense --row-density "$x"
  [ "$mpi" = 1 ] && each_build --method mpi --row-density "$x" ${mpiargs[@]+"${mpiargs[@]}"}
  for rs in $rowsets; do
    kflag=()
    [ "$rs" = known ] && kflag=(--known-rows)
    for m in coo union; do
      each_build --method $m --row-density "$x" ${kflag[@]+"${kflag[@]}"}
    done
    for y in $ratios; do
      each_build --method s2 --row-density "$x" --sketch-ratio "$y" ${kflag[@]+"${kflag[@]}"}
    done
  done
done
