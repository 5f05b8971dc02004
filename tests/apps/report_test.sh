#!/usr/bin/env bash
# `merak report` in a real browser: a pipeline-parallel run with --trace,
# --metrics and --save, its page rendered by headless Chromium, and the
# rendered DOM checked against the run's own files (every chart present,
# with the run's numbers). Skips (77) without chromium. Usage:
# report_test.sh MERAK_BINARY
set -euo pipefail
merak=$1
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$browser" ]]; then
  # CI installs Chromium (deploy/install-deps.sh --test) and sets
  # MERAK_REQUIRE_BROWSER=1: there a missing browser fails the test.
  if [[ "${MERAK_REQUIRE_BROWSER:-0}" == 1 ]]; then
    echo "no chromium, and MERAK_REQUIRE_BROWSER=1 (deploy/install-deps.sh --test installs it)"
    exit 1
  fi
  echo "skip: no chromium (deploy/install-deps.sh --test installs it)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect_error.sh"
cat "$(dirname "$0")"/../../README.md >"$work/text.txt"
run=$work/run
"$merak" train --data "$work/text.txt" --layers 2 --dim 64 --heads 2 --seq 32 --batch 12 \
  --steps 6 --eval-interval 3 --pp 2 --micro-batches 3 --trace "$run/trace.json" \
  --metrics "$run/metrics.jsonl" --save "$run/ckpt" --log-level warn
"$merak" report "$run" >"$work/report.out"
grep -q "report.html: 6 steps, pipeline timeline, flags" "$work/report.out" || { cat "$work/report.out"; exit 1; }
# The page as the browser built it (no network: the page needs none).
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --dump-dom "file://$run/report.html" \
  >"$work/dom.html" 2>"$work/browser.err" || { cat "$work/browser.err"; exit 1; }
python3 - "$work/dom.html" "$run" <<'PY'
import json, sys
from html.parser import HTMLParser
dom, run = open(sys.argv[1]).read(), sys.argv[2]
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.el = {}; self.rects = 0; self.lines = 0; self.cur = None; self.text = {}
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a: self.el[a["id"]] = (tag, a); self.cur = a["id"]
        if tag == "rect" and a.get("class") == "slice": self.rects += 1
        if tag == "polyline": self.lines += 1
    def handle_data(self, d):
        if self.cur: self.text[self.cur] = self.text.get(self.cur, "") + d
    def handle_endtag(self, tag):
        if tag in ("td", "pre"): self.cur = None
p = P(); p.feed(dom)
m = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
events = [e for e in json.load(open(f"{run}/trace.json"))["traceEvents"] if e["ph"] == "X"]
for cid in ("loss", "throughput", "grad-norm", "timeline"):
    assert cid in p.el and p.el[cid][0] == "svg", f"chart {cid} missing from the rendered page"
loss = p.el["loss"][1]
assert int(loss["data-loss-points"]) == len(m) == 6, loss
assert abs(float(loss["data-loss-last"]) - m[-1]["loss"]) < 1e-5 * abs(m[-1]["loss"]), (loss, m[-1])
vals = [l for l in m if "val_loss" in l]
assert int(loss["data-val_loss-points"]) == len(vals) == 2, loss
assert p.text["last-loss"] == f"{m[-1]['loss']:.4f}", p.text["last-loss"]
assert p.text["last-val-loss"] == f"{vals[-1]['val_loss']:.4f}", p.text["last-val-loss"]
assert int(p.el["throughput"][1]["data-tokens_per_s-points"]) == 6
assert abs(float(p.el["grad-norm"][1]["data-grad_norm-last"]) - m[-1]["grad_norm"]) < 1e-5 * m[-1]["grad_norm"]
tl = p.el["timeline"][1]
assert int(tl["data-slices"]) == len(events) == p.rects > 0, (tl, len(events), p.rects)
assert int(tl["data-lanes"]) == 2, tl  # one lane per pipeline stage
assert p.lines >= 4, p.lines
assert "layers = 2" in p.text["config"] and "pp = 2" in p.text["config"], p.text["config"][:200]
print(f"ok: Chromium rendered 4 charts: loss {m[-1]['loss']:.4f} over 6 steps, "
      f"val_loss at 2 steps, {len(events)} timeline slices on 2 lanes, the run's flags")
PY
expect_error "merak report: '$work/none' is not a directory" report "$work/none"
mkdir "$work/empty"
expect_error "merak report: '$work/empty' holds 0 metrics files" report "$work/empty"
printf '{"step": 1, "loss": 2}\nnot json\n' >"$work/empty/metrics.jsonl"
expect_error "merak report: $work/empty/metrics.jsonl:2: not a metrics line of merak train" report "$work/empty"
