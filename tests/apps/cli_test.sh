#!/usr/bin/env bash
# Command-line tests of `merak train`: bad input must end with a clear
# one-line error and a non-zero exit (never a signal or an abort), and a good
# run must write its metrics. Usage: cli_test.sh MERAK_BINARY CASE
set -euo pipefail
merak=$1
case_name=$2
source "$(dirname "${BASH_SOURCE[0]}")/cli_fixture.sh"

make_checkpoint() {
  "$merak" train --data "$work/text.txt" "${tiny[@]}" --steps 2 --save "$work/run" >/dev/null
  ckpt="$work/run/$(cat "$work/run/latest")"
  test -f "$ckpt/model.safetensors"
}

case "$case_name" in
  data_tokenize)
    # `merak data tokenize / detokenize`: ByteTokenizer ids and back, and
    # bad input refused in one line naming the file and what is wrong.
    printf 'Hi\n' >"$work/hi.txt"
    [[ $("$merak" data tokenize "$work/hi.txt") == "72 105 10" ]] || { echo "FAIL: byte ids"; exit 1; }
    [[ $("$merak" data tokenize "$work/hi.txt" --json) == "[72,105,10]" ]] || { echo "FAIL: --json"; exit 1; }
    [[ $(echo "[72, 105]" | "$merak" data detokenize -) == "Hi" ]] || { echo "FAIL: detokenize"; exit 1; }
    [[ $(printf 'a\nbc' | "$merak" data tokenize - --lines) == $'97\n98 99' ]] || { echo "FAIL: --lines"; exit 1; }
    printf 'ok \xff\n' >"$work/bad.txt"
    expect_error "--vocab-file $work/v.json: No such file" data tokenize "$work/bad.txt" \
      --tokenizer-type GPT2BPETokenizer --vocab-file "$work/v.json" --merge-file "$work/m.bpe"
    # A GPT-2 vocabulary of the 256 bytes (GPT-2's bytes_to_unicode), no merges.
    python3 - "$work/v.json" <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:] + [256 + n for n in range(256 - len(bs))]
bs += [b for b in range(256) if b not in bs]
json.dump({chr(c): b for b, c in zip(bs, cs)}, open(sys.argv[1], "w"))
PY
    echo "#version: 0.2" >"$work/m.bpe"
    gpt2=(--tokenizer-type GPT2BPETokenizer --vocab-file "$work/v.json" --merge-file "$work/m.bpe")
    [[ $("$merak" data tokenize "$work/hi.txt" "${gpt2[@]}") == "72 105 10" ]] || { echo "FAIL: gpt2 ids"; exit 1; }
    expect_error "bad.txt: GPT2BPETokenizer: the text: invalid UTF-8 at byte offset 3" \
      data tokenize "$work/bad.txt" "${gpt2[@]}"
    expect_error "unknown tokenizer 'Bogus'" data tokenize "$work/hi.txt" --tokenizer-type Bogus
    expect_error "needs --tokenizer-model" data tokenize "$work/hi.txt" --tokenizer-type HuggingFaceTokenizer
    echo "1 2 x3" >"$work/ids.txt"
    expect_error "ids.txt: id 2 \(byte offset 4\) is not an integer" data detokenize "$work/ids.txt"
    echo "1 300" >"$work/ids.txt"
    expect_error "ids.txt: ByteTokenizer: id 300 at position 1" data detokenize "$work/ids.txt"
    expect_error "missing.txt: cannot open: No such file" data tokenize "$work/missing.txt"
    echo "ok: data tokenize / detokenize" ;;
  program_split)
    # merak runs svm itself and execs merak-full for the rest: both reach the
    # same commands; without merak-full beside it the error names the path.
    command -v readelf >/dev/null || { echo "FAIL: readelf (binutils) is needed"; exit 1; }
    # (Each help whole first: grep -q stops reading at its match.)
    help=$("$merak" --help)
    grep -q "train" <<<"$help" || { echo "FAIL: merak --help lists no train"; exit 1; }
    help=$("$merak" plan --help)
    grep -q "Usage: plan" <<<"$help" || { echo "FAIL: plan via merak-full"; exit 1; }
    help=$("$merak" --log-level warn svm --help)
    grep -q "train" <<<"$help" || { echo "FAIL: svm after --log-level"; exit 1; }
    if readelf -d "$merak" | grep -Eq "NEEDED.*(libucp|libdnnl|libopenblas)"; then
      echo "FAIL: merak links a library an SVM fit does not use:"; readelf -d "$merak" | grep NEEDED; exit 1
    fi
    cp "$merak" "$work/merak"
    merak=$work/merak expect_error "cannot run $work/merak-full" plan --help
    echo "ok: merak runs svm, merak-full the rest" ;;
  skip_nonfinite)
    # --skip-nonfinite: a step whose loss or gradient norm is not finite
    # leaves weights and optimizer state as they were (its checkpoint holds
    # the same bytes as the step before), the metrics mark it, and the run
    # goes on; on one device and as pp 2 on actors. Ten in a row end it.
    for layout in "" "--pp 2 --micro-batches 2"; do
      rm -rf "$work/skip" "$work/skip.jsonl"
      # lr 1e30: step 1's update makes every later loss non-finite.
      "$merak" train --data "$work/text.txt" "${tiny[@]}" $layout --steps 4 --lr 1e30 --warmup 0 \
        --skip-nonfinite --save "$work/skip" --save-interval 1 --metrics "$work/skip.jsonl" 2>"$work/skip.err"
      grep -q "step 2: the loss is .* skipped (weights unchanged)" "$work/skip.err" ||
        { echo "FAIL ($layout): no warning for step 2:"; cat "$work/skip.err"; exit 1; }
      python3 - "$work/skip" "$work/skip.jsonl" "$layout" <<'PY'
import json, os, sys
run, metrics, layout = sys.argv[1:4]
def data_sections(step):
    d = os.path.join(run, f"step_{step:08d}")
    out = {}
    for root, _, files in os.walk(d):
        for f in sorted(files):
            if f.endswith(".safetensors"):
                b = open(os.path.join(root, f), "rb").read()
                n = int.from_bytes(b[:8], "little")
                out[os.path.relpath(os.path.join(root, f), d)] = b[8 + n:]
    assert out, (d, "no safetensors files")
    return out
one = data_sections(1)
for step in (2, 3, 4):
    assert data_sections(step) == one, f"{layout}: step {step} changed the weights or moments"
lines = [json.loads(l) for l in open(metrics)]
assert [l.get("skipped", False) for l in lines] == [False, True, True, True], lines
assert lines[0]["loss"] is not None and lines[1]["loss"] is None, lines
print(f"ok ({layout or 'one device'}): steps 2-4 skipped, checkpoints equal step 1's")
PY
    done
    # Without the flag the first such step ends the run; ten in a row end it with the flag.
    expect_error "error: step 2: the loss is .*training diverged" \
      train --data "$work/text.txt" "${tiny[@]}" --steps 4 --lr 1e30 --warmup 0
    expect_error "error: steps 2-11 were all skipped \(a non-finite loss or gradient norm 10 times in a row\)" \
      train --data "$work/text.txt" "${tiny[@]}" --steps 20 --lr 1e30 --warmup 0 --skip-nonfinite ;;
  bad_numbers)
    # Every numeric flag is checked before anything runs: a layout that is
    # not one (refused, never run on one device), non-finite rates, a
    # thread count out of range, a launcher timeout that is neither 0 (no
    # limit) nor at least a millisecond.
    t=(train --data "$work/text.txt" "${tiny[@]}" --steps 2)
    expect_error "error: --dp must be at least 1 \(got 0\)" "${t[@]}" --dp 0 --pp 2
    expect_error "error: --tp must be at least 1 \(got -1\)" "${t[@]}" --tp -1
    expect_error "error: --micro-batches must be at least 1 \(got 0\)" "${t[@]}" --micro-batches 0
    expect_error "error: --lr must be a positive number \(got inf\)" "${t[@]}" --lr inf
    expect_error "error: --weight-decay must be a number of at least 0 \(got nan\)" "${t[@]}" \
      --weight-decay nan
    expect_error "error: --grad-clip must be a number of at least 0" "${t[@]}" --grad-clip nan
    expect_error "error: --min-lr must be a number up to --lr" "${t[@]}" --min-lr 1
    expect_error "error: --threads must be from 0 \(every core\) to" "${t[@]}" --threads 100000
    # A run that diverges stops naming the step, with nothing saved.
    expect_error "error: step [0-9]+: the loss is -?nan and the gradient norm" "${t[@]}" --lr 1e30 \
      --save "$work/diverged"
    test ! -e "$work/diverged/latest" || { echo "FAIL: a diverged step was saved"; exit 1; }
    for bad in 0.0001 nan -1 inf; do
      expect_error "error: merak launch: --timeout must be 0 \(no limit\) or from 0.001" \
        launch --procs 1 --timeout "$bad" "${t[@]}"
    done
    # Devices: a name that is none, and CUDA where this machine cannot run
    # it (no GPU, or a build without CUDA): refused by the flag, with why.
    expect_error "error: unknown device 'gpu' \(cpu, cuda or cuda:N\)" "${t[@]}" --device gpu
    expect_error "error: unknown device 'cuda:x'" bench gpt --device cuda:x --steps 1
    if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
      expect_error "error: --device cuda: (no usable CUDA device: .+|this merak was built without CUDA)" \
        "${t[@]}" --device cuda
    fi
    expect_error "error: --device cuda:1( with --devices|: )" "${t[@]}" --device cuda:1 --devices 2 ;;
  outputs)
    # Where the run writes is checked before it trains; a write that fails
    # later (a full disk) stops it, named.
    t=(train --data "$work/text.txt" "${tiny[@]}" --steps 2)
    expect_error "error: --save '/proc/merak-nope': cannot create the directory" "${t[@]}" \
      --save /proc/merak-nope
    expect_error "error: --metrics '/proc/merak-nope': cannot create the directory" "${t[@]}" \
      --metrics /proc/merak-nope/m.jsonl
    expect_error "error: cannot write metrics file '/dev/full': No space left on device" "${t[@]}" \
      --metrics /dev/full
    # A fresh directory for the metrics is made, as --save's is.
    "$merak" "${t[@]}" --metrics "$work/new/dir/m.jsonl"
    test "$(wc -l <"$work/new/dir/m.jsonl")" -eq 2
    echo "ok: outputs" ;;
  missing_data)
    expect_error "error: cannot open data file '$work/none.txt'" train --data "$work/none.txt" "${tiny[@]}" --steps 1
    # A directory or a device that never ends is named, not read.
    expect_error "error: data file '$work' is a directory" train --data "$work" "${tiny[@]}" --steps 1
    expect_error "error: data file '/dev/zero' is not a regular file or a pipe" \
      train --data /dev/zero "${tiny[@]}" --steps 1
    expect_error "error: data file '$work' is a directory" svm train --data "$work"
    expect_error "error: data file '/dev/zero' is not a regular file or a pipe" \
      svm train --data /dev/zero ;;
  empty_data)
    : >"$work/empty.txt"
    expect_error "error: data file '$work/empty.txt' is empty" train --data "$work/empty.txt" "${tiny[@]}" --steps 1 ;;
  llama)
    # --model llama with Megatron's shape flags and switches trains and logs
    # falling losses; its config.toml runs it again to the same losses; --tp
    # and a switch of the other family are refused, naming the flag.
    llama=(--model llama --num-layers 2 --hidden-size 32 --num-attention-heads 4
      --num-query-groups 2 --ffn-hidden-size 64 --seq-length 16 --max-position-embeddings 16
      --rotary-base 10000 --norm-epsilon 1e-5 --normalization RMSNorm
      --position-embedding-type rope --swiglu --disable-bias-linear
      --untie-embeddings-and-output-weights --group-query-attention --batch 4 --steps 6 --lr 1e-2)
    "$merak" train --data "$work/text.txt" "${llama[@]}" --pp 2 --micro-batches 2 \
      --save "$work/llama" --metrics "$work/llama.jsonl" 2>"$work/llama.err"
    grep -q "llama G=2 F=64 L=2 C=32 NH=4" "$work/llama.err" ||
      { echo "FAIL: the run does not describe the Llama model:"; cat "$work/llama.err"; exit 1; }
    grep -q "step 6/6 loss" "$work/llama.err" || { echo "FAIL: no losses:"; cat "$work/llama.err"; exit 1; }
    grep -q '^model = "llama"' "$work/llama/config.toml" &&
      grep -q '^swiglu = true' "$work/llama/config.toml" ||
      { echo "FAIL: config.toml lacks the family:"; cat "$work/llama/config.toml"; exit 1; }
    "$merak" train --config "$work/llama/config.toml" --save "$work/again" --metrics "$work/again.jsonl" \
      --log-level warn
    python3 - "$work/llama.jsonl" "$work/again.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert a[-1]["loss"] < a[0]["loss"], ("the loss does not fall", a)
for x, y in zip(a, b, strict=True):
    assert abs(x["loss"] - y["loss"]) <= 1e-6 * abs(x["loss"]), (x, y)
print("ok: llama losses", [round(x["loss"], 4) for x in a], "and config.toml reads back")
PY
    # Tensor parallelism splits its heads, groups and SwiGLU: the same losses.
    "$merak" train --data "$work/text.txt" "${llama[@]}" --tp 2 --sequence-parallel \
      --metrics "$work/llama_tp.jsonl" --log-level warn
    python3 - "$work/llama.jsonl" "$work/llama_tp.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
for x, y in zip(a, b, strict=True):
    assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"]), (x, y)
print("ok: llama --tp 2 --sequence-parallel equals the single device")
PY
    "$merak" train --data "$work/text.txt" "${llama[@]}" --devices 2 --log-level warn
    expect_error "error: --normalization LayerNorm: --model llama normalizes with RMSNorm" \
      train --data "$work/text.txt" "${llama[@]}" --normalization LayerNorm
    expect_error "error: --position-embedding-type learned_absolute: --model llama uses rope" \
      train --data "$work/text.txt" "${llama[@]}" --position-embedding-type learned_absolute
    expect_error "error: --swiglu needs --model llama" train --data "$work/text.txt" "${tiny[@]}" --swiglu
    expect_error "error: --num-query-groups needs --model llama" \
      train --data "$work/text.txt" "${tiny[@]}" --num-query-groups 1
    expect_error "error: --num-query-groups \(3\) must divide --num-attention-heads \(4\)" \
      train --data "$work/text.txt" "${llama[@]}" --num-query-groups 3
    expect_error "error: --model must be gpt or llama \(got 'bert'\)" \
      train --data "$work/text.txt" "${tiny[@]}" --model bert ;;
  unknown_flag)
    # Unknown commands and flags are named with the nearest known one, before
    # anything is reported missing (--dat names --data, not "--data is required").
    expect_error "error: unknown flag '--bogus' for 'merak train' \(see merak train --help\)" \
      train --data "$work/text.txt" --bogus 3
    expect_error "error: unknown flag '--dat' for 'merak train'; did you mean '--data'\?" train --dat x
    expect_error "error: unknown flag '--layer' for 'merak train'; did you mean '--layers'\?" \
      train --data "$work/text.txt" --layer 2
    expect_error "error: unknown command 'trian'; did you mean 'train'\?" trian --data x
    expect_error "error: unknown command 'tran' for 'merak svm'; did you mean 'train'\?" svm tran
    expect_error "error: unknown flag '--dta' for 'merak svm train'; did you mean '--data'\?" \
      svm train --dta x
    # A flag's value that looks like a command is not one; --config is every command's.
    "$merak" bench --help >/dev/null
    # merak --version: version, commit, build type, the libraries built with.
    "$merak" --version >"$work/version"
    grep -Eq "^merak [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-f]+(-dirty)?|unknown, [A-Za-z]+ build" "$work/version" &&
      grep -Eq "^built with: CAF 0\.17\.[0-9]+, UCX ([0-9.]+|none), oneDNN" "$work/version" &&
      grep -Eq ", CUDA ([0-9.]+|none), cuDNN ([0-9.]+|none), NCCL ([0-9.]+|none)$" "$work/version" ||
      { echo "FAIL: merak --version printed:"; cat "$work/version"; exit 1; }
    cmp -s <("$merak" version) "$work/version" || { echo "FAIL: merak version differs"; exit 1; }
    echo "ok: $(head -n 1 "$work/version")" ;;
  heads_dim)
    expect_error "error: --heads \(4\) must divide --dim \(30\)" train --data "$work/text.txt" --dim 30 --heads 4 --steps 1 ;;
  seq_too_long)
    expect_error "error: data file .* too short for --seq 100000" train --data "$work/text.txt" --seq 100000 --steps 1 ;;
  bad_config)
    echo '{"layers": 1, "dim": ' >"$work/bad.json"
    expect_error "not valid JSON" train --config "$work/bad.json" --data "$work/text.txt"
    # A broken TOML file: the parser's line and column.
    printf 'steps = 2\nlayers = [2\n' >"$work/broken.toml"
    expect_error "config file '$work/broken.toml', line 2, column [0-9]+: .*\(not valid TOML\)" \
      train --config "$work/broken.toml" --data "$work/text.txt"
    printf 'layers: 2\n' >"$work/run.yaml"
    expect_error "config file '$work/run.yaml': YAML is not read; write it as TOML" \
      train --config "$work/run.yaml" --data "$work/text.txt"
    printf '[train]\nlayers = 1\n[train.x]\ny = 2\n' >"$work/nested.toml"
    expect_error "line 3: \[train.x\] nests sections" train --config "$work/nested.toml" \
      --data "$work/text.txt"
    echo '{"layerz": 1}' >"$work/typo.json"
    expect_error "layerz" train --config "$work/typo.json" --data "$work/text.txt"
    # A list's strings stay values: they cannot become flags of their own.
    echo '{"steps": ["2", "--save", "'"$work"'/planted"]}' >"$work/splice.json"
    expect_error "key 'steps' takes one value, not a list of 3" train --config "$work/splice.json" \
      --data "$work/text.txt"
    printf 'steps = ["2", "--save", "%s/planted"]\n' "$work" >"$work/splice.toml"
    expect_error "key 'steps' takes one value, not a list of 3" train --config "$work/splice.toml" \
      --data "$work/text.txt"
    echo '{"steps": "--save"}' >"$work/flag.json"
    expect_error "steps" train --config "$work/flag.json" --data "$work/text.txt"
    test ! -e "$work/planted" || { echo "FAIL: a config value became --save"; exit 1; }
    # Deep nesting is refused while parsing (no deep recursion).
    python3 -c "print('{\"steps\": ' + '[' * 100000 + ']' * 100000 + '}')" >"$work/deep.json"
    expect_error "nests values deeper than 4 levels" train --config "$work/deep.json" \
      --data "$work/text.txt"
    # A list for a flag that takes several values.
    echo '{"layout": ["pp=2,m=2", "dp=2"], "layers": 1, "dim": 16, "heads": 2, "seq": 8, "batch": 4, "steps": 1, "warmup-steps": 0, "rounds": 1}' >"$work/list.json"
    "$merak" bench parallel --config "$work/list.json" >"$work/list.out"
    grep -q '"pp=2,m=2"' "$work/list.out" && grep -q '"dp=2"' "$work/list.out" ||
      { cat "$work/list.out"; exit 1; }
    echo "ok: config values stay values" ;;
  train_metrics)
    # Flags from a TOML file (a [train] section), overridden on the command line.
    printf '[train]\nlayers = 1\ndim = 16\nheads = 2\nseq = 8\nbatch = 2\nsteps = 50\nlr = 1e-3\n' \
      >"$work/cfg.toml"
    "$merak" train --config "$work/cfg.toml" --data "$work/text.txt" --steps 2 \
      --metrics "$work/toml.jsonl" --log-level warn
    [[ $(wc -l <"$work/toml.jsonl") == 2 ]] || { echo "FAIL: TOML config"; cat "$work/toml.jsonl"; exit 1; }
    # Flags from a JSON config file, overridden on the command line.
    printf '{"layers": 1, "dim": 16, "heads": 2, "seq": 8, "batch": 2, "steps": 50}\n' >"$work/cfg.json"
    "$merak" train --config "$work/cfg.json" --data "$work/text.txt" --steps 4 \
      --metrics "$work/metrics.jsonl" --log-level warn
    python3 - "$work/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 4, f"expected 4 metrics lines, got {len(lines)}"
import time
for i, l in enumerate(lines, 1):
    for k in ("step", "time", "loss", "lr", "tokens_per_s"):
        assert k in l, f"line {i} lacks {k}: {l}"
    assert l["step"] == i
    assert abs(l["time"] - time.time()) < 600, l["time"]  # wall clock, seconds since 1970
assert all(a["time"] <= b["time"] for a, b in zip(lines, lines[1:]))
assert "val_loss" in lines[-1]
print("ok: metrics", lines[-1])
PY
    # The resolved configuration beside the metrics, which runs the same again.
    grep -q '^steps = 4$' "$work/metrics.jsonl.config.toml" &&
      grep -q '^dim = 16$' "$work/metrics.jsonl.config.toml" &&
      grep -q '^lr = ' "$work/metrics.jsonl.config.toml" ||
      { echo "FAIL: resolved config"; cat "$work/metrics.jsonl.config.toml"; exit 1; }
    "$merak" train --config "$work/metrics.jsonl.config.toml" --metrics "$work/again.jsonl" --log-level warn
    python3 -c "
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]; b = [json.loads(l) for l in open(sys.argv[2])]
assert [x['loss'] for x in a] == [x['loss'] for x in b], (a, b)
print('ok: the run directory\'s config.toml reruns the run: same losses')" "$work/metrics.jsonl" "$work/again.jsonl"
    # The same from TOML.
    printf 'layers = 1\ndim = 16\nheads = 2\nseq = 8\nbatch = 2\nsteps = 3\n' >"$work/cfg.toml"
    "$merak" train --config "$work/cfg.toml" --data "$work/text.txt" --metrics "$work/m2.jsonl" --log-level warn
    test "$(wc -l <"$work/m2.jsonl")" -eq 3
    echo "ok: toml config" ;;
  truncated_checkpoint)
    make_checkpoint
    head -c 300 "$ckpt/model.safetensors" >"$work/t" && mv "$work/t" "$ckpt/model.safetensors"
    expect_error "error: .*model.safetensors.* truncated" train --data "$work/text.txt" "${tiny[@]}" --steps 3 --load "$work/run" ;;
  corrupted_checkpoint)
    make_checkpoint
    python3 - "$ckpt/optimizer.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-5] ^= 0x40
open(p, "wb").write(b)
PY
    expect_error "error: .*optimizer.safetensors' is corrupted" train --data "$work/text.txt" "${tiny[@]}" --steps 3 --load "$ckpt" ;;
  other_shape_checkpoint)
    make_checkpoint
    expect_error "error: checkpoint .* holds model .*\"dim\":16.* but this run builds .*\"dim\":32" \
      train --data "$work/text.txt" --layers 1 --dim 32 --heads 2 --seq 8 --batch 2 --steps 3 --load "$work/run" ;;
  bad_checkpoint_path)
    expect_error "error: checkpoint path '$work/nowhere' does not exist" train --data "$work/text.txt" "${tiny[@]}" --steps 3 --load "$work/nowhere"
    mkdir "$work/emptydir"
    expect_error "neither a checkpoint directory" train --data "$work/text.txt" "${tiny[@]}" --steps 3 --load "$work/emptydir" ;;
  parallel_trace)
    "$merak" train --data "$work/text.txt" --layers 2 --dim 16 --heads 2 --seq 8 --batch 4 --steps 2 \
      --pp 2 --dp 2 --tp 2 --micro-batches 2 --schedule shifted --trace "$work/trace.json" \
      --bucket-mb 0.001 --metrics "$work/m.jsonl" --log-level warn
    python3 - "$work/trace.json" "$work/m.jsonl" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
tracks = {e["args"]["name"] for e in t["traceEvents"] if e.get("ph") == "M"}
# One track per stage actor (2 x 2 x 2), its reducer and its TP sums.
for kind in ("stage", "reducer", "TP sums"):
    got = {n for n in tracks if n.startswith(kind + " (")}
    assert len(got) == 8, (kind, sorted(tracks))
names = {e["name"].rstrip("0123456789") for e in ev}
assert {"F", "B", "adamw", "allreduce", "tp-allreduce"} <= names, names
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in ev)
m = [json.loads(l) for l in open(sys.argv[2])]
assert all(0 <= l["bubble"] < 1 for l in m), m
print("ok: trace with", len(ev), "slices; bubble", m[-1]["bubble"])
PY
    ;;
  errors_37)
    # Errors at the right place, in one line: flags checked as they are
    # read (before any actor starts), files' fields and sizes bounded, long
    # values and control characters cut or escaped, and what escapes a
    # command (out of memory, a file-system failure) named.
    t=(train --data "$work/text.txt" "${tiny[@]}" --steps 1)
    s2=("${t[@]}" --sparse-reducer s2 --dp 2)
    for bad in 0 -1 nan inf 65 1e300 ""; do
      expect_error "^merak: error: --sketch-ratio must be a number above 0 and at most 64 \(got '$bad'\)$" \
        "${s2[@]}" --sketch-ratio "$bad"
    done
    for bad in 0 33 -1 99999999999 1.5; do
      expect_error "^merak: error: --sketch-rows must be an integer from 1 to 32 \(got '$bad'\)$" \
        "${s2[@]}" --sketch-rows "$bad"
    done
    # Durations convert to the clocks without overflow.
    for bad in 1e10 0 -1 nan; do
      expect_error "error: --step-timeout must be a number above 0 and at most 31536000 \(got '$bad'\)" \
        "${t[@]}" --micro-batches 2 --step-timeout "$bad"
    done
    expect_error "error: --heartbeat-timeout must be 0 \(off\) or a number from 0.2 to 1000000 \(got '1e10'\)" \
      "${t[@]}" --heartbeat-timeout 1e10
    expect_error "error: --idle-spin-us must be an integer from -1 to 1000000 \(got '1e9'\)" \
      "${t[@]}" --idle-spin-us 1e9
    expect_error "error: --chunks must be an integer from 1 to 64 \(got '0'\)" plan --devices 2 --chunks 0
    # Device files: each field in its range, named with the file and the device.
    dev='{"devices": [{"name": "my-gpu", "peak_tflops": 100, "memory_gb": 24, "memory_bw_gbs": 900,
      "intra_bw_gbs": 64, "intra_latency_us": 10, "inter_bw_gbs": 12.5, "inter_latency_us": LAT,
      "devices_per_node": PER}]}'
    sed 's/LAT/20/; s/PER/1e12/' <<<"$dev" >"$work/per.json"
    expect_error "error: device file '$work/per.json': devices\[0\] \('my-gpu'\): 'devices_per_node' is 1000000000000, must be an integer from 1 to 1048576" \
      plan --device-file "$work/per.json" --device-type my-gpu --devices 8
    sed 's/LAT/-20/; s/PER/4/' <<<"$dev" >"$work/lat.json"
    expect_error "error: device file '$work/lat.json': devices\[0\] \('my-gpu'\): 'inter_latency_us' is -20, must be a number from 0 to" \
      plan --device-file "$work/lat.json" --device-type my-gpu --devices 8
    # Long values are cut, keeping the line's start and end.
    big=$(head -c 100000 /dev/zero | tr '\0' a)
    expect_error "^merak: error: unknown schedule 'a+\.\.\.\[[0-9]+ bytes cut\]\.\.\.a+' \(expected gpipe" \
      "${t[@]}" --schedule "$big"
    (($(wc -c <"$work/err") < 1000)) || { echo "FAIL: a long value echoed whole"; exit 1; }
    printf 'schedule = "%s"\n' "$(head -c 1000000 /dev/zero | tr '\0' a)" >"$work/big.toml"
    expect_error "error: unknown schedule 'a+\.\.\.\[[0-9]+ bytes cut\]" "${t[@]}" --config "$work/big.toml"
    (($(wc -c <"$work/err") < 1000)) || { echo "FAIL: a config value echoed whole"; exit 1; }
    expect_error "Could not convert: --layers" "${t[@]}" --layers "$big"
    (($(wc -c <"$work/err") < 1000)) || { echo "FAIL: CLI11's message echoed whole"; exit 1; }
    # Control characters (an ANSI escape) are shown, not sent to the terminal.
    expect_error "unknown schedule 'x\\\\x1b\[31m'" "${t[@]}" --schedule $'x\e[31m'
    ! grep -q $'\e' "$work/err" || { echo "FAIL: a raw escape reached stderr"; exit 1; }
    # --data within the memory the process may use: an endless pipe stops
    # at its bound, a 40 GB (sparse) file is refused before it is read.
    truncate -s 40G "$work/huge.txt"
    (
      ulimit -v 1500000
      expect_error "^merak: error: data file '/dev/fd/[0-9]+' is not a regular file and gave more than [0-9]+ bytes" \
        train --data <(yes) "${tiny[@]}" --steps 1
      expect_error "^merak: error: data file '$work/huge.txt' holds 40.0 GiB of text; with its tokens that needs 200.0 GiB of memory" \
        train --data "$work/huge.txt" "${tiny[@]}" --steps 1
      # What escapes a command: out of memory named, not "unexpected error".
      ulimit -v 400000
      expect_error "^merak: error: out of memory: an allocation failed" \
        schedule show --pp 1024 --micro-batches 65536
    )
    ln -s loop2 "$work/loop1"
    ln -s loop1 "$work/loop2"
    expect_error "^merak: error: .*'$work/loop1'.*([Ss]ymbolic|loop)" eval --load "$work/loop1"
    ;;
  outputs_37)
    # Outputs replaced through a temporary file (--trace, --save's
    # config.toml) are written only as regular files: a FIFO or a directory
    # there is refused by name and kept.
    mkfifo "$work/fifo"
    expect_error "error: output '$work/fifo' is a FIFO: only a regular file is written" \
      train --data "$work/text.txt" "${tiny[@]}" --steps 1 --dp 2 --trace "$work/fifo"
    [[ -p "$work/fifo" ]] || { echo "FAIL: the FIFO was replaced"; exit 1; }
    mkdir -p "$work/run/config.toml"
    expect_error "error: output '$work/run/config.toml' is a directory" \
      train --data "$work/text.txt" "${tiny[@]}" --steps 1 --save "$work/run"
    [[ -d "$work/run/config.toml" ]] || { echo "FAIL: the directory was replaced"; exit 1; }
    echo "ok: outputs_37" ;;
  resume_other_data)
    # A run resumed on other data than its checkpoint's says so.
    "$merak" train --data "$work/text.txt" "${tiny[@]}" --steps 1 --save "$work/run" >/dev/null 2>&1
    head -c 30000 "$work/text.txt" >"$work/other.txt"
    "$merak" train --data "$work/other.txt" "${tiny[@]}" --steps 2 --load "$work/run" \
      --save "$work/run2" >"$work/out" 2>&1 || { cat "$work/out"; exit 1; }
    grep -q "warning.*checkpoint '$work/run/step_00000001' was trained on '$work/text.txt' and this run reads '$work/other.txt': training goes on from step 1 on the new data" "$work/out" ||
      { echo "FAIL: no word of the other data"; cat "$work/out"; exit 1; }
    "$merak" train --data "$work/text.txt" "${tiny[@]}" --steps 2 --load "$work/run" \
      --save "$work/run3" 2>&1 | grep -q "was trained on" && { echo "FAIL: warned on the same data"; exit 1; }
    echo "ok: resume_other_data" ;;
  outputs_37b)
    # A run never replaces another: a --save directory that holds a run is
    # refused unless --load resumes it or --overwrite starts over; ckpt
    # export never moves another run's latest; --load of a new directory
    # starts at step 0; latest is read only as a small regular file; a
    # failed save leaves no step_*.tmp and a stale one is swept.
    r=(train --data "$work/text.txt" "${tiny[@]}")
    "$merak" "${r[@]}" --steps 4 --save-interval 2 --save "$work/run" >/dev/null
    latest_is() { [[ $(cat "$1/latest") == "$2" ]] || { echo "FAIL: $1/latest is $(cat "$1/latest"), not $2"; exit 1; }; }
    expect_error "error: --save '$work/run' already holds a run \(latest: step 4\): resume it with --load $work/run, or pass --overwrite to start over" \
      "${r[@]}" --steps 2 --save "$work/run"
    latest_is "$work/run" step_00000004
    "$merak" "${r[@]}" --steps 2 --save "$work/other" >/dev/null
    expect_error "error: --save '$work/run' already holds a run \(latest: step 4\) that --load '$work/other' is not part of" \
      "${r[@]}" --steps 3 --save "$work/run" --load "$work/other"
    expect_error "error: --overwrite starts the run in --save '$work/run' over but --load" \
      "${r[@]}" --steps 6 --save "$work/run" --load "$work/run" --overwrite
    latest_is "$work/run" step_00000004
    # Resuming, also Megatron's --save D --load D and a checkpoint inside D.
    "$merak" "${r[@]}" --steps 6 --save-interval 2 --save "$work/run" --load "$work/run" >/dev/null
    latest_is "$work/run" step_00000006
    # A checkpoint of another run is no part of this one.
    expect_error "error: ckpt export: OUT '$work/run' already holds a run \(latest: step 6\): write into a new directory, or pass --overwrite" \
      ckpt export "$work/run/step_00000002" "$work/run"
    expect_error "error: ckpt export: OUT '$work/run' holds the checkpoint being exported" \
      ckpt export "$work/run/step_00000002" "$work/run" --overwrite
    expect_error "error: ckpt export: OUT '$work/run' already holds a run" ckpt export "$work/other" "$work/run"
    latest_is "$work/run" step_00000006
    "$merak" ckpt export "$work/other" "$work/run2" >/dev/null
    latest_is "$work/run2" step_00000002
    "$merak" ckpt export "$work/run/step_00000004" "$work/run2" --overwrite >/dev/null 2>&1
    latest_is "$work/run2" step_00000004
    [[ $(cd "$work/run2" && echo *) == "latest step_00000004" ]] || { echo "FAIL: export --overwrite: $(ls "$work/run2")"; exit 1; }
    "$merak" "${r[@]}" --steps 6 --save-interval 2 --save "$work/run" --load "$work/run/step_00000004" >/dev/null
    "$merak" "${r[@]}" --steps 2 --save "$work/run" --overwrite 2>"$work/err" >/dev/null
    grep -q "warning.*--overwrite: removed the run that --save '$work/run' held (latest: step 6); this run starts over" "$work/err" ||
      { echo "FAIL: --overwrite not logged"; cat "$work/err"; exit 1; }
    [[ $(cd "$work/run" && echo *) == "config.toml latest step_00000002" ]] || { echo "FAIL: after --overwrite: $(ls "$work/run")"; exit 1; }
    # --load of the --save directory, new or empty: step 0, with a warning.
    for d in new empty; do
      [[ $d == empty ]] && mkdir "$work/$d"
      "$merak" "${r[@]}" --steps 2 --save "$work/$d" --load "$work/$d" 2>"$work/err" >/dev/null
      grep -q "warning.*--load '$work/$d' (the --save directory) holds no checkpoint yet: this run starts at step 0" "$work/err" ||
        { echo "FAIL: --load $d: $(cat "$work/err")"; exit 1; }
      latest_is "$work/$d" step_00000002
    done
    # latest: CRLF read, a large one and a FIFO refused by name.
    printf 'step_00000002\r\n' >"$work/run/latest"
    "$merak" ckpt inspect "$work/run" >/dev/null
    head -c 1000000 /dev/zero | tr '\0' x >"$work/run/latest"
    expect_error "error: '$work/run/latest' is 1000000 bytes, not a checkpoint name" ckpt inspect "$work/run"
    (( $(wc -c <"$work/err") < 200 )) || { echo "FAIL: a long error line"; exit 1; }
    rm "$work/run/latest" && mkfifo "$work/run/latest"
    # through_tool TOOL REGEX ARGS...: expect_error of `TOOL ARGS...`, where
    # ARGS name $merak (timeout: a hang fails, as no line matches).
    through_tool() { local m=$merak; merak=$1; shift; expect_error "$@"; merak=$m; }
    through_tool timeout "error: '$work/run/latest' is a FIFO, not a file naming a checkpoint" \
      20 "$merak" ckpt inspect "$work/run"
    expect_error "error: '$work/run/latest' is a FIFO" "${r[@]}" --steps 3 --load "$work/run" --save "$work/run"
    # --data: a named FIFO refused (its open would wait for a writer), a pipe read.
    mkfifo "$work/data.fifo"
    through_tool timeout "error: data file '$work/data.fifo' is a named FIFO" \
      20 "$merak" train --data "$work/data.fifo" "${tiny[@]}" --steps 1
    "$merak" train --data <(cat "$work/text.txt") "${tiny[@]}" --steps 1 >/dev/null
    ln -s "$work/loop" "$work/loop"
    expect_error "error: checkpoint path '$work/loop': too many levels of symbolic links" ckpt inspect "$work/loop"
    expect_error "error: checkpoint path '$work/loop': too many levels of symbolic links" "${r[@]}" --load "$work/loop"
    # step_*.tmp: a stale one swept at the next save (other names kept); a
    # save failing on a full disk (fsync's ENOSPC injected) removes its own.
    mkdir -p "$work/sw/step_00000001.tmp" "$work/sw/step_1.tmp"
    "$merak" "${r[@]}" --steps 2 --save "$work/sw" 2>/dev/null
    [[ $(cd "$work/sw" && echo *) == "config.toml latest step_00000002 step_1.tmp" ]] ||
      { echo "FAIL: not swept: $(ls "$work/sw")"; exit 1; }
    if command -v strace >/dev/null; then
      for pp in 1 2; do
        rm -rf "$work/full"
        through_tool strace "error: cannot fsync .*$work/full/step_00000001.tmp.*No space left on device" \
          -f -qq -o /dev/null -e trace=fsync -e inject=fsync:error=ENOSPC:when=3+ \
          "$merak" "${r[@]}" --steps 1 --pp $pp --save "$work/full"
        [[ $(cd "$work/full" && echo *) == "config.toml" ]] || { echo "FAIL: pp $pp left $(ls "$work/full")"; exit 1; }
      done
    fi
    echo "ok: outputs_37b" ;;
  bad_input_37)
    # Integer flags read as exact integers in range (never saturated,
    # wrapped or empty-as-0), floats finite and in range, and shapes and
    # counts bounded before anything is allocated or searched: each refused
    # with one line naming the flag and the value.
    t=(train --data "$work/text.txt" "${tiny[@]}" --steps 1)
    int64_max=9223372036854775807
    # Config files: a directory, two of them, a key given twice.
    expect_error "error: config file '$work' is not a regular file" "${t[@]}" --config "$work"
    printf 'steps = 1\n' >"$work/one.toml"
    printf 'steps = 2\n' >"$work/two.toml"
    expect_error "error: --config is given twice \('$work/one.toml' and '$work/two.toml'\)" \
      "${t[@]}" --config "$work/one.toml" --config "$work/two.toml"
    printf '{"steps": 1, "seed": 3, "steps": 2}\n' >"$work/twice.json"
    expect_error "error: config file '$work/twice.json': key 'steps' is given twice" \
      "${t[@]}" --config "$work/twice.json"
    for bad in -1 18446744073709551616 1e23 "" 1.5 12x; do
      expect_error "error: --seed must be an integer from 0 to $int64_max \(got '$bad'\)" \
        "${t[@]}" --seed "$bad"
    done
    expect_error "error: --steps must be an integer from 0 to $int64_max \(got ''\)" "${t[@]}" --steps ""
    expect_error "error: --steps must be an integer from 0 to $int64_max \(got '9223372036854775808'\)" \
      "${t[@]}" --steps 9223372036854775808
    for bad in nan inf -1 0; do
      expect_error "error: --bucket-mb must be a positive number up to 1048576 \(got $bad\)" \
        "${t[@]}" --bucket-mb "$bad"
    done
    expect_error "error: --chunks must be an integer from 1 to 64 \(got '0'\)" "${t[@]}" --chunks 0
    expect_error "error: --memory-budget must be an integer from 0 to $int64_max \(got '-1'\)" \
      "${t[@]}" --memory-budget -1
    # A config file's values pass the same checks.
    printf 'seed = -1\n' >"$work/seed.toml"
    expect_error "error: --seed must be an integer from 0" "${t[@]}" --config "$work/seed.toml"
    # The largest --steps round-trips through the run's config.toml.
    "$merak" train --data "$work/text.txt" "${tiny[@]}" --steps 0 --seed "$int64_max" --save "$work/rt" >/dev/null
    grep -qx "seed = $int64_max" "$work/rt/config.toml" || { echo "FAIL: seed not in config.toml"; exit 1; }
    "$merak" train --config "$work/rt/config.toml" --save "$work/rt2" >/dev/null
    # --steps at its bound too (the run stops after config.toml is written,
    # at a check that comes later; reading the file back reaches that check).
    expect_error "error: --sparse-reducer s2 needs --dp 2" "${t[@]}" --steps "$int64_max" \
      --sparse-reducer s2 --save "$work/rt3"
    grep -qx "steps = $int64_max" "$work/rt3/config.toml" || { echo "FAIL: steps not in config.toml"; exit 1; }
    expect_error "error: --sparse-reducer s2 needs --dp 2" train --config "$work/rt3/config.toml"
    # Model shapes far past any trained model fail at once, before config.toml.
    expect_error "error: --layers must be from 1 to 65536 \(got 2147483647\)" "${t[@]}" \
      --layers 2147483647 --save "$work/huge"
    test ! -e "$work/huge/config.toml" || { echo "FAIL: config.toml written for a refused model"; exit 1; }
    expect_error "error: the model has about .* parameters \(--layers 60000 --dim 65536 --vocab 256\), more than merak takes" \
      "${t[@]}" --layers 60000 --dim 65536 --heads 1
    # plan: more nodes than devices, and a micro-batch search bounded by the batch.
    expect_error "error: --nodes must be from 1 to --devices 8 \(each node holds a device; got 1000\)" \
      plan --nodes 1000 --devices 8 --device-type a100-40gb
    expect_error "error: --max-micro-batches must be at least 1 \(got 0\)" \
      plan --devices 8 --device-type a100-40gb --max-micro-batches 0
    # (the report was a search past 60 s; the search stops at 4096
    # micro-batches and says so)
    timeout 60 "$merak" plan --batch 1048576 --max-micro-batches 2147483647 --devices 8 \
      --device-type a100-40gb >/dev/null 2>"$work/plan_err" || { echo "FAIL: plan with a huge --max-micro-batches"; exit 1; }
    grep -q "the search tries at most 4096 micro-batches" "$work/plan_err" ||
      { cat "$work/plan_err"; echo "FAIL: no word of the micro-batch bound"; exit 1; } ;;
  schedule_bad)
    # Shapes and costs the simulator cannot take: refused naming the flag,
    # never a crash or a loop (a NaN cost once made the simulator spin).
    expect_error "--pp must be from 1 to 1024 \(got 0\)" schedule show --pp 0
    expect_error "--pp must be from 1 to 1024 \(got -1\)" schedule show --pp -1
    expect_error "--micro-batches must be from 1" schedule show --micro-batches 0
    expect_error "--chunks must be from 1 to 64" schedule show --schedule interleaved --chunks 0
    expect_error "--t-f must be a finite cost" schedule show --t-f nan
    expect_error "--t-f must be a finite cost" schedule show --t-f -1
    expect_error "--t-b must be a finite cost" schedule show --t-b inf
    expect_error "--t-f and --t-b must be positive" schedule show --t-f 0
    "$merak" schedule show --pp 2 --micro-batches 2 --stats | grep -q "makespan" ;;
  parallel_bad_split)
    expect_error "error: --batch 4 does not split into --dp 3" train --data "$work/text.txt" "${tiny[@]}" --batch 4 --dp 3 --steps 1
    expect_error "unknown schedule 'zigzag'" train --data "$work/text.txt" "${tiny[@]}" --pp 2 --schedule zigzag --steps 1
    expect_error "error: tp 3 does not divide" train --data "$work/text.txt" "${tiny[@]}" --tp 3 --steps 1
    expect_error "error: --tp-overlap must be 0, 1 or 2" train --data "$work/text.txt" "${tiny[@]}" --tp 2 --tp-overlap 5 --steps 1
    expect_error "error: --sparse-reducer s2 needs --dp 2" train --data "$work/text.txt" "${tiny[@]}" --sparse-reducer s2 --steps 1
    expect_error "unknown" train --data "$work/text.txt" "${tiny[@]}" --dp 2 --sparse-reducer zip --steps 1 ;;
  bench_memory)
    # The planner's bytes by category against what the stage actors hold,
    # to the byte: weights, gradients, moments and the activations' peak
    # (every stage's, recomputing inside backward, sequence-parallel slices).
    "$merak" bench memory --layers 2 --dim 32 --heads 2 --seq 16 --batch 8 --layout dp=2 \
      --layout dp=2,sharding=optim --layout tp=2,m=2,sp=on --layout pp=2,m=4,recompute=full \
      --layout dp=2,recompute=selective --layout tp=2,pp=2,m=2,sp=on,recompute=stage-aware \
      --layout dp=2,pp=2,m=2,sharding=optim_grads --layout pp=2,m=1 > "$work/mem.json"
    python3 - "$work/mem.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
# Also: the tied embedding's gradient kept whole across stages under
# gradient shards (7), fewer micro-batches than 1F1B's warm-up (8).
assert len(d["layouts"]) == 8, d
for row in d["layouts"]:
    r = row["measured_over_predicted"]
    for k in ("parameters", "gradients", "optimizer", "activations_peak"):
        assert r[k] == 1.0, (row["layout"], k, row)
# Sequence parallelism: the row-parallel linears' whole partial sums are
# freed once reduce-scattered, in the runtime and in the prediction alike
# (keeping them would put the measured peak 19% above).
sp = d["layouts"][2]
assert "sequence-parallel" in sp["layout"], sp
assert abs(sp["measured_over_predicted"]["activations_peak"] - 1) < 0.01, sp
optim = d["layouts"][1]["measured"]["optimizer"]
assert optim * 2 == d["layouts"][0]["measured"]["optimizer"], d
# A step's data-parallel traffic: the distributed optimizer's reduce-scatter
# and all-gather move what no_shard's all-reduce moves (the ring's two
# halves); a layout without replicas moves nothing.
plain_bytes, optim_bytes = (d["layouts"][k]["dp_bytes_per_rank"] for k in (0, 1))
assert plain_bytes > 0 and abs(optim_bytes - plain_bytes) <= 0.02 * plain_bytes, d
assert d["layouts"][2]["dp_bytes_per_rank"] == 0, d
print("ok: bytes by category as the planner predicts for", [r["layout"] for r in d["layouts"]])
PY
    # Interleaved: a device's bytes are its chunks' together (each chunk is a
    # stage actor, its peak counted apart), the model cut into pp x chunks
    # virtual stages (6 layers into 4 and 6 chunks of unequal size), each
    # chunk holding the micro-batches the device's order leaves in flight
    # (on pp 3 the first device's chunk 0 holds 5 where its chunk 1 holds 3).
    # Under parameter shards every replica runs the fixed order the count
    # follows: the bytes are exact; otherwise a device that runs a backward
    # earlier than the order allows holds less, never more.
    "$merak" bench memory --layers 6 --dim 32 --heads 2 --seq 16 --batch 24 \
      --layout dp=2,pp=2,m=4,schedule=interleaved,chunks=2,sharding=optim_grads_params \
      --layout dp=2,pp=3,m=6,schedule=interleaved,chunks=2,sharding=optim_grads_params \
      --layout dp=2,pp=2,m=4,schedule=interleaved,chunks=2,recompute=full,sharding=optim_grads_params \
      --layout pp=3,m=6,schedule=interleaved,chunks=2 > "$work/chunks.json"
    python3 - "$work/chunks.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["layouts"]
assert len(rows) == 4, rows
for i, row in enumerate(rows):
    r = row["measured_over_predicted"]
    for k in ("parameters", "gradients", "optimizer"):
        assert r[k] == 1.0, (k, row)
    if i < 3:
        assert r["activations_peak"] == 1.0, row
    assert 0.5 < r["activations_peak"] <= 1.0, row
    assert r["gradients_peak"] <= 1.0, row
print("ok: an interleaved device holds its chunks' bytes:", [r["measured"] for r in rows])
PY
    # Gradient shards' peak during backward (small buckets, so that the
    # peak is the shards, a layer's whole gradients and three buckets, not
    # the unsharded bytes): within 5% of the planner's.
    "$merak" bench memory --layers 2 --dim 64 --heads 2 --seq 16 --batch 8 \
      --layout dp=2,sharding=optim_grads,bucket_kb=64 --layout dp=4,sharding=optim_grads,bucket_kb=64 \
      --layout dp=2 > "$work/peak.json"
    python3 - "$work/peak.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
grads, grads4, plain = d["layouts"]
for row in (grads, grads4):
    assert 0.95 <= row["measured_over_predicted"]["gradients_peak"] <= 1.05, row
    assert row["measured"]["gradients"] < row["measured"]["gradients_peak"] < plain["measured"]["gradients"], row
assert plain["measured_over_predicted"]["gradients_peak"] == 1.0, plain
print("ok: gradient shards peak as the planner predicts:",
      [r["measured"]["gradients_peak"] for r in (grads, grads4, plain)])
PY
    # Parameter shards: the values held whole at once, as the planner
    # replays the runtime's buckets and fetcher, to the byte (small buckets:
    # many of them, each past its limit by up to a parameter), in fp32 and
    # in bf16 (GEMM weights held as bf16 only).
    for precision in fp32 bf16; do
      "$merak" bench memory --layers 2 --dim 64 --heads 2 --seq 16 --batch 8 --precision $precision \
        --layout dp=2,sharding=optim_grads_params,bucket_kb=16 \
        --layout dp=2,pp=2,m=2,sharding=optim_grads_params,bucket_kb=16 \
        --layout dp=2,tp=2,m=2,sharding=optim_grads_params,bucket_kb=16 \
        --layout dp=2,tp=2,sp=on,m=2,sharding=optim_grads_params,bucket_kb=16 > "$work/zero3.json"
      python3 - "$work/zero3.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["layouts"]) == 4, d
for row in d["layouts"]:
    assert row["measured"]["parameters"] == row["predicted"]["parameters"], row
print("ok: gathered values as replayed:", [r["measured"]["parameters"] for r in d["layouts"]])
PY
    done
    expect_error "layout 'dp=2,bucket_kb=0': bucket_kb must be at least 1" bench memory --layout dp=2,bucket_kb=0
    expect_error "bench memory: layout 'dp=2,procs=2': runs in one process" bench memory --layout dp=2,procs=2 ;;
  bench_parallel)
    small=(--layers 1 --dim 32 --heads 2 --seq 16 --batch 4 --steps 1 --warmup-steps 0 --rounds 1)
    expect_error "layout 'pp=2,mb=2': unknown key 'mb'" bench parallel "${small[@]}" --layout pp=2,mb=2
    expect_error "layout 'pp=two': pp must be an integer .got 'two'" bench parallel "${small[@]}" --layout pp=two
    expect_error "layout 'dp=2,lend=maybe': lend must be on or off" bench parallel "${small[@]}" --layout dp=2,lend=maybe
    expect_error "layout 'tp=2,sp=1': sp must be on or off" bench parallel "${small[@]}" --layout tp=2,sp=1
    expect_error "error: --batch 4 does not split into --dp 1 x --micro-batches 3" bench parallel "${small[@]}" --layout pp=2,m=3
    "$merak" bench parallel "${small[@]}" --layout pp=2,m=2 --layout dp=2,lend=off > "$work/par.json"
    python3 - "$work/par.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["rounds"][0]
assert r["single_1_thread_tokens_per_s"] > 0, r
for name in ("pp=2,m=2", "dp=2,lend=off"):
    assert r[name]["tokens_per_s"] > 0 and abs(r[name]["ratio"] * r["single_1_thread_tokens_per_s"] - r[name]["tokens_per_s"]) < 1e-6 * r[name]["tokens_per_s"], r[name]
    assert d["ratio_to_1_thread"][name]["ratio_median"] == r[name]["ratio"]
PY
    # A layout as 2 processes of one job, against the same layout in one.
    "$merak" bench parallel "${small[@]}" --layout pp=2,m=2,lend=off --layout pp=2,m=2,lend=off,procs=2 > "$work/procs.json"
    python3 - "$work/procs.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["rounds"][0]["pp=2,m=2,lend=off,procs=2"]
one = d["rounds"][0]["pp=2,m=2,lend=off"]
assert r["tokens_per_s"] > 0 and abs(r["vs_one_process"] - r["tokens_per_s"] / one["tokens_per_s"]) < 1e-9, r
PY
    expect_error "procs must be at least 1" bench parallel "${small[@]}" --layout pp=2,procs=0
    # A tensor between 2 processes: the channel against UCX, per size.
    "$merak" bench p2p --bytes 4096 --bytes 65536 --iters 5 > "$work/p2p.json"
    python3 - "$work/p2p.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert [s["bytes"] for s in d["sizes"]] == [4096, 65536], d
for s in d["sizes"]:
    assert s["ucx_one_way_us"] > 0 and s["channel_one_way_us"] > 0, s
    assert abs(s["channel_vs_ucx"] - s["channel_one_way_us"] / s["ucx_one_way_us"]) < 1e-9, s
PY
    expect_error "--bytes 6 is not a positive multiple of 4" bench p2p --bytes 6 --iters 1
    ;;
  *)
    echo "unknown case $case_name"
    exit 2 ;;
esac
