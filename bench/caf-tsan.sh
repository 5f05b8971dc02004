#!/usr/bin/env bash
# Builds CAF 0.17 (Debian's actor-framework source) with ThreadSanitizer into
# PREFIX, so that the actor tests can run under ThreadSanitizer with CAF's
# own synchronisation visible (bench/sanitize.sh tsan-actors). A long build:
# the whole of CAF is compiled.
#
# Usage: bench/caf-tsan.sh PREFIX [actor-framework_0.17.6.orig.tar.gz]
# Without a tarball it fetches Debian's source package (apt-get source; needs
# a deb-src line for bookworm in the apt sources).
set -euo pipefail
prefix=${1:?usage: bench/caf-tsan.sh PREFIX [TARBALL]}
tarball=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ -z $tarball ]]; then
  (cd "$work" && apt-get source --download-only actor-framework >&2) || true
  tarball=$(ls "$work"/actor-framework_*.orig.tar.gz 2>/dev/null | head -n 1)
  [[ -n $tarball ]] || { echo "caf-tsan: no CAF source: add a deb-src line or give the tarball" >&2; exit 1; }
fi
tar xzf "$tarball" -C "$work"
src=$(ls -d "$work"/actor-framework-*/ | head -n 1)
# GCC 12 needs <limits> where CAF 0.17.6 relies on it arriving indirectly.
grep -q '#include <limits>' "$src/libcaf_io/caf/io/network/receive_buffer.hpp" ||
  sed -i 's|#include <memory>|#include <limits>\n#include <memory>|' \
    "$src/libcaf_io/caf/io/network/receive_buffer.hpp"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes \
  -DCAF_NO_OPENCL=yes -DCAF_NO_PYTHON=yes -DCAF_NO_TOOLS=yes -DCAF_NO_OPENSSL=yes \
  -DCAF_NO_MEM_MANAGEMENT=yes -DCAF_NO_COMPILER_CHECK=yes -DCAF_NO_SUMMARY=yes \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >&2
cmake --build "$work/build" -j"${MERAK_JOBS:-2}" >&2
cmake --install "$work/build" >&2
echo "caf-tsan: installed in $prefix"
