#!/usr/bin/env bash
# Resource failures are one line and an exit, never a hang. Usage:
# resource_limits_test.sh MERAK CASE
#   threads   --dp 500 in one process under ulimit -v 4 GB: the actors'
#             threads cannot all start; the run fails within 30 s naming the
#             limits, with exit code 1
set -euo pipefail
merak=$(realpath "$1")
case_name=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=$work/text.txt
cat "$(dirname "$0")"/../../README.md "$(dirname "$0")"/../../docs/*.md >"$data"

case $case_name in
  threads)
    rc=0
    (ulimit -v 4000000 && exec timeout 30 "$merak" train --data "$data" --layers 1 --dim 32 \
      --heads 2 --seq 16 --batch 500 --dp 500 --steps 1) >/dev/null 2>"$work/err" || rc=$?
    if ((rc == 124)); then
      echo "FAIL: still running after 30 s"
      exit 1
    fi
    grep -v '\[info\]' "$work/err" >"$work/lines" || true
    if ((rc != 1)) || ! grep -Eq "^merak: error: cannot start the job's actors: .*ulimit -v" \
      "$work/lines" || (($(wc -l <"$work/lines") != 1)); then
      echo "FAIL: exit code $rc, expected 1 and one line naming the limits:"
      cat "$work/err"
      exit 1
    fi
    echo "ok (exit $rc): $(cat "$work/lines")"
    ;;
  *)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
