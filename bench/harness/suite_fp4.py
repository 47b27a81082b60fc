"""bench/harness/suite_fp4.py — does 4-bit training train? The ablation NVIDIA's NVFP4 paper
reports (arXiv 2509.25149), on the main job: configs/demo.yaml (its SentencePiece tokenizer and
shards from scripts/demo_data.sh), final validation loss against BF16 for

    nvfp4            the full recipe: stochastic rounding of gradients, the random Hadamard
                     transform on the wgrad operands, 16x16 weight blocks, the last transformer
                     layer kept in BF16 (a quarter of the layers: NVIDIA keeps the last few)
    nvfp4 -rht       ... without the transform
    nvfp4 -sr        ... gradients rounded to nearest even
    nvfp4 -2d        ... weights in 1x16 blocks, a copy per axis
    nvfp4 -bf16      ... every layer in NVFP4
    mxfp4            OCP MXFP4 (1x32 E8M0 blocks) everywhere
    mxfp8, bf16      for reference

each with 3 seeds (training.seed: initial weights and data order). Losses are deterministic on
a kernel path, so every (run, seed) trains once; there are no rounds. `steps` (default 3000,
the main job) sets training.steps: a shorter run is a whole shorter schedule (warm-up, cosine
decay to min_lr), said in the table.

    bash scripts/bench.sh fp4                     # 24 runs of the main job
    bash scripts/bench.sh fp4:steps=600           # the same ablation, 600 steps each
    bash scripts/bench.sh fp4:runs=bf16,nvfp4     # only those runs (names as in RUNS; a
                                                  # switch's name quoted, e.g. 'nvfp4 -rht')
"""
import os
import subprocess

from core import ROOT, append_row, log, md_table, read_rows
from suite_misc import train_run

# name: extra `mxtrain train` arguments
RUNS = {
    "bf16": ["--recipe", "bf16"],
    "mxfp8": ["--recipe", "mxfp8"],
    "nvfp4": ["--recipe", "nvfp4", "--bf16-last-layers", "1"],
    "nvfp4 -rht": ["--recipe", "nvfp4", "--bf16-last-layers", "1", "--fp4-rht", "false"],
    "nvfp4 -sr": ["--recipe", "nvfp4", "--bf16-last-layers", "1",
                  "--fp4-stochastic-rounding", "false"],
    "nvfp4 -2d": ["--recipe", "nvfp4", "--bf16-last-layers", "1", "--fp4-2d-weights", "false"],
    "nvfp4 -bf16": ["--recipe", "nvfp4", "--bf16-last-layers", "0"],
    "mxfp4": ["--recipe", "mxfp4"],
}
SEEDS = ("1", "2", "3")


def run(ctx, args):
    steps = args.get("steps", "20" if ctx.quick else "3000")
    seeds = SEEDS[:1] if ctx.quick else SEEDS
    names = args["runs"].split(",") if "runs" in args else list(RUNS)
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        raise SystemExit(f"fp4:runs: unknown run {unknown[0]!r}; the runs are "
                         + ", ".join(RUNS))
    subprocess.run(["bash", "scripts/demo_data.sh", ctx.binary], check=True, cwd=ROOT)
    path = ctx.rows_path("fp4")
    # A (run, seed, steps) already in the rows is not trained again: the losses are
    # deterministic, so an interrupted ablation resumes where it stopped.
    done = {(r["run"], str(r["seed"]), str(r["steps"])) for r in
            (read_rows(path) if os.path.exists(path) else [])}
    for seed in seeds:
        for name in names:
            extra = RUNS[name]
            if (name, seed, str(steps)) in done:
                log(f"fp4: {name}, seed {seed}, {steps} steps: in the rows already")
                continue
            log(f"fp4: {name}, seed {seed}, {steps} steps")
            tag = name.replace(" ", "").replace("-", "_")
            m = os.path.join(ctx.work, f"fp4-{tag}-s{seed}.jsonl")
            argv = ["--config", "configs/demo.yaml", "--quiet", "--seed", seed, "--steps",
                    steps] + extra
            row, s, _ = train_run(ctx, "fp4", f"{tag}-s{seed}", 1, argv, m, run=name,
                                  seed=int(seed), steps=int(steps))
            row.update({k: s[k] for k in ("final_val_loss", "final_val_nats_per_byte",
                                           "tokens_per_s", "median_step_ms", "peak_rss_bytes")})
            append_row(path, row)
    return path


def table_ablation(rows):
    """Per run: the final validation loss (nats per byte) of each seed, their mean, and the
    mean's distance from BF16's mean over the same seeds (an ablation still under way has runs
    with fewer seeds); nvfp4's goal is within 2% over all 3."""
    steps = sorted({r["steps"] for r in rows})
    bf16 = {str(r["seed"]): r["final_val_nats_per_byte"] for r in rows if r["run"] == "bf16"}
    body, counts = [], set()
    for name in RUNS:
        rs = sorted((r for r in rows if r["run"] == name), key=lambda r: r["seed"])
        if not rs:
            continue
        seeds = [str(r["seed"]) for r in rs]
        counts.add(len(seeds))
        v = [r["final_val_nats_per_byte"] for r in rs]
        mean = sum(v) / len(v)
        gap = None
        if name != "bf16" and all(s in bf16 for s in seeds):
            base = sum(bf16[s] for s in seeds) / len(seeds)
            gap = (mean / base - 1) * 100
        goal = "–"
        if name == "nvfp4":
            goal = (("met" if gap is not None and gap <= 2.0 else "not met") + " (<= 2%)"
                    if len(seeds) == len(SEEDS) else f"{len(seeds)} of {len(SEEDS)} seeds")
        body.append([name, ", ".join(seeds), ", ".join(f"{x:.4f}" for x in v),
                     f"{mean:.4f} ± {(max(v) - min(v)) / 2:.4f}",
                     "–" if gap is None else f"{gap:+.2f}%", goal])
    machines = sorted({r["machine"] for r in rows})
    full = len(counts) == 1  # every run has as many seeds
    return (md_table(["run", "seeds", "final val nats/byte", "mean ± half range",
                      "mean vs bf16's, same seeds", "goal"], body, "lllrrl") +
            f"\n\n{'' if full else 'up to '}{len({r['seed'] for r in rows})} seeds"
            f"{'' if full else ' (the seeds column says which each run has)'}, "
            f"{' / '.join(map(str, steps))} steps "
            f"each (the main job is 3000), on `{'`, `'.join(machines)}`.")


def tables():
    return {"fp4.ablation": lambda f, a: table_ablation([r for x in f for r in read_rows(x)])}
