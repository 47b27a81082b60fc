#!/usr/bin/env python3
"""Plot training and validation loss curves from mxtrain metrics files as an SVG.

Usage: plot_losses.py --out FILE.svg --title TEXT LABEL=metrics.jsonl [LABEL=metrics.jsonl ...]

Reads the JSON Lines that `mxtrain train --metrics-out` writes (objects with `step` + `loss`,
and `step` + `val_loss`) and draws, per run, the training loss (thin line, smoothed over a
window of 10 steps) and the validation loss (markers joined by a thicker line), in nats per
byte: validation rows give `val_nats_per_byte` (equal to `val_loss` for byte-level models), and
the per-token training loss is scaled by the validation windows' tokens per byte (their mean
ratio val_nats_per_byte / val_loss; 1 for byte-level models), so runs with different
tokenizers share the axis. Uses only the Python standard library, so it runs anywhere the
project builds.
"""
import argparse
import json
import math
import os
import sys
import tempfile

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def read_metrics(path):
    train, val, ratios = [], [], []
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if o.get("summary"):
                continue
            if "val_loss" in o:
                per_byte = o.get("val_nats_per_byte", o["val_loss"])
                val.append((o["step"], per_byte))
                if o["val_loss"] > 0:
                    ratios.append(per_byte / o["val_loss"])
            elif "loss" in o and o["loss"] is not None:
                train.append((o["step"], o["loss"]))
    ratio = sum(ratios) / len(ratios) if ratios else 1.0
    return [(x, y * ratio) for x, y in train], val


def smooth(points, window=10):
    out = []
    for i in range(len(points)):
        lo = max(0, i - window + 1)
        out.append((points[i][0], sum(p[1] for p in points[lo:i + 1]) / (i + 1 - lo)))
    return out


def check_writable(out):
    """Fails (exit 1, one line) unless a file can be created next to `out`."""
    d = os.path.dirname(os.path.abspath(out))
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".plot-check-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        sys.exit(f"error: cannot write the plot {out}: {e.strerror}")


def write_atomic(out, text):
    """Temp file in the same directory, fsync, rename: a failure leaves no partial plot."""
    d = os.path.dirname(os.path.abspath(out))
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".plot-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except OSError as e:
        sys.exit(f"error: cannot write the plot {out}: {e.strerror}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="loss")
    ap.add_argument("--check", action="store_true",
                    help="only check that --out can be written (run before training)")
    ap.add_argument("runs", nargs="*", help="LABEL=metrics.jsonl")
    a = ap.parse_args()
    check_writable(a.out)
    if a.check:
        return
    if not a.runs:
        ap.error("no LABEL=metrics.jsonl given")
    runs = []
    for r in a.runs:
        label, path = r.split("=", 1)
        train, val = read_metrics(path)
        runs.append((label, smooth(train), val))
    xs = [p[0] for _, t, v in runs for p in t + v]
    ys = [p[1] for _, t, v in runs for p in t + v]
    x0, x1 = 0, max(xs)
    y0, y1 = math.floor(min(ys) * 10) / 10, math.ceil(max(ys) * 10) / 10
    W, H, L, R, T, B = 760, 440, 60, 180, 40, 50
    px = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    py = lambda y: T + (y1 - y) / (y1 - y0) * (H - T - B)
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="22" text-anchor="middle" font-size="15">{a.title}</text>']
    for i in range(6):
        y = y0 + (y1 - y0) * i / 5
        s.append(f'<line x1="{L}" x2="{W-R}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#ddd"/>')
        s.append(f'<text x="{L-6}" y="{py(y)+4:.1f}" text-anchor="end">{y:.2f}</text>')
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        s.append(f'<text x="{px(x):.1f}" y="{H-B+18}" text-anchor="middle">{x:.0f}</text>')
    s.append(f'<text x="{(L+W-R)/2}" y="{H-10}" text-anchor="middle">step</text>')
    s.append(f'<text x="16" y="{(T+H-B)/2}" transform="rotate(-90 16 {(T+H-B)/2})" '
             f'text-anchor="middle">loss (nats/byte)</text>')
    s.append(f'<rect x="{L}" y="{T}" width="{W-L-R}" height="{H-T-B}" fill="none" stroke="#333"/>')
    for k, (label, train, val) in enumerate(runs):
        c = COLORS[k % len(COLORS)]
        if train:
            pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in train)
            s.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1" '
                     f'opacity="0.6"/>')
        if val:
            pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in val)
            s.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2.5" '
                     f'stroke-dasharray="6,3"/>')
            for x, y in val:
                s.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{c}"/>')
        ly = T + 16 + 36 * k
        s.append(f'<line x1="{W-R+12}" x2="{W-R+36}" y1="{ly}" y2="{ly}" stroke="{c}" '
                 f'stroke-width="2"/>')
        s.append(f'<text x="{W-R+42}" y="{ly+4}">{label} train</text>')
        s.append(f'<line x1="{W-R+12}" x2="{W-R+36}" y1="{ly+16}" y2="{ly+16}" stroke="{c}" '
                 f'stroke-width="2.5" stroke-dasharray="6,3"/>')
        s.append(f'<text x="{W-R+42}" y="{ly+20}">{label} val</text>')
    s.append("</svg>")
    write_atomic(a.out, "\n".join(s) + "\n")


if __name__ == "__main__":
    main()
