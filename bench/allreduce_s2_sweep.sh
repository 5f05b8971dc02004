#!/usr/bin/env bash
# The embedding-like sweep of docs/s2-reducer.md: n = 50,000 x d = 256, N = 2
# real processes over UCX, dense / coo / union / s2 (y = 0.01 .. 0.2) at the
# row densities given, with the codecs scanning for rows and (KNOWN=1) with
# the rows known. Prints one JSON line per run (merak bench allreduce).
# S2_ARGS: extra arguments of the s2 runs (e.g. "--sketch-hash elements").
# Usage: [UCX_TLS=...] [KNOWN=0|1] [ITERS=11] [S2_ARGS=...] bench/allreduce_s2_sweep.sh MERAK "0.01 0.05" ["0.01 0.05 0.1 0.2"]
set -euo pipefail
merak=$1
densities=${2:-"0.01 0.05"}
ratios=${3:-"0.01 0.05 0.1 0.2"}
iters=${ITERS:-11}
known=${KNOWN:-0}
read -r -a s2args <<<"${S2_ARGS:-}"
common=(bench allreduce --procs 2 --rows 50000 --cols 256 --iters "$iters")
for x in $densities; do
  "$merak" "${common[@]}" --method dense --row-density "$x"
  for kflag in "" $([ "$known" = 1 ] && echo --known-rows); do
    for m in coo union; do
      "$merak" "${common[@]}" --method $m --row-density "$x" $kflag
    done
    for y in $ratios; do
      "$merak" "${common[@]}" --method s2 --row-density "$x" --sketch-ratio "$y" $kflag ${s2args[@]+"${s2args[@]}"}
    done
  done
done
