#!/usr/bin/env bash
# Configures (once) and builds merak in Release into build/ (or $MERAK_BUILD_DIR).
# Incremental: quick when nothing changed. Compiles for this machine's CPU
# (-march=native: the fastest build here); MERAK_NATIVE=OFF gives a build
# that runs on any x86-64 CPU, CMake's own default (to install elsewhere).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MERAK_BUILD_DIR:-$root/build}
jobs=${MERAK_JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DMERAK_NATIVE="${MERAK_NATIVE:-ON}" ${MERAK_CMAKE_ARGS:-}
fi
cmake --build "$build" -j "$jobs"
