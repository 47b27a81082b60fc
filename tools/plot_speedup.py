#!/usr/bin/env python3
"""Plot FP8 / BF16 layer speedup against token count from `mxtrain bench-layers` reports, as SVG.

Usage: plot_speedup.py --out FILE.svg [--title TEXT] LABEL=report.json [LABEL=report.json ...]

One panel per report, side by side. In each panel, one line per layer (dense kinds:
`kind/name`; MoE grouped kinds: `kind gN`, N local experts) of `speedup` = bf16_ms / fp8_ms
against `tokens` on a log2 axis, with an error bar of +- `spread` (the half-range the merge
uses) and a dashed horizontal line at 1.0: above it FP8 is faster. Points that carry only one
precision are skipped. The y axis runs from 0 to at most 2.0; longer error bars are cut
there. Part of the adaptive-FP8 evidence (scripts/adaptive.sh); uses only the
Python standard library, like tools/plot_losses.py.
"""
import argparse
import json
import math
import os

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"]


def read_report(path):
    """Returns {series label: [(tokens, speedup, spread), ...]} sorted by tokens."""
    with open(path) as f:
        rep = json.load(f)
    series = {}
    for p in rep.get("points", []):
        if "speedup" not in p:
            continue
        if "num_gemms" in p:
            label = f'{p["kind"]} g{p["num_gemms"]}'
        else:
            label = f'{p["kind"]}/{p["name"]}'
        series.setdefault(label, []).append((p["tokens"], p["speedup"], p.get("spread", 0.0)))
    return {k: sorted(v) for k, v in series.items()}


def panel(s, ox, label, series, y1, W, H, L, R, T, B):
    pts = [q for v in series.values() for q in v]
    if not pts:
        s.append(f'<text x="{ox + W/2}" y="{H/2}" text-anchor="middle">{label}: no paired points</text>')
        return
    lx0 = math.floor(math.log2(min(q[0] for q in pts)))
    lx1 = math.ceil(math.log2(max(q[0] for q in pts)))
    if lx1 == lx0:
        lx1 = lx0 + 1
    px = lambda t: ox + L + (math.log2(t) - lx0) / (lx1 - lx0) * (W - L - R)
    py = lambda y: T + (y1 - min(max(y, 0.0), y1)) / y1 * (H - T - B)
    s.append(f'<text x="{ox + (L + W - R)/2}" y="{T-8}" text-anchor="middle" '
             f'font-size="14">{label}</text>')
    for i in range(6):
        y = y1 * i / 5
        s.append(f'<line x1="{ox+L}" x2="{ox+W-R}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#ddd"/>')
        s.append(f'<text x="{ox+L-6}" y="{py(y)+4:.1f}" text-anchor="end">{y:.2f}</text>')
    for e in range(lx0, lx1 + 1):
        x = px(2 ** e)
        s.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{T}" y2="{H-B}" stroke="#eee"/>')
        s.append(f'<text x="{x:.1f}" y="{H-B+16}" text-anchor="middle">{2**e}</text>')
    s.append(f'<text x="{ox + (L + W - R)/2}" y="{H-B+34}" text-anchor="middle">'
             f'tokens (log2)</text>')
    s.append(f'<text x="{ox+14}" y="{(T+H-B)/2}" transform="rotate(-90 {ox+14} {(T+H-B)/2})" '
             f'text-anchor="middle">speedup = bf16_ms / fp8_ms</text>')
    s.append(f'<line x1="{ox+L}" x2="{ox+W-R}" y1="{py(1.0):.1f}" y2="{py(1.0):.1f}" '
             f'stroke="#000" stroke-width="1.5" stroke-dasharray="6,3"/>')
    s.append(f'<rect x="{ox+L}" y="{T}" width="{W-L-R}" height="{H-T-B}" fill="none" stroke="#333"/>')
    for k, (name, v) in enumerate(sorted(series.items())):
        c = COLORS[k % len(COLORS)]
        line = " ".join(f"{px(t):.1f},{py(y):.1f}" for t, y, _ in v)
        s.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"/>')
        for t, y, sp in v:
            s.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{py(y - sp):.1f}" '
                     f'y2="{py(y + sp):.1f}" stroke="{c}" opacity="0.5"/>')
            s.append(f'<circle cx="{px(t):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        ly = T + 14 + 18 * k
        s.append(f'<line x1="{ox+W-R+10}" x2="{ox+W-R+30}" y1="{ly}" y2="{ly}" stroke="{c}" '
                 f'stroke-width="2"/>')
        s.append(f'<text x="{ox+W-R+35}" y="{ly+4}">{name}</text>')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="MXFP8 vs BF16 per layer (forward + backward)")
    ap.add_argument("reports", nargs="+", help="LABEL=report.json")
    a = ap.parse_args()
    panels = []
    for r in a.reports:
        label, path = r.split("=", 1) if "=" in r else (r, r)
        panels.append((label, read_report(path)))
    top = max([q[1] + q[2] for _, ser in panels for v in ser.values() for q in v] + [1.2])
    y1 = min(math.ceil(top * 5) / 5, 2.0)  # clip huge error bars; the 1.0 line stays in view
    W, H, L, R, T, B = 600, 400, 60, 200, 50, 50
    TW = W * len(panels)
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{TW}" height="{H+20}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{TW}" height="{H+20}" fill="white"/>',
         f'<text x="{TW/2}" y="20" text-anchor="middle" font-size="15">{a.title}</text>']
    for i, (label, ser) in enumerate(panels):
        panel(s, i * W, label, ser, y1, W, H, L, R, T + 10, B)
    s.append("</svg>")
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(s) + "\n")
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
