#!/usr/bin/env bash
# `merak data prepare --workers 2` against `--workers 1` on Moby Dick: the
# book as JSONL, one paragraph per line, repeated REPEAT times (default 20,
# about 25 MB), tokenized by ByteTokenizer (or TOKENIZER_FLAGS). Best of
# RUNS (default 3) runs each; the two outputs must be identical.
#
# Usage: bench/prepare_bench.sh [MERAK]    (default build-gpu/bin/merak; env:
#        REPEAT, RUNS, TOKENIZER_FLAGS, MERAK_SHARED_DATA for moby_dick.txt)
#
# Prints one JSON object: {"input_mb", "documents", "tokens",
# "workers_1": {"seconds", "mb_per_s"}, "workers_2": {...}, "speedup", "cores",
# "load_average"}: the ratio needs free cores (the main thread reads and
# writes while the workers tokenize), so the load at the end is reported.
# Exits 77 without Moby Dick (deploy/get-data.sh fetches it).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
merak="${1:-$repo_root/build-gpu/bin/merak}"
REPEAT="${REPEAT:-20}"
RUNS="${RUNS:-3}"
read -r -a tok_flags <<<"${TOKENIZER_FLAGS:-}"
moby=""
for c in "${MERAK_SHARED_DATA:+$MERAK_SHARED_DATA/moby_dick.txt}" "$repo_root/data/moby_dick.txt"; do
  [[ -n "$c" && -f "$c" ]] && { moby=$c; break; }
done
[[ -n "$moby" ]] || { echo "no moby_dick.txt (deploy/get-data.sh)" >&2; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$moby" "$work/moby.jsonl" "$REPEAT" <<'PY'
import json, sys
text = open(sys.argv[1], encoding="utf-8").read()
paras = [p for p in text.split("\n\n") if p.strip()]
with open(sys.argv[2], "w") as f:
    for _ in range(int(sys.argv[3])):
        for p in paras:
            f.write(json.dumps({"text": p}) + "\n")
PY
best() {  # best() WORKERS -> the fastest run's --json line
  local n=$1 out=""
  for ((r = 0; r < RUNS; ++r)); do
    "$merak" data prepare --input "$work/moby.jsonl" --output-prefix "$work/w$n" --workers "$n" \
      "${tok_flags[@]}" --json 2>/dev/null >"$work/r.json"
    out=$(python3 - "$work/r.json" "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
prev = json.loads(sys.argv[2]) if sys.argv[2] else None
print(json.dumps(r if prev is None or r["seconds"] < prev["seconds"] else prev))
PY
)
  done
  echo "$out"
}
one=$(best 1)
two=$(best 2)
cmp "$work/w1_text_document.bin" "$work/w2_text_document.bin"
cmp "$work/w1_text_document.idx" "$work/w2_text_document.idx"
python3 - "$one" "$two" <<'PY'
import json, os, sys
a, b = (json.loads(x) for x in sys.argv[1:])
print(json.dumps({"bench": "data_prepare", "tokenizer": a["tokenizer"],
                  "input_mb": round(a["input_bytes"] / 1e6, 2), "documents": a["documents"],
                  "tokens": a["tokens"],
                  "workers_1": {"seconds": round(a["seconds"], 4), "mb_per_s": round(a["mb_per_s"], 1)},
                  "workers_2": {"seconds": round(b["seconds"], 4), "mb_per_s": round(b["mb_per_s"], 1)},
                  "speedup": round(a["seconds"] / b["seconds"], 3),
                  "cores": os.cpu_count(), "load_average": float(open("/proc/loadavg").read().split()[0])}))
PY
