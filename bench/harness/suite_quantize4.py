"""bench/harness/suite_quantize4.py — what the 4-bit recipes' quantization costs a step of the
main job, pass by pass, against MXFP8's.

Each round runs `mxtrain bench quantize --formats fp4` and `--formats mx` on the main job's
largest gradient, x [2048, 1344] (fc1's output gradient: 16 x 128 tokens, the 2 x 672 SwiGLU
features), FP32 input, caches not settled (a layer quantizes what it has just written), 1 and
2 threads, on the active kernel path; one process per round, the two alternating.

    bash scripts/bench.sh quantize4          # rows in raw/quantize4_<class>.jsonl

The table takes, per pass, each run's median over its iterations in nanoseconds per element,
and gives their median and range over the runs. Its last column multiplies the 2-thread median
by the elements that pass sees in one step of the main job in that recipe (configs/demo.yaml:
4 layers, d_model 256, SwiGLU d_ff 672, 2048 tokens, every layer's Linears quantized, as
`mxtrain train --recipe nvfp4 --dry-run` lists), an estimate of the step's time in it: it
holds the shapes of the main job but not its cache state, nor the work around each pass.
"""
from core import append_row, md_table, median, mrange, read_rows
from suite_misc import bench_json

ROWS, COLS = 2048, 1344

# Elements per step of the main job: T tokens; per layer, the Linears' inputs (qkv, proj and
# fc1 read d_model features, fc2 d_ff), their output gradients (3d, d, 2 d_ff, d) and weights.
T, D, FF, LAYERS = 2048, 256, 672, 4
INPUTS = LAYERS * T * (3 * D + FF)                              # 11,796,480
GRADS = LAYERS * T * (3 * D + D + 2 * FF + D)                   # 21,495,808
WEIGHTS = LAYERS * (3 * D * D + D * D + 2 * FF * D + D * FF)    # 3,112,960

# (op, recipe, what it is there, elements per step). nvfp4: the tensor amaxes (an input's or
# gradient's two, of x and of T x, from one read: its rowwise and transformed colwise copies
# are made together), inputs rowwise (forward) and colwise transformed (wgrad), gradients
# rowwise (dgrad) and colwise transformed (wgrad) with stochastic rounding, weights in 16x16
# tiles; mxfp8: inputs and gradients both ways from one read, weights both ways.
PASSES = [
    ("nvfp4_amaxes", "nvfp4", "tensor amaxes of x and T x: inputs, gradients", INPUTS + GRADS),
    ("nvfp4_amax", "nvfp4", "tensor amax: weights", WEIGHTS),
    ("nvfp4_rowwise", "nvfp4", "inputs, 1x16", INPUTS),
    ("nvfp4_colwise_rht", "nvfp4", "inputs, colwise of T x", INPUTS),
    ("nvfp4_rowwise_sr", "nvfp4", "gradients, 1x16, stochastic", GRADS),
    ("nvfp4_colwise_rht_sr", "nvfp4", "gradients, colwise of T x, stochastic", GRADS),
    ("nvfp4_tile16", "nvfp4", "weights, 16x16", WEIGHTS),
    ("dual", "mxfp8", "inputs and gradients, both ways", INPUTS + GRADS),
    ("dual", "mxfp8", "weights, both ways", WEIGHTS),
]


def run(ctx, args):
    path = ctx.rows_path("quantize4")
    cases = ["fp4", "mx"]
    iters = "3" if ctx.quick else "20"
    for rnd in range(1, ctx.rounds + 1):
        for formats in ctx.round_order(cases, rnd):
            argv = ["quantize", "--formats", formats, "--rows", str(ROWS), "--cols", str(COLS),
                    "--iters", iters, "--no-scalar", "--no-settle"]
            rows, t = bench_json(ctx, argv, f"quantize4-{formats}-r{rnd}")
            for r in rows:
                if r["input"] == "f32":
                    append_row(path, ctx.row("quantize4", formats, rnd,
                                             [ctx.binary, "bench"] + argv + ["--json"], t, **r))
    return path


def table_passes(rows):
    if not rows:
        raise ValueError("no rows")
    ns = lambda op, threads: [r["median_ns_per_elem"] for r in rows
                              if r["op"] == op and r["threads"] == threads]
    body, totals = [], {}
    for op, recipe, what, n in PASSES:
        one, two = ns(op, 1), ns(op, 2)
        if not one or not two:
            raise ValueError(f"no rows of {op}")
        ms = n * median(two) / 1e6
        totals[recipe] = totals.get(recipe, 0.0) + ms
        body.append([recipe, f"`{op}`", what, mrange(one, "{:.3f}"), mrange(two, "{:.3f}"),
                     f"{n / 1e6:.1f}", f"{ms:.1f}"])
    for recipe, ms in totals.items():
        body.append([recipe, "", "**all passes**", "", "", "", f"**{ms:.1f}**"])
    machines = sorted({r["machine"] for r in rows})
    return (md_table(["recipe", "pass", "in a step", "ns/element, 1 thread",
                      "ns/element, 2 threads", "M elements per step", "ms per step, 2 threads"],
                     body, "lllrrrr") +
            f"\n\n{len({r['round'] for r in rows})} runs of x [{ROWS}, {COLS}] FP32 on "
            f"`{'`, `'.join(machines)}`.")


def tables():
    return {"quantize4.passes": lambda f, a: table_passes([r for x in f for r in read_rows(x)])}
