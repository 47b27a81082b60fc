"""bench/harness/suite_peers.py — the same-recipe peer: torchao's emulated MXFP8 training of the
main job's model against mxtrain's mxfp8, from the same initial weights on the same batches.

The main job is configs/demo.yaml (its tokenizer and shards from scripts/demo_data.sh). Its
initial weights are exported once (`mxtrain export --format hf`); each round then trains the
first STEPS (300) steps of the job, its schedule unchanged (3000 steps; mxtrain --stop-after),
with every tool:
  mxtrain mxfp8, mxtrain bf16                  `mxtrain train --init-from` the export
  pytorch torchao-mxfp8, pytorch eager (bf16)   bench/torch_peer.py on the same shards, drawn
                                                as mxtrain draws them, with mxtrain's AdamW,
                                                clipping and schedule
The bf16 pair is the control: it shows how far the two trainers' curves sit apart without
FP8. Rows (raw/peers_<class>.jsonl) carry every step's loss, the median step time and the peak
RSS of each run.
"""
import os
import re
import subprocess

from core import (ROOT, append_row, log, md_table, median, mrange, per_round, ratio_cell,
                  read_rows)
from suite_trainer import init_weights, run_mxtrain, run_torch

TOOLS = ("mxtrain mxfp8", "pytorch torchao-mxfp8", "mxtrain bf16", "pytorch eager")
WINDOW = (281, 300)  # the steps whose mean loss the goal compares


def demo_hparams():
    t = open(os.path.join(ROOT, "configs", "demo.yaml")).read()
    g = lambda k: re.search(rf"(?m)^  {k}: (\S+)", t).group(1)
    return {"lr": g("lr"), "min_lr": g("min_lr"), "warmup": g("warmup_steps"),
            "total": g("steps"), "wd": g("weight_decay"), "clip": g("grad_clip"),
            "seed": g("seed"), "batch": g("micro_batch_size"), "seq": g("seq_len"),
            "data": re.search(r"(?m)^  path: (\S+)", t).group(1)}


def run(ctx, args):
    steps = int(args.get("steps", 20 if ctx.quick else 300))
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "demo_data.sh"), ctx.binary],
                   check=True, cwd=ROOT)
    hp = demo_hparams()
    cfg = os.path.join(ROOT, "configs", "demo.yaml")
    hf = init_weights(ctx, cfg, "demo")
    rows_path = ctx.rows_path("peers")
    torch_args = ["--data", hp["data"], "--batch", hp["batch"], "--seq", hp["seq"],
                  "--seed", hp["seed"], "--lr", hp["lr"], "--min-lr", hp["min_lr"],
                  "--warmup", hp["warmup"], "--total-steps", hp["total"],
                  "--weight-decay", hp["wd"], "--grad-clip", hp["clip"]]
    for rnd in range(1, ctx.rounds + 1):
        for tool in ctx.round_order(TOOLS, rnd):
            log(f"peers: round {rnd}/{ctx.rounds}, {tool}, {steps} steps of the main job")
            if tool.startswith("mxtrain"):
                ck = os.path.join(ctx.work, f"peers-ckpt-r{rnd}")
                row = run_mxtrain(ctx, "peers", "main-job", rnd, cfg, hf, tool.split()[1],
                                  ["--stop-after", str(steps), "--checkpoint-dir", ck])
                subprocess.run(["rm", "-rf", ck])
            else:
                row = run_torch(ctx, "peers", "main-job", rnd, hf, tool.split()[1], steps,
                                torch_args)
            row["tokens_per_s"] = int(hp["batch"]) * int(hp["seq"]) / (row["median_step_ms"] / 1e3)
            append_row(rows_path, row)
    return rows_path


# ---- tables ----------------------------------------------------------------------------------

def window_mean(row):
    lo, hi = WINDOW
    v = row["losses"][lo - 1:hi]
    return sum(v) / len(v) if len(v) == hi - lo + 1 else None


def table_speed(rows):
    tools = [t for t in TOOLS if any(r["tool"] == t for r in rows)]
    body = []
    for t in tools:
        tr = [r for r in rows if r["tool"] == t]
        vs = "1.00x" if t == "pytorch torchao-mxfp8" else ratio_cell(
            [1 / x for x in per_round(rows, lambda r: r["tool"], t, "pytorch torchao-mxfp8")])
        body.append([t, mrange([r["median_step_ms"] for r in tr]), vs,
                     mrange([r["tokens_per_s"] for r in tr], "{:,.0f}"),
                     mrange([r["peak_rss_kib"] / 1024 for r in tr], "{:.0f}"), len(tr)])
    return md_table(["main job, first steps", "step ms: median (range)",
                     "speed vs torchao MXFP8, per round", "tokens/s", "peak RSS MiB", "runs"],
                    body, "lrlrrr")


def table_loss(rows):
    lo, hi = WINDOW
    tools = [t for t in TOOLS if any(r["tool"] == t for r in rows)]
    means = {t: [m for m in (window_mean(r) for r in rows if r["tool"] == t) if m is not None]
             for t in tools}
    body = []
    for t in tools:
        if not means[t]:
            continue
        v = means[t]
        first = median(r["losses"][0] for r in rows if r["tool"] == t)
        body.append([t, f"{first:.4f}", mrange(v, "{:.4f}"), len(v)])
    lines = [md_table(["loss (nats/token)", "step 1 (median)",
                       f"mean over steps {lo}-{hi}: median (range)", "runs"], body, "lrrr")]
    for a, b in (("mxtrain mxfp8", "pytorch torchao-mxfp8"), ("mxtrain bf16", "pytorch eager"),
                 ("mxtrain mxfp8", "mxtrain bf16")):
        if means.get(a) and means.get(b):
            d = (median(means[a]) / median(means[b]) - 1) * 100
            lines.append(f"\n{a} against {b}: {d:+.2f}% (mean loss over steps {lo}-{hi}, "
                         "medians over the runs).")
    return "\n".join(lines)


def table_curve(rows, width=20):
    """The loss curve: the mean loss over windows of `width` steps, per tool (the median over
    its runs; the runs of one tool agree to the printed digits when training is
    deterministic), and each FP8 run's gap to its BF16 twin."""
    tools = [t for t in TOOLS if any(r["tool"] == t for r in rows)]
    n = min(len(r["losses"]) for r in rows)
    starts = [s for s in (1, 21, 41, 61, 101, 141, 181, 221, 261, 281) if s + width - 1 <= n]
    mean = lambda r, s: sum(r["losses"][s - 1:s - 1 + width]) / width
    body = []
    for t in tools:
        rs = [r for r in rows if r["tool"] == t]
        body.append([t] + [f"{median(mean(r, s) for r in rs):.4f}" for s in starts])
    for a, b in (("mxtrain mxfp8", "pytorch torchao-mxfp8"), ("mxtrain bf16", "pytorch eager")):
        if a in tools and b in tools:
            ra = [r for r in rows if r["tool"] == a]
            rb = [r for r in rows if r["tool"] == b]
            body.append([f"{a} / {b} - 1"] + [
                f"{(median(mean(r, s) for r in ra) / median(mean(r, s) for r in rb) - 1) * 100:+.2f}%"
                for s in starts])
    return md_table([f"mean loss over steps"] + [f"{s}-{s + width - 1}" for s in starts], body)


def tables():
    return {
        "peers.curve": lambda files, a: table_curve(load(files)),
        "peers.speed": lambda files, a: table_speed(load(files)),
        "peers.loss": lambda files, a: table_loss(load(files)),
    }


def load(files):
    return [r for f in files for r in read_rows(f)]
