#!/usr/bin/env bash
# Builds the whole project with sanitizers in a build directory of its own
# and runs the test suite there. Prints one JSON object: sanitizer, tests
# run, passed, failed (names), skipped, seconds.
#
# Usage: bench/sanitize.sh asan [BUILD_DIR] [CTEST_REGEX]
#   asan   AddressSanitizer + UndefinedBehaviorSanitizer (MERAK_SANITIZE),
#          every test (default BUILD_DIR build-asan)
#   tsan   ThreadSanitizer (MERAK_TSAN): the comm tests (transports,
#          bootstrap, gates, tensor channel; in-process and multi-process)
#          by default (BUILD_DIR build-tsan). The actor tests run on CAF,
#          which Debian builds without ThreadSanitizer, so its own
#          synchronisation is invisible to it. Suppressions: tests/tsan.supp
#   tsan-actors  ThreadSanitizer over the actor tests (merak_actors_tests,
#          merak_svm_actor_tests) against a CAF built with it: give its prefix
#          in MERAK_CAF_TSAN (bench/caf-tsan.sh builds one). Suppressions:
#          tests/tsan-actors.supp (UCX; nothing of CAF); OMP_THREAD_LIMIT=1,
#          so no OpenMP worker thread exists
# asan is by far the slower of the two (build and run); neither is part of
# CI's run (see docs/testing.md).
set -euo pipefail
kind=${1:?usage: bench/sanitize.sh asan|tsan|tsan-actors [BUILD_DIR] [CTEST_REGEX]}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "$kind" in
  asan) build=${2:-$root/build-asan}; flag=-DMERAK_SANITIZE=ON; regex=${3:-.}
        # The LD_PRELOAD shim of the yama tests would load before ASan's runtime.
        exclude='yama'; targets=() ;;
  tsan) build=${2:-$root/build-tsan}; flag=-DMERAK_TSAN=ON; regex=${3:-'^comm\.'}
        # Not the tests of the merak program or of the LD_PRELOAD shim.
        exclude='bench|yama|nccl'; targets=(--target merak_comm_tests --target merak_comm_multiproc) ;;
  tsan-actors)
        caf=${MERAK_CAF_TSAN:?tsan-actors needs MERAK_CAF_TSAN=PREFIX of a CAF built by bench/caf-tsan.sh}
        build=${2:-$root/build-tsan-actors}; flag="-DMERAK_TSAN=ON -DCMAKE_PREFIX_PATH=$caf"
        regex=${3:-'^(actors|svm\.actors)\.'}; exclude='bench|yama|nccl'
        targets=(--target merak_actors_tests --target merak_svm_actor_tests)
        export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan-actors.supp}
        # libgomp is not instrumented: no OpenMP worker threads at all, even
        # where a stage actor widens its team to borrowed cores.
        export OMP_THREAD_LIMIT=1 ;;
  *) echo "bench/sanitize.sh: unknown sanitizer '$kind' (asan, tsan or tsan-actors)" >&2; exit 1 ;;
esac
# shellcheck disable=SC2086  # $flag may hold two options
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $flag >&2
cmake --build "$build" -j"${MERAK_JOBS:-2}" "${targets[@]}" >&2
# UCX's malloc hooks and the sanitizers' allocator do not mix.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp}
start=$(date +%s)
set +e
ctest --test-dir "$build" -j"${MERAK_JOBS:-2}" -R "$regex" -E "$exclude" --timeout 1200 >"$build/sanitize.log" 2>&1
set -e
python3 - "$kind" "$build/sanitize.log" "$(($(date +%s) - start))" <<'PY'
import json, re, sys
kind, log, secs = sys.argv[1], open(sys.argv[2]).read(), int(sys.argv[3])
rows = re.findall(r"Test +#\d+: (.+?) \.{2,}\**\s*(Passed|Failed|Not Run|Skipped|Timeout|Exception|\w+)", log)
failed = [n for n, s in rows if s not in ("Passed", "Skipped")]
skipped = [n for n, s in rows if s == "Skipped"]
print(json.dumps({"sanitizer": kind, "tests": len(rows), "passed": sum(s == "Passed" for _, s in rows),
                  "failed": failed, "skipped": len(skipped), "seconds": secs}))
PY
