"""bench/harness/suite_misc.py — the runner's suites other than the PyTorch comparisons: the main
job's speed, the quantized layers and products, FSDP, parallel layouts, data, memory, the
machine's peak, adaptive FP8, loss parity and generation; and the tables of their raw rows.

Each run_* appends raw rows to docs/results/raw/<suite>_<class>.jsonl (--out overrides);
each table_* renders one table from raw rows. Rows of earlier releases, committed before the
runner, keep their own fields; the renderers read both.
"""
import glob
import json
import os
import re
import subprocess

from core import (RAW, ROOT, append_row, git_describe, gpt_config, log, md_table, median,
                  metrics_summary, mrange, per_round, ratio_cell, read_rows)


def steady(steps):
    """Training rows after the first step (start-up work, warm-up)."""
    rows = sorted((r for r in steps if "step_ms" in r and "step" in r), key=lambda r: r["step"])
    return rows[1:] or rows


def train_run(ctx, suite, case, rnd, argv, metrics, env=None, mpi=0, exe=None, **fields):
    """One `mxtrain train` (argv without the binary), timed by the OS; mpi=N runs it on N
    ranks (OMP_NUM_THREADS=1 each) with every rank under /usr/bin/time, and the row's peak RSS
    is the largest rank's. exe: another mxtrain than the run's (an A/B's "before")."""
    tag = f"{suite}-{case}-r{rnd}"
    exe = exe or ctx.binary
    if mpi:
        rss = os.path.join(ctx.work, tag + ".rss")
        inner = " ".join(["/usr/bin/time", "-f", "%M", "-o", rss + ".$OMPI_COMM_WORLD_RANK",
                          exe, "train"] + argv + ["--metrics-out", metrics])
        full = ["mpirun", "--oversubscribe", "-np", str(mpi), "sh", "-c", inner]
        e = {"OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1",
             "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **(env or {})}
        t = ctx.timed(full, tag, env=e)
        ranks = [int(open(f).read().split()[-1]) for f in glob.glob(rss + ".*")]
        t = (max(ranks),) + t[1:]
        shown = ["mpirun", "--oversubscribe", "-np", str(mpi), exe, "train"] + argv + [
            "--metrics-out", metrics]
        row = ctx.row(suite, case, rnd, shown, t, env={"OMP_NUM_THREADS": "1", **(env or {})},
                      ranks=mpi, **fields)
    else:
        full = [exe, "train"] + argv + ["--metrics-out", metrics]
        t = ctx.timed(full, tag, env=env)
        row = ctx.row(suite, case, rnd, full, t, env=env, **fields)
    s, steps = metrics_summary(metrics)
    return row, s, steps


def bench_json(ctx, argv, tag, env=None):
    out = os.path.join(ctx.work, tag + ".json")
    t = ctx.timed([ctx.binary, "bench"] + argv + ["--json"], tag, env=env, stdout_path=out)
    return json.load(open(out)), t


def cases_rounds(ctx, cases):
    for rnd in range(1, ctx.rounds + 1):
        for c in ctx.round_order(cases, rnd):
            yield rnd, c


# ---- main job ------------------------------------------------------------------------------

def run_mainjob(ctx, args):
    """The main job's first STEPS (120) steps, its schedule unchanged (--stop-after), in mxfp8
    and bf16 alternately (mainjob:recipes=A,B,... for others, each a recipe case R[:FLAG...] of
    RECIPE_FLAGS or RECIPE_ENV, e.g. nvfp4:nosr:norht, mxfp8:noamx). mainjob:before=BINARY makes it
    an A/B: each round runs the recipes (mxfp8 and bf16 unless mainjob:recipes says) with
    BINARY (rows labelled `before <its git describe>`, or mainjob:before=...:label=NAME) and
    with the run's binary, alternating, into mainjob_ab_<class>.jsonl (table mainjob.ab)."""
    steps = args.get("steps", "20" if ctx.quick else "120")
    subprocess.run(["bash", "scripts/demo_data.sh", ctx.binary], check=True, cwd=ROOT)
    before = args.get("before")
    if before:
        label = "before " + args.get("label", describe(before))
        path = ctx.rows_path("mainjob_ab")
        cases = [(b, r) for r in args.get("recipes", "mxfp8,bf16").split(",")
                 for b in (before, ctx.binary)]
    else:
        path = ctx.rows_path("mainjob")
        cases = [(ctx.binary, r) for r in args.get("recipes", "mxfp8,bf16").split(",")]
    for rnd, (binary, recipe) in cases_rounds(ctx, cases):
        who = label if before and binary == before else "this"
        log(f"mainjob: round {rnd}, {recipe}" + (f", {who}" if before else ""))
        ck = os.path.join(ctx.work, "mainjob-ckpt")
        subprocess.run(["rm", "-rf", ck])
        case = recipe + ("-before" if who != "this" else "")
        m = os.path.join(ctx.work, f"mainjob-{case.replace(':', '-')}-r{rnd}.jsonl")
        extra = {"binary": who} if before else {}
        row, s, _ = train_run(ctx, "mainjob", case, rnd,
                              ["--config", "configs/demo.yaml", "--quiet", "--stop-after", steps,
                               "--checkpoint-dir", ck] + recipe_case_argv("mainjob", recipe), m,
                              env=recipe_case_env(recipe), exe=binary, run=recipe, **extra)
        row.update({k: s[k] for k in ("median_step_ms", "tokens_per_s", "steps", "final_loss",
                                       "peak_rss_bytes") if k in s})
        append_row(path, row)
    return path


def describe(binary):
    """The `git describe` of the tree a binary was built in (its build dir's parent)."""
    tree = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    return git_describe(tree) or os.path.abspath(binary)


def table_mainjob_speed(rows, base="bf16"):
    """Per recipe its tokens/s and step; each other recipe's tokens/s against base's, per
    round (table option base=RECIPE)."""
    runs = list(dict.fromkeys(r["run"] for r in rows))
    body = []
    for run in runs:
        rs = [r for r in rows if r["run"] == run]
        body.append([run, len(rs), mrange([r["tokens_per_s"] for r in rs], "{:,.0f}"),
                     mrange([r["median_step_ms"] for r in rs], "{:.0f}")])
    ratios = "; ".join(
        f"{run} / {base} tokens/s per round: "
        f"{ratio_cell(per_round(rows, lambda r: r['run'], run, base, 'tokens_per_s'))}"
        for run in runs if run != base)
    from core import load_note
    return (md_table(["recipe", "runs", "tokens/s: median (range)",
                      "median step ms: median (range)"], body, "lrrr") +
            f"\n\n{ratios}; {load_note(rows)}.")


def table_mainjob_ab(rows):
    body = []
    for run in dict.fromkeys(r["run"] for r in rows):
        rs = [r for r in rows if r["run"] == run]
        before = [r for r in rs if r["binary"].startswith("before")]
        after = [r for r in rs if not r["binary"].startswith("before")]
        ratios = [a["tokens_per_s"] / b["tokens_per_s"]
                  for a in after for b in before if a["round"] == b["round"]]
        body.append([run, mrange([r["tokens_per_s"] for r in before], "{:,.0f}"),
                     mrange([r["tokens_per_s"] for r in after], "{:,.0f}"), ratio_cell(ratios)])
    label = sorted({r["binary"] for r in rows if r["binary"].startswith("before")})[0]
    return md_table(["recipe", f"{label}: tokens/s", "this release: tokens/s",
                     "this / before, per round"], body, "lrrr")


def table_mainjob_runs(rows):
    """Full runs of the main job: one summary per run; the training time is steps x the mean
    step, the whole command's time where the row recorded it."""
    summ = [r for r in rows if r.get("summary")]
    body = []
    for s in summ:
        wall = s.get("demo_sh_wall_s")
        body.append([s["run"], s["steps"], f"{s['final_val_nats_per_byte']:.4f}",
                     f"{s['tokens_per_s']:,.0f}", f"{s['steps'] * s['mean_step_ms'] / 1e3:.0f}",
                     f"{wall:.0f}" if wall else "–", f"{s['peak_rss_bytes'] / 2**20:.0f}"])
    vals = sorted({round(s["final_val_nats_per_byte"], 6) for s in summ})
    train = [s["steps"] * s["mean_step_ms"] / 1e3 for s in summ]
    note = (f"\n\n{len(summ)} runs on `{summ[0]['machine']}`: final validation loss "
            f"{' / '.join(f'{v:.4f}' for v in vals)} nats/byte "
            f"({'the same in every run' if len(vals) == 1 else 'differing'}); tokens/s "
            f"{mrange([s['tokens_per_s'] for s in summ], '{:,.0f}')}; training "
            f"{mrange(train, '{:.0f}')} s ({mrange([t / 60 for t in train], '{:.1f}')} minutes).")
    return md_table(["run", "steps", "final val nats/byte", "tokens/s", "training s",
                     "whole command s", "peak RSS MiB"], body, "lrrrrrr") + note


def table_mainjob_val(rows):
    """Validation nats/byte along the way, per run and machine class (deterministic: runs with
    equal losses share a row)."""
    from core import class_tag
    name = lambda r: f"{r['run']} ({class_tag(r['machine'])})"
    runs = list(dict.fromkeys(name(r) for r in rows))
    vals = {run: {r["step"]: r["val_nats_per_byte"] for r in rows
                  if name(r) == run and "val_nats_per_byte" in r and not r.get("summary")}
            for run in runs}
    cols = {}
    for run in runs:
        cols.setdefault(tuple(sorted(vals[run].items())), []).append(run)
    steps = sorted({s for v in vals.values() for s in v})
    body = [[", ".join(names)] + [f"{dict(k).get(x, float('nan')):.4f}" for x in steps]
            for k, names in cols.items()]
    return md_table(["runs: validation nats/byte at step"] + [str(x) for x in steps], body)


def table_mainjob_sweep(rows):
    summ = [r for r in rows if r.get("summary")]
    body = []
    for s in summ:
        vals = [(r["step"], r["val_nats_per_byte"]) for r in rows
                if r["run"] == s["run"] and "val_nats_per_byte" in r and not r.get("summary")]
        best = min(vals, key=lambda v: v[1])
        at = dict(vals)
        mid = " / ".join(f"{at[x]:.4f}" for x in (1000, 2000) if x in at)
        body.append([s["run"], s["steps"], f"{mid} / **{s['final_val_nats_per_byte']:.4f}**",
                     f"{best[1]:.4f} (step {best[0]})"])
    return md_table(["run", "steps", "val nats/byte at 1000 / 2000 / end", "best"], body, "lrll")


# ---- quantized layers and products -------------------------------------------------------------

LINEAR_SHAPES = {
    "dense": ["--tokens", "2048", "--in", "4096", "--out", "4096", "--iters", "3"],
    "grouped": ["--experts", "8", "--topk", "2", "--tokens", "512", "--in", "2048", "--out",
                "1408", "--iters", "5"],
}


def run_linear(ctx, args):
    """Quantized Linear and GroupedLinear against BF16 (linear:recipes=...); linear:amx=off
    runs them with MXTRAIN_AMX=0 (the scaled products on the AVX512-BF16 kernels)."""
    recipes = args.get("recipes", "bf16,mxfp8,blockwise")
    env = {"MXTRAIN_AMX": "0"} if args.get("amx") == "off" else None
    path = ctx.rows_path("linear")
    for rnd, shape in cases_rounds(ctx, list(LINEAR_SHAPES)):
        log(f"linear: round {rnd}, {shape}")
        argv = ["linear", "--recipes", recipes] + LINEAR_SHAPES[shape]
        if ctx.quick:
            argv = [a if a != "2048" else "256" for a in argv]
        rows, t = bench_json(ctx, argv, f"linear-{shape}-r{rnd}", env=env)
        for r in rows:
            r.update(shape=shape)
            append_row(path, ctx.row("linear", shape, rnd, [ctx.binary, "bench"] + argv + ["--json"],
                                     t, env=env, **r))
    return path


def table_linear(rows):
    groups = {}
    for r in rows:
        if r["recipe"] != "bf16":
            groups.setdefault((r["shape"], r["recipe"], r["defer_backward_quant"]), []).append(
                r["fwd_bwd_ms"] / r["bf16_fwd_bwd_ms"])
    body = []
    for shape, recipe in dict.fromkeys((k[0], k[1]) for k in groups):
        body.append([shape, recipe] + [ratio_cell(groups.get((shape, recipe, d)), "{:.3f}")
                                       for d in (False, True)])
    bf = {}
    for r in rows:
        if r["recipe"] == "bf16":
            bf.setdefault(r["shape"], []).append(r["fwd_bwd_ms"])
    note = "; ".join(f"BF16 {s}: {mrange(v)} ms" for s, v in bf.items())
    return (md_table(["shape", "recipe", "defer off: time as x BF16's, median (range)",
                      "defer on"], body, "llrr") +
            f"\n\n{len({r['round'] for r in rows})} rounds. {note}.")


GEMM_SHAPES = """peer.qkv 2048 256 768
peer.proj 2048 256 256
peer.fc1 2048 256 1344
peer.fc2 2048 672 256
d1024.qkv 2048 1024 3072
d1024.fc1 2048 1024 5504
d1024.fc2 2048 2752 1024
tiny-moe.expert.fc1 512 128 384
tiny-moe.expert.fc2 512 192 128
grouped.expert.fc1 128 2048 1408
grouped.expert.fc2 128 1408 2048"""


def run_gemm(ctx, args):
    """(1) the MX products against BF16 over token counts at 4096x4096; (2) oneDNN's two
    shapings of the BF16 products at the training shapes; (3) whole training steps under each
    shaping. gemm:parts=sweep,shapes,train chooses the parts; gemm:recipes=A,B,... the sweep's
    recipes (BF16 is always its base); gemm:ms=1,4,... its token counts; gemm:ops=fwd,...
    its products; gemm:fp32=on also times blockwise recipes with unrounded FP32 scales (as
    '<name>+fp32'); gemm:amx=off runs the sweep with MXTRAIN_AMX=0; gemm:stream=8,0,...
    runs it once per streaming limit in each round (MXTRAIN_STREAM_ROWS; 'own' for the paths'
    own), the limits alternating; gemm:cold=on flushes the operands from the caches before
    each timed product (bench gemm --cold)."""
    path = ctx.rows_path("gemm")
    base_env = {"MXTRAIN_AMX": "0"} if args.get("amx") == "off" else {}
    parts = args.get("parts", "sweep,shapes,train").split(",")
    ms = args.get("ms", "1,4,64" if ctx.quick else "1,4,16,64,256,2048")
    streams = args.get("stream", "own").split(",")
    for rnd in range(1, ctx.rounds + 1):
        if "sweep" not in parts:
            break
        for stream in ctx.round_order(streams, rnd):
            env = dict(base_env, **({} if stream == "own" else {"MXTRAIN_STREAM_ROWS": stream}))
            env = env or None
            log(f"gemm: round {rnd}, the 4096x4096 sweep" +
                ("" if stream == "own" else f", streaming up to {stream} rows"))
            argv = ["gemm", "--m", ms, "--k", "4096", "--n", "4096", "--iters", "15"]
            if "recipes" in args:
                argv += ["--recipes", args["recipes"]]
            if "ops" in args:
                argv += ["--ops", args["ops"]]
            if args.get("fp32") == "on":
                argv += ["--fp32-scales"]
            if args.get("cold") == "on":
                argv += ["--cold"]
            rows, t = bench_json(ctx, argv, f"gemm-sweep-r{rnd}-s{stream}", env=env)
            for r in rows:
                append_row(path, ctx.row("gemm", "sweep", rnd,
                                         [ctx.binary, "bench"] + argv + ["--json"], t, env=env,
                                         **r))
    for rnd in range(1, ctx.rounds + 1):
        if "shapes" not in parts:
            break
        shapes = GEMM_SHAPES.splitlines()[: 2 if ctx.quick else None]
        for line in ctx.round_order(shapes, rnd):
            layer, m, k, n = line.split()
            log(f"gemm: round {rnd}, shapes of {layer}")
            argv = ["gemm", "--recipes", "bf16", "--bf16-shapes", "exact,runtime", "--m", m,
                    "--k", k, "--n", n, "--iters", "9", "--peak", "1"]
            rows, t = bench_json(ctx, argv, f"gemm-{layer}-r{rnd}")
            for r in rows:
                append_row(path, ctx.row("gemm", "shapes", rnd,
                                         [ctx.binary, "bench"] + argv + ["--json"], t,
                                         layer=layer, **r))
    steps = "6" if ctx.quick else "30"
    moe = os.path.join(ctx.work, "gemm-tiny-moe.yaml")
    text = open(os.path.join(ROOT, "configs", "tiny-moe.yaml")).read()
    text = re.sub(r"(?m)^  steps: .*$", f"  steps: {steps}", text)
    text = re.sub(r"(?m)^  eval_every: .*$", "  eval_every: 100000", text)
    open(moe, "w").write(re.sub(r"(?m)^  eval_batches: .*$", "  eval_batches: 1", text))
    peer = gpt_config(256, 4, 672, int(steps), os.path.join(ctx.work, "gemm-peer.yaml"))
    cases = [("tiny-moe", moe, "bf16", "exact"), ("tiny-moe", moe, "mxfp8", "exact"),
             ("peer", peer, "bf16", "runtime")]
    for rnd in range(1, ctx.rounds + 1):
        if "train" not in parts:
            break
        for name, cfg, recipe, other in ctx.round_order(cases, rnd):
            for shaping in ("default", other):
                log(f"gemm: round {rnd}, {name} {recipe} training, shapes {shaping}")
                env = {} if shaping == "default" else {"MXTRAIN_GEMM_SHAPES": shaping}
                m = os.path.join(ctx.work, f"gemm-train-{name}-{recipe}-{shaping}-r{rnd}.jsonl")
                row, s, _ = train_run(ctx, "gemm", "train", rnd,
                                      ["--config", cfg, "--recipe", recipe, "--quiet"], m, env=env,
                                      config=name, recipe=recipe, shapes=shaping)
                row.update(median_step_ms=s["median_step_ms"], steps=s["steps"],
                           final_loss=s.get("final_loss"))
                append_row(path, row)
    return path


def table_gemm_stream(rows):
    """The forward product's time per recipe and token count under each streaming limit
    (gemm:stream=own,16,0): the milliseconds themselves, since each limit ran in its own
    process and BF16's time moves from one process to the next."""
    rows = [r for r in rows if r.get("case", "sweep") == "sweep" and r["recipe"] != "bf16"]
    if not rows:
        raise ValueError("no quantized rows of the token-count sweep")

    def limit(r):  # the run's MXTRAIN_STREAM_ROWS, or 'own'
        m = re.match(r"MXTRAIN_STREAM_ROWS=(\d+) ", r["command"])
        return m.group(1) if m else "own"
    limits = list(dict.fromkeys(limit(r) for r in rows))
    keys = list(dict.fromkeys((r["m"], r["recipe"]) for r in rows))
    body = []
    for m, rec in keys:
        rs = [r for r in rows if r["m"] == m and r["recipe"] == rec]
        own = sorted({r["stream_rows"] for r in rs if limit(r) == "own"})
        cells = [mrange([r["ms"] for r in rs if limit(r) == lim], "{:.2f}")
                 if any(limit(r) == lim for r in rs) else "–" for lim in limits]
        body.append([m, rec, ",".join(str(o) for o in own) or "–"] + cells)
    head = [("the path's own limit" if lim == "own" else
             "never (tiles)" if lim == "0" else f"up to {lim} rows") + ": ms" for lim in limits]
    return (md_table(["m", "recipe", "own limit (rows)"] + head, body,
                     "rlr" + "r" * len(limits)) +
            f"\n\n{len({r['round'] for r in rows})} runs of each; k = n = 4096, forward (fwd).")


def table_gemm_sweep(rows):
    rows = [r for r in rows if r.get("case", "sweep") == "sweep"]
    if not rows:
        raise ValueError("no rows of the token-count sweep (case sweep)")
    keys = []
    for r in rows:
        if (r["m"], r["op"]) not in keys:
            keys.append((r["m"], r["op"]))

    # A recipe timed with unrounded FP32 scales too (gemm:fp32=on): '<name>+fp32'; one timed
    # under several streaming limits (gemm:stream=...; table gemm.stream compares them):
    # '<name> (stream N)'.
    limits = {}
    for r in rows:
        limits.setdefault(r["recipe"], set()).add(r.get("stream_rows"))

    def name(r):
        return (r["recipe"] + ("+fp32" if r.get("scales") == "fp32" else "") +
                (f" (stream {r.get('stream_rows')})" if len(limits[r["recipe"]]) > 1 else ""))
    recipes = list(dict.fromkeys(name(r) for r in rows if r["recipe"] != "bf16"))
    body = []
    for m, op in keys:
        rs = [r for r in rows if r["m"] == m and r["op"] == op]
        cells = [mrange([r["ms"] for r in rs if r["recipe"] == "bf16"], "{:.2f}")]
        for rec in recipes:
            cells.append(ratio_cell([r["vs_bf16"] for r in rs if name(r) == rec]))
        body.append([m, op] + cells)
    return (md_table(["m", "op", "bf16 ms: median (range)"] + [f"{x} time / bf16's" for x in recipes],
                     body, "rlr" + "r" * len(recipes)) +
            f"\n\n{len({r['round'] for r in rows})} runs; k = n = 4096.")


def table_gemm_shapes(rows):
    rows = [r for r in rows if r.get("case", "shapes") == "shapes"]
    if not rows:
        raise ValueError("no rows of the shapes comparison (case shapes)")
    by = {}
    order = []
    for r in rows:
        key = (r["layer"], r["m"], r["k"], r["n"], r["op"])
        if key not in by:
            order.append(key)
        by.setdefault(key, {}).setdefault(r["round"], {})[r["bf16_shapes"]] = r["ms"]
    body, sums = [], {}
    for key in order:
        per = by[key]
        both = [x for x in per.values() if "exact" in x and "runtime" in x]
        ex, rt = [x["exact"] for x in both], [x["runtime"] for x in both]
        for rnd, x in per.items():
            s = sums.setdefault(rnd, [0.0, 0.0])
            s[0] += x.get("exact", 0)
            s[1] += x.get("runtime", 0)
        body.append(list(key) + [mrange(ex, "{:.3f}"), mrange(rt, "{:.3f}"),
                                 ratio_cell([b / a for a, b in zip(ex, rt)], "{:.3f}")])
    tot = [s[1] / s[0] for s in sums.values()]
    return (md_table(["layer", "m", "k", "n", "op", "exact ms", "runtime ms", "runtime / exact"],
                     body, "lrrrlrrr") +
            f"\n\nSummed over every product of a round, runtime / exact: "
            f"{ratio_cell(tot, '{:.3f}')} over {len(tot)} rounds.")


def table_gemm_train(rows):
    rows = [r for r in rows if "shapes" in r and "median_step_ms" in r]
    if not rows:
        raise ValueError("no training rows (case train)")
    by = {}
    for r in rows:
        by.setdefault((r["config"], r["recipe"]), {}).setdefault(r["round"], {})[r["shapes"]] = r
    body = []
    for (config, recipe), per in by.items():
        other = next(s for x in per.values() for s in x if s != "default")
        both = [x for x in per.values() if "default" in x and other in x]
        d = [x["default"]["median_step_ms"] for x in both]
        e = [x[other]["median_step_ms"] for x in both]
        body.append([config, recipe, mrange(d), f"all {other}", mrange(e),
                     ratio_cell([a / b for a, b in zip(d, e)], "{:.3f}")])
    return md_table(["config", "recipe", "step ms, default shapes", "other shaping",
                     "step ms, other", "default / other, per round"], body, "llrlrr")


# ---- FSDP and parallel layouts ---------------------------------------------------------------

def run_fsdp(ctx, args):
    """Peak RSS per rank under FSDP (ZeRO-3) against one process, configs/params1024.yaml, the
    same global batch (4 sequences) at every world size."""
    path = ctx.rows_path("fsdp")
    runs = ["mxfp8-32x32:-", "mxfp8:on-demand", "mxfp8:all", "bf16:reshard"]
    worlds = [1, 2] if ctx.quick else [1, 2, 4]
    cases = [(run, w) for run in runs for w in worlds]
    for rnd, (run, w) in cases_rounds(ctx, cases):
        recipe, mode = run.split(":")
        cfg = os.path.join(ctx.work, f"fsdp-{recipe}-{mode}.yaml")
        text = open(os.path.join(ROOT, "configs", "params1024.yaml")).read()
        if mode in ("on-demand", "all"):
            text = text.replace("precision:", f"fsdp:\n  mxfp8_gather: {mode}\nprecision:", 1)
        if ctx.quick:
            text = re.sub(r"(?m)^  steps: .*$", "  steps: 3", text)
        open(cfg, "w").write(text)
        log(f"fsdp: round {rnd}, {recipe} {mode}, {w} rank(s)")
        m = os.path.join(ctx.work, f"fsdp-{recipe}-{mode}-w{w}-r{rnd}.jsonl")
        argv = ["--config", cfg, "--recipe", recipe, "--quiet"]
        if w > 1:
            argv += ["--fsdp", "--micro-batch-size", str(4 // w)]
        row, s, steps = train_run(ctx, "fsdp", f"{recipe}-{mode}-w{w}", rnd, argv, m,
                                  mpi=w if w > 1 else 0, recipe=recipe, mode=mode, world=w)
        row["step_ms"] = median(r["step_ms"] for r in steady(steps))
        append_row(path, row)
    # The gathers alone: `mxtrain bench fsdp` (a synthetic model, no GEMMs between gathers)
    # at 2 ranks, once per round.
    for rnd in range(1, ctx.rounds + 1):
        log(f"fsdp: round {rnd}, bench fsdp at 2 ranks")
        argv = ["mpirun", "--oversubscribe", "-np", "2", ctx.binary, "bench", "fsdp", "--steps",
                "11", "--json"]
        out = os.path.join(ctx.work, f"fsdp-gather-r{rnd}.json")
        env = {"OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1",
               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        t = ctx.timed(argv, f"fsdp-gather-r{rnd}", env=env, stdout_path=out)
        text = open(out).read()
        for r in json.loads(text[text.index("["):text.rindex("]") + 1]):
            append_row(path, ctx.row("fsdp", "gather", rnd, argv, t,
                                     env={"OMP_NUM_THREADS": "1"}, **r))
    return path


def table_fsdp_gather(rows):
    rows = [r for r in rows if r.get("case") == "gather"]
    if not rows:
        raise ValueError("no `bench fsdp` rows (case gather)")
    body = []
    # bf16 appears twice with no mode: gathered once (keep, 2N bytes) and again for backward
    # (reshard, 4N); the payload tells them apart.
    key = lambda r: (r["recipe"], r["mode"], r["payload_bytes_per_step"])
    for k in dict.fromkeys(key(r) for r in rows):
        rs = [r for r in rows if key(r) == k]
        mode = k[1] or ("keep" if k[0] == "bf16" and rs[0]["bytes_vs_bf16"] == 1 else
                        "reshard" if k[0] == "bf16" else "-")
        body.append([k[0], mode, f"{rs[0]['payload_bytes_per_step']:,}",
                     f"{rs[0]['bytes_vs_bf16']:.4f}", mrange([r["allgather_ms_per_step"] for r in rs], "{:.2f}"),
                     ratio_cell([r["allgather_ms_vs_bf16"] for r in rs], "{:.3f}")])
    return (md_table(["recipe", "mode", "payload bytes/step", "bytes vs bf16",
                      "all-gather ms/step", "time vs bf16, per round"], body, "llrrrr") +
            f"\n\n{len({r['round'] for r in rows})} rounds, 2 ranks.")


def table_fsdp_memory(rows):
    rows = [r for r in rows if r.get("case") != "gather"]
    body = []
    for tag in dict.fromkeys((r["recipe"], r["mode"]) for r in rows):
        rs = [r for r in rows if (r["recipe"], r["mode"]) == tag]
        one = {r["round"]: r["peak_rss_kib"] for r in rs if r["world"] == 1}
        for w in sorted({r["world"] for r in rs}):
            ws = [r for r in rs if r["world"] == w]
            ratios = [r["peak_rss_kib"] / one[r["round"]] for r in ws if r["round"] in one]
            body.append([tag[0], tag[1], w, mrange([r["peak_rss_kib"] / 1024 for r in ws], "{:.0f}"),
                         ratio_cell(ratios, "{:.3f}") if w > 1 else "1",
                         mrange([r["step_ms"] for r in ws], "{:.0f}")])
    return (md_table(["recipe", "gather mode", "ranks", "largest rank's peak RSS MiB",
                      "vs one process, per round", "step ms"], body, "llrrrr") +
            f"\n\n{len({r['round'] for r in rows})} rounds.")


def table_fsdp_ab(rows):
    body = []
    for recipe in dict.fromkeys(r["recipe"] for r in rows):
        rs = [r for r in rows if r["recipe"] == recipe]
        b = [r for r in rs if r["binary"].startswith("before")]
        a = [r for r in rs if not r["binary"].startswith("before")]
        ratio = [x["median_step_ms"] / y["median_step_ms"] for x in a for y in b
                 if x["round"] == y["round"]]
        body.append([recipe, rs[0]["ranks"], mrange([r["median_step_ms"] for r in b], "{:.0f}"),
                     mrange([r["median_step_ms"] for r in a], "{:.0f}"),
                     ratio_cell(ratio), mrange([r["median_reduce_scatter_ms"] for r in b], "{:.0f}"),
                     mrange([r["median_reduce_scatter_ms"] for r in a], "{:.0f}")])
    label = sorted({r["binary"] for r in rows if r["binary"].startswith("before")})[0]
    return md_table(["recipe", "ranks", f"{label}: step ms", "after: step ms",
                     "after / before, per round", "reduce-scatter ms before", "after"], body,
                    "lrrrrrr")


LAYOUTS = [
    ("dense-1", 1, "configs/params1024.yaml", []),
    ("dense-tp2", 2, "configs/params1024.yaml", ["--tp", "2"]),
    ("dense-tp2-sp", 2, "configs/params1024.yaml", ["--tp", "2", "--sequence-parallel"]),
    ("dense-tp2-sprow", 2, "configs/params1024.yaml",
     ["--tp", "2", "--sequence-parallel", "--sp-wire", "rowwise"]),
    ("dense-tp2xdp2", 4, "configs/params1024.yaml", ["--tp", "2", "--micro-batch-size", "2"]),
    ("moe-1", 1, "configs/moe8.yaml", ["--grad-accum", "2"]),
    ("moe-ep2", 2, "configs/moe8.yaml", ["--ep", "2"]),
    ("moe-ep2xedp2", 4, "configs/moe8.yaml", ["--ep", "2", "--micro-batch-size", "2"]),
]


def run_parallel(ctx, args, suite="parallel", layouts=None, recipes=("bf16", "mxfp8"),
                 num_steps=None):
    """The layouts (LAYOUTS; quick: those of 2 ranks at most) in each recipe, alternating within
    each round; rows to docs/results/raw/<suite>_<class>.jsonl. num_steps: --steps of every
    run (the configs' own when None)."""
    path = ctx.rows_path(suite)
    if layouts is None:
        layouts = [l for l in LAYOUTS if l[1] <= 2] if ctx.quick else LAYOUTS
    cases = [(l, rec) for rec in recipes for l in layouts]
    for rnd, ((name, np, cfg, extra), recipe) in cases_rounds(ctx, cases):
        log(f"{suite}: round {rnd}, {name} {recipe}")
        m = os.path.join(ctx.work, f"{suite}-{name}-{recipe}-r{rnd}.jsonl")
        argv = ["--config", cfg, "--recipe", recipe, "--quiet"] + extra + (
            ["--steps", "3"] if ctx.quick else ["--steps", str(num_steps)] if num_steps else [])
        row, s, steps = train_run(ctx, suite, name, rnd, argv, m, mpi=np if np > 1 else 0,
                                  layout=name, recipe=recipe)
        st = [r for r in steps if "step_ms" in r and r.get("step", 0) >= 2]
        med = lambda k: median([r.get(k, 0) for r in st]) if st else 0
        row.update(ranks=np, step_ms=med("step_ms"), final_loss=s["final_loss"],
                   exposed_comm_ms=median([r.get("tp_comm_ms", 0) + r.get("ep_comm_ms", 0) +
                                           r.get("allreduce_ms", 0) for r in st]),
                   tp_comm_bytes=med("tp_comm_bytes"), tp_allgather_bytes=med("tp_allgather_bytes"),
                   ep_comm_bytes=med("ep_comm_bytes"), ep_dispatch_bytes=med("ep_dispatch_bytes"),
                   dp_allreduce_bytes=med("allreduce_bytes"),
                   max_rank_peak_rss_kib=row["peak_rss_kib"],
                   step1=({k: v for k, v in steps[0].items() if k.endswith("_bytes")}
                          if steps else {}))
        append_row(path, row)
    return path


# The 4-bit wires against bf16's: the sequence-parallel all-gathers on both wires and the expert
# dispatch, bytes per step (deterministic per step: 4 steps a run).
FP4_LAYOUTS = [l for l in LAYOUTS if l[0] in ("dense-tp2-sp", "dense-tp2-sprow", "moe-ep2")]


def run_parallel_fp4(ctx, args):
    return run_parallel(ctx, args, suite="parallel_fp4", layouts=FP4_LAYOUTS,
                        recipes=("bf16", "mxfp4", "nvfp4"), num_steps=int(args.get("steps", 4)))


def table_parallel_fp4(rows):
    """Per layout and 4-bit recipe: bytes per step against bf16's, per round."""
    def per_round(layout, recipe, get):
        return {r["round"]: get(r) for r in rows if r["layout"] == layout and r["recipe"] == recipe}

    what = {"dense-tp2-sp": ("sequence-parallel all-gathers, exact wire",
                             lambda r: r["tp_allgather_bytes"]),
            "dense-tp2-sprow": ("sequence-parallel all-gathers, rowwise wire",
                                lambda r: r["tp_allgather_bytes"]),
            "moe-ep2": ("expert dispatch of step 1 (same weights and batch: nearly the same "
                        "routing)", lambda r: r["step1"]["ep_dispatch_bytes"])}
    body = []
    for layout in dict.fromkeys(r["layout"] for r in rows):
        label, get = what[layout]
        b = per_round(layout, "bf16", get)
        for recipe in ("mxfp4", "nvfp4"):
            a = per_round(layout, recipe, get)
            if not a:
                continue
            body.append([layout, f"{recipe} / bf16", label,
                         f"{median(a.values()):,.0f} / {median(b.values()):,.0f}",
                         ratio_cell([a[x] / b[x] for x in a if x in b and b[x]], "{:.4f}")])
    return (md_table(["layout", "recipes", "bytes", "per step: median", "ratio per round: "
                      "median (range)"], body, "lllrr") +
            f"\n\n{len({r['round'] for r in rows})} rounds; bytes are rank 0's (all-gathers: "
            "median over steps 2..).")


def table_parallel(rows):
    body = []
    for (layout, recipe) in dict.fromkeys((r["layout"], r["recipe"]) for r in rows):
        rs = [r for r in rows if (r["layout"], r["recipe"]) == (layout, recipe)]
        m = lambda k: median(r[k] for r in rs)
        body.append([layout, recipe, rs[0]["ranks"], mrange([r["step_ms"] for r in rs]),
                     f"{m('exposed_comm_ms'):.1f}",
                     f"{m('tp_comm_bytes'):,.0f} ({m('tp_allgather_bytes'):,.0f})",
                     f"{m('ep_comm_bytes'):,.0f} ({m('ep_dispatch_bytes'):,.0f})",
                     mrange([r["max_rank_peak_rss_kib"] / 1024 for r in rs], "{:.0f}")])
    return (md_table(["layout", "recipe", "ranks", "step ms: median (range)", "exposed comm ms",
                      "tp bytes (all-gathers)", "ep bytes (dispatch)",
                      "largest rank's peak RSS MiB"], body, "llrrrrrr") +
            f"\n\n{len({r['round'] for r in rows})} rounds; bytes are rank 0's per step "
            "(median over steps 2..).")


def table_parallel_ratios(rows):
    def pr(num, den, key, recipe):
        a = {r["round"]: r[key] for r in rows if r["layout"] == num and r["recipe"] == recipe}
        b = {r["round"]: r[key] for r in rows if r["layout"] == den and r["recipe"] == recipe}
        return [a[x] / b[x] for x in a if x in b and b[x]]

    def pr2(layout, key):  # mxfp8 / bf16 of one layout, per round
        a = {r["round"]: r[key] for r in rows if r["layout"] == layout and r["recipe"] == "mxfp8"}
        b = {r["round"]: r[key] for r in rows if r["layout"] == layout and r["recipe"] == "bf16"}
        return [a[x] / b[x] for x in a if x in b and b[x]]

    body = []
    for recipe in ("bf16", "mxfp8"):
        for num, den in (("dense-tp2", "dense-1"), ("dense-tp2-sp", "dense-1"),
                         ("dense-tp2-sprow", "dense-1"), ("moe-ep2", "moe-1")):
            body.append([f"{num} / {den}", recipe, "largest rank's peak RSS",
                         ratio_cell(pr(num, den, "max_rank_peak_rss_kib", recipe), "{:.3f}")])
    for layout in ("dense-tp2-sp", "dense-tp2-sprow"):
        body.append([layout, "mxfp8 / bf16", "all-gather bytes per step",
                     ratio_cell(pr2(layout, "tp_allgather_bytes"), "{:.4f}")])
    s1 = [r for r in rows if r["layout"] == "moe-ep2" and r.get("step1")]
    if {r["recipe"] for r in s1} >= {"bf16", "mxfp8"}:
        a = {r["round"]: r["step1"]["ep_dispatch_bytes"] for r in s1 if r["recipe"] == "mxfp8"}
        b = {r["round"]: r["step1"]["ep_dispatch_bytes"] for r in s1 if r["recipe"] == "bf16"}
        body.append(["moe-ep2", "mxfp8 / bf16", "expert dispatch bytes of step 1 (same weights "
                     "and batch: nearly the same routing)",
                     ratio_cell([a[x] / b[x] for x in a if x in b and b[x]], "{:.4f}")])
    body.append(["dense-tp2-sprow / dense-tp2-sp", "mxfp8", "step time",
                 ratio_cell(pr("dense-tp2-sprow", "dense-tp2-sp", "step_ms", "mxfp8"), "{:.3f}")])
    return md_table(["layouts", "recipe", "what", "ratio per round: median (range)"], body,
                    "lllr")


# ---- data, memory --------------------------------------------------------------------------

def run_data(ctx, args):
    """prepare-data on a 10 MB and a 100 MB corpus built from the Debian fortunes text (never
    committed), and training from their shards: MB/s and peak RSS, the sizes alternating."""
    import random
    path = ctx.rows_path("data")
    tmp = os.path.join(ctx.work, "data")
    os.makedirs(tmp, exist_ok=True)
    entries = []
    for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if os.path.isfile(f) and not f.endswith((".dat", ".u8")):
            text = open(f, "rb").read().decode("utf-8", "replace")
            entries += [e.strip("\n") + "\n" for e in text.split("\n%\n") if e.strip()]
    sizes = {"c10": 10_000_000, "c100": 1_000_000 if ctx.quick else 100_000_000}
    for name, size in sizes.items():
        with open(f"{tmp}/{name}.txt", "w") as out:
            n, rep = 0, 0
            while n < size:
                order = list(entries)
                random.Random(rep).shuffle(order)
                for e in order:
                    out.write(e + "\n")
                    n += len(e.encode()) + 1
                    if n >= size:
                        break
                rep += 1
    tok = f"{tmp}/tok.model"
    subprocess.run([ctx.binary, "tokenizer", "train", "--input", "fortunes", "--vocab-size", "4096",
                    "--out", tok, "--quiet"], check=True)
    base = open(os.path.join(ROOT, "configs", "demo.yaml")).read()
    base = re.sub(r"(?m)^  steps: .*$", "  steps: 60", base)
    base = re.sub(r"(?m)^  eval_every: .*$", "  eval_every: 0", base)
    base = re.sub(r"(?m)^  tokenizer: .*$", f"  tokenizer: {tok}", base)
    for rnd in range(1, ctx.rounds + 1):
        for c in ctx.round_order(list(sizes), rnd):
            log(f"data: round {rnd}, prepare-data {c}")
            sh = f"{tmp}/sh_{c}"
            subprocess.run(["rm", "-rf", sh])
            argv = [ctx.binary, "prepare-data", "--input", f"{tmp}/{c}.txt", "--tokenizer", tok,
                    "--out", sh, "--json", "--quiet"]
            out = f"{tmp}/prep.json"
            t = ctx.timed(argv, f"data-prep-{c}-r{rnd}", stdout_path=out)
            j = json.load(open(out))
            append_row(path, ctx.row("data", c, rnd, argv, t, what="prepare-data", corpus=c,
                                     input_bytes=j["input_bytes"], seconds=j["seconds"],
                                     mb_per_s=j["mb_per_s"],
                                     tokens=j["train_tokens"] + j["val_tokens"]))
        for c in ctx.round_order(list(sizes), rnd):
            log(f"data: round {rnd}, training from {c}'s shards")
            cfg = f"{tmp}/train_{c}.yaml"
            open(cfg, "w").write(re.sub(r"(?m)^  path: .*$", f"  path: {tmp}/sh_{c}", base))
            m = f"{tmp}/train_{c}.jsonl"
            row, s, _ = train_run(ctx, "data", c, rnd, ["--config", cfg, "--quiet"], m,
                                  what="train", corpus=c)
            row.update(steps=s["steps"], tokens_per_s=s["tokens_per_s"])
            append_row(path, row)
    return path


def table_data(rows):
    body = []
    for what, key, scale, fmt, label in (
            ("prepare-data", "mb_per_s", 1, "{:.1f}", "throughput, MB/s"),
            ("prepare-data", "peak_rss_kib", 1 / 1024, "{:.1f}", "peak RSS, MiB"),
            ("train", "peak_rss_kib", 1 / 1024, "{:.1f}", "peak RSS, MiB")):
        cells = []
        for c in ("c10", "c100"):
            v = [r[key] * scale for r in rows if r["what"] == what and r["corpus"] == c]
            cells.append(mrange(v, fmt))
        a = median(r["peak_rss_kib"] for r in rows if r["what"] == what and r["corpus"] == "c100")
        b = median(r["peak_rss_kib"] for r in rows if r["what"] == what and r["corpus"] == "c10")
        ratio = f"{a / b:.3f}x" if key == "peak_rss_kib" else ""
        body.append([what, label] + cells + [ratio])
    return (md_table(["command", "figure", "10 MB corpus: median (range)", "100 MB corpus",
                      "peak RSS 100 MB / 10 MB"], body, "llrrr") +
            f"\n\n{len({r['round'] for r in rows})} rounds.")


# A recipe case R[:FLAG...] of the memory and mainjob suites: the recipe R with each flag's
# `mxtrain train` arguments.
RECIPE_FLAGS = {"sw32": ["--swiglu-input", "fp32"], "sw4": ["--swiglu-input", "fp4"],
                "ra": ["--recompute", "attention"],
                "nosr": ["--fp4-stochastic-rounding", "false"], "norht": ["--fp4-rht", "false"],
                "no2d": ["--fp4-2d-weights", "false"]}
# Flags of a recipe case that set the run's environment instead: :noamx keeps the scaled
# products off the AMX tiles (MXTRAIN_AMX=0; the AVX512-BF16 kernels).
RECIPE_ENV = {"noamx": {"MXTRAIN_AMX": "0"}}


def recipe_case_env(case):
    """The environment a recipe case R[:FLAG...] sets (RECIPE_ENV), or None."""
    env = {}
    for f in case.split(":")[1:]:
        env.update(RECIPE_ENV.get(f, {}))
    return env or None


def recipe_case_argv(suite, case):
    """`--recipe R` and the flags' arguments of a recipe case R[:FLAG...]."""
    recipe, *flags = case.split(":")
    argv = ["--recipe", recipe]
    for f in flags:
        if f in RECIPE_ENV:
            continue
        if f not in RECIPE_FLAGS:
            raise SystemExit(f"{suite}: recipe case {case!r}: unknown flag {f!r}; the flags "
                             "are " + ", ".join(list(RECIPE_FLAGS) + list(RECIPE_ENV)))
        argv += RECIPE_FLAGS[f]
    return argv


def run_memory(ctx, args):
    """Peak RSS and step time of activation recompute (none | attention | layer) and of the
    recipes, on configs/act512.yaml. memory:recompute=MODES:recipes=RECIPES choose the cases
    (comma lists; recompute= empty runs none of them). A recipe case is R[:FLAG...]
    (RECIPE_FLAGS): :sw32 runs R with --swiglu-input fp32, :sw4 with --swiglu-input fp4, :ra
    with --recompute attention (e.g. nvfp4:sw4:ra)."""
    path = ctx.rows_path("memory")
    cfg = "configs/act512.yaml"
    modes = [m for m in args.get("recompute", "none,attention,layer").split(",") if m]
    recipes = [r for r in args.get("recipes", "bf16,mxfp8,mxfp8-32x32,mxfp8:sw32").split(",")
               if r]
    cases = [("recompute", m) for m in modes] + [("recipe", r) for r in recipes]
    for rnd, (kind, what) in cases_rounds(ctx, cases):
        log(f"memory: round {rnd}, {kind} {what}")
        argv = ["--config", cfg, "--quiet"] + (["--steps", "3"] if ctx.quick else [])
        if kind == "recompute":
            argv += ["--recompute", what]
        else:
            argv += recipe_case_argv("memory", what)
        m = os.path.join(ctx.work, f"memory-{kind}-{what.replace(':', '-')}-r{rnd}.jsonl")
        row, s, steps = train_run(ctx, "memory", f"{kind}-{what}", rnd, argv, m,
                                  config=cfg, **{kind: what})
        st = [r for r in steps if "step_ms" in r]
        row.update(median_step_ms=median(r["step_ms"] for r in st[1:] or st),
                   held_bytes=s["held_bytes"], final_loss=s["final_loss"],
                   losses=[r["loss"] for r in st])
        append_row(path, row)
    return path


def table_memory(rows, kind="recompute"):
    rows = [r for r in rows if kind in r]
    modes = list(dict.fromkeys(r[kind] for r in rows))
    base = modes[0]
    body = []
    for m in modes:
        rs = [r for r in rows if r[kind] == m]
        rss = per_round(rows, lambda r: r[kind], m, base, "peak_rss_kib")
        ms = per_round(rows, lambda r: r[kind], m, base, "median_step_ms")
        same = all(r["losses"] == next(x for x in rows if x[kind] == base
                                        and x["round"] == r["round"])["losses"] for r in rs)
        body.append([m, mrange([r["peak_rss_kib"] / 1024 for r in rs], "{:.0f}"),
                     ratio_cell(rss, "{:.3f}"), mrange([r["median_step_ms"] for r in rs], "{:.0f}"),
                     ratio_cell(ms, "{:.3f}"), f"{rs[0]['held_bytes'] / 2**20:.1f}",
                     "same" if same else "differ"])
    return (md_table([kind, "peak RSS MiB", f"vs {base}, per round", "step ms",
                      f"vs {base}, per round", "held MiB", f"losses vs {base}"], body, "lrrrrrl") +
            f"\n\n{len({r['round'] for r in rows})} rounds.")


# ---- peak ------------------------------------------------------------------------------------

def run_peak(ctx, args):
    """`mxtrain bench peak`, and the peer shape (d_model 256) trained 6 steps with
    --profile-steps 5 in bf16 and mxfp8; ROUNDS rounds, written as a directory of raw JSON
    (raw/peak_<class>/: peak_rN.json, profile_<recipe>_rN.json, machine.txt)."""
    d = (os.path.join(ctx.work, "peak") if ctx.quick else
         ctx.out or os.path.join(RAW, f"peak_{ctx.tag}"))
    os.makedirs(d, exist_ok=True)
    cfg = "configs/peer256.yaml"
    for rnd in range(1, ctx.rounds + 1):
        log(f"peak: round {rnd}")
        subprocess.run(f"{ctx.binary} bench peak --json --quiet > {d}/peak_r{rnd}.json",
                       shell=True, check=True)
        for recipe in ctx.round_order(["bf16", "mxfp8"], rnd):
            subprocess.run([ctx.binary, "train", "--config", cfg, "--recipe", recipe, "--steps", "6",
                            "--profile-steps", "5", "--quiet", "--profile-out",
                            f"{d}/profile_{recipe}_r{rnd}.json", "--metrics-out",
                            f"{d}/metrics_{recipe}_r{rnd}.jsonl"], check=True,
                           stderr=subprocess.DEVNULL)
    with open(f"{d}/machine.txt", "w") as f:
        f.write(f"CPU: {ctx.machine}\ncommand: bash scripts/bench.sh peak\n"
                f"{open('/proc/loadavg').read()}")
    return d


def _runs(d, pattern):
    key = lambda p: int(re.search(r"_r(\d+)\.json$", p).group(1))
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(RAW, d, pattern)), key=key)]


def table_peak_machine(d):
    peaks = _runs(d, "peak_r*.json")
    machine = open(os.path.join(RAW, d, "machine.txt")).read().splitlines()[0]
    machine = machine[len("CPU: "):] if machine.startswith("CPU: ") else machine
    out = [f"Machine: `{machine}`; {len(peaks)} runs, each figure the median (range).", ""]
    body = []
    for c0 in peaks[0]["compute"]:
        v = [c["gflops"] for p in peaks for c in p["compute"]
             if (c["kind"], c["threads"]) == (c0["kind"], c0["threads"])]
        body.append([c0["kind"], c0["instruction"], f"{c0['flops_per_instruction']:g}",
                     c0["threads"], mrange(v)])
    out.append(md_table(["compute", "instruction", "FLOPs/instr", "threads", "GFLOP/s"], body,
                        "llrrr"))
    ref = [p["reference"]["gflops"] for p in peaks]
    out += ["", f"Reference peak ({peaks[0]['reference']['kind']}, "
                f"{peaks[0]['reference']['threads']} threads): {mrange(ref)} GFLOP/s.", ""]
    body = []
    for m0 in peaks[0]["memory"]:
        v = [m["gb_per_s"] for p in peaks for m in p["memory"]
             if (m["stream"], m["threads"]) == (m0["stream"], m0["threads"])]
        body.append([m0["stream"], m0["kernel"], m0["threads"], mrange(v, "{:.2f}")])
    out.append(md_table(["memory", "kernel", "threads", "GB/s"], body, "llrr"))
    return "\n".join(out)


def table_peak_profile(d):
    recipes = [r for r in ("bf16", "mxfp8") if glob.glob(os.path.join(RAW, d, f"profile_{r}_r*.json"))]
    profs = {r: _runs(d, f"profile_{r}_r*.json") for r in recipes}
    out = [md_table(["peer shape, steps 2-6"] + recipes, [
        ["mean step ms"] + [mrange([p["mean_step_ms"] for p in profs[r]]) for r in recipes],
        ["MFU"] + [mrange([100 * p["mfu"] for p in profs[r]], "{:.1f}", "%") for r in recipes],
        ["peak measured at start, GFLOP/s"] + [mrange([p["peak_gflops"] for p in profs[r]], "{:.0f}")
                                              for r in recipes]] + [
        [f"{g} (share of the step)"] + [
            mrange([100 * sum(x["share"] for x in p["rows"] if x["group"] == g) for p in profs[r]],
                   "{:.1f}", "%") for r in recipes]
        for g in dict.fromkeys(x["group"] for x in profs[recipes[0]][0]["rows"])
        if any(x["share"] > 0.0005 for r in recipes for p in profs[r] for x in p["rows"]
               if x["group"] == g)]), ""]
    names = []
    for r in sorted(recipes, key=lambda r: -len(profs[r][0]["rows"])):
        for row in profs[r][0]["rows"]:
            n = (row["region"] + " " + row["pass"]).strip()
            if n not in names:
                names.append(n)
    body = []
    for n in names:
        cells = []
        for r in recipes:
            rows = [x for p in profs[r] for x in p["rows"] if (x["region"] + " " + x["pass"]).strip() == n]
            if len(rows) < len(profs[r]):
                cells += ["", ""]
                continue
            cells.append(mrange([x["ms"] for x in rows], "{:.2f}"))
            cells.append(f"{100 * median(x['share'] for x in rows):.1f}%")
        body.append([n] + cells)
    hdr = ["region"] + [h for r in recipes for h in (f"{r} ms/step", f"{r} share")]
    out.append(md_table(hdr, body))
    return "\n".join(out)


# ---- adaptive FP8 ----------------------------------------------------------------------------

ADAPTIVE_CASES = [("tiny", "tiny", "256 1024 4096", "1", "5", "12", []),
                  ("tiny-moe", "tiny-moe", "256 1024 4096", "1", "5", "12", []),
                  ("medium", "medium", "128 512 1024", "1", "3", "5", []),
                  ("medium-2k", "medium", "512 2048 4096", "1", "3", "5",
                   ["--micro-batch-size", "8"])]


def run_adaptive(ctx, args):
    """Per config: bench-layers (BF16 vs MXFP8 per layer kind), a policy merged from it, then
    rounds of bf16, mxfp8 and adaptive (mxfp8 + the policy) training back to back."""
    path = ctx.rows_path("adaptive")
    cases = ADAPTIVE_CASES[:1] if ctx.quick else ADAPTIVE_CASES
    for name, config, tokens, warm, iters, steps, extra in cases:
        cfg = f"configs/{config}.yaml"
        rep = os.path.join(ctx.work, f"adaptive-{name}-report.json")
        pol = os.path.join(ctx.work, f"adaptive-{name}-policy.json")
        log(f"adaptive: {name}: bench-layers")
        subprocess.run([ctx.binary, "bench-layers", "--config", cfg, "--recipe", "mxfp8",
                        "--warmup", warm, "--iters", iters, "--tokens"] + tokens.split() +
                       ["--report", rep, "--quiet"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([ctx.binary, "policy", "merge", "--reports", rep, "--output", pol],
                       check=True, stdout=subprocess.DEVNULL)
        dec = os.path.join(ctx.work, f"adaptive-{name}-decisions.json")
        subprocess.run([ctx.binary, "train", "--config", cfg] + extra +
                       ["--recipe", "mxfp8", "--fp8-policy", pol, "--dry-run", "--decisions-out",
                        dec], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ds = json.load(open(dec))
        fp8 = sum(1 for x in ds if x["precision"] != "bf16")
        for rnd, run in cases_rounds(ctx, ["bf16", "mxfp8", "adaptive"]):
            log(f"adaptive: {name}: round {rnd}, {run}")
            rec = ["--recipe", "mxfp8", "--fp8-policy", pol] if run == "adaptive" else [
                "--recipe", run]
            m = os.path.join(ctx.work, f"adaptive-{name}-{run}-r{rnd}.jsonl")
            row, s, st = train_run(ctx, "adaptive", name, rnd,
                                   ["--config", cfg] + extra + rec +
                                   ["--steps", "3" if ctx.quick else steps, "--quiet"], m,
                                   run=run, fp8_modules=fp8, modules=len(ds))
            row["step_ms"] = [r["step_ms"] for r in sorted(
                (r for r in st if "step_ms" in r), key=lambda r: r["step"])]
            append_row(path, row)
    return path


def _adaptive_times(rows):
    """{(case, run, round): [step_ms after the first]} from either form of row: the runner's
    (one row per run, step_ms a list) or the earlier one (one row per step)."""
    t = {}
    for r in rows:
        key = (r["case"], r["run"], r["round"])
        if isinstance(r.get("step_ms"), list):
            t[key] = r["step_ms"][1:]
        elif "step_ms" in r and not r.get("summary"):
            t.setdefault(key, []).append((r["step"], r["step_ms"]))
    for k, v in t.items():
        if v and isinstance(v[0], tuple):
            t[k] = [ms for _, ms in sorted(v)][1:]
    return t


def table_adaptive(rows):
    t = _adaptive_times(rows)
    fp8 = {r["case"]: (r["fp8_modules"], r["modules"]) for r in rows if "fp8_modules" in r}
    body = []
    for case in dict.fromkeys(k[0] for k in t):
        rounds = sorted({k[2] for k in t if k[0] == case})
        med = {run: median(ms for rnd in rounds for ms in t.get((case, run, rnd), []))
               for run in ("bf16", "mxfp8", "adaptive")}
        ratios = []
        for rnd in rounds:
            m = {run: median(t[(case, run, rnd)]) for run in ("bf16", "mxfp8", "adaptive")
                 if t.get((case, run, rnd))}
            if len(m) == 3:
                ratios.append(m["adaptive"] / min(m["bf16"], m["mxfp8"]))
        judged = median(ratios)
        body.append([case, f"{med['bf16']:.1f}", f"{med['mxfp8']:.1f}", f"{med['adaptive']:.1f}",
                     ratio_cell(ratios, "{:.3f}"), "met" if judged <= 1.03 else "not met",
                     "{} / {}".format(*fp8[case]) if case in fp8 else "–"])
    return (md_table(["config", "bf16 ms/step", "mxfp8 ms/step", "adaptive ms/step",
                      "adaptive / min(bf16, mxfp8), per round", "goal <= 1.03",
                      "modules in FP8"], body, "lrrrrll") +
            f"\n\nms/step: median over every timed step (after the first) of all "
            f"{len({k[2] for k in t})} rounds.")


# ---- loss parity -----------------------------------------------------------------------------

PARITY_RUNS = ["bf16", "mxfp8", "mxfp8-32x32", "mxfp8:sw32", "mxfp8-32x32:sw32", "blockwise",
               "fp8-current", "fp8-delayed"]


def run_parity(ctx, args):
    """Loss parity: the tiny dense and MoE configs in every recipe family with 4 seeds, and the
    byte-level main job (configs/demo-bytes.yaml) in each recipe with 3 seeds. Losses are
    deterministic on a kernel path, so each (config, recipe, seed) runs once."""
    path = ctx.rows_path("parity")
    jobs = []
    seeds = ["1234"] if ctx.quick else ["1234", "1235", "1236", "1237"]
    for model in ("tiny", "tiny-moe"):
        for seed in seeds:
            for run in PARITY_RUNS:
                jobs.append((f"configs/{model}.yaml", model, run, seed))
    if not ctx.quick and args.get("main", "1") == "1":
        for seed in ("1", "2", "3"):
            for run in ("bf16", "mxfp8", "mxfp8-32x32", "blockwise", "fp8-current", "fp8-delayed"):
                jobs.append(("configs/demo-bytes.yaml", "demo-bytes", run, seed))
    for cfg, model, run, seed in jobs:
        log(f"parity: {model} {run} seed {seed}")
        argv = ["--config", cfg, "--recipe", run.split(":")[0], "--seed", seed, "--quiet"] + (
            ["--swiglu-input", "fp32"] if run.endswith(":sw32") else []) + (
            ["--steps", "20"] if ctx.quick else [])
        m = os.path.join(ctx.work, f"parity-{model}-{run.replace(':', '-')}-s{seed}.jsonl")
        row, s, steps = train_run(ctx, "parity", model, 1, argv, m, model=model, run=run,
                                  seed=int(seed))
        row.update(final_val_loss=s["final_val_loss"], tokens_per_s=s["tokens_per_s"],
                   held_bytes=s["held_bytes"],
                   losses=[r["loss"] for r in steps if "loss" in r])
        append_row(path, row)
    return path


def table_parity(rows, model):
    rs = [r for r in rows if r["model"] == model]
    base = None
    body = []
    for run in dict.fromkeys(r["run"] for r in rs):
        v = [r["final_val_loss"] for r in rs if r["run"] == run]
        mean = sum(v) / len(v)
        if run == "bf16":
            base = mean
        gap = f"{(mean / base - 1) * 100:+.2f}%" if base else "–"
        body.append([run.replace(":sw32", ", SwiGLU input fp32"), ", ".join(f"{x:.4f}" for x in v),
                     f"{mean:.4f} ± {(max(v) - min(v)) / 2:.4f}", gap])
    return md_table(["recipe", "final val loss per seed", "mean ± half range",
                     "mean vs bf16's"], body, "llrr")


# ---- generation ------------------------------------------------------------------------------

def run_generate(ctx, args):
    """`mxtrain generate` on a d_model 256, 4-layer model (trained 2 steps: speed does not
    depend on the weights): decode (200 new tokens), slide (1000, the default window), full
    (300 with --context-keep 256), prompt (a 256-byte prompt in one pass), at 1 and 2
    threads."""
    path = ctx.rows_path("generate")
    tmp = os.path.join(ctx.work, "generate")
    os.makedirs(tmp, exist_ok=True)
    corpus = os.path.join(tmp, "corpus.txt")
    open(corpus, "w").write("the quick brown fox jumps over the lazy dog. " * 2000)
    cfg = os.path.join(tmp, "m.yaml")
    open(cfg, "w").write(
        "model: {d_model: 256, n_layers: 4, n_heads: 4, d_ff: 768, max_seq_len: 256}\n"
        "training: {steps: 2, seq_len: 256, micro_batch_size: 2, eval_every: 0, eval_batches: 1}\n"
        f"data: {{path: {corpus}}}\nprecision: {{recipe: mxfp8}}\n")
    ck = os.path.join(tmp, "ck")
    subprocess.run(["rm", "-rf", ck])
    subprocess.run([ctx.binary, "train", "--quiet", "--config", cfg, "--checkpoint-dir", ck],
                   check=True, stderr=subprocess.DEVNULL)
    text = open(corpus).read()
    cases = {"decode": ["--prompt", text[:32], "--max-new-tokens", "200"],
             "slide": ["--prompt", text[:32], "--max-new-tokens", "1000"],
             "full": ["--prompt", text[:32], "--max-new-tokens", "300", "--context-keep", "256"],
             "prompt": ["--prompt", text[:256], "--max-new-tokens", "1"]}
    for rnd, (case, th) in cases_rounds(ctx, [(c, t) for c in cases for t in ("1", "2")]):
        argv = [ctx.binary, "generate", "--checkpoint", ck, "--json", "--quiet"] + cases[case]
        out = os.path.join(tmp, f"{case}-{th}.json")
        t = ctx.timed(argv, f"generate-{case}-{th}-r{rnd}", env={"OMP_NUM_THREADS": th},
                      stdout_path=out)
        j = json.load(open(out))
        n = 256 if case == "prompt" else j["new_tokens"]
        wall = j["prefill_s"] if case == "prompt" else j["prefill_s"] + j["decode_s"]
        append_row(path, ctx.row("generate", case, rnd, argv, t, env={"OMP_NUM_THREADS": th},
                                 threads=int(th), tokens_per_s=n / wall,
                                 tokens_per_cpu_s=n / j["cpu_s"], slides=j["slides"]))
    return path


def table_generate(rows):
    body = []
    for case, th in dict.fromkeys((r["case"], r["threads"]) for r in rows):
        rs = [r for r in rows if (r["case"], r["threads"]) == (case, th)]
        body.append([case, th, mrange([r["tokens_per_s"] for r in rs], "{:.0f}"),
                     mrange([r["tokens_per_cpu_s"] for r in rs], "{:.0f}"), rs[0]["slides"]])
    return md_table(["case", "threads", "tokens/s", "tokens per CPU-s", "window slides"], body,
                    "lrrrr")


# ---- quantization throughput -----------------------------------------------------------------

QKEYS = [(op, inp, t) for inp in ("f32", "bf16") for op in ("rowwise", "dual", "tile32")
         for t in (1, 2)]


def _qsummary(runs):
    out = {}
    for key in QKEYS:
        rows = [next(r for r in run if (r["op"], r["input"], r["threads"]) == key) for run in runs]
        f = [100 * r["fraction_of_memcpy"] for r in rows]
        out[key] = {"best": min(r["ms"] for r in rows),
                    "memcpy": median(r["memcpy_gb_per_s"] for r in rows), "frac": f}
    return out


def run_quantize(ctx, args):
    """`mxtrain bench quantize` (4096 x 4096, 30 iterations, no scalar path), one run per
    round with huge pages (the default) and one with MXTRAIN_HUGE_PAGES=0, alternating; written
    as one JSON of series (raw/quantize_<class>.json; quantize.md's runs took --rounds 8)."""
    out = (os.path.join(ctx.work, "quantize.json") if ctx.quick else
           ctx.out or os.path.join(RAW, f"quantize_{ctx.tag}.json"))
    argv = ["quantize", "--rows", "4096", "--cols", "4096", "--iters", "3" if ctx.quick else "30",
            "--no-scalar"]
    series = {"now": {"what": "huge pages (default)", "runs": []},
              "now_4k_pages": {"what": "MXTRAIN_HUGE_PAGES=0", "runs": []}}
    for rnd, name in cases_rounds(ctx, ["now", "now_4k_pages"]):
        env = {"MXTRAIN_HUGE_PAGES": "0"} if name == "now_4k_pages" else None
        rows, _t = bench_json(ctx, argv, f"quantize-{name}-r{rnd}", env=env)
        series[name]["runs"].append(rows)
    from core import write_atomic
    write_atomic(out, json.dumps({"command": "mxtrain bench " + " ".join(argv) + " --json",
                                  "machine": ctx.machine, "series": series}, indent=1) + "\n")
    return out


def table_quantize(path, which):
    series = json.load(open(os.path.join(RAW, path)))["series"]
    now = _qsummary(series["now"]["runs"])
    name = lambda k: [k[0], k[1], k[2]]
    if which == "now":
        return (md_table(["kernel", "input", "threads", "best ms", "memcpy GB/s (median)",
                          "of memcpy: median (range)"],
                         [name(k) + [f"{now[k]['best']:.2f}", f"{now[k]['memcpy']:.0f}",
                                     mrange(now[k]["frac"], "{:.0f}", "%")] for k in QKEYS],
                         "llrrrr") + f"\n\n{len(series['now']['runs'])} runs.")
    other = _qsummary(series[which]["runs"])
    return md_table(["kernel", "input", "threads", f"{which}: best ms, of memcpy (median)",
                     "now: best ms, of memcpy (median)"],
                    [name(k) + [f"{other[k]['best']:.2f}, {median(other[k]['frac']):.0f}%",
                                f"{now[k]['best']:.2f}, {median(now[k]['frac']):.0f}%"]
                     for k in QKEYS], "llrrr")


# ---- registry --------------------------------------------------------------------------------

def _load(files):
    rows = [r for f in files for r in read_rows(f)]
    if not rows:
        raise ValueError(f"{files}: no rows")
    return rows


def tables():
    L = _load
    return {
        "mainjob.speed": lambda f, a: table_mainjob_speed(L(f), a.get("base", "bf16")),
        "mainjob.ab": lambda f, a: table_mainjob_ab(L(f)),
        "mainjob.runs": lambda f, a: table_mainjob_runs(L(f)),
        "mainjob.sweep": lambda f, a: table_mainjob_sweep(L(f)),
        "mainjob.val": lambda f, a: table_mainjob_val(L(f)),
        "linear.speed": lambda f, a: table_linear(L(f)),
        "gemm.sweep": lambda f, a: table_gemm_sweep(L(f)),
        "gemm.stream": lambda f, a: table_gemm_stream(L(f)),
        "gemm.shapes": lambda f, a: table_gemm_shapes(L(f)),
        "gemm.train": lambda f, a: table_gemm_train(L(f)),
        "fsdp.memory": lambda f, a: table_fsdp_memory(L(f)),
        "fsdp.ab": lambda f, a: table_fsdp_ab(L(f)),
        "fsdp.gather": lambda f, a: table_fsdp_gather(L(f)),
        "parallel.layouts": lambda f, a: table_parallel(L(f)),
        "parallel.ratios": lambda f, a: table_parallel_ratios(L(f)),
        "parallel.fp4": lambda f, a: table_parallel_fp4(L(f)),
        "data.prepare": lambda f, a: table_data(L(f)),
        "memory.recompute": lambda f, a: table_memory(L(f), "recompute"),
        "memory.recipe": lambda f, a: table_memory(L(f), "recipe"),
        "peak.machine": lambda f, a: table_peak_machine(f[0]),
        "peak.profile": lambda f, a: table_peak_profile(f[0]),
        "adaptive.steps": lambda f, a: table_adaptive(L(f)),
        "parity.final": lambda f, a: table_parity(L(f), a.get("model", "tiny")),
        "generate.speed": lambda f, a: table_generate(L(f)),
        "quantize.now": lambda f, a: table_quantize(f[0], "now"),
        "quantize.vs": lambda f, a: table_quantize(f[0], a.get("series", "before")),
    }
