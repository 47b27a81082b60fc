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


def table(columns, rows):
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "docs/results/quantize_runs.json"
    series = json.load(open(path))["series"]
    now, k4, before = (summary(series[s]["runs"]) for s in ("now", "now_4k_pages", "before"))
    name = lambda k: [k[0], k[1], str(k[2])]
    print(f"Huge pages (default), {now[KEYS[0]]['n']} runs:\n")
    table(["kernel", "input", "threads", "best ms", "memcpy GB/s (median)",
           "of memcpy: median (range)"],
          [name(k) + [f"{now[k]['best']:.2f}", f"{now[k]['memcpy']:.0f}",
                      f"{now[k]['frac']:.0f}% ({now[k]['lo']:.0f}-{now[k]['hi']:.0f}%)"]
           for k in KEYS])
    print("\n4 KiB pages against huge pages:\n")
    cell = lambda s: f"{s['best']:.2f}, {s['frac']:.0f}% (memcpy {s['memcpy']:.0f} GB/s)"
    table(["kernel", "input", "threads", "4 KiB pages: best ms, of memcpy (median)",
           "huge pages: best ms, of memcpy (median)"],
          [name(k) + [cell(k4[k]), cell(now[k])] for k in KEYS])
    print("\nBefore and after:\n")
    table(["kernel", "input", "threads", "before: best ms", "now: best ms", "change",
           "before: of memcpy (median)", "now"],
          [name(k) + [f"{before[k]['best']:.2f}", f"{now[k]['best']:.2f}",
                      f"{100 * (now[k]['best'] / before[k]['best'] - 1):+.0f}%",
                      f"{before[k]['frac']:.0f}%", f"{now[k]['frac']:.0f}%"] for k in KEYS])


if __name__ == "__main__":
    main()
