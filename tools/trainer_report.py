#!/usr/bin/env python3
"""Table and plot of scripts/trainer_bench.sh's runs: mxtrain against PyTorch on one GPT.

Usage: trainer_report.py ROWS.jsonl MACHINE.txt TABLE.md PLOT.svg

ROWS holds one JSON object per run (tool, d_model, round, median_step_ms, tokens_per_s,
peak_rss_kib). The table gives, at d_model 256, the median over rounds of each tool's median
step, its speed relative to PyTorch (PyTorch's step time / the tool's) and peak RSS; then
tokens/s per width. The SVG plots tokens/s against d_model, one line per tool. Standard
library only; both outputs are written atomically.
"""
import json
import os
import statistics
import sys
import tempfile

COLORS = {"pytorch bf16 autocast": "#7f7f7f", "mxtrain bf16": "#1f77b4", "mxtrain mxfp8": "#d62728"}


def write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    rows_path, machine_path, table_path, svg_path = sys.argv[1:5]
    rows = [json.loads(l) for l in open(rows_path) if l.strip()]
    machine = open(machine_path).read().strip().splitlines()[0]
    tools = [t for t in COLORS if any(r["tool"] == t for r in rows)]
    by = {}
    for r in rows:
        by.setdefault((r["tool"], r["d_model"]), []).append(r)

    def med(tool, d, key):
        rs = by.get((tool, d), [])
        return statistics.median(r[key] for r in rs) if rs else None

    ref = "pytorch bf16 autocast"
    lines = [f"Machine: {machine}", "",
             "| d_model 256, 4 layers, seq 256, micro-batch 8 | median step (ms) | speed vs PyTorch | tokens/s | peak RSS (MiB) | rounds |",
             "|---|---|---|---|---|---|"]
    for t in tools:
        ms = med(t, 256, "median_step_ms")
        if ms is None:
            continue
        p = med(ref, 256, "median_step_ms")
        rel = f"{p / ms:.2f}x" if p else "n/a"
        lines.append(f"| {t} | {ms:.0f} | {rel} | {8 * 256 / (ms / 1e3):.0f} | "
                     f"{med(t, 256, 'peak_rss_kib') / 1024:.0f} | {len(by[(t, 256)])} |")
    widths = sorted({r["d_model"] for r in rows})
    lines += ["", "| tokens/s (peak RSS MiB) | " + " | ".join(f"d_model {d}" for d in widths) + " |",
              "|---|" + "---|" * len(widths)]
    for t in tools:
        cells = []
        for d in widths:
            tps, rss = med(t, d, "tokens_per_s"), med(t, d, "peak_rss_kib")
            cells.append(f"{tps:.0f} ({rss / 1024:.0f})" if tps else "–")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    write_atomic(table_path, "\n".join(lines) + "\n")

    # Plot: tokens/s against d_model (log-scaled y), one polyline per tool.
    import math
    W, H, L, R, T, B = 640, 400, 70, 170, 40, 50
    pts = {t: [(d, med(t, d, "tokens_per_s")) for d in widths if med(t, d, "tokens_per_s")] for t in tools}
    ys = [y for p in pts.values() for _, y in p]
    y0, y1 = math.log10(min(ys) * 0.8), math.log10(max(ys) * 1.25)
    x0, x1 = min(widths), max(widths)
    X = lambda d: L + (d - x0) / max(x1 - x0, 1) * (W - L - R)
    Y = lambda v: T + (y1 - math.log10(v)) / (y1 - y0) * (H - T - B)
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2 - 60}" y="20" font-size="14">Training throughput (tokens/s, log scale)</text>',
         f'<text x="{L}" y="{H - 8}">d_model (4 layers, seq 256, micro-batch 8) — {machine[:60]}</text>']
    for d in widths:
        s.append(f'<line x1="{X(d):.1f}" y1="{H - B}" x2="{X(d):.1f}" y2="{H - B + 5}" stroke="black"/>'
                 f'<text x="{X(d) - 12:.1f}" y="{H - B + 18}">{d}</text>')
    k = 10 ** math.floor(y0)
    while k <= 10 ** y1:
        for m in (1, 2, 5):
            v = k * m
            if 10 ** y0 <= v <= 10 ** y1:
                s.append(f'<line x1="{L}" y1="{Y(v):.1f}" x2="{W - R}" y2="{Y(v):.1f}" stroke="#ddd"/>'
                         f'<text x="{L - 8}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
        k *= 10
    s.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="black"/>')
    for i, t in enumerate(tools):
        p = pts[t]
        s.append(f'<polyline fill="none" stroke="{COLORS[t]}" stroke-width="2" points="' +
                 " ".join(f"{X(d):.1f},{Y(v):.1f}" for d, v in p) + '"/>')
        s += [f'<circle cx="{X(d):.1f}" cy="{Y(v):.1f}" r="3" fill="{COLORS[t]}"/>' for d, v in p]
        s.append(f'<line x1="{W - R + 10}" y1="{T + 10 + 18 * i}" x2="{W - R + 30}" y2="{T + 10 + 18 * i}" '
                 f'stroke="{COLORS[t]}" stroke-width="2"/><text x="{W - R + 35}" y="{T + 14 + 18 * i}">{t}</text>')
    s.append("</svg>")
    write_atomic(svg_path, "\n".join(s) + "\n")


if __name__ == "__main__":
    main()
