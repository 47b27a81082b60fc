#!/usr/bin/env python3
"""Summarise parity runs: final validation loss per recipe over seeds, gap to BF16, tokens/s.

Usage: parity_table.py RUN_DIR "RUNS" "SEEDS"
  reads RUN_DIR/<model>-<run>-s<seed>.jsonl (run: a recipe, `:` written as `-`) for the tiny
  and tiny-moe models and prints a Markdown table: the final validation loss of every seed,
  their mean ± spread (half the min-max range), the gap of the mean to BF16's mean, mean
  tokens/s, and the held bytes (forward -> backward) of the first seed's last step.
"""
import json
import os
import statistics
import sys


def summary(path):
    s = None
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if o.get("summary"):
                s = o
    return s


def main():
    d, runs, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
    machine = os.path.join(d, "machine.txt")
    if os.path.exists(machine):
        print(f"Machine: {open(machine).read().strip()}; seeds {', '.join(seeds)}.\n")
    print("| model | run | final val loss per seed | mean ± spread | gap of the mean vs bf16 | "
          "tokens/s (mean) | held bytes (fwd->bwd) |")
    print("|---|---|---|---|---|---|---|")
    for model in ["tiny", "tiny-moe"]:
        base = None
        for run in runs:
            tag = run.replace(":", "-")
            paths = [os.path.join(d, f"{model}-{tag}-s{s}.jsonl") for s in seeds]
            if not all(os.path.exists(p) for p in paths):
                continue
            sums = [summary(p) for p in paths]
            losses = [s["final_val_loss"] for s in sums]
            mean = statistics.mean(losses)
            spread = (max(losses) - min(losses)) / 2
            if run == "bf16":
                base = mean
            gap = (mean / base - 1) * 100 if base else float("nan")
            name = run.replace(":sw8", ", swiglu_input fp8").replace(":sw32", ", swiglu_input fp32")
            per_seed = ", ".join(f"{x:.4f}" for x in losses)
            tps = statistics.mean(s["tokens_per_s"] for s in sums)
            print(f"| {model} | {name} | {per_seed} | {mean:.4f} ± {spread:.4f} | {gap:+.2f}% | "
                  f"{tps:.0f} | {sums[0]['held_bytes']} |")


if __name__ == "__main__":
    main()
