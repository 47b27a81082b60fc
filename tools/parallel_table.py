#!/usr/bin/env python3
"""Rows and tables of scripts/parallel_bench.sh (docs/results/parallel.md).

  parallel_table.py RUNS_DIR MACHINE   one JSON row per run (layout, recipe, round) on stdout:
                                       median step ms (steps 2..), medians per step of the
                                       communication counters, the largest rank's peak RSS
  parallel_table.py --table ROWS       Markdown tables: per layout and recipe the true median
                                       over rounds (mean of the middle two for an even count)
                                       with its range, and the ratios the goals name
"""
import glob
import json
import os
import re
import statistics
import sys


def median(v):
    v = sorted(v)
    n = len(v)
    return (v[(n - 1) // 2] + v[n // 2]) / 2


def rows(runs_dir, machine):
    for path in sorted(glob.glob(os.path.join(runs_dir, "*.jsonl"))):
        tag = os.path.basename(path)[: -len(".jsonl")]
        m = re.match(r"(.+)-(bf16|mxfp8[\w-]*|blockwise)-r(\d+)$", tag)
        layout, recipe, rnd = m.group(1), m.group(2), int(m.group(3))
        steps = [json.loads(l) for l in open(path)]
        summary = [s for s in steps if s.get("summary")][-1]
        steps = [s for s in steps if "step_ms" in s and s["step"] >= 2]
        rss = [int(open(f).read().split()[-1]) for f in glob.glob(os.path.join(runs_dir, tag + ".rss.*"))]

        def med(key):
            v = [s.get(key, 0) for s in steps]
            return median(v) if v else 0

        exposed = median([s.get("tp_comm_ms", 0) + s.get("ep_comm_ms", 0) + s.get("allreduce_ms", 0)
                          for s in steps])
        yield {
            "layout": layout, "recipe": recipe, "round": rnd, "machine": machine,
            "ranks": len(rss), "layout_fields": summary.get("layout", {}),
            "step_ms": med("step_ms"), "exposed_comm_ms": exposed,
            "tp_comm_bytes": med("tp_comm_bytes"), "tp_allgather_bytes": med("tp_allgather_bytes"),
            "ep_comm_bytes": med("ep_comm_bytes"), "ep_dispatch_bytes": med("ep_dispatch_bytes"),
            "dp_allreduce_bytes": med("allreduce_bytes"),
            "max_rank_peak_rss_kib": max(rss), "final_loss": summary["final_loss"],
        }


def table(path):
    data = [json.loads(l) for l in open(path)]
    groups = {}
    for r in data:
        groups.setdefault((r["layout"], r["recipe"]), []).append(r)
    print(f"Machine: {data[0]['machine']}; {len({r['round'] for r in data})} rounds.\n")
    print("| layout | recipe | ranks | step ms (median, range) | exposed comm ms | tp bytes (all-gather) | ep bytes (dispatch) | dp all-reduce bytes | largest rank's peak RSS MiB (median, range) |")
    print("|---|---|---:|---|---:|---|---|---:|---|")
    med = {}
    for (layout, recipe), rs in groups.items():
        def mr(k, scale=1.0):
            v = [r[k] * scale for r in rs]
            return median(v), min(v), max(v)
        s, s0, s1 = mr("step_ms")
        m, m0, m1 = mr("max_rank_peak_rss_kib", 1 / 1024)
        med[(layout, recipe)] = {k: median([r[k] for r in rs]) for k in rs[0] if isinstance(rs[0][k], (int, float))}
        print(f"| {layout} | {recipe} | {rs[0]['ranks']} | {s:.1f} ({s0:.1f}-{s1:.1f}) | "
              f"{mr('exposed_comm_ms')[0]:.1f} | {mr('tp_comm_bytes')[0]:.0f} ({mr('tp_allgather_bytes')[0]:.0f}) | "
              f"{mr('ep_comm_bytes')[0]:.0f} ({mr('ep_dispatch_bytes')[0]:.0f}) | {mr('dp_allreduce_bytes')[0]:.0f} | "
              f"{m:.1f} ({m0:.1f}-{m1:.1f}) |")
    print("\nRatios (medians over rounds):\n")
    for recipe in sorted({k[1] for k in med}):
        def ratio(a, b, key):
            if (a, recipe) in med and (b, recipe) in med and med[(b, recipe)][key]:
                return med[(a, recipe)][key] / med[(b, recipe)][key]
            return float("nan")
        print(f"- {recipe}: largest rank's peak RSS, tp 2 / one process {ratio('dense-tp2', 'dense-1', 'max_rank_peak_rss_kib'):.3f}, "
              f"tp 2 + SP {ratio('dense-tp2-sp', 'dense-1', 'max_rank_peak_rss_kib'):.3f}, "
              f"rowwise wire {ratio('dense-tp2-sprow', 'dense-1', 'max_rank_peak_rss_kib'):.3f}, "
              f"ep 2 / one process {ratio('moe-ep2', 'moe-1', 'max_rank_peak_rss_kib'):.3f}")
    for layout, key in (("dense-tp2-sp", "tp_allgather_bytes"), ("dense-tp2-sprow", "tp_allgather_bytes"),
                        ("moe-ep2", "ep_dispatch_bytes")):
        if (layout, "mxfp8") in med and (layout, "bf16") in med and med[(layout, "bf16")][key]:
            print(f"- {layout}: mxfp8 / bf16 {key} = {med[(layout, 'mxfp8')][key] / med[(layout, 'bf16')][key]:.4f}")


if __name__ == "__main__":
    if sys.argv[1] == "--table":
        table(sys.argv[2])
    else:
        for r in rows(sys.argv[1], sys.argv[2]):
            print(json.dumps(r, sort_keys=True))
