"""bench/python_linear_bench.py — forward+backward time of mxtrain.torch.MXLinear against
torch.nn.Linear under BF16 autocast (and in FP32), from PyTorch, on the CPU.

Each iteration runs y = layer(x); y.backward(dy) once for every variant, in turn, so load
changes on a shared machine hit all variants alike; reported are the median and min–max over
the iterations, and each variant's ratio to torch BF16 autocast. Every iteration is its own
optimizer step for MXLinear (the weight is changed in place, so it is re-quantized each time,
as in training with one micro-batch). The machine line comes from mxtrain.info().
PyTorch and mxtrain share one OpenMP runtime (Debian's libgomp), so torch.set_num_threads
(--threads, default: all CPUs) sets the thread count for both.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_linear_bench.py \
        [--tokens 2048] [--dims 1024,4096] [--iters 7] [--warmup 2] [--threads N]
        [--fp32] [--json out.json]
"""

import argparse
import json
import os
import statistics
import time

import torch

import mxtrain
from mxtrain.torch import MXLinear


def variants(d_in, d_out, fp32):
    ref = torch.nn.Linear(d_in, d_out, bias=False)
    out = {"torch fp32": (ref, False)} if fp32 else {}
    out["torch bf16 autocast"] = (ref, True)
    for recipe in ("bf16", "mxfp8", "mxfp8-32x32"):
        out[f"MXLinear {recipe}"] = (MXLinear.from_linear(ref, recipe=recipe), False)
    return out


def step(layer, autocast, x, dy):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = layer(x)
    y.backward(dy)
    with torch.no_grad():  # an "optimizer step": new weight values every iteration
        layer.weight.mul_(1.0)
        layer.weight.add_(1e-7)
    layer.weight.grad = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--dims", default="1024,4096")
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--fp32", action="store_true",
                    help="also time torch.nn.Linear in FP32 (through the system BLAS)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    info = mxtrain.info()
    print(f"machine: {info['cpu']}, mxtrain path {info['active_isa']}, "
          f"{info['omp_max_threads']} OpenMP threads, torch {torch.__version__} with "
          f"{torch.get_num_threads()} threads")
    rows = []
    for d in (int(v) for v in args.dims.split(",")):
        torch.manual_seed(0)
        vs = variants(d, d, args.fp32)
        x = torch.randn(args.tokens, d, requires_grad=True)
        dy = torch.randn(args.tokens, d)
        times = {k: [] for k in vs}
        for it in range(args.warmup + args.iters):
            for name, (layer, ac) in vs.items():
                x.grad = None
                t0 = time.perf_counter()
                step(layer, ac, x, dy)
                if it >= args.warmup:
                    times[name].append((time.perf_counter() - t0) * 1e3)
        base = statistics.median(times["torch bf16 autocast"])
        print(f"\ntokens {args.tokens}, {d}x{d}: fwd+bwd ms")
        print(f"| variant | median ms | min–max ms | vs torch bf16 autocast |")
        print(f"|---|---:|---:|---:|")
        for name, t in times.items():
            med = statistics.median(t)
            rows.append({"tokens": args.tokens, "dim": d, "variant": name, "median_ms": med,
                         "min_ms": min(t), "max_ms": max(t), "vs_bf16_autocast": med / base})
            print(f"| {name} | {med:.1f} | {min(t):.0f}–{max(t):.0f} | {med / base:.2f}× |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
