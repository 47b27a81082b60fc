#!/usr/bin/env python3
"""Tables of scripts/peak_profile.sh's runs: the machine's peak and a profiled training step.

Usage: peak_table.py RUN_DIR TABLE.md

RUN_DIR holds peak_rN.json (`mxtrain bench peak --json`), profile_<recipe>_rN.json
(`mxtrain train --profile-out`) and machine.txt. Every figure is the median over the runs
(the mean of the middle two for an even count) of each run's figure, with the least and the
greatest: for bench peak a run's figure is itself the median of its repetitions; for a profile
it is the mean over its profiled steps. Standard library only; the table is written
atomically.
"""
import glob
import json
import os
import re
import statistics
import sys

from trainer_report import write_atomic  # tools/trainer_report.py


def mr(values, fmt):
    """median [least - greatest] of the values, each formatted with fmt."""
    return "%s [%s - %s]" % (fmt % statistics.median(values), fmt % min(values), fmt % max(values))


def run_number(path):
    return int(re.search(r"_r(\d+)\.json$", path).group(1))


def main():
    run_dir, table_path = sys.argv[1:3]
    peaks = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(run_dir, "peak_r*.json")), key=run_number)]
    machine = open(os.path.join(run_dir, "machine.txt")).read().strip().splitlines()
    out = ["<!-- written by tools/peak_table.py from scripts/peak_profile.sh's runs -->", ""]
    out.append("Machine: `%s`, `%s`; load average at the end: `%s`." % (
        machine[0], machine[1], machine[-1].strip()))
    out.append("")
    out.append("%d runs; each figure is the median over the runs [least - greatest]." % len(peaks))
    out.append("")
    out.append("| compute | instruction | FLOPs/instr | threads | GFLOP/s |")
    out.append("|---|---|---:|---:|---:|")
    keys = [(c["kind"], c["threads"]) for c in peaks[0]["compute"]]
    for kind, threads in keys:
        rows = [c for p in peaks for c in p["compute"] if (c["kind"], c["threads"]) == (kind, threads)]
        out.append("| %s | %s | %g | %d | %s |" % (kind, rows[0]["instruction"], rows[0]["flops_per_instruction"],
                                                 threads, mr([c["gflops"] for c in rows], "%.1f")))
    ref = [p["reference"]["gflops"] for p in peaks]
    out.append("")
    out.append("Reference peak (%s, %d threads): %s GFLOP/s." % (
        peaks[0]["reference"]["kind"], peaks[0]["reference"]["threads"], mr(ref, "%.1f")))
    out.append("")
    out.append("| memory | kernel | threads | GB/s |")
    out.append("|---|---|---:|---:|")
    for m0 in peaks[0]["memory"]:
        rows = [m for p in peaks for m in p["memory"] if (m["stream"], m["threads"]) == (m0["stream"], m0["threads"])]
        out.append("| %s | %s | %d | %s |" % (m0["stream"], m0["kernel"], m0["threads"],
                                              mr([m["gb_per_s"] for m in rows], "%.2f")))
    out.append("")
    out.append("Buffers of %d MiB (copy: two)." % (peaks[0]["memory"][0]["buffer_bytes"] >> 20))

    recipes = [r for r in ("bf16", "mxfp8") if glob.glob(os.path.join(run_dir, "profile_%s_r*.json" % r))]
    profs = {r: [json.load(open(p)) for p in sorted(glob.glob(os.path.join(run_dir, "profile_%s_r*.json" % r)),
                                                      key=run_number)] for r in recipes}
    out.append("")
    out.append("| peer shape, steps 2-6 | " + " | ".join(recipes) + " |")
    out.append("|---|" + "---:|" * len(recipes))
    out.append("| mean step (ms) | " + " | ".join(mr([p["mean_step_ms"] for p in profs[r]], "%.1f") for r in recipes) + " |")
    out.append("| MFU | " + " | ".join(mr([100 * p["mfu"] for p in profs[r]], "%.1f%%") for r in recipes) + " |")
    out.append("| peak measured at start (GFLOP/s) | " + " | ".join(mr([p["peak_gflops"] for p in profs[r]], "%.0f") for r in recipes) + " |")
    groups = []
    for p in profs[recipes[0]][0]["rows"]:
        if p["group"] not in groups:
            groups.append(p["group"])
    out.append("")
    out.append("| share of the step | " + " | ".join(recipes) + " |")
    out.append("|---|" + "---:|" * len(recipes))
    for g in groups:
        cells = []
        for r in recipes:
            shares = [100 * sum(x["share"] for x in p["rows"] if x["group"] == g) for p in profs[r]]
            cells.append(mr(shares, "%.1f%%"))
        out.append("| %s | %s |" % (g, " | ".join(cells)))
    out.append("")
    out.append("| region | " + " | ".join("%s ms/step | %s share | %s %%peak" % (r, r, r) for r in recipes) + " |")
    out.append("|---|" + "---:|---:|---:|" * len(recipes))
    names = []  # in the row order of the profile with the most rows (mxfp8 adds swiglu_fp8)
    for r in sorted(recipes, key=lambda r: -len(profs[r][0]["rows"])):
        for row in profs[r][0]["rows"]:
            n = (row["region"] + " " + row["pass"]).strip()
            if n not in names:
                names.append(n)
    for n in names:
        cells = []
        for r in recipes:
            rows = [row for p in profs[r] for row in p["rows"] if (row["region"] + " " + row["pass"]).strip() == n]
            if len(rows) < len(profs[r]):
                cells += ["", "", ""]
                continue
            cells.append(mr([x["ms"] for x in rows], "%.2f"))
            cells.append("%.1f%%" % (100 * statistics.median([x["share"] for x in rows])))
            pct = [x["pct_of_peak"] for x in rows]
            cells.append("%.0f%%" % statistics.median(pct) if max(pct) > 0 else "")
        out.append("| %s | %s |" % (n, " | ".join(cells)))
    write_atomic(table_path, "\n".join(out) + "\n")


if __name__ == "__main__":
    main()
