"""bench/harness/suite_trainer.py — the training step of mxtrain against PyTorch 2 on the same
GPT, and where the time of each goes.

  trainer   a width sweep, d_model 128 .. 1024 (heads d_model/64, d_ff 8/3 d_model rounded up to
            32; 4 layers, seq 256, micro-batch 8, vocabulary 256; the peer shape is d_model
            256): mxtrain bf16, mxtrain mxfp8, and transformers' LlamaForCausalLM built from the
            exported config under bf16 autocast with SDPA attention, eager and torch.compile
            (bench/torch_peer.py). Every tool starts from the same initial weights: mxtrain's,
            written once per width by `mxtrain export --format hf` and read back by both (mxtrain
            with --init-from). Rows: raw/trainer_<class>.jsonl.
  profile   the same shapes profiled (d_model 256, 768 and 1024 unless profile:widths=...):
            `mxtrain train --profile-steps` (bf16, mxfp8) and torch.profiler (eager, compile),
            5 steps after a warm-up step. Rows: raw/profile_<class>.jsonl.
"""
import json
import os
import shutil

from core import (ROOT, append_row, gpt_config, log, md_table, median, mrange,
                  metrics_summary, per_round, ratio_cell, read_rows)

WIDTHS = (128, 256, 512, 768, 1024)
MX_TOOLS = ("mxtrain bf16", "mxtrain mxfp8")
PT_TOOLS = ("pytorch eager", "pytorch compile")
TOOLS = MX_TOOLS + PT_TOOLS


def shape(d):
    return d, max(d // 64, 1), (d * 8 // 3 + 31) // 32 * 32


def init_weights(ctx, cfg, name):
    """mxtrain's initial weights for cfg as a Hugging Face directory: one step at a learning
    rate of 1e-30 (AdamW's update is then below every weight's last bit, so the weights are
    the initial ones) and `mxtrain export --format hf`."""
    work = os.path.join(ctx.work, "init-" + name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    y = os.path.join(work, "init.yaml")
    text = open(cfg).read()
    import re
    text = re.sub(r"(?m)^  lr: .*$", "  lr: 1.0e-30", text)
    text = re.sub(r"(?m)^  min_lr: .*$", "  min_lr: 1.0e-30", text)
    open(y, "w").write(text)
    import subprocess
    subprocess.run([ctx.binary, "train", "--config", y, "--stop-after", "1", "--quiet",
                    "--checkpoint-dir", os.path.join(work, "ckpt")], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    hf = os.path.join(work, "hf")
    subprocess.run([ctx.binary, "export", "--checkpoint", os.path.join(work, "ckpt"),
                    "--format", "hf", "--out", hf], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return hf


def run_mxtrain(ctx, suite, case, rnd, cfg, hf, recipe, extra=(), **fields):
    tag = f"{case}-{recipe}-r{rnd}".replace(" ", "_")
    m = os.path.join(ctx.work, tag + ".jsonl")
    argv = [ctx.binary, "train", "--config", cfg, "--recipe", recipe, "--init-from", hf,
            "--quiet", "--metrics-out", m] + list(extra)
    t = ctx.timed(argv, tag)
    s, steps = metrics_summary(m)
    return ctx.row(suite, case, rnd, argv, t, tool="mxtrain " + recipe,
                   median_step_ms=s["median_step_ms"], steps=s["steps"],
                   parameters=s["parameters"], flops_per_token=s.get("flops_per_token"),
                   losses=[r["loss"] for r in steps if "loss" in r and "step" in r],
                   final_loss=s.get("final_loss"), **fields)


def run_torch(ctx, suite, case, rnd, hf, mode, steps, extra=(), **fields):
    tag = f"{case}-{mode}-r{rnd}".replace(" ", "_")
    out = os.path.join(ctx.work, tag + ".json")
    argv = [ctx.pinned_python(), os.path.join(ROOT, "bench", "torch_peer.py"), "--hf", hf,
            "--mode", mode, "--steps", str(steps)] + list(extra)
    t = ctx.timed(argv, tag, env={"HF_HUB_OFFLINE": "1"}, stdout_path=out)
    o = json.loads(open(out).read().strip().splitlines()[-1])
    return ctx.row(suite, case, rnd, argv, t, env={"HF_HUB_OFFLINE": "1"},
                   tool="pytorch " + mode, median_step_ms=o["median_step_ms"], steps=o["steps"],
                   parameters=o["parameters"], threads=o["threads"], torch=o["torch"],
                   first_step_ms=o["first_step_ms"], losses=o["losses"],
                   final_loss=o["final_loss"], **({"torchao": o["torchao"]} if "torchao" in o else {}),
                   **fields)


def run(ctx, args):
    widths = [int(w) for w in args.get("widths", "").split(",") if w] or (
        [128, 256] if ctx.quick else list(WIDTHS))
    steps = int(args.get("steps", 4 if ctx.quick else 10))
    rows_path = ctx.rows_path("trainer")
    shapes = {}
    for d in widths:
        d, h, f = shape(d)
        cfg = gpt_config(d, h, f, steps, os.path.join(ctx.work, f"gpt-{d}.yaml"))
        shapes[d] = (h, f, cfg, init_weights(ctx, cfg, f"gpt-{d}"))
    for rnd in range(1, ctx.rounds + 1):
        for d in widths:
            h, f, cfg, hf = shapes[d]
            for tool in ctx.round_order(TOOLS, rnd):
                log(f"trainer: round {rnd}/{ctx.rounds}, d_model {d}, {tool}")
                case = f"d{d}"
                common = dict(d_model=d, heads=h, d_ff=f, layers=4, seq=256, batch=8)
                if tool in MX_TOOLS:
                    row = run_mxtrain(ctx, "trainer", case, rnd, cfg, hf, tool.split()[1], **common)
                else:
                    row = run_torch(ctx, "trainer", case, rnd, hf, tool.split()[1], steps,
                                    ["--batch", "8", "--seq", "256"], **common)
                row["tokens_per_s"] = 8 * 256 / (row["median_step_ms"] / 1e3)
                append_row(rows_path, row)
    return rows_path


def run_profile(ctx, args):
    widths = [int(w) for w in args.get("widths", "256,768,1024").split(",") if w]
    nprof = 5
    rows_path = ctx.rows_path("profile")
    for rnd in range(1, ctx.rounds + 1):
        for d in widths:
            d, h, f = shape(d)
            cfg = gpt_config(d, h, f, nprof + 1, os.path.join(ctx.work, f"prof-{d}.yaml"))
            hf = os.path.join(ctx.work, f"init-prof-{d}", "hf")
            if not os.path.isdir(hf):
                hf = init_weights(ctx, cfg, f"prof-{d}")
            for tool in ctx.round_order(TOOLS, rnd):
                log(f"profile: round {rnd}/{ctx.rounds}, d_model {d}, {tool}")
                case = f"d{d}"
                tag = f"prof-{d}-{tool.split()[1]}-r{rnd}"
                pj = os.path.join(ctx.work, tag + ".prof.json")
                if tool in MX_TOOLS:
                    row = run_mxtrain(ctx, "profile", case, rnd, cfg, hf, tool.split()[1],
                                      ["--profile-steps", str(nprof), "--profile-out", pj],
                                      d_model=d)
                    p = json.load(open(pj))
                    row["profile"] = [{"region": (x["region"] + " " + x["pass"]).strip(),
                                       "group": x["group"], "ms": x["ms"], "share": x["share"]}
                                      for x in p["rows"]]
                    row["profiled_step_ms"] = p["mean_step_ms"]
                else:
                    row = run_torch(ctx, "profile", case, rnd, hf, tool.split()[1], nprof + 1,
                                    ["--batch", "8", "--seq", "256", "--profile-steps",
                                     str(nprof), "--profile-out", pj], d_model=d)
                    p = json.load(open(pj))
                    row["profile"] = p["ops"][:25]
                    row["profiled_self_ms"] = p["self_ms_per_step_all"]
                for k in ("losses",):
                    row.pop(k, None)
                append_row(rows_path, row)
    return rows_path


# ---- tables ----------------------------------------------------------------------------------

def _tools(rows):
    order = TOOLS + ("pytorch bf16 autocast",)
    return [t for t in order if any(r["tool"] == t for r in rows)]


def best_peer(rows, d):
    """The faster PyTorch mode at width d (median step over the rounds)."""
    meds = {t: median(r["median_step_ms"] for r in rows if r["tool"] == t and r["d_model"] == d)
            for t in PT_TOOLS if any(r["tool"] == t and r["d_model"] == d for r in rows)}
    return min(meds, key=meds.get) if meds else None


def peer_ratios(rows, tool, d):
    """PyTorch peer's step / tool's step per round: the peer is, in each round, the faster of
    eager and compile in that round."""
    by = {}
    for r in rows:
        if r["d_model"] == d:
            by.setdefault(r["round"], {})[r["tool"]] = r["median_step_ms"]
    out = []
    for rnd in sorted(by):
        peer = [by[rnd][t] for t in PT_TOOLS if t in by[rnd]]
        if tool in by[rnd] and peer:
            out.append(min(peer) / by[rnd][tool])
    return out


def table_peer_shape(rows, d=256):
    """At one width: each tool's median step and range, speed against the PyTorch peer (per
    round), tokens/s and peak RSS."""
    rs = [r for r in rows if r["d_model"] == d]
    body = []
    for t in _tools(rs):
        tr = [r for r in rs if r["tool"] == t]
        ms = [r["median_step_ms"] for r in tr]
        rss = [r["peak_rss_kib"] / 1024 for r in tr]
        vs = "1.00x (the peer)" if t == best_peer(rs, d) else ratio_cell(peer_ratios(rs, t, d))
        body.append([t, mrange(ms), vs, fmt_tps(median(r["tokens_per_s"] for r in tr)),
                     mrange(rss, "{:.0f}"), len(tr)])
    return md_table([f"d_model {d}, 4 layers, seq 256, micro-batch 8", "step ms: median (range)",
                     "speed vs the PyTorch peer, per round", "tokens/s", "peak RSS MiB", "runs"],
                    body, "lrlrrr")


def fmt_tps(x):
    return f"{x:,.0f}"


def table_sweep(rows):
    widths = sorted({r["d_model"] for r in rows})
    body = []
    for t in _tools(rows):
        cells = []
        for d in widths:
            v = [r["tokens_per_s"] for r in rows if r["tool"] == t and r["d_model"] == d]
            cells.append(mrange(v, "{:,.0f}") if v else "–")
        body.append([t + " tokens/s"] + cells)
    body.append(["the PyTorch peer (faster mode)"] +
                [(best_peer(rows, d) or "–").replace("pytorch ", "") for d in widths])
    for t in MX_TOOLS:
        if any(r["tool"] == t for r in rows):
            body.append([f"{t} vs the peer, per round"] +
                        [ratio_cell(peer_ratios(rows, t, d)) for d in widths])
    body.append(["mxfp8 step / bf16 step, per round"] + [
        ratio_cell(per_round([r for r in rows if r["d_model"] == d], lambda r: r["tool"],
                             "mxtrain mxfp8", "mxtrain bf16")) for d in widths])
    rounds = len({r["round"] for r in rows})
    from core import load_note
    return (md_table(["4 layers, seq 256, micro-batch 8: median (range)"] +
                     [f"d_model {d}" for d in widths], body, "l" + "r" * len(widths)) +
            f"\n\n{rounds} rounds; every tool at every width once per round; {load_note(rows)}.")


def table_rss(rows):
    widths = sorted({r["d_model"] for r in rows})
    body = [[t] + [mrange([r["peak_rss_kib"] / 1024 for r in rows
                           if r["tool"] == t and r["d_model"] == d], "{:.0f}")
                   if any(r["tool"] == t and r["d_model"] == d for r in rows) else "–"
                   for d in widths] for t in _tools(rows)]
    return md_table(["peak RSS MiB: median (range)"] + [f"d_model {d}" for d in widths], body)


def table_history(rows):
    """PyTorch 1.13 rows of earlier releases (tool 'pytorch bf16 autocast'): the peer shape."""
    return table_peer_shape_legacy(rows)


def table_peer_shape_legacy(rows, d=256):
    rs = [r for r in rows if r["d_model"] == d]
    ref = "pytorch bf16 autocast"
    body = []
    for t in [x for x in (ref, "mxtrain bf16", "mxtrain mxfp8") if any(r["tool"] == x for r in rs)]:
        tr = [r for r in rs if r["tool"] == t]
        vs = "1.00x" if t == ref else ratio_cell(
            [1 / x for x in per_round(rs, lambda r: r["tool"], t, ref)])
        body.append([t, mrange([r["median_step_ms"] for r in tr]), vs,
                     mrange([r["peak_rss_kib"] / 1024 for r in tr], "{:.0f}"), len(tr)])
    return md_table([f"d_model {d}", "step ms: median (range)",
                     "speed vs PyTorch 1.13, per round", "peak RSS MiB", "runs"], body, "lrlrr")


def table_profile_mxtrain(rows, d):
    """mxtrain's profile per region (each module's products forward and backward, attention,
    each elementwise op, the optimizer): ms per step and share of the step, per recipe."""
    rs = [r for r in rows if r["d_model"] == d and r["tool"].startswith("mxtrain")]
    tools = [t for t in MX_TOOLS if any(r["tool"] == t for r in rs)]
    regions = []
    for r in rs:
        for x in r["profile"]:
            if x["region"] not in regions:
                regions.append(x["region"])
    body = []
    for reg in regions:
        cells, top = [], 0.0
        for t in tools:
            v = [next((x["ms"] for x in r["profile"] if x["region"] == reg), 0.0)
                 for r in rs if r["tool"] == t]
            sh = [100 * next((x["share"] for x in r["profile"] if x["region"] == reg), 0.0)
                  for r in rs if r["tool"] == t]
            cells.append(f"{mrange(v)}, {median(sh):.1f}%")
            top = max([top] + v)
        if top >= 0.05:  # regions that took no time (communication on one process, ...)
            body.append([reg] + cells)
    body.append(["step (profiled)"] + [mrange([r["profiled_step_ms"] for r in rs if r["tool"] == t])
                                       for t in tools])
    return md_table([f"mxtrain, d_model {d}: ms per step (range), share"] + tools, body)


def table_profile_torch(rows, d, top=12):
    rs = [r for r in rows if r["d_model"] == d and r["tool"].startswith("pytorch")]
    tools = [t for t in PT_TOOLS if any(r["tool"] == t for r in rs)]
    ops = []
    for t in tools:
        tot = {}
        for r in rs:
            if r["tool"] == t:
                for x in r["profile"]:
                    tot[x["op"]] = tot.get(x["op"], 0) + x["self_ms_per_step"]
        for op in sorted(tot, key=lambda k: -tot[k])[:top]:
            if op not in ops:
                ops.append(op)
    body = []
    for op in ops:
        cells = []
        for t in tools:
            v = [next((x["self_ms_per_step"] for x in r["profile"] if x["op"] == op), 0.0)
                 for r in rs if r["tool"] == t]
            cells.append(mrange(v, "{:.1f}"))
        body.append([f"`{op}`"] + cells)
    body.append(["all operators (self)"] + [mrange([r["profiled_self_ms"] for r in rs if r["tool"] == t])
                                            for t in tools])
    return md_table([f"PyTorch, d_model {d}: self CPU ms per step (range)"] + tools, body)


def torch_group(op):
    """The mxtrain profile group a PyTorch operator's time belongs to."""
    o = op.lower()
    if op in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"):
        return "products"
    if "scaled_dot_product" in o:
        return "attention"
    if "adamw" in o or o.startswith("optimizer.") or op in ("aten::linalg_vector_norm",
                                                            "aten::_foreach_norm"):
        return "optimizer"
    return None


def table_profile_compare(rows, d):
    """Both tools side by side in mxtrain's groups: PyTorch's products are its matrix products,
    attention its SDPA kernels, the optimizer fused AdamW and the norm of the clip; the rest
    (elementwise ops, copies, autograd and compiled-graph overhead) is the remainder of its
    self time."""
    rs = [r for r in rows if r["d_model"] == d]
    tools = [t for t in TOOLS if any(r["tool"] == t for r in rs)]
    groups = ("products", "attention", "elementwise and the rest", "optimizer")
    cells = {g: [] for g in groups + ("step",)}
    for t in tools:
        per = {g: [] for g in groups}
        steps = []
        for r in (x for x in rs if x["tool"] == t):
            if t in MX_TOOLS:
                got = {g: sum(x["ms"] for x in r["profile"] if x["group"] == g)
                       for g in ("products", "attention", "optimizer")}
                got["elementwise and the rest"] = r["profiled_step_ms"] - sum(got.values())
                steps.append(r["profiled_step_ms"])
            else:
                got = {g: sum(x["self_ms_per_step"] for x in r["profile"] if torch_group(x["op"]) == g)
                       for g in ("products", "attention", "optimizer")}
                got["elementwise and the rest"] = r["profiled_self_ms"] - sum(got.values())
                steps.append(r["profiled_self_ms"])
            for g in groups:
                per[g].append(got[g])
        for g in groups:
            cells[g].append(mrange(per[g]))
        cells["step"].append(mrange(steps))
    body = [[g] + cells[g] for g in groups] + [["step (profiled)"] + cells["step"]]
    return md_table([f"d_model {d}: ms per step, median (range)"] + tools, body)


def tables():
    return {
        "profile.compare": lambda files, a: table_profile_compare(load(files), int(a.get("d", 256))),
        "trainer.peer": lambda files, a: table_peer_shape(load(files), int(a.get("d", 256))),
        "trainer.sweep": lambda files, a: table_sweep(load(files)),
        "trainer.rss": lambda files, a: table_rss(load(files)),
        "trainer.history": lambda files, a: table_history(load(files)),
        "profile.mxtrain": lambda files, a: table_profile_mxtrain(load(files), int(a.get("d", 256))),
        "profile.torch": lambda files, a: table_profile_torch(load(files), int(a.get("d", 256))),
    }


def load(files):
    rows = [r for f in files for r in read_rows(f)]
    if not rows:
        raise ValueError(f"{files}: no rows")
    return rows
