#!/usr/bin/env python3
"""Markdown table of `merak bench allreduce` JSON lines (stdin): the codec
sweep's columns, speed-up against the dense run of the same density and
transport setting, and against coo of the same density/rows setting."""
import json, sys

runs = [json.loads(l) for l in sys.stdin if l.startswith("{")]
dense = {(r["row_density"], r["ucx_tls"]): r["time_ms"] for r in runs if r["method"] == "dense"}
coo = {(r["row_density"], r["ucx_tls"], r["known_rows"]): r["time_ms"] for r in runs if r["method"] == "coo"}
print("| tls | density | method | rows | time ms [min, max] | encode | comm | decode | bytes/rank | vs dense bytes | vs dense | vs coo | rel_error |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in runs:
    m = r["method"] + (f" y={r['sketch_ratio']:g}" if r["method"] == "s2" else "")
    rows = "-" if r["method"] == "dense" else ("known" if r["known_rows"] else "scan")
    d = dense.get((r["row_density"], r["ucx_tls"]))
    c = coo.get((r["row_density"], r["ucx_tls"], r["known_rows"]))
    sd = f"{d / r['time_ms']:.2f}x" if d else "-"
    sc = f"{c / r['time_ms']:.2f}x" if c and r["method"] != "dense" else "-"
    print(f"| {r['ucx_tls']} | {r['row_density']:g} | {m} | {rows} | {r['time_ms']:.2f} [{r['time_min_ms']:.2f}, {r['time_max_ms']:.2f}] "
          f"| {r['encode_ms']:.2f} | {r['comm_ms']:.2f} | {r['decode_ms']:.2f} | {r['bytes_per_rank']:.0f} "
          f"| {r['bytes_vs_dense']:.4f} | {sd} | {sc} | {r['rel_error']:.3g} |")
