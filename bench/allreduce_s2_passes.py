#!/usr/bin/env python3
"""Tables of several passes of bench/allreduce_s2_pass.sh (docs/s2-reducer.md,
"Results"). Arguments: BUILD PASS.jsonl [PASS.jsonl ...]: the build
whose runs make the main table (others are compared in the second table).
Speed-ups are per pass: dense median / median and coo median / median (same
build, density and row setting). Phases are medians over the passes. A
summary follows: per setting the range over passes of the median time and
of the two speed-ups, and in how many passes the speed-up against coo
reached the issue's 1.8x (and against MPI_Allreduce when the passes ran
--method mpi)."""
import json, statistics, sys

build, files = sys.argv[1], sys.argv[2:]
passes = [[json.loads(l) for l in open(f) if l.startswith("{")] for f in files]


def key(r):
    rows = "-" if r["method"] in ("dense", "mpi") else ("known" if r["known_rows"] else "scan")
    m = r["method"] + (f" y={r['sketch_ratio']:g}" if r["method"] == "s2" else "")
    return (r["row_density"], rows, m)


def index(runs, b):
    return {key(r): r for r in runs if r.get("build", "") == b}


def bytes_cell(r):
    # MPI_Allreduce's bytes are not counted by a transport of ours (bytes_counted false)
    if r.get("bytes_counted", True) is False:
        return "not counted"
    return f"{r['bytes_per_rank']:.0f} ({r['bytes_vs_dense']:.4f})"


def vs_dense(r):
    return f"{r['bytes_vs_dense']:.4f}" if "bytes_vs_dense" in r else "-"


idx = [index(p, build) for p in passes]
order = [key(r) for r in passes[0] if r.get("build", "") == build]
print(f"build {build}; per pass: median ms (vs dense, vs coo)")
print("| density | rows | method | bytes/rank (vs dense) | rel_error | "
      + " | ".join(f"pass {i + 1}" for i in range(len(files)))
      + " | encode / comm / decode ms |")
print("|---|---|---|---|---|" + "---|" * len(files) + "---|")
for k in order:
    x, rows, m = k
    cells = []
    ph = {"encode_ms": [], "comm_ms": [], "decode_ms": []}
    for p in idx:
        r = p.get(k)
        if not r:
            cells.append("-")
            continue
        d = p.get((x, "-", "dense"))
        c = p.get((x, rows, "coo"))
        s = f"{r['time_ms']:.2f} ({d['time_ms'] / r['time_ms']:.1f}x" if d else f"{r['time_ms']:.2f} (-"
        s += f", {c['time_ms'] / r['time_ms']:.2f}x)" if c and rows != "-" else ")"
        cells.append(s)
        for f in ph:
            ph[f].append(r[f])
    r0 = idx[0][k]
    phs = " / ".join(f"{statistics.median(v):.2f}" for v in ph.values())
    print(f"| {x:g} | {rows} | {m} | {bytes_cell(r0)} | "
          f"{r0['rel_error']:.3g} | " + " | ".join(cells) + f" | {phs} |")

print(f"\nsummary over {len(files)} passes (build {build}): range of per-pass medians")
print("| density | rows | method | bytes/rank vs dense | rel_error | time ms | vs dense | vs MPI_Allreduce | vs coo | passes >= 1.8x coo |")
print("|---|---|---|---|---|---|---|---|---|---|")


def span(v, f):
    return "-" if not v else (f.format(min(v)) if min(v) == max(v) else f.format(min(v)) + "–" + f.format(max(v)))


for k in order:
    x, rows, m = k
    t, vd, vm, vc = [], [], [], []
    for p in idx:
        r = p.get(k)
        if not r:
            continue
        t.append(r["time_ms"])
        for ref, out in (((x, "-", "dense"), vd), ((x, "-", "mpi"), vm), ((x, rows, "coo"), vc)):
            q = p.get(ref)
            if q and ref != k and (ref[2] != "coo" or rows != "-"):
                out.append(q["time_ms"] / r["time_ms"])
    r0 = idx[0][k]
    hits = f"{sum(v >= 1.8 for v in vc)} of {len(vc)}" if vc and m != "coo" else "-"
    print(f"| {x:g} | {rows} | {m} | {vs_dense(r0)} | {r0['rel_error']:.3g} | {span(t, '{:.2f}')} | "
          f"{span(vd, '{:.1f}x')} | {span(vm, '{:.1f}x')} | {span(vc if m != 'coo' else [], '{:.2f}x')} | {hits} |")

others = sorted({r.get("build", "") for p in passes for r in p} - {build})
for o in others:
    oidx = [index(p, o) for p in passes]
    print(f"\nbuild {o} against {build}, same passes: median ms {o} -> {build}")
    print("| density | rows | method | " + " | ".join(f"pass {i + 1}" for i in range(len(files)))
          + " | decode ms (median over passes) |")
    print("|---|---|---|" + "---|" * len(files) + "---|")
    for k in order:
        cells, da, db = [], [], []
        for p, q in zip(oidx, idx):
            a, b = p.get(k), q.get(k)
            if a and b:
                cells.append(f"{a['time_ms']:.2f} -> {b['time_ms']:.2f}")
                da.append(a["decode_ms"]), db.append(b["decode_ms"])
            else:
                cells.append("-")
        dec = f"{statistics.median(da):.2f} -> {statistics.median(db):.2f}" if da else "-"
        print(f"| {k[0]:g} | {k[1]} | {k[2]} | " + " | ".join(cells) + f" | {dec} |")
