#!/usr/bin/env python3
"""Summarise parity runs: final train/val loss per recipe, gap to BF16, tokens/s.

Usage: parity_table.py RUN_DIR   (reads RUN_DIR/<model>-<recipe>.jsonl, prints Markdown)
"""
import json
import os
import sys


def summary(path):
    s, last_loss = None, None
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if o.get("summary"):
                s = o
    return s


def main():
    d = sys.argv[1]
    print("| model | recipe | final train loss | final val loss | val gap vs bf16 | tokens/s | "
          "held bytes (fwd->bwd) |")
    print("|---|---|---|---|---|---|---|")
    for model in ["tiny", "tiny-moe"]:
        base = None
        for recipe in ["bf16", "mxfp8", "mxfp8-32x32"]:
            p = os.path.join(d, f"{model}-{recipe}.jsonl")
            if not os.path.exists(p):
                continue
            s = summary(p)
            if recipe == "bf16":
                base = s["final_val_loss"]
            gap = (s["final_val_loss"] / base - 1) * 100 if base else float("nan")
            print(f"| {model} | {recipe} | {s['final_loss']:.4f} | {s['final_val_loss']:.4f} | "
                  f"{gap:+.2f}% | {s['tokens_per_s']:.0f} | {s['held_bytes']} |")


if __name__ == "__main__":
    main()
