"""bench/harness/suite_summary.py — the README's results table: one row per measurement, each
figure computed from the same committed raw rows as the docs/results table it summarises.

`<!-- table:readme.results -->` renders it; which raw files feed which row is listed in ROWS
below (a file missing fails the check, naming it).
"""
import json
import os

from core import RAW, class_tag, md_table, median, mrange, per_round, ratio_cell, read_rows
import suite_misc as misc
import suite_peers as peers
import suite_trainer as trainer


def cls(rows):
    return ", ".join(sorted({class_tag(r["machine"]).replace("zen", "Zen ") for r in rows}))


def row_trainer(f, again=None):
    """The sweep's figures; a width behind the peer at the median in the sweep that was
    measured again (the rows of `again`) is given with both measurements."""
    rows = read_rows(f)
    later = read_rows(again) if again else []
    widths = sorted({r["d_model"] for r in rows})
    at = lambda rs, t, d: ratio_cell(trainer.peer_ratios(rs, t, d))
    behind = [d for d in widths if any(trainer.peer_ratios(rows, t, d) and
                                       median(trainer.peer_ratios(rows, t, d)) < 1
                                       for t in trainer.MX_TOOLS)]
    parts = []
    for d in behind:
        txt = (f"d_model {d} (bf16 {at(rows, 'mxtrain bf16', d)}, "
               f"mxfp8 {at(rows, 'mxtrain mxfp8', d)})")
        if any(r["d_model"] == d for r in later):
            txt += (f", and ahead there when measured again with less load (bf16 "
                    f"{at(later, 'mxtrain bf16', d)}, mxfp8 {at(later, 'mxtrain mxfp8', d)})")
        parts.append(txt)
    rounds = len({r["round"] for r in rows})
    return ("training vs PyTorch 2", cls(rows),
            f"same GPT (4 layers, seq 256, micro-batch 8), against the faster of PyTorch 2 eager "
            f"and torch.compile (bf16 autocast, SDPA, transformers' Llama from the same initial "
            f"weights): at d_model 256 mxtrain bf16 {at(rows, 'mxtrain bf16', 256)} its speed, "
            f"mxfp8 {at(rows, 'mxtrain mxfp8', 256)} (per-round ratios, {rounds} rounds); "
            + (f"in the sweep behind it at the median at {'; '.join(parts)}; ahead at every "
               f"other width "
               f"from d_model {widths[0]} to {widths[-1]}" if behind else
               f"ahead at every width from d_model {widths[0]} to {widths[-1]}")
            + "; measured on a shared machine (noisy)", "`docs/results/trainer.md`")


def row_peers(f):
    rows = read_rows(f)
    sp = [1 / x for x in per_round(rows, lambda r: r["tool"], "mxtrain mxfp8",
                                   "pytorch torchao-mxfp8")]
    m = {t: [x for x in (peers.window_mean(r) for r in rows if r["tool"] == t) if x is not None]
         for t in ("mxtrain mxfp8", "pytorch torchao-mxfp8")}
    lo, hi = peers.WINDOW
    gap = (median(m["mxtrain mxfp8"]) / median(m["pytorch torchao-mxfp8"]) - 1) * 100 \
        if all(m.values()) else None
    loss = (f"; mean loss over steps {lo}-{hi} {abs(gap):.2f}% {'below' if gap < 0 else 'above'} "
            "torchao's (the same in every run)" if gap is not None else "")
    rss = per_round(rows, lambda r: r["tool"], "mxtrain mxfp8", "pytorch torchao-mxfp8",
                    "peak_rss_kib")
    return ("same-recipe peer", cls(rows),
            f"the main job's first steps in MXFP8 from the same weights and batches: mxtrain "
            f"{ratio_cell(sp)} the speed of torchao's emulated MXFP8 training, in "
            f"{ratio_cell(rss)} its peak RSS{loss}; speed measured on a shared machine",
            "`docs/results/peers.md`")


def row_history(f4, f5):
    out = []
    for f in (f4, f5):
        rows = [r for r in read_rows(f) if r["d_model"] == 256]
        ref = "pytorch bf16 autocast"
        r_ = lambda t: ratio_cell([1 / x for x in per_round(rows, lambda r: r["tool"], t, ref)])
        out.append(f"{cls(rows)}: bf16 {r_('mxtrain bf16')}, mxfp8 {r_('mxtrain mxfp8')}")
    return ("training vs PyTorch 1.13 (history)", "Zen 4, Zen 5",
            "earlier releases against Debian's PyTorch 1.13 (no SDPA, no torch.compile) at "
            "d_model 256, per round: " + "; ".join(out), "`docs/results/trainer.md`")


def row_peak(d5, d4):
    parts = []
    for d in (d5, d4):
        peaks = misc._runs(d, "peak_r*.json")
        prof = {r: misc._runs(d, f"profile_{r}_r*.json") for r in ("bf16", "mxfp8")}
        parts.append(f"{d.split('_')[1].replace('zen', 'Zen ')}: VDPBF16PS "
                     f"{median(p['reference']['gflops'] for p in peaks):.0f} GFLOP/s on 2 threads; "
                     f"the peer shape at {median(100 * p['mfu'] for p in prof['bf16']):.1f}% MFU "
                     f"(bf16) and {median(100 * p['mfu'] for p in prof['mxfp8']):.1f}% (mxfp8)")
    return ("peak and MFU", "Zen 5, Zen 4", "`mxtrain bench peak`, medians of 3: " +
            "; ".join(parts), "`docs/results/peak.md`")


def row_mainjob(f5, f4):
    parts = []
    for f in (f5, f4):
        s = [r for r in read_rows(f) if r.get("summary")]
        vals = sorted({round(x["final_val_nats_per_byte"], 4) for x in s})
        train = [x["steps"] * x["mean_step_ms"] / 6e4 for x in s]
        parts.append(f"{cls(s)}: {'/'.join(f'{v:.4f}' for v in vals)} nats/byte after "
                     f"{s[0]['steps']} steps, training {mrange(train)} minutes, "
                     f"{mrange([x['tokens_per_s'] for x in s], '{:,.0f}')} tokens/s, peak RSS "
                     f"{median(x['peak_rss_bytes'] / 2**20 for x in s):.0f} MiB ({len(s)} runs)")
    return ("the main job", "Zen 5, Zen 4",
            "`configs/demo.yaml` (4096-piece SentencePiece tokenizer) in MXFP8, goal ≤ 1.6 within "
            "10 minutes; " + "; ".join(parts), "`docs/results/data.md`")


def row_mainjob_speed(f, fab):
    rows = read_rows(f)
    r1 = per_round(rows, lambda r: r["run"], "mxfp8", "bf16", "tokens_per_s")
    ab = read_rows(fab)
    cells = []
    for run in ("mxfp8", "bf16"):
        b = {r["round"]: r["tokens_per_s"] for r in ab if r["run"] == run and r["binary"].startswith("before")}
        a = {r["round"]: r["tokens_per_s"] for r in ab if r["run"] == run and not r["binary"].startswith("before")}
        cells.append(f"{run} {ratio_cell([a[x] / b[x] for x in a if x in b])}")
    return ("the main job's speed", cls(rows),
            f"its first 120 steps: mxfp8 / bf16 tokens/s {ratio_cell(r1)} per round; this release "
            f"against the previous one, per round: {', '.join(cells)}", "`docs/results/trainer.md`")


def row_data(f, fm):
    rows = read_rows(f)
    mbs = {c: mrange([r["mb_per_s"] for r in rows if r["what"] == "prepare-data" and r["corpus"] == c])
           for c in ("c10", "c100")}
    mem = read_rows(fm)
    rss = per_round(mem, lambda r: r["recompute"], "layer", "none", "peak_rss_kib")
    ms = per_round(mem, lambda r: r["recompute"], "layer", "none", "median_step_ms")
    return ("real data, recompute", cls(rows),
            f"prepare-data {mbs['c10']} MB/s on a 10 MB corpus, {mbs['c100']} on 100 MB; "
            f"recompute `layer` on act512: {ratio_cell(rss, '{:.3f}')} the peak RSS of `none` "
            f"at {ratio_cell(ms)} the step time per round, losses bit-identical",
            "`docs/results/data.md`")


def row_linear(f5, f4):
    parts = []
    for f in (f5, f4):
        rows = read_rows(f)
        g = {}
        for r in rows:
            if r["recipe"] == "mxfp8":
                g.setdefault((r["shape"], r["defer_backward_quant"]), []).append(
                    r["fwd_bwd_ms"] / r["bf16_fwd_bwd_ms"])
        parts.append(f"{cls(rows)}: dense 2048 tokens 4096x4096 {ratio_cell(g[('dense', False)], '{:.3f}')}, "
                     f"8-expert grouped layer {ratio_cell(g[('grouped', False)], '{:.3f}')} "
                     f"({ratio_cell(g[('grouped', True)], '{:.3f}')} with defer)")
    return ("quantized Linear and grouped layer", "Zen 5, Zen 4",
            "mxfp8 fwd+bwd time as x BF16's, medians of 5 rounds: " + "; ".join(parts),
            "`docs/results/linear.md`")


def row_gemm(f):
    rows = read_rows(f)
    tr = [r for r in rows if "shapes" in r and "median_step_ms" in r]
    by = {}
    for r in tr:
        by.setdefault((r["config"], r["recipe"]), {}).setdefault(r["round"], {})[r["shapes"]] = r["median_step_ms"]
    moe = [x["default"] / x["exact"] for x in by[("tiny-moe", "bf16")].values() if "exact" in x]
    text = (f"`configs/tiny-moe.yaml` in bf16: {ratio_cell(moe, '{:.3f}')} the step time since "
            "the experts' BF16 products take their row counts at run time")
    sw = [r for r in rows if r.get("case") == "sweep"]
    if sw:
        fwd4 = [r["vs_bf16"] for r in sw if r["recipe"] == "mxfp8" and r["m"] == 4 and r["op"] == "fwd"]
        big = [r["vs_bf16"] for r in sw if r["recipe"] == "mxfp8" and r["m"] == 2048]
        text = (f"4096x4096 products, mxfp8 time as x BF16's: forward at 4 tokens "
                f"{ratio_cell(fwd4)}, 2048 tokens {min(big):.2f}-{max(big):.2f}x over the ops and "
                f"rounds; " + text)
    return ("MX products, BF16 shapes", cls(rows), text + " (3 rounds, a shared machine: noisy)",
            "`docs/results/gemm.md`")


def row_fsdp(f, fab):
    rows = read_rows(f)
    one = {r["round"]: r["peak_rss_kib"] for r in rows if r["recipe"] == "mxfp8-32x32" and r["world"] == 1}
    two = [r["peak_rss_kib"] / one[r["round"]] for r in rows
           if r["recipe"] == "mxfp8-32x32" and r["world"] == 2 and r["round"] in one]
    ab = read_rows(fab)
    sp = []
    for rec in ("mxfp8-32x32", "bf16"):
        b = {r["round"]: r["median_step_ms"] for r in ab if r["recipe"] == rec and r["binary"].startswith("before")}
        a = {r["round"]: r["median_step_ms"] for r in ab if r["recipe"] == rec and not r["binary"].startswith("before")}
        sp.append(f"{rec} {ratio_cell([a[x] / b[x] for x in a if x in b])}")
    return ("FSDP memory (ZeRO-3)", cls(rows),
            f"51 M-parameter GPT, mxfp8-32x32: largest rank's peak RSS {ratio_cell(two, '{:.3f}')} "
            f"one process at 2 ranks; the point-to-point reduce-scatter's 2-rank step against the "
            f"previous release's: {', '.join(sp)} (3 rounds)", "`docs/results/fsdp.md`")


def row_parallel(f, f4):
    rows = read_rows(f)
    rows4 = read_rows(f4)

    def fp4(layout, rec):  # a 4-bit recipe's all-gather bytes against bf16's, per round
        a = {r["round"]: r["tp_allgather_bytes"] for r in rows4
             if r["layout"] == layout and r["recipe"] == rec}
        b = {r["round"]: r["tp_allgather_bytes"] for r in rows4
             if r["layout"] == layout and r["recipe"] == "bf16"}
        return ratio_cell([a[x] / b[x] for x in a if x in b and b[x]], "{:.4f}")

    def pr(num, den, key, rec):
        a = {r["round"]: r[key] for r in rows if r["layout"] == num and r["recipe"] == rec}
        b = {r["round"]: r[key] for r in rows if r["layout"] == den and r["recipe"] == rec}
        return [a[x] / b[x] for x in a if x in b and b[x]]

    def rec2(layout, key):
        a = {r["round"]: r[key] for r in rows if r["layout"] == layout and r["recipe"] == "mxfp8"}
        b = {r["round"]: r[key] for r in rows if r["layout"] == layout and r["recipe"] == "bf16"}
        return [a[x] / b[x] for x in a if x in b and b[x]]

    return ("parallel layouts", cls(rows),
            f"largest rank's peak RSS against one process: tp 2 {ratio_cell(pr('dense-tp2', 'dense-1', 'max_rank_peak_rss_kib', 'mxfp8'), '{:.3f}')}, "
            f"ep 2 {ratio_cell(pr('moe-ep2', 'moe-1', 'max_rank_peak_rss_kib', 'mxfp8'), '{:.3f}')} (mxfp8; bf16 "
            f"{ratio_cell(pr('moe-ep2', 'moe-1', 'max_rank_peak_rss_kib', 'bf16'), '{:.3f}')}); sequence-parallel "
            f"all-gathers of mxfp8 {ratio_cell(rec2('dense-tp2-sp', 'tp_allgather_bytes'), '{:.4f}')} bf16's bytes "
            f"on the exact wire, {ratio_cell(rec2('dense-tp2-sprow', 'tp_allgather_bytes'), '{:.4f}')} on the rowwise "
            f"wire, whose mxfp8 step is {ratio_cell(pr('dense-tp2-sprow', 'dense-tp2-sp', 'step_ms', 'mxfp8'), '{:.3f}')} "
            "the exact wire's; expert dispatch 0.5156x bf16's bytes per row (exact, tested; per-step "
            "bytes follow the routing); 4-bit on the rowwise wire: nvfp4 "
            f"{fp4('dense-tp2-sprow', 'nvfp4')}, mxfp4 {fp4('dense-tp2-sprow', 'mxfp4')} bf16's "
            "bytes, dispatch 0.2813x and 0.2656x per row (3 rounds)", "`docs/results/parallel.md`")


def row_adaptive(f):
    rows = read_rows(f)
    t = misc._adaptive_times(rows)
    cells = []
    for case in ("tiny-moe", "medium-2k"):
        ratios = []
        for rnd in sorted({k[2] for k in t if k[0] == case}):
            m = {run: median(t[(case, run, rnd)]) for run in ("bf16", "mxfp8", "adaptive")}
            ratios.append(m["adaptive"] / min(m["bf16"], m["mxfp8"]))
        cells.append(f"{case} {ratio_cell(ratios, '{:.3f}')} ({'met' if median(ratios) <= 1.03 else 'not met'})")
    return ("adaptive FP8", cls(rows),
            "step time against the faster of bf16 and full mxfp8 (goal ≤ 1.03), per round: "
            + ", ".join(cells), "`docs/results/adaptive.md`")


def row_quantize(f):
    series = json.load(open(os.path.join(RAW, f)))["series"]
    now = misc._qsummary(series["now"]["runs"])
    one = [median(now[k]["frac"]) for k in misc.QKEYS if k[2] == 1 and k[0] != "rowwise"]
    two = [median(now[k]["frac"]) for k in misc.QKEYS if k[2] == 2 and k[0] != "rowwise"]
    return ("quantization", "class not recorded",
            f"dual-axis and 32x32 copies at {min(one):.0f}-{max(one):.0f}% of a same-run memcpy "
            f"at 1 thread and {min(two):.0f}-{max(two):.0f}% at 2 (medians of "
            f"{len(series['now']['runs'])} runs)", "`docs/results/quantize.md`")


ROWS = [
    (row_trainer, ["trainer_zen5.jsonl", "trainer768_zen5.jsonl"]),
    (row_peers, ["peers_zen5.jsonl"]),
    (row_history, ["history_trainer_pt113_zen4.jsonl", "history_trainer_pt113_zen5.jsonl"]),
    (row_peak, ["peak_zen5", "peak_zen4"]),
    (row_mainjob, ["mainjob_runs_zen5.jsonl", "mainjob_runs_zen4.jsonl"]),
    (row_mainjob_speed, ["mainjob_zen4.jsonl", "mainjob_ab_zen4.jsonl"]),
    (row_data, ["data_zen4.jsonl", "memory_zen4.jsonl"]),
    (row_linear, ["linear_zen5.jsonl", "linear_zen4.jsonl"]),
    (row_gemm, ["gemm_zen5.jsonl"]),
    (row_fsdp, ["fsdp_zen4.jsonl", "fsdp_ab_zen4.jsonl"]),
    (row_parallel, ["parallel_zen5.jsonl", "parallel_fp4_zen5.jsonl"]),
    (row_adaptive, ["adaptive_zen5.jsonl"]),
    (row_quantize, ["quantize_unrecorded.json"]),
]


def table_results(files, opts):
    body = []
    for fn, args in ROWS:
        missing = [a for a in args if not os.path.exists(os.path.join(RAW, a))]
        if missing:
            raise ValueError(f"{fn.__name__}: raw rows missing: {', '.join(missing)}")
        body.append(list(fn(*args)))
    return md_table(["", "machine", "figure (true medians with ranges; ratios taken per round)",
                     "details"], body, "llll")


def tables():
    return {"readme.results": table_results}
