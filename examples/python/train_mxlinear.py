"""examples/python/train_mxlinear.py — train a small PyTorch MLP whose Linear layers are
mxtrain.torch.MXLinear (forward, dgrad and wgrad in MXFP8 through the mxtrain engine) and
print the loss going down.

The task is regression onto a fixed random "teacher" MLP, so it needs no data files. The
same model with torch.nn.Linear in FP32 is trained alongside from the same initial weights
for comparison.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train_mxlinear.py [--steps 200]
        [--recipe mxfp8|mxfp8-32x32|bf16]
"""

import argparse
import sys

import torch

from mxtrain.torch import MXLinear


def mlp(linear, dims):
    layers = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(linear(a, b))
        if i + 2 < len(dims):
            layers.append(torch.nn.GELU())
    return torch.nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--recipe", default="mxfp8")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()
    torch.manual_seed(0)
    dims = [64, 256, 256, 32]
    teacher = mlp(torch.nn.Linear, dims).requires_grad_(False)
    ref = mlp(torch.nn.Linear, dims)
    model = torch.nn.Sequential(*[MXLinear.from_linear(m, recipe=args.recipe)
                                  if isinstance(m, torch.nn.Linear) else m for m in ref])
    opts = [torch.optim.AdamW(m.parameters(), lr=args.lr) for m in (model, ref)]
    gen = torch.Generator().manual_seed(1)
    first = last = None
    print(f"{'step':>5} {'loss ' + args.recipe:>14} {'loss fp32':>12}")
    for step in range(args.steps):
        x = torch.randn(args.batch, dims[0], generator=gen)
        target = teacher(x)
        losses = []
        for m, opt in zip((model, ref), opts):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        first = losses[0] if first is None else first
        last = losses[0]
        if step % max(1, args.steps // 10) == 0 or step == args.steps - 1:
            print(f"{step:5d} {losses[0]:14.6f} {losses[1]:12.6f}")
    print(f"{args.recipe} loss {first:.6f} -> {last:.6f}")
    if not last < 0.5 * first:
        sys.exit(f"the loss did not halve in {args.steps} steps")


if __name__ == "__main__":
    main()
