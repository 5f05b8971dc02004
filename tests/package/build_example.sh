#!/usr/bin/env bash
# The installed package as an outside project sees it: installs the build
# tree BUILD_DIR to a temporary prefix (cmake --install), configures and
# builds SOURCE_DIR/examples/EXAMPLE against it with find_package(merak)
# (and nothing of the source tree), and runs the program briefly, checking
# its output.
#
# Usage: build_example.sh BUILD_DIR SOURCE_DIR CXX_COMPILER CMAKE EXAMPLE
#   EXAMPLE: train_gpt (2 devices, 2 steps), svm_fit (2 workers) or
#            embed_actor_system (the program's own actor system, 3 steps)
set -euo pipefail
build=$1 src=$2 cxx=$3 cmake=$4 example=$5
case "$example" in
  train_gpt | svm_fit | embed_actor_system) ;;
  *) echo "build_example: unknown example '$example'" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

step() { echo "build_example: $*"; }
run_logged() {  # run_logged LOG CMD...: quiet unless it fails
  local log=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    echo "build_example: failed: $*" >&2
    cat "$log" >&2
    exit 1
  fi
}

step "install $build -> $prefix"
run_logged "$work/install.log" "$cmake" --install "$build" --prefix "$prefix"
config=$(ls "$prefix"/lib*/cmake/merak/merakConfig.cmake)
for f in include/merak/model/gpt.hpp include/merak/model/layers.hpp \
         include/merak/actors/parallel_trainer.hpp include/merak/actors/auto_plan.hpp \
         include/merak/partition/planner.hpp include/merak/svm/fit.hpp bin/merak bin/merak-full; do
  [[ -e $prefix/$f ]] || { echo "build_example: not installed: $f" >&2; exit 1; }
done
[[ -e $(dirname "$config")/merakConfigVersion.cmake ]] || { echo "build_example: no version file" >&2; exit 1; }
ls "$prefix"/lib*/libmerak_actors.a >/dev/null
# A build with CUDA installs the module merak loads on --device cuda where
# the installed merak-full looks for it.
if [[ -e $build/bin/libmerak_cuda.so ]]; then
  ls "$prefix"/lib*/merak/libmerak_cuda.so >/dev/null ||
    { echo "build_example: the CUDA module is not installed" >&2; exit 1; }
  said=$("$prefix/bin/merak" train --data /dev/null --device cuda 2>&1 || true)
  [[ $said != *"no CUDA module"* ]] ||
    { echo "build_example: the installed merak does not find its CUDA module: $said" >&2; exit 1; }
fi
# The installed merak hands commands other than svm to the merak-full beside it.
# (The help whole first: grep -q stops reading at its match.)
help=$("$prefix/bin/merak" plan --help)
grep -q "Usage: plan" <<<"$help" ||
  { echo "build_example: installed merak does not reach merak-full" >&2; exit 1; }

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
step "configure examples/$example against the package"
run_logged "$work/configure.log" "$cmake" -S "$src/examples/$example" -B "$work/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release
# The package it found is the one just installed.
found=$(sed -n 's/^merak_DIR:PATH=//p' "$work/build/CMakeCache.txt")
[[ $found == "$(dirname "$config")" ]] || { echo "build_example: found merak in '$found', not $prefix" >&2; exit 1; }
step "build"
run_logged "$work/compile.log" "$cmake" --build "$work/build" -j 2

step "run"
expect() { grep -Eq "$1" "$work/out.txt" || { echo "build_example: the output lacks a line matching /$1/" >&2; exit 1; }; }
python3 - "$work/text.txt" <<'PY'
import sys
s = ("Call me Ishmael. Some years ago, never mind how long precisely, having little or no "
     "money in my purse, and nothing particular to interest me on shore. ")
open(sys.argv[1], "w").write(s * 60)
PY
case "$example" in
  embed_actor_system)
    "$work/build/embed_actor_system" "$work/text.txt" 3 | tee "$work/out.txt"
    expect '^step 1/3 loss [0-9.]+$'
    expect '^step 3/3 loss [0-9.]+$'
    expect '^validation loss [0-9.]+$'
    # The program's own actor outlived the job and got every step's loss.
    python3 - "$work/out.txt" <<'PY' || { echo "build_example: the reporter's mean is wrong" >&2; exit 1; }
import re, sys
text = open(sys.argv[1]).read()
losses = [float(x) for x in re.findall(r"^step \d+/3 loss ([0-9.]+)$", text, re.M)]
mean = float(re.search(r"^mean training loss ([0-9.]+) \(from the program's own actor\)$", text, re.M).group(1))
assert len(losses) == 3 and abs(mean - sum(losses) / 3) < 1e-3, (losses, mean)
PY
    ;;
  train_gpt)
    "$work/build/train_gpt" "$work/text.txt" 2 2 | tee "$work/out.txt"
    expect '^model L=4 C=64 NH=4 V=256 T=32 custom model: [0-9]+ parameters'
    # dp x tp x pp = 2 devices
    expect '^plan for 2 devices: dp=(2 tp=1 pp=1|1 tp=2 pp=1|1 tp=1 pp=2) m=[0-9]+ '
    expect '^step 1/2 loss [0-9.]+$'
    expect '^step 2/2 loss [0-9.]+$'
    expect '^validation loss [0-9.]+$'
    # 2 steps from a random init: the loss is about ln 256 = 5.55.
    awk '/^step 2\/2 loss/ { exit !($4 > 4 && $4 < 7) }' "$work/out.txt" ||
      { echo "build_example: step 2's loss is not near ln 256" >&2; exit 1; }
    ;;
  svm_fit)
    "$work/build/svm_fit" 2 | tee "$work/out.txt"
    expect '^mcp\(lambda=0.02, theta=3\) on 2 workers: [0-9]+ iterations .* training accuracy 0\.(8|9)[0-9]+$'
    ;;
esac
step "ok"
