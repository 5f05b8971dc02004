#!/usr/bin/env bash
# `merak data prepare|inspect` and `merak train --data-path`: Megatron's
# indexed dataset written by an independent Python writer
# (tests/model/megatron_indexed.py) is read exactly, merak's files read
# exactly by the Python reader; damage is refused naming file and field;
# prepare -> inspect -> train -> resume is exact; dp 2 trains as dp 1;
# merak eval --data-path reads the valid split train reports on.
# Usage: dataset_test.sh MERAK_BINARY CASE
set -euo pipefail
merak=$1
case_name=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pyidx=$here/../model/megatron_indexed.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$here/expect_error.sh"

# Text inputs: two plain-text files and a JSONL file of 300 documents.
python3 - "$work" <<'PY'
import json, random, sys
w = sys.argv[1]
rnd = random.Random(7)
words = ("call me ishmael some years ago never mind how long precisely having little or no "
         "money in my purse and nothing particular to interest me on shore whale sea").split()
def para(n):
    return " ".join(rnd.choice(words) for _ in range(n)) + ".\n"
open(f"{w}/a.txt", "w").write("".join(para(40) for _ in range(20)))
open(f"{w}/b.txt", "w").write("Ünïcödé — " + para(30))
with open(f"{w}/docs.jsonl", "w") as f:
    for i in range(300):
        f.write(json.dumps({"text": para(rnd.randint(5, 60)), "title": f"doc {i}", "n": i}) + "\n")
        if i == 10:
            f.write("\n")  # blank lines are skipped
PY
tiny=(--layers 1 --dim 16 --heads 2 --seq 16 --batch 4 --log-level warn)

case "$case_name" in
  python_layout)
    # Python writes every integer dtype, a document of several sequences and
    # an empty one; merak data inspect reads the same ids.
    python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
docs = [[[1, 2, 3]], [[4], [5, 6]], [], [[100, 7]], [[0]]]
json.dump(docs, open(f"{w}/docs.json", "w"))
PY
    for code in 1 2 3 4 5 8; do
      python3 "$pyidx" write "$work/py$code" $code "$work/docs.json"
      "$merak" data inspect "$work/py$code" --json --ids >"$work/m.json"
      python3 "$pyidx" read "$work/py$code" >"$work/p.json"
      python3 - "$work/m.json" "$work/p.json" <<'PY'
import json, sys
m, p = (json.load(open(f)) for f in sys.argv[1:])
assert m["format"] == "MMIDIDX" and m["version"] == 1, m
for k in ("dtype", "documents", "sequences", "ids"):
    assert m[k] == p[k], (k, m[k], p[k])
assert m["tokens"] == 9 and m["min_id"] == 0 and m["max_id"] == 100, m
PY
    done
    echo "ok: merak reads the Python writer's files (dtypes 1 2 3 4 5 8)"
    # merak's writer, read by the Python reader: ids are the files' UTF-8
    # bytes (ByteTokenizer), documents in input order, one per JSONL line.
    "$merak" data prepare --input "$work/a.txt" "$work/b.txt" "$work/docs.jsonl" \
      --output-prefix "$work/m" --json-keys text title 2>"$work/progress"
    grep -q "^prepare: .* documents" "$work/progress" || { echo "FAIL: no progress line"; cat "$work/progress"; exit 1; }
    python3 "$pyidx" read "$work/m_text_document" >"$work/p.json"
    python3 "$pyidx" read "$work/m_title_document" >"$work/t.json"
    "$merak" data inspect "$work/m_text_document" --json --ids >"$work/m.json"
    python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
p = json.load(open(f"{w}/p.json")); t = json.load(open(f"{w}/t.json")); m = json.load(open(f"{w}/m.json"))
lines = [json.loads(l) for l in open(f"{w}/docs.jsonl") if l.strip()]
texts = [open(f"{w}/a.txt", "rb").read(), open(f"{w}/b.txt", "rb").read()]
texts += [l["text"].encode() for l in lines]
assert p["dtype"] == "uint16", p["dtype"]
assert p["ids"] == [list(x) for x in texts], "text ids differ from the inputs' bytes"
# Plain-text files go to the first key only; the title dataset has the JSONL lines.
assert t["ids"] == [list(l["title"].encode()) for l in lines], "title ids"
assert m["ids"] == p["ids"] and m["documents"] == len(texts) == 302, m["documents"]
print("ok: the Python reader reads merak's files:", m["documents"], "documents,", m["tokens"], "tokens")
PY
    ;;
  workers)
    # --workers N tokenizes in N threads; the files do not depend on N.
    for n in 1 2 3; do
      "$merak" data prepare --input "$work/docs.jsonl" "$work/a.txt" --output-prefix "$work/w$n" \
        --workers $n --json >"$work/w$n.json" 2>/dev/null
      cmp "$work/w1_text_document.bin" "$work/w${n}_text_document.bin"
      cmp "$work/w1_text_document.idx" "$work/w${n}_text_document.idx"
    done
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["workers"]==3 and d["documents"]==301, d' "$work/w3.json"
    echo "ok: --workers 1, 2 and 3 write identical files" ;;
  damage)
    "$merak" data prepare --input "$work/docs.jsonl" --output-prefix "$work/d" 2>/dev/null >/dev/null
    p=$work/d_text_document
    cp "$p.idx" "$work/good.idx"; cp "$p.bin" "$work/good.bin"
    restore() { cp "$work/good.idx" "$p.idx"; cp "$work/good.bin" "$p.bin"; }
    truncate -s -3 "$p.bin"
    expect_error "error: index file '$p.idx': sequence 299's pointer [0-9]+ at byte [0-9]+ .* runs past the end of '$p.bin'" data inspect "$p"
    expect_error "error: index file '$p.idx': sequence 299's pointer" train --data-path "$p" "${tiny[@]}" --steps 1
    restore; printf 'X' | dd of="$p.idx" bs=1 seek=0 conv=notrunc status=none
    expect_error "error: index file '$p.idx': magic at byte 0" data inspect "$p"
    restore; printf '\x02' | dd of="$p.idx" bs=1 seek=9 conv=notrunc status=none
    expect_error "error: index file '$p.idx': version 2 at byte 9" data inspect "$p"
    restore; printf '\x0b' | dd of="$p.idx" bs=1 seek=17 conv=notrunc status=none
    expect_error "error: index file '$p.idx': dtype code 11 at byte 17" data inspect "$p"
    restore; printf '\xff\xff\xff\xff\xff\xff\xff\x0f' | dd of="$p.idx" bs=1 seek=18 conv=notrunc status=none
    expect_error "error: index file '$p.idx': sequence count [0-9]+ at byte 18 needs more than" data inspect "$p"
    restore; printf '\x00\x00\x00\x00\x00\x00\x01\x00' | dd of="$p.idx" bs=1 seek=$((34 + 300 * 4 + 8)) conv=notrunc status=none
    expect_error "error: index file '$p.idx': sequence 1's pointer [0-9]+ at byte $((34 + 300 * 4 + 8))" data inspect "$p"
    restore; rm "$p.bin"
    expect_error "error: cannot open token file '$p.bin'" data inspect "$p"
    restore
    # Ids the model's vocabulary does not hold: named with file and byte.
    expect_error "error: token file '$p.bin': id [0-9]+ at byte [0-9]+ is outside the model's vocabulary \[0, 100\)" \
      train --data-path "$p" "${tiny[@]}" --vocab 100 --steps 2
    expect_error "error: data path '$work/none': neither" train --data-path "$work/none" "${tiny[@]}" --steps 1
    expect_error "error: --split '1,x': expected" train --data-path "$p" "${tiny[@]}" --split 1,x --steps 1
    expect_error "error: --split 100,0,0: no dataset" train --data-path "$p" "${tiny[@]}" --split 100,0,0 --steps 1
    expect_error "error: --data FILE or --data-path PREFIX is required" train "${tiny[@]}" --steps 1
    expect_error "--data-path excludes --data|--data excludes --data-path" train --data "$work/a.txt" --data-path "$p" "${tiny[@]}"
    printf '{"text": "a"}\n{"body": "b"}\n' >"$work/bad.jsonl"
    expect_error "error: input file '$work/bad.jsonl' line 2: key 'text' \(--json-keys\) is missing" \
      data prepare --input "$work/bad.jsonl" --output-prefix "$work/x"
    printf '{"text": "a"}\n[1]\n' >"$work/bad.jsonl"
    expect_error "error: input file '$work/bad.jsonl' line 2: not a JSON object" data prepare --input "$work/bad.jsonl" --output-prefix "$work/x"
    expect_error "error: --append-eod: the ByteTokenizer tokenizer has no end-of-document id" \
      data prepare --input "$work/a.txt" --output-prefix "$work/x" --append-eod
    [[ ! -e "$work/x_text_document.bin" && ! -e "$work/x_text_document.bin.tmp" ]] ||
      { echo "FAIL: a failed prepare left files"; ls "$work"; exit 1; } ;;
  megatron_script)
    # A pretrain_gpt.py argument list runs as it is: the tokenizer sizes the
    # vocabulary, the learning rate warms up from --lr-warmup-init for
    # 0.2 x 5 steps and falls linearly to --min-lr at step 5 (Megatron's
    # scheduler, step for step), bf16, the switches merak decides itself
    # accepted.
    "$merak" data prepare --input "$work/docs.jsonl" --output-prefix "$work/c" 2>/dev/null >/dev/null
    "$merak" train --data-path "$work/c_text_document" --split 90,10,0 --tokenizer-type ByteTokenizer \
      --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
      --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 7 \
      --lr 0.003 --min-lr 0.0003 --lr-decay-style linear --lr-decay-iters 5 \
      --lr-warmup-fraction 0.2 --lr-warmup-init 0.001 --weight-decay 0.1 --clip-grad 1.0 \
      --adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8 --bf16 --log-interval 2 --eval-iters 2 \
      --eval-interval 3 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --distributed-backend nccl \
      --attention-dropout 0.0 --hidden-dropout 0.0 --use-flash-attn --use-mcore-models \
      --transformer-impl local --no-masked-softmax-fusion --no-bias-gelu-fusion \
      --no-bias-dropout-fusion --no-gradient-accumulation-fusion --attention-softmax-in-fp32 \
      --accumulate-allreduce-grads-in-fp32 --overlap-grad-reduce --use-distributed-optimizer \
      --threads 1 --metrics "$work/m.jsonl" 2>"$work/m.err"
    grep -q "V=256 " "$work/m.err" || { cat "$work/m.err"; echo "FAIL: vocabulary"; exit 1; }
    python3 - "$work/m.jsonl" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
lr = [x["lr"] for x in m]
# warm-up: --lr-warmup-init at step 0 (0-based), --lr at step 1; then
# linear from step 1 to 5, --min-lr after.
want = [0.001] + [0.0003 + 0.0027 * (1 - (k - 1) / 4) for k in range(1, 5)] + [0.0003] * 2
assert len(lr) == 7 and all(abs(a - b) <= 1e-7 for a, b in zip(lr, want)), (lr, want)
print("ok: a Megatron argument list trains; lr", [round(x, 6) for x in lr])
PY
    expect_error "error: --fp16: merak trains in fp32 or bf16" \
      train --data-path "$work/c_text_document" "${tiny[@]}" --fp16 --steps 1
    expect_error "error: --hidden-dropout 0.1: merak trains without dropout" \
      train --data-path "$work/c_text_document" "${tiny[@]}" --hidden-dropout 0.1 --steps 1
    expect_error "error: --lr-warmup-init must be a number from 0 to 1e\\+30 \\(got '-1'\\)" \
      train --data-path "$work/c_text_document" "${tiny[@]}" --lr-warmup-init -1 --steps 1
    expect_error "error: --lr-decay-style must be cosine, linear or constant \\(got 'exponential'\\)" \
      train --data-path "$work/c_text_document" "${tiny[@]}" --lr-decay-style exponential --steps 1
    expect_error "error: --vocab 100 is smaller than --tokenizer-type ByteTokenizer's 256 ids" \
      train --data-path "$work/c_text_document" "${tiny[@]}" --tokenizer-type ByteTokenizer \
      --vocab 100 --steps 1
    expect_error "error: --tokenizer-type and its files size the vocabulary of --data-path" \
      train --data "$work/a.txt" "${tiny[@]}" --tokenizer-type ByteTokenizer --steps 1 ;;
  train_resume)
    # prepare (text and JSONL) -> inspect -> train; a run stopped at step 3
    # and resumed from its checkpoint takes the uninterrupted run's steps 4..6
    # (the same losses, bit for bit); dp 2 trains as dp 1.
    "$merak" data prepare --input "$work/docs.jsonl" "$work/a.txt" --output-prefix "$work/c" 2>/dev/null >/dev/null
    "$merak" data inspect "$work/c_text_document" | grep -q "documents 301" ||
      { echo "FAIL: inspect"; "$merak" data inspect "$work/c_text_document"; exit 1; }
    d=(--data-path "$work/c_text_document" --split 90,10,0)
    "$merak" train "${d[@]}" "${tiny[@]}" --steps 6 --threads 1 --metrics "$work/full.jsonl"
    "$merak" train "${d[@]}" "${tiny[@]}" --steps 6 --threads 1 --save "$work/run" --save-interval 3 --metrics "$work/first.jsonl" 2>/dev/null
    # merak eval on the valid split: the run's own last val_loss.
    "$merak" eval --load "$work/run" "${d[@]}" --batch 4 --threads 1 --json >"$work/eval.json"
    python3 - "$work/eval.json" "$work/first.jsonl" <<'PY'
import json, sys
e = json.load(open(sys.argv[1])); last = [json.loads(l) for l in open(sys.argv[2])][-1]
assert e["val_loss"] == last["val_loss"], (e, last)
print("ok: merak eval --data-path gives the run's val_loss", e["val_loss"])
PY
    rm -rf "$work/run/step_00000006"; echo step_00000003 >"$work/run/latest"
    "$merak" train "${d[@]}" "${tiny[@]}" --steps 6 --threads 1 --load "$work/run" --metrics "$work/resumed.jsonl"
    "$merak" train "${d[@]}" "${tiny[@]}" --steps 6 --threads 1 --dp 2 --metrics "$work/dp2.jsonl"
    python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
read = lambda n: [json.loads(l) for l in open(f"{w}/{n}.jsonl")]
full, resumed, dp2 = read("full"), read("resumed"), read("dp2")
assert [x["step"] for x in resumed] == [4, 5, 6], resumed
for a, b in zip(full[3:], resumed, strict=True):
    assert a["loss"] == b["loss"], ("resume is not exact", a, b)
assert full[-1]["val_loss"] == resumed[-1]["val_loss"], (full[-1], resumed[-1])
for a, b in zip(full, dp2, strict=True):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), ("dp 2", a, b)
print("ok: resumed losses", [x["loss"] for x in resumed], "equal the uninterrupted run's; dp 2 within 1e-5")
PY
    grep -q '"merak.data_samples":"12"' "$work/run/step_00000003/model.safetensors" ||
      { echo "FAIL: the checkpoint does not record 12 samples consumed"; exit 1; }
    expect_error "consumed 12 samples in 3 steps but this run's --global-batch-size is 2" \
      train "${d[@]}" "${tiny[@]}" --batch 2 --steps 6 --load "$work/run"
    # A blend by weights trains, and its config.toml runs it again.
    "$merak" data prepare --input "$work/a.txt" "$work/b.txt" "$work/docs.jsonl" --output-prefix "$work/e" 2>/dev/null >/dev/null
    "$merak" train --data-path 0.3 "$work/c_text_document" 0.7 "$work/e_text_document" --split 90,10,0 \
      "${tiny[@]}" --steps 3 --threads 1 --save "$work/blend" --metrics "$work/blend.jsonl"
    grep -q "^data-path = \[" "$work/blend/config.toml" || { echo "FAIL: config.toml"; cat "$work/blend/config.toml"; exit 1; }
    "$merak" train --config "$work/blend/config.toml" --save "$work/blend2" --metrics "$work/blend2.jsonl"
    python3 - "$work/blend.jsonl" "$work/blend2.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
assert a == b, (a, b)
print("ok: a 0.3/0.7 blend trains and its config.toml repeats it:", a)
PY
    ;;
  llmc)
    # An llm.c token file (header 20240520, version 1, uint16; documents
    # start at <|endoftext|>) written here from llm.c's layout: inspected,
    # trained on, and its ids checked against --vocab.
    python3 - "$work/tok.bin" <<'PY'
import random, struct, sys
r = random.Random(1); toks = []
for d in range(200):
    toks.append(50256); toks += [r.randrange(1000) for _ in range(r.randint(5, 40))]
open(sys.argv[1], "wb").write(struct.pack("<3i", 20240520, 1, len(toks)) + bytes(1024 - 12)
                              + struct.pack("<%dH" % len(toks), *toks))
PY
    "$merak" data inspect "$work/tok.bin" --json >"$work/i.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert (d["format"], d["documents"], d["max_id"]) == ("llm.c", 200, 50256), d' "$work/i.json"
    "$merak" train --data-path "$work/tok.bin" --split 90,10,0 "${tiny[@]}" --vocab 50304 --steps 2 --metrics "$work/l.jsonl"
    [[ $(wc -l <"$work/l.jsonl") == 2 ]] || { echo "FAIL: no metrics"; exit 1; }
    expect_error "error: token file '$work/tok.bin': id [0-9]+ at byte [0-9]+ is outside the model's vocabulary \[0, 256\)" \
      train --data-path "$work/tok.bin" --split 90,10,0 "${tiny[@]}" --steps 2
    truncate -s -1 "$work/tok.bin"
    expect_error "error: token file '$work/tok.bin': token count [0-9]+ at byte 8 needs" data inspect "$work/tok.bin"
    echo "ok: an llm.c token file is inspected and trained on" ;;
  gpt2_eod)
    # GPT2BPETokenizer with --append-eod: uint16 ids, every document ending
    # in <|endoftext|> 50256 (deploy/get-data.sh fetches the vocabulary;
    # skips without it).
    repo=$(cd "$here/../.." && pwd)
    vocab=""
    for dir in "${MERAK_SHARED_DATA:+$MERAK_SHARED_DATA/gpt2}" "$repo/data/gpt2"; do
      [[ -n "$dir" && -f "$dir/encoder.json" && -f "$dir/vocab.bpe" ]] && { vocab=$dir; break; }
    done
    [[ -n "$vocab" ]] || { echo "skip: no GPT-2 vocabulary (deploy/get-data.sh)"; exit 77; }
    "$merak" data prepare --input "$work/docs.jsonl" --output-prefix "$work/g" --append-eod --workers 2 \
      --tokenizer-type GPT2BPETokenizer --vocab-file "$vocab/encoder.json" --merge-file "$vocab/vocab.bpe" 2>/dev/null >/dev/null
    python3 "$pyidx" read "$work/g_text_document" >"$work/p.json"
    python3 - "$work/p.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["dtype"] == "uint16" and p["documents"] == 300, (p["dtype"], p["documents"])
assert all(d and d[-1] == 50256 and 50256 not in d[:-1] for d in p["ids"]), "EOD"
assert max(max(d) for d in p["ids"]) <= 50256
print("ok: GPT-2 BPE documents end in 50256:", sum(map(len, p["ids"])), "tokens")
PY
    ;;
  two_processes)
    # dp 2 over two processes (merak launch) reads the rows of the same
    # global batches as one device: the losses agree within 1e-5.
    "$merak" data prepare --input "$work/docs.jsonl" --output-prefix "$work/c" 2>/dev/null >/dev/null
    d=(--data-path "$work/c_text_document" --split 90,10,0 "${tiny[@]}" --steps 4 --threads 1)
    "$merak" train "${d[@]}" --metrics "$work/one.jsonl"
    "$merak" launch --procs 2 train "${d[@]}" --dp 2 --metrics "$work/two.jsonl"
    python3 - "$work/one.jsonl" "$work/two.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
for x, y in zip(a, b, strict=True):
    assert abs(x - y) <= 1e-5 * abs(x), (a, b)
print("ok: dp 2 over two processes trains as one device:", b)
PY
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
