"""The benchmark runner: `bash scripts/bench.sh` (docs/results/README.md).

    bash scripts/bench.sh list                      the suites, their tables and durations
    bash scripts/bench.sh [options] SUITE ...       run suites (all: every suite), then render
    bash scripts/bench.sh render                    rewrite every marked table from the rows
    bash scripts/bench.sh check                     fail when a committed table is stale

Options: --rounds N (default 3), --quick (a smoke run: fewer widths, steps and rounds; its rows
go to runs/bench/quick/, never to docs/results/raw), --out FILE (rows file), --work DIR
(default runs/bench), --no-render. A suite takes options as SUITE:key=value:key=value (e.g.
trainer:widths=256,1024:steps=10). A suite appends its rows to docs/results/raw/<suite>_<class>.jsonl
(class: zen4, zen5, ... from `mxtrain info`); start a new measurement of a class by moving
the old file away, or pass --out.
"""
import argparse
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from core import ROOT, Context, log  # noqa: E402
import render  # noqa: E402

# name: (module, run function, what it measures, minutes at 3 rounds on 2 cores: trainer, peers
# and profile as measured on a shared machine, the others from earlier runs of their drivers)
SUITES = {
    "trainer": ("suite_trainer", "run", "mxtrain bf16/mxfp8 vs PyTorch 2 eager/compile, "
                "d_model 128..1024", 30),
    "peers": ("suite_peers", "run", "torchao emulated MXFP8 vs mxtrain mxfp8: the main job's "
              "first 300 steps, same weights and batches", 60),
    "profile": ("suite_trainer", "run_profile", "where a step's time goes: mxtrain "
                "--profile-steps and torch.profiler, d_model 256, 768 and 1024", 25),
    "mainjob": ("suite_misc", "run_mainjob", "the main job's first 120 steps, mxfp8 vs bf16", 8),
    "linear": ("suite_misc", "run_linear", "quantized Linear and GroupedLinear vs BF16", 6),
    "gemm": ("suite_misc", "run_gemm", "oneDNN exact vs run-time shapes of the BF16 "
             "products, and whole steps", 12),
    "fsdp": ("suite_misc", "run_fsdp", "FSDP peak RSS per rank vs one process", 15),
    "parallel": ("suite_misc", "run_parallel", "tp/sp/ep layouts: step, bytes, peak RSS", 25),
    "parallel_fp4": ("suite_misc", "run_parallel_fp4", "4-bit SP and EP wires: bytes against "
                     "bf16's (mxfp4, nvfp4)", 6),
    "data": ("suite_misc", "run_data", "prepare-data throughput and memory", 10),
    "memory": ("suite_misc", "run_memory", "activation recompute and recipes: peak RSS, step",
               25),
    "peak": ("suite_misc", "run_peak", "bench peak and the profiled peer shape", 5),
    "adaptive": ("suite_misc", "run_adaptive", "adaptive FP8 vs the faster full recipe", 15),
    "generate": ("suite_misc", "run_generate", "mxtrain generate: tokens/s by case and threads",
                 5),
    "quantize": ("suite_misc", "run_quantize", "MX quantization against a same-run memcpy", 3),
    "quantize4": ("suite_quantize4", "run", "the 4-bit recipes' quantization passes per "
                  "element and per main-job step, against MXFP8's", 2),
    "parity": ("suite_misc", "run_parity", "final losses of every recipe over seeds (long)",
               240),
    "fp4": ("suite_fp4", "run", "4-bit ablation on the main job: nvfp4, each switch off, "
            "mxfp4, mxfp8, bf16, 3 seeds (long; fp4:steps=N shortens every run)", 400),
}
# `all`: every speed and memory suite (not the long loss studies)
ORDER = [s for s in SUITES if s not in ("parity", "fp4")]


def renderers():
    out = {}
    for mod in sorted({m for m, *_ in SUITES.values()} | {"suite_summary"}):
        out.update(importlib.import_module(mod).tables())
    return out


def main():
    ap = argparse.ArgumentParser(prog="scripts/bench.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--work", default=os.path.join(ROOT, "runs", "bench"))
    ap.add_argument("--no-render", action="store_true")
    ap.add_argument("--binary", default=os.environ.get("MXTRAIN_BIN",
                                                       os.path.join(ROOT, "build", "mxtrain")))
    a = ap.parse_args()

    if a.what == ["list"]:
        total = 0
        for name, (mod, _, what, minutes) in SUITES.items():
            print(f"{name:<10} ~{minutes:>3} min  {what}")
            total += minutes if name in ORDER else 0
        print(f"{'all':<10} ~{total:>3} min  every suite above but parity and fp4")
        print("\ntables:", " ".join(sorted(renderers())))
        return 0
    if a.what == ["render"] or a.what == ["check"]:
        errors = []
        stale = render.process(renderers(), write=a.what == ["render"], errors=errors)
        n = render.count_tables()
        for e in errors:
            print(e, file=sys.stderr)
        if a.what == ["check"]:
            for path, table, old, new in stale:
                print(f"{path}: table `{table}` differs from what its raw rows render to "
                      "(bash scripts/bench.sh render)", file=sys.stderr)
            bad = len(stale) + len(errors)
            print(f"{n - bad} passed, {bad} failed")
            return 1 if bad else 0
        print(f"rendered {n} tables, {len(stale)} changed, {len(errors)} failed")
        return 1 if errors else 0

    names = ORDER if a.what == ["all"] else a.what
    jobs = []
    for w in names:
        name, _, opts = w.partition(":")
        if name not in SUITES:
            ap.error(f"unknown suite `{name}`; suites: {', '.join(ORDER)}, all, list, render, check")
        # SUITE:key=value:key=value (a value may hold commas: trainer:widths=256,1024; a piece
        # without `=` continues the value before it: memory:recipes=bf16,nvfp4:sw4)
        args, key = {}, None
        for kv in opts.split(":") if opts else []:
            if "=" in kv:
                key, v = kv.split("=", 1)
                args[key] = v
            elif key is not None:
                args[key] += ":" + kv
            else:
                ap.error(f"`{w}`: `{kv}` is not key=value")
        jobs.append((name, args))
    if not os.path.exists(a.binary):
        ap.error(f"--binary {a.binary}: not found (bash scripts/build.sh)")
    rounds = 1 if a.quick and a.rounds == 3 else a.rounds
    work = os.path.join(a.work, "quick") if a.quick else a.work
    out = a.out or (os.path.join(work, "rows.jsonl") if a.quick else None)
    ctx = Context(a.binary, rounds, work, a.quick, out=out)
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    for name, args in jobs:
        mod, fn, _, _ = SUITES[name]
        t0 = time.time()
        log(f"{name}: {rounds} rounds on `{ctx.machine}`")
        path = getattr(importlib.import_module(mod), fn)(ctx, args)
        log(f"{name}: done in {time.time() - t0:.0f} s; rows in {os.path.relpath(path, ROOT)}")
    if not a.no_render and not a.quick:
        errors = []
        stale = render.process(renderers(), write=True, errors=errors)
        for e in errors:
            log(e)
        log(f"rendered the tables; {len(stale)} changed, {len(errors)} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
