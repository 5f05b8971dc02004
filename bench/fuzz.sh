#!/usr/bin/env bash
# Fuzzes one target of tests/fuzz for real: clang's libFuzzer with
# AddressSanitizer and UndefinedBehaviorSanitizer over the whole library,
# starting from the target's seed corpus (copied: the repository's corpus is
# not changed). Prints one JSON object: target, seconds, executions, new
# corpus entries and crashes (with the crashing inputs' paths).
#
# Usage: bench/fuzz.sh TARGET SECONDS [BUILD_DIR]
#   TARGET     safetensors, hf_config, indexed_dataset, svm_data, svm_model, hostfile, auth,
#              config, svm_wire, tokenizer_json, gpt2_vocab, job_claim or sharded_index
#   BUILD_DIR  default build-fuzz (configured on first use with clang++)
# Needs clang (Debian: apt-get install clang).
set -euo pipefail
target=${1:?usage: bench/fuzz.sh TARGET SECONDS [BUILD_DIR]}
seconds=${2:?usage: bench/fuzz.sh TARGET SECONDS [BUILD_DIR]}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${3:-$root/build-fuzz}
seeds=$root/tests/fuzz/corpus/$target
[[ -d $seeds ]] || { echo "bench/fuzz.sh: no target '$target' (tests/fuzz/corpus/)" >&2; exit 1; }
command -v clang++ >/dev/null || { echo "bench/fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 1; }
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DMERAK_FUZZ=ON \
    -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >&2
fi
cmake --build "$build" -j"${MERAK_JOBS:-2}" --target "fuzz_$target" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/crashes"
cp -r "$seeds"/. "$work/corpus/"
seeded=$(find "$work/corpus" -type f | wc -l)
set +e
"$build/bin/fuzz_$target" "$work/corpus" -max_total_time="$seconds" -rss_limit_mb=4096 \
  -timeout=10 -artifact_prefix="$work/crashes/" -print_final_stats=1 >"$work/log" 2>&1
rc=$?
set -e
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' || echo 0)
found=$(($(find "$work/corpus" -type f | wc -l) - seeded))
crashes=()
for c in "$work"/crashes/*; do
  [[ -e $c ]] || continue
  mkdir -p "$root/fuzz-findings/$target"
  cp "$c" "$root/fuzz-findings/$target/"
  crashes+=("\"fuzz-findings/$target/$(basename "$c")\"")
done
if ((rc != 0)) && ((${#crashes[@]} == 0)); then tail -20 "$work/log" >&2; fi
printf '{"bench": "fuzz", "target": "%s", "seconds": %s, "executions": %s, "new_corpus_entries": %s, "crashes": [%s], "exit_code": %s}\n' \
  "$target" "$seconds" "${execs:-0}" "$found" "$(IFS=,; echo "${crashes[*]}")" "$rc"
