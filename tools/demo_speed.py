#!/usr/bin/env python3
"""The main job's speed from its raw rows (docs/results/raw/demo_speed_rows.jsonl).

Each row is the metrics summary of one run (`scripts/demo.sh` in mxfp8, or the same training
in bf16, alternated round by round) plus its round, load average and start time. Prints, per
recipe, the true median (statistics.median: the mean of the middle two for an even count)
and range of tokens/s and of the median step time, and the per-round ratio of mxfp8's
tokens/s to bf16's with its median and range.

Usage: tools/demo_speed.py [ROWS_JSONL]
"""
import json
import statistics
import sys


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "docs/results/raw/demo_speed_rows.jsonl"
    rows = [json.loads(line) for line in open(path)]
    print("| recipe | runs | tokens/s: median (range) | median step ms: median (range) |")
    print("|---|---|---|---|")
    for run in ("mxfp8", "bf16"):
        rs = [r for r in rows if r["run"] == run]
        tok = [r["tokens_per_s"] for r in rs]
        ms = [r["median_step_ms"] for r in rs]
        print(f"| {run} | {len(rs)} | {statistics.median(tok):,.0f} ({min(tok):,.0f}-{max(tok):,.0f}) "
              f"| {statistics.median(ms):.0f} ({min(ms):.0f}-{max(ms):.0f}) |")
    by_round = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r["run"]] = r["tokens_per_s"]
    ratios = [v["mxfp8"] / v["bf16"] for v in by_round.values() if len(v) == 2]
    print(f"\nmxfp8 / bf16 tokens/s per round: {', '.join(f'{x:.2f}' for x in ratios)}; "
          f"median {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}x)")
    loads = [float(r[k].split()[0]) for r in rows for k in ("loadavg_before", "loadavg_after")]
    print(f"load average (1 min) at the runs' starts and ends: {min(loads):.1f}-{max(loads):.1f}")


if __name__ == "__main__":
    main()
