#!/usr/bin/env python3
"""Summarise FSDP training runs (scripts/fsdp_train_bench.sh) as a Markdown table.

Usage: fsdp_table.py RUN_DIR   (reads RUN_DIR/np<W>-<recipe>-<mode>.jsonl)
Medians over steps after the first (which includes start-up gathers and warm-up).
"""
import glob
import json
import os
import statistics
import sys


def rows(path):
    out = []
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if "allgather_bytes" in o:
                out.append(o)
    return out[1:]


def main():
    d = sys.argv[1]
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
            r = rows(p)
            b = statistics.median(x["allgather_bytes"] for x in r)
            ms = statistics.median(x["allgather_ms"] for x in r)
            rs = statistics.median(x["reduce_scatter_bytes"] for x in r)
            st = statistics.median(x["step_ms"] for x in r)
            if recipe == "bf16":
                base = (b, ms)
            shown_mode = mode if recipe == "mxfp8" else ("reshard" if recipe == "bf16" else "-")
            print(f"| {np} | {recipe} | {shown_mode} | {b:,.0f} | {b / base[0]:.3f} | {ms:.2f} | "
                  f"{ms / base[1]:.3f} | {rs:,.0f} | {st:.1f} |")


if __name__ == "__main__":
    main()
