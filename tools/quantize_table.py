#!/usr/bin/env python3
"""The tables of docs/results/quantize.md from its raw runs (docs/results/quantize_runs.json).

Per kernel, input and thread count over the runs of a series: `best ms` is the best run's
time (each run's `ms` is already its best iteration), `memcpy GB/s` and `of memcpy` are true
medians over the runs (statistics.median: the mean of the middle two for an even count), with
the range of `of memcpy` beside it.

Usage: tools/quantize_table.py [RUNS_JSON]   (prints Markdown)
"""
import json
import statistics
import sys

KEYS = [(op, inp, t) for inp in ("f32", "bf16") for op in ("rowwise", "dual", "tile32")
        for t in (1, 2)]


def summary(runs):
    out = {}
    for key in KEYS:
        rows = [next(r for r in run if (r["op"], r["input"], r["threads"]) == key)
                for run in runs]
        f = [100 * r["fraction_of_memcpy"] for r in rows]
        out[key] = {"best": min(r["ms"] for r in rows),
                    "memcpy": statistics.median(r["memcpy_gb_per_s"] for r in rows),
                    "frac": statistics.median(f), "lo": min(f), "hi": max(f), "n": len(rows)}
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "docs/results/quantize_runs.json"
    series = json.load(open(path))["series"]
    now, k4, before = (summary(series[s]["runs"]) for s in ("now", "now_4k_pages", "before"))
    print(f"Huge pages (default), {now[KEYS[0]]['n']} runs:\n")
    print("| kernel | input | threads | best ms | memcpy GB/s (median) | of memcpy: median (range) |")
    print("|---|---|---|---|---|---|")
    for (op, inp, t) in KEYS:
        s = now[(op, inp, t)]
        print(f"| {op} | {inp} | {t} | {s['best']:.2f} | {s['memcpy']:.0f} | "
              f"{s['frac']:.0f}% ({s['lo']:.0f}-{s['hi']:.0f}%) |")
    print("\n4 KiB pages against huge pages:\n")
    print("| kernel | input | threads | 4 KiB pages: best ms, of memcpy (median) | huge pages: best ms, of memcpy (median) |")
    print("|---|---|---|---|---|")
    for key in KEYS:
        a, b = k4[key], now[key]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {a['best']:.2f}, {a['frac']:.0f}% (memcpy "
              f"{a['memcpy']:.0f} GB/s) | {b['best']:.2f}, {b['frac']:.0f}% (memcpy "
              f"{b['memcpy']:.0f} GB/s) |")
    print("\nBefore and after:\n")
    print("| kernel | input | threads | before: best ms | now: best ms | change | before: of memcpy (median) | now |")
    print("|---|---|---|---|---|---|---|---|")
    for key in KEYS:
        a, b = before[key], now[key]
        ch = 100 * (b["best"] / a["best"] - 1)
        print(f"| {key[0]} | {key[1]} | {key[2]} | {a['best']:.2f} | {b['best']:.2f} | "
              f"{ch:+.0f}% | {a['frac']:.0f}% | {b['frac']:.0f}% |")


if __name__ == "__main__":
    main()
