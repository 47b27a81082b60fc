#!/usr/bin/env python3
"""Rows and table of scripts/linear_speed.sh (docs/results/linear.md).

  linear_speed_table.py --tag JSON SHAPE ROUND MACHINE   one JSON row per entry of a
                                                         `bench linear --json` array, tagged
  linear_speed_table.py --table ROWS                     Markdown: per shape, recipe and defer
                                                         state the time as a multiple of BF16's
                                                         in the same run: true median over the
                                                         rounds (mean of the middle two for an
                                                         even count) and range
"""
import json
import sys


def median(v):
    v = sorted(v)
    n = len(v)
    return (v[(n - 1) // 2] + v[n // 2]) / 2


def tag(path, shape, rnd, machine):
    for r in json.load(open(path)):
        r.update({"shape": shape, "round": int(rnd), "machine": machine})
        print(json.dumps(r, sort_keys=True))


def table(path):
    rows = [json.loads(l) for l in open(path)]
    groups = {}
    for r in rows:
        if r["recipe"] == "bf16":
            continue
        key = (r["shape"], r["recipe"], r["defer_backward_quant"])
        groups.setdefault(key, []).append(r["fwd_bwd_ms"] / r["bf16_fwd_bwd_ms"])
    print(f"Machine: {rows[0]['machine']}; {len({r['round'] for r in rows})} rounds.\n")
    print("| shape | recipe | defer off: x BF16 (median, range) | defer on |")
    print("|---|---|---:|---:|")
    for shape, recipe in dict.fromkeys((k[0], k[1]) for k in groups):
        cells = []
        for defer in (False, True):
            v = groups.get((shape, recipe, defer))
            cells.append(f"{median(v):.3f}x ({min(v):.3f}-{max(v):.3f})" if v else "-")
        print(f"| {shape} | {recipe} | {cells[0]} | {cells[1]} |")
    bf = {}
    for r in rows:
        if r["recipe"] == "bf16":
            bf.setdefault(r["shape"], []).append(r["fwd_bwd_ms"])
    for shape, v in bf.items():
        print(f"\nBF16 {shape}: {median(v):.1f} ms ({min(v):.1f}-{max(v):.1f})", end="")
    print()


if __name__ == "__main__":
    if sys.argv[1] == "--tag":
        tag(*sys.argv[2:6])
    else:
        table(sys.argv[2])
