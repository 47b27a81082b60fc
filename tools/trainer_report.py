#!/usr/bin/env python3
"""Table and plot of scripts/trainer_bench.sh's runs: mxtrain against PyTorch on one GPT.

Usage: trainer_report.py ROWS.jsonl MACHINE.txt TABLE.md PLOT.svg [PEAK_GFLOPS]

ROWS holds one JSON object per run (tool, d_model, round, median_step_ms, tokens_per_s,
peak_rss_kib). The table gives, at d_model 256, the median over rounds of each tool's median
step with its range, its speed relative to PyTorch (PyTorch's step time / the tool's, taken
per round; the median and range of those) and peak RSS; then tokens/s per width (median,
and the range when there is more than one round), and per width the ratio of mxtrain
mxfp8's step to bf16's (per round; median and range). Medians are true medians (the mean of
the middle two for an even count). With PEAK_GFLOPS (and rows that carry flops_per_token),
each mxtrain tool gets an MFU row per width: tokens/s x FLOPs per token / the peak, per round
(median and range). The SVG plots tokens/s against d_model, one line per tool.
Standard library only; both outputs are written atomically.
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
    peak = float(sys.argv[5]) if len(sys.argv) > 5 else None
    rows = [json.loads(l) for l in open(rows_path) if l.strip()]
    machine = open(machine_path).read().strip().splitlines()[0]
    tools = [t for t in COLORS if any(r["tool"] == t for r in rows)]
    by = {}
    for r in rows:
        by.setdefault((r["tool"], r["d_model"]), []).append(r)

    def med(tool, d, key):
        rs = by.get((tool, d), [])
        return statistics.median(r[key] for r in rs) if rs else None

    def span(tool, d, key, fmt):
        vals = [r[key] for r in by.get((tool, d), [])]
        return f" ({fmt.format(min(vals))}-{fmt.format(max(vals))})" if len(vals) > 1 else ""

    def per_round(num_tool, den_tool, d):
        """num's step / den's step, per round both ran in."""
        a = {r["round"]: r["median_step_ms"] for r in by.get((num_tool, d), [])}
        b = {r["round"]: r["median_step_ms"] for r in by.get((den_tool, d), [])}
        return [a[k] / b[k] for k in sorted(a) if k in b]

    def ratio_cell(vals, invert=False):
        if not vals:
            return "n/a"
        vals = [1 / v for v in vals] if invert else vals
        m = statistics.median(vals)
        return f"{m:.2f}x" + (f" ({min(vals):.2f}-{max(vals):.2f}x)" if len(vals) > 1 else "")

    ref = "pytorch bf16 autocast"
    lines = [f"Machine: {machine}", "",
             "| d_model 256, 4 layers, seq 256, micro-batch 8 | median step (ms, range) | speed vs PyTorch (per round: median, range) | tokens/s | peak RSS (MiB) | rounds |",
             "|---|---|---|---|---|---|"]
    for t in tools:
        ms = med(t, 256, "median_step_ms")
        if ms is None:
            continue
        rel = ratio_cell(per_round(t, ref, 256), invert=True) if t != ref else "1.00x"
        lines.append(f"| {t} | {ms:.1f}{span(t, 256, 'median_step_ms', '{:.1f}')} | {rel} | "
                     f"{8 * 256 / (ms / 1e3):.0f} | {med(t, 256, 'peak_rss_kib') / 1024:.0f} | "
                     f"{len(by[(t, 256)])} |")
    widths = sorted({r["d_model"] for r in rows})
    lines += ["", "| tokens/s: median (range), peak RSS MiB | " +
              " | ".join(f"d_model {d}" for d in widths) + " |", "|---|" + "---|" * len(widths)]
    for t in tools:
        cells = []
        for d in widths:
            tps, rss = med(t, d, "tokens_per_s"), med(t, d, "peak_rss_kib")
            cells.append(f"{tps:.0f}{span(t, d, 'tokens_per_s', '{:.0f}')}, {rss / 1024:.0f}"
                         if tps else "–")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    if peak:
        for t in tools:
            if not t.startswith("mxtrain"):
                continue
            cells = []
            for d in widths:
                v = [r["tokens_per_s"] * r["flops_per_token"] / (peak * 1e9)
                     for r in by.get((t, d), []) if "flops_per_token" in r]
                cells.append(f"{100 * statistics.median(v):.1f}%" +
                             (f" ({100 * min(v):.1f}-{100 * max(v):.1f}%)" if len(v) > 1 else "")
                             if v else "–")
            lines.append(f"| {t} MFU (peak {peak:.1f} GFLOP/s) | " + " | ".join(cells) + " |")
    if "mxtrain mxfp8" in tools and "mxtrain bf16" in tools:
        lines.append("| mxfp8 step / bf16 step (per round) | " + " | ".join(
            ratio_cell(per_round("mxtrain mxfp8", "mxtrain bf16", d)) for d in widths) + " |")
    rounds = sorted({r["round"] for r in rows if r["d_model"] != 256})
    lines += ["", f"Rounds per width: {len(rounds)} (d_model 256: {len(by.get((tools[0], 256), []))})."]
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
