#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
# Extra arguments go to ctest (e.g. ./deploy/test.sh -L cpu -R grad).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
./deploy/install-deps.sh
./deploy/build.sh
build=${MERAK_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j "${MERAK_TEST_JOBS:-2}" "$@"
