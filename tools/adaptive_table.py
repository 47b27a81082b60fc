#!/usr/bin/env python3
"""Step-time table for the adaptive-FP8 comparison written by scripts/adaptive.sh.

Usage: adaptive_table.py RUN_DIR NAME [NAME ...]

For each config NAME reads RUN_DIR/NAME-{bf16,mxfp8,adaptive}-r*.jsonl (`mxtrain train
--metrics-out`, one file per round; NAME-RUN.jsonl when there are no rounds) and RUN_DIR/NAME-decisions.json (`mxtrain train --dry-run --decisions-out` with
the policy). The step time of a run is the median `step_ms` over its steps after the first:
the first step pays for one-off work (page faults, oneDNN primitive creation), and the
trainer's summary `mean_step_ms` averages it in. With several rounds the median is over the
timed steps of all rounds together. Prints a Markdown table: ms/step for each
run, adaptive / min(bf16, mxfp8) against the goal of 1.03 (pooled, and per round: each
round's ratio of its own medians, their median and range, the figure the goal is judged by,
since the machine's load moves between rounds), and how many quantizable modules the policy
put in FP8. Python standard library only.
"""
import glob
import json
import os
import statistics
import sys

GOAL = 1.03


def step_times(paths):
    """Median step_ms over each run's steps after its first, and the number of steps used."""
    used = []
    for path in paths:
        steps = []
        with open(path) as f:
            for line in f:
                o = json.loads(line)
                if not o.get("summary") and "step_ms" in o:
                    steps.append((o["step"], o["step_ms"]))
        steps.sort()
        used += [ms for _, ms in (steps[1:] or steps)]
    if not used:
        raise SystemExit(f"{paths}: no timed steps (did the runs finish?)")
    return statistics.median(used), len(used)


def per_round_ratios(run_dir, name):
    """adaptive / min(bf16, mxfp8) of each round that has all three runs, in round order."""
    ratios = []
    for r in range(1, 1000):
        paths = {run: os.path.join(run_dir, f"{name}-{run}-r{r}.jsonl")
                 for run in ("bf16", "mxfp8", "adaptive")}
        if not all(os.path.exists(p) for p in paths.values()):
            break
        t = {run: step_times([p])[0] for run, p in paths.items()}
        ratios.append(t["adaptive"] / min(t["bf16"], t["mxfp8"]))
    return ratios


def run_files(run_dir, name, run):
    paths = sorted(glob.glob(os.path.join(run_dir, f"{name}-{run}-r*.jsonl")))
    return paths or [os.path.join(run_dir, f"{name}-{run}.jsonl")]


def fp8_modules(path):
    with open(path) as f:
        ds = json.load(f)
    return sum(1 for d in ds if d["precision"] != "bf16"), len(ds)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    run_dir, names = sys.argv[1], sys.argv[2:]
    print("| config | bf16 ms/step | mxfp8 ms/step | adaptive ms/step | adaptive / min(bf16, mxfp8) "
          f"| per round: median (range) | goal <= {GOAL} | modules in FP8 (adaptive) "
          "| timed steps |")
    print("|---|---:|---:|---:|---:|---|---|---:|---:|")
    for name in names:
        t = {}
        n = 0
        for run in ("bf16", "mxfp8", "adaptive"):
            t[run], n = step_times(run_files(run_dir, name, run))
        ratio = t["adaptive"] / min(t["bf16"], t["mxfp8"])
        rounds = per_round_ratios(run_dir, name)
        judged = statistics.median(rounds) if rounds else ratio
        per_round = (f"{judged:.3f} ({min(rounds):.3f}-{max(rounds):.3f})" if rounds else "-")
        k, total = fp8_modules(os.path.join(run_dir, f"{name}-decisions.json"))
        print(f"| {name} | {t['bf16']:.1f} | {t['mxfp8']:.1f} | {t['adaptive']:.1f} | {ratio:.3f} "
              f"| {per_round} | {'met' if judged <= GOAL else 'not met'} | {k} / {total} | {n} |")
    print()
    print("ms/step: median `step_ms` over the steps after the first of each run, all rounds "
          "together (bf16, mxfp8, adaptive back to back per round; same config and seed). "
          "timed steps: per precision.")


if __name__ == "__main__":
    main()
