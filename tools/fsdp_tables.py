#!/usr/bin/env python3
"""Markdown tables for the FSDP training measurements, plus one JSON row per line for tools.

Usage: fsdp_tables.py train RUN_DIR     (scripts/fsdp_train_bench.sh: np<W>-<recipe>-<mode>.jsonl)
       fsdp_tables.py memory RUN_DIR    (scripts/fsdp_memory.sh: <recipe>-<mode>-w<W>.rss.<rank>)
       fsdp_tables.py overlap RUN_DIR   (scripts/fsdp_overlap.sh: w<W>-<recipe>-p<P>-<thread>.jsonl)
Writes RUN_DIR/rows.jsonl and prints the table. Time figures are medians over the steps after
the first (which includes start-up gathers and warm-up).
"""
import glob
import json
import os
import re
import statistics
import sys


def steady_rows(path):
    """Metrics rows of the training steps after the first (start-up gathers, warm-up)."""
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if "step_ms" in r][1:]


def median(rows, key):
    return statistics.median(r[key] for r in rows)


def train(d):
    """All-gather bytes and time per step by recipe and gather mode, against BF16 (reshard)."""
    out = []
    print("| ranks | recipe | mode | all-gather bytes sent/step | vs bf16 | all-gather ms/step | "
          "vs bf16 | reduce-scatter bytes/step | step ms |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for np in (2, 4):
        base = None
        for recipe, mode in (("bf16", "on-demand"), ("mxfp8", "on-demand"), ("mxfp8", "all"),
                             ("mxfp8-32x32", "on-demand")):
            p = os.path.join(d, f"np{np}-{recipe}-{mode}.jsonl")
            if not os.path.exists(p):
                continue
            r = steady_rows(p)
            b, ms = median(r, "allgather_bytes"), median(r, "allgather_ms")
            rs, st = median(r, "reduce_scatter_bytes"), median(r, "step_ms")
            if recipe == "bf16":
                base = (b, ms)
            shown_mode = mode if recipe == "mxfp8" else ("reshard" if recipe == "bf16" else "-")
            out.append({"world": np, "recipe": recipe, "mode": shown_mode, "allgather_bytes": b,
                        "allgather_ms": ms, "reduce_scatter_bytes": rs, "step_ms": st})
            print(f"| {np} | {recipe} | {shown_mode} | {b:,.0f} | {b / base[0]:.3f} | {ms:.2f} | "
                  f"{ms / base[1]:.3f} | {rs:,.0f} | {st:.1f} |")
    return out


def memory(d):
    peaks = {}  # (tag, world) -> [peak KiB per rank]
    for f in glob.glob(os.path.join(d, "*.rss.*")):
        m = re.match(r"(.+)-w(\d+)\.rss\.(\d+)$", os.path.basename(f))
        kib = int(open(f).read().split()[-1])
        peaks.setdefault((m.group(1), int(m.group(2))), []).append(kib)
    out = []
    print("| recipe | gather mode | ranks | largest per-rank peak RSS (MiB) | vs one process | "
          "step ms |")
    print("|---|---|---:|---:|---:|---:|")
    for tag in sorted({t for t, _ in peaks}):
        recipe, mode = re.match(r"(.+)-(on-demand|all|reshard|-)$", tag).groups()
        one = max(peaks[(tag, 1)])
        for w in sorted(w for t, w in peaks if t == tag):
            big = max(peaks[(tag, w)])
            step = median(steady_rows(os.path.join(d, f"{tag}-w{w}.jsonl")), "step_ms")
            row = {"recipe": recipe, "mode": mode, "world": w, "peak_rss_kib": big,
                   "ratio_vs_one_process": big / one, "step_ms": step}
            out.append(row)
            print(f"| {recipe} | {mode} | {w} | {big / 1024:.0f} | {big / one:.2f}x | {step:.0f} |")
    return out


def overlap(d):
    out = []
    print("| ranks | recipe | prefetch | progress thread | comm total ms | comm exposed ms | "
          "all-gather exposed ms | reduce-scatter exposed ms | step ms |")
    print("|---:|---|---:|---|---:|---:|---:|---:|---:|")
    files = glob.glob(os.path.join(d, "w*-p*-*.jsonl"))
    keyed = []
    for f in files:
        m = re.match(r"w(\d+)-(.+)-p(\d+)-(true|false)\.jsonl$", os.path.basename(f))
        keyed.append(((int(m.group(1)), m.group(2), int(m.group(3)), m.group(4) == "true"), f))
    for (w, recipe, p, thread), f in sorted(keyed, key=lambda k: (k[0][0], k[0][1], k[0][2], k[0][3])):
        rows = steady_rows(f)
        row = {"world": w, "recipe": recipe, "prefetch": p, "progress_thread": thread}
        for k in ("comm_total_ms", "comm_exposed_ms", "allgather_ms", "reduce_scatter_ms",
                  "step_ms"):
            row[k] = median(rows, k)
        out.append(row)
        print(f"| {w} | {recipe} | {p} | {'on' if thread else 'off'} | {row['comm_total_ms']:.0f} | "
              f"{row['comm_exposed_ms']:.0f} | {row['allgather_ms']:.0f} | "
              f"{row['reduce_scatter_ms']:.0f} | {row['step_ms']:.0f} |")
    return out


def main():
    kind, d = sys.argv[1], sys.argv[2]
    rows = {"train": train, "memory": memory, "overlap": overlap}[kind](d)
    with open(os.path.join(d, "rows.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
