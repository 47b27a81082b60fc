#!/usr/bin/env python3
"""Tables of scripts/gemm_shapes.sh's rows.

1. Per layer and product: the median over rounds of the exact-shape and runtime-shape BF16
   times (each round's own median over its iterations), their range, and the ratio
   runtime / exact per round (median and range).
2. With the training rows: per config and recipe, the median step with the default shaping
   against every product on the other shaping, their ratio per round, and the final losses.

Usage: python3 tools/gemm_shapes_table.py docs/results/raw/gemm_shapes_rows.jsonl \
           [docs/results/raw/gemm_shapes_train_rows.jsonl]
"""
import json
import sys
from collections import defaultdict
from statistics import median  # the true median: the mean of the middle two for an even count


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    by = defaultdict(lambda: defaultdict(dict))  # (layer, m, k, n, op) -> round -> shaping -> ms
    order = []
    for r in rows:
        key = (r["layer"], r["m"], r["k"], r["n"], r["op"])
        if key not in by:
            order.append(key)
        by[key][r["round"]][r["bf16_shapes"]] = r["ms"]
    machines = sorted({r["machine"] for r in rows})
    rounds = sorted({r["round"] for r in rows})
    print(f"Machine: {'; '.join(machines)}. {len(rounds)} rounds; each figure the median over "
          "rounds (range).\n")
    print("| layer | m | k | n | op | exact ms | runtime ms | runtime / exact |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    tot = defaultdict(lambda: defaultdict(float))
    for key in order:
        per = by[key]
        ex = [per[x]["exact"] for x in per if "exact" in per[x] and "runtime" in per[x]]
        rt = [per[x]["runtime"] for x in per if "exact" in per[x] and "runtime" in per[x]]
        ratio = [a / b for a, b in zip(rt, ex)]
        for x in per:
            tot[x]["exact"] += per[x].get("exact", 0)
            tot[x]["runtime"] += per[x].get("runtime", 0)
        layer, m, k, n, op = key
        print(f"| {layer} | {m} | {k} | {n} | {op} | {median(ex):.3f} ({min(ex):.3f}-{max(ex):.3f}) "
              f"| {median(rt):.3f} ({min(rt):.3f}-{max(rt):.3f}) "
              f"| {median(ratio):.3f}x ({min(ratio):.3f}-{max(ratio):.3f}) |")
    sums = [tot[x]["runtime"] / tot[x]["exact"] for x in sorted(tot)]
    print(f"\nSummed over every product of a round, runtime / exact: {median(sums):.3f}x "
          f"({min(sums):.3f}-{max(sums):.3f}) over {len(sums)} rounds.")
    if len(sys.argv) > 2:
        train_table([json.loads(l) for l in open(sys.argv[2]) if l.strip()])


def train_table(rows):
    by = defaultdict(lambda: defaultdict(dict))  # (config, recipe) -> round -> shapes -> row
    for r in rows:
        by[(r["config"], r["recipe"])][r["round"]][r["shapes"]] = r
    print("\n| config | recipe | step ms, default shapes | other shaping | step ms, other "
          "| default / other | final loss default / other |")
    print("|---|---|---:|---|---:|---:|---|")
    for (config, recipe), per in by.items():
        other = next(s for x in per.values() for s in x if s != "default")
        both = [x for x in per.values() if "default" in x and other in x]
        d = [x["default"]["median_step_ms"] for x in both]
        e = [x[other]["median_step_ms"] for x in both]
        ratio = [a / b for a, b in zip(d, e)]
        losses = sorted({(x["default"]["final_loss"], x[other]["final_loss"]) for x in both})
        loss = "; ".join(f"{a:.6f} / {b:.6f}" for a, b in losses)
        print(f"| {config} | {recipe} | {median(d):.1f} ({min(d):.1f}-{max(d):.1f}) | all {other} "
              f"| {median(e):.1f} ({min(e):.1f}-{max(e):.1f}) "
              f"| {median(ratio):.3f}x ({min(ratio):.3f}-{max(ratio):.3f}) | {loss} |")


if __name__ == "__main__":
    main()
