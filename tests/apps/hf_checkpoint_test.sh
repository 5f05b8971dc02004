#!/usr/bin/env bash
# Hugging Face checkpoints (docs/hf-checkpoints.md) against an independent
# NumPy reference (hf_reference.py, written from the published model
# definitions and the safetensors format): a random tiny checkpoint it
# writes, imported with `merak ckpt import --hf`, has the loss the reference
# computes (`merak eval`, 1e-5 relative); export -> import is bit-exact, and
# the reference reads merak's export and gets the same loss; damaged
# checkpoints are refused with one line naming the file and the field.
# `merak generate`'s greedy ids are the reference's (a full forward per
# token, float64, no cache).
# Usage: hf_checkpoint_test.sh MERAK_BINARY CASE (gpt2, llama, damage, generate).
# Skips (77) without a python3 that has NumPy.
set -euo pipefail
merak=$1
case_name=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ref=$(dirname "${BASH_SOURCE[0]}")/hf_reference.py

python=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import numpy" 2>/dev/null; then
    python=$p
    break
  fi
done
[[ -n $python ]] || { echo "SKIP: no python3 with NumPy"; exit 77; }

source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"

"$python" - "$work/text.txt" <<'PY'
import sys
s = ("Call me Ishmael. Some years ago, never mind how long precisely, having little or no "
     "money in my purse, and nothing particular to interest me on shore. ")
open(sys.argv[1], "w").write(s * 4)
PY
windows=(--batch 4 --eval-batches 2 --val-fraction 0.5)

# merak's validation loss of checkpoint $1 (a run directory).
merak_loss() {
  "$merak" --log-level warn eval --load "$1" --data "$work/text.txt" "${windows[@]}" --json |
    "$python" -c "import json, sys; print(repr(json.load(sys.stdin)['val_loss']))"
}

# The reference's loss of Hugging Face checkpoint $1.
reference_loss() {
  "$python" "$ref" loss "$1" "$work/text.txt" "${windows[@]}"
}

# agree LABEL A B: |A - B| <= 1e-5 |B|.
agree() {
  "$python" -c "import sys; a, b = float(sys.argv[2]), float(sys.argv[3]); \
ok = abs(a - b) <= 1e-5 * abs(b); print(('ok' if ok else 'FAIL') + f': {sys.argv[1]}: merak {a!r}, reference {b!r}'); \
sys.exit(0 if ok else 1)" "$@"
}

# import_and_compare LABEL HF_DIR: imports it and compares the losses.
import_and_compare() {
  local label=$1 dir=$2
  "$merak" ckpt import --hf "$dir" --out "$work/run-$label" >/dev/null
  agree "$label" "$(merak_loss "$work/run-$label")" "$(reference_loss "$dir")"
}

# round_trip LABEL: exports run-LABEL (sharded at a small size, and whole),
# checks the weights are the reference's bit for bit and give the same
# loss, and that importing the export gives back the same merak tensors.
round_trip() {
  local label=$1 source=$2
  "$merak" ckpt export --hf "$work/hf-$label" "$work/run-$label" --max-shard-bytes 20000 >/dev/null
  test -f "$work/hf-$label/model.safetensors.index.json" ||
    { echo "FAIL: $label: no sharded export"; exit 1; }
  "$python" "$ref" same-hf "$source" "$work/hf-$label"
  agree "$label export, read by the reference" "$(merak_loss "$work/run-$label")" \
    "$(reference_loss "$work/hf-$label")"
  "$merak" ckpt import --hf "$work/hf-$label" --out "$work/back-$label" >/dev/null
  "$python" "$ref" same-tensors "$work/run-$label/step_00000000/model.safetensors" \
    "$work/back-$label/step_00000000/model.safetensors"
  echo "ok: $label: export -> import is bit-exact"
}

case "$case_name" in
  gpt2)
    # Seed 3 writes the "transformer." prefix and the attn.bias buffers.
    "$python" "$ref" write gpt2 "$work/gpt2" --seed 3
    import_and_compare gpt2 "$work/gpt2"
    round_trip gpt2 "$work/gpt2"
    # Seed 2: no prefix, BF16, two shards with an index.
    "$python" "$ref" write gpt2 "$work/gpt2-bf16" --seed 2 --dtype BF16 --shards 2
    import_and_compare gpt2-bf16 "$work/gpt2-bf16"
    # A BF16 export: rounded weights, the reference's loss of them.
    "$merak" ckpt export --hf "$work/gpt2-out-bf16" "$work/run-gpt2" --dtype bf16 >/dev/null
    grep -q '"torch_dtype": "bfloat16"' "$work/gpt2-out-bf16/config.json"
    "$merak" ckpt import --hf "$work/gpt2-out-bf16" --out "$work/run-gpt2-out-bf16" >/dev/null
    agree "gpt2 bf16 export" "$(merak_loss "$work/run-gpt2-out-bf16")" \
      "$(reference_loss "$work/gpt2-out-bf16")"
    # Export from a sharded checkpoint (pipeline stages, tensor parallel:
    # q, k, v split by heads): its loss is the reference's of the export.
    "$merak" train --data "$work/text.txt" --load "$work/run-gpt2" --layers 2 --dim 32 --heads 4 \
      --seq 16 --batch 4 --steps 1 --pp 2 --tp 2 --micro-batches 2 --log-level warn --save "$work/pp"
    test -f "$work/pp/$(cat "$work/pp/latest")/index.json" ||
      { echo "FAIL: no sharded checkpoint"; exit 1; }
    "$merak" ckpt export --hf "$work/hf-pp" "$work/pp" >/dev/null
    agree "gpt2 sharded (pp 2, tp 2) export" "$(merak_loss "$work/pp")" \
      "$(reference_loss "$work/hf-pp")"
    # The imported checkpoint resumes training.
    "$merak" train --data "$work/text.txt" --load "$work/run-gpt2" --layers 2 --dim 32 --heads 4 \
      --seq 16 --batch 2 --steps 2 --log-level warn --metrics "$work/m.jsonl"
    test "$(wc -l <"$work/m.jsonl")" -eq 2 || { echo "FAIL: train --load did not run"; exit 1; }
    echo "ok: train --load resumes an imported checkpoint" ;;
  llama)
    "$python" "$ref" write llama "$work/llama" --seed 5
    import_and_compare llama "$work/llama"
    round_trip llama "$work/llama"
    "$python" "$ref" write llama "$work/llama-f16" --seed 6 --dtype F16 --shards 3 --tied
    import_and_compare llama-f16-tied "$work/llama-f16"
    # Export from a sharded checkpoint (pipeline stages): its loss on the
    # same windows is the reference's of the export.
    llama=(--model llama --layers 2 --dim 32 --heads 4 --num-query-groups 2 --ffn-hidden-size 48
      --seq 16 --rotary-base 1000 --norm-epsilon 1e-6 --batch 4 --log-level warn)
    "$merak" train --data "$work/text.txt" "${llama[@]}" --load "$work/run-llama" --steps 1 \
      --pp 2 --micro-batches 2 --save "$work/pp"
    test -f "$work/pp/$(cat "$work/pp/latest")/index.json" ||
      { echo "FAIL: no sharded checkpoint"; exit 1; }
    "$merak" ckpt export --hf "$work/hf-pp" "$work/pp" >/dev/null
    agree "llama sharded export" "$(merak_loss "$work/pp")" "$(reference_loss "$work/hf-pp")" ;;
  generate)
    # new_ids RUN ARGS...: merak generate's new token ids, comma-separated.
    new_ids() {
      local run=$1
      shift
      "$merak" --log-level warn generate --load "$run" --json "$@" |
        "$python" -c "import json, sys; print(','.join(map(str, json.load(sys.stdin)['new_tokens'])))"
    }
    same_ids() {  # same_ids LABEL MERAK REFERENCE
      [[ $2 == "$3" ]] || { echo "FAIL: $1: merak $2, reference $3"; exit 1; }
      echo "ok: $1: $2"
    }
    for family in gpt2 llama; do
      "$python" "$ref" write "$family" "$work/$family" --seed 7
      "$merak" ckpt import --hf "$work/$family" --out "$work/run-$family" >/dev/null
      # ByteTokenizer: "Hi!" is ids 72,105,33. Prompt and new tokens fill all 16 positions.
      same_ids "$family greedy from text" "$(new_ids "$work/run-$family" --prompt 'Hi!' \
        --max-new-tokens 13)" "$("$python" "$ref" greedy "$work/$family" --prompt-ids 72,105,33 --new 13)"
      same_ids "$family greedy from ids" "$(new_ids "$work/run-$family" --prompt-ids 200,7 \
        --max-new-tokens 9)" "$("$python" "$ref" greedy "$work/$family" --prompt-ids 200,7 --new 9)"
    done
    # A sharded checkpoint (pipeline stages, tensor parallel) after a step of
    # training: merak generate reads it; the reference reads its export.
    "$merak" train --data "$work/text.txt" --load "$work/run-gpt2" --layers 2 --dim 32 --heads 4 \
      --seq 16 --batch 4 --steps 1 --pp 2 --tp 2 --micro-batches 2 --log-level warn --save "$work/pp"
    test -f "$work/pp/$(cat "$work/pp/latest")/index.json" ||
      { echo "FAIL: no sharded checkpoint"; exit 1; }
    "$merak" ckpt export --hf "$work/hf-pp" "$work/pp" >/dev/null
    same_ids "gpt2 sharded (pp 2, tp 2)" "$(new_ids "$work/pp" --prompt-ids 9,8,7 --max-new-tokens 13)" \
      "$("$python" "$ref" greedy "$work/hf-pp" --prompt-ids 9,8,7 --new 13)"
    # A tied Llama from F16 shards.
    "$python" "$ref" write llama "$work/tied" --seed 8 --dtype F16 --shards 2 --tied
    "$merak" ckpt import --hf "$work/tied" --out "$work/run-tied" >/dev/null
    same_ids "llama tied f16" "$(new_ids "$work/run-tied" --prompt-ids 5,6,7,8 --max-new-tokens 10)" \
      "$("$python" "$ref" greedy "$work/tied" --prompt-ids 5,6,7,8 --new 10)"
    # Sampling: reproducible from its seed, and only real ids.
    a=$(new_ids "$work/run-llama" --prompt-ids 1,2 --max-new-tokens 12 --temperature 1.5 --top-k 40 --seed 3)
    b=$(new_ids "$work/run-llama" --prompt-ids 1,2 --max-new-tokens 12 --temperature 1.5 --top-k 40 --seed 3)
    same_ids "sampling with one seed twice" "$a" "$b"
    expect_error "prompt's 3 tokens plus --max-new-tokens 14 make 17 positions, more than the model's 16" \
      generate --load "$work/run-gpt2" --prompt 'Hi!' --max-new-tokens 14
    expect_error "checkpoint path '$work/none' does not exist" generate --load "$work/none" --prompt x
    expect_error "--prompt is empty" generate --load "$work/run-gpt2" --prompt ''
    expect_error "--prompt-ids: 'x' is not a token id" generate --load "$work/run-gpt2" --prompt-ids 1,x
    expect_error "--prompt-ids: '' is not a token id" generate --load "$work/run-gpt2" --prompt-ids ''
    expect_error "--prompt-ids: token id 256 is outside the vocabulary" \
      generate --load "$work/run-gpt2" --prompt-ids 256
    expect_error "--top-k 3 needs --temperature above 0" \
      generate --load "$work/run-gpt2" --prompt x --top-k 3
    "$merak" train --data "$work/text.txt" --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 \
      --steps 1 --tokenizer words --vocab 500 --save "$work/words" --log-level warn
    expect_error "checkpoint '.*' was trained on hashed words \(--tokenizer words\)" \
      generate --load "$work/words" --prompt x ;;
  damage)
    "$python" "$ref" write gpt2 "$work/g" --seed 2
    "$python" "$ref" write llama "$work/l" --seed 2
    one_line() {
      test "$(wc -l <"$work/err")" -eq 1 || { echo "FAIL: more than one line:"; cat "$work/err"; exit 1; }
    }
    # fresh NAME FAMILY: a copy of the undamaged checkpoint to break.
    fresh() { rm -rf "$work/$1" && cp -r "$work/$2" "$work/$1"; }
    edit_config() {  # edit_config DIR PYTHON-STATEMENT-ON-c
      "$python" -c "import json, sys; p = sys.argv[1] + '/config.json'; c = json.load(open(p)); $2; \
json.dump(c, open(p, 'w'))" "$1"
    }
    fresh m g
    "$python" "$ref" damage "$work/m" drop h.1.mlp.c_fc.weight
    expect_error "'$work/m/model.safetensors': tensor 'h.1.mlp.c_fc.weight' is missing" \
      ckpt import --hf "$work/m" --out "$work/run"
    one_line
    fresh s l
    "$python" "$ref" damage "$work/s" transpose model.layers.0.self_attn.k_proj.weight
    expect_error "'$work/s/model.safetensors': tensor 'model.layers.0.self_attn.k_proj.weight' has shape \(32, 16\) \(F32\); '$work/s/config.json' asks for \(16, 32\)" \
      ckpt import --hf "$work/s" --out "$work/run"
    one_line
    fresh c g
    edit_config "$work/c" "c['n_head'] = 'four'"
    expect_error "'$work/c/config.json': field 'n_head' is \"four\", not a whole number" \
      ckpt import --hf "$work/c" --out "$work/run"
    one_line
    fresh c l
    edit_config "$work/c" "del c['vocab_size']"
    expect_error "'$work/c/config.json': field 'vocab_size' is missing" \
      ckpt import --hf "$work/c" --out "$work/run"
    one_line
    fresh c l
    edit_config "$work/c" "c['rope_scaling'] = {'type': 'linear', 'factor': 2.0}"
    expect_error "'$work/c/config.json': field 'rope_scaling' is .*no scaling" \
      ckpt import --hf "$work/c" --out "$work/run"
    one_line
    fresh c g
    edit_config "$work/c" "c['architectures'] = ['BertModel']"
    expect_error "'$work/c/config.json': field 'architectures': unknown architecture 'BertModel'" \
      ckpt import --hf "$work/c" --out "$work/run"
    one_line
    "$python" "$ref" write llama "$work/i" --seed 2 --shards 2
    rm "$work/i/model-00002-of-00002.safetensors"
    expect_error "'$work/i/model.safetensors.index.json': weight_map places tensor '.*' in 'model-00002-of-00002.safetensors', which does not exist" \
      ckpt import --hf "$work/i" --out "$work/run"
    one_line
    "$python" - "$work/i/model.safetensors.index.json" <<'PY'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
j["weight_map"]["model.norm.weight"] = "../model-00001-of-00002.safetensors"
json.dump(j, open(p, "w"))
PY
    expect_error "'$work/i/model.safetensors.index.json': weight_map: tensor 'model.norm.weight' maps to '../model-00001-of-00002.safetensors', not a file name" \
      ckpt import --hf "$work/i" --out "$work/run"
    one_line
    expect_error "Hugging Face config '$work/none/config.json' does not exist" \
      ckpt import --hf "$work/none" --out "$work/run"
    test ! -e "$work/run" || { echo "FAIL: a refused import wrote $work/run"; exit 1; } ;;
  *)
    echo "unknown case $case_name"
    exit 2 ;;
esac
