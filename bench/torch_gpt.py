"""bench/torch_gpt.py — the same byte-level GPT as `mxtrain train`, trained by PyTorch on the
CPU: the step time a user gets from the tool they would otherwise pick.

The model matches nn/transformer.h layer for layer: token embedding, n_layers x [x +=
proj(attn(rope(qkv(rmsnorm(x))))); x += fc2(silu(gate) * up)] with fc1 -> [gate | up], rotary
embeddings of q and k (theta 10000, pairs (i, i + hd/2)), RMSNorm with a gain and eps 1e-5, no biases, final RMSNorm, an
untied lm_head, mean cross-entropy, AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on
matrices) and gradient clipping at 1.0. Attention is written out (softmax(q k^T / sqrt(hd))
with a causal mask, then @ v): PyTorch 1.13 has no fused scaled_dot_product_attention.
`--autocast` (the default) runs forward and backward under torch.autocast('cpu', bfloat16),
as a user after BF16 speed would. Batches are random bytes: only time is measured here.

    /usr/bin/python3 bench/torch_gpt.py [--d-model 256] [--layers 4] [--heads 4]
        [--d-ff 672] [--seq 256] [--batch 8] [--steps 12] [--threads N] [--no-autocast]

Prints one JSON object: median and per-step times (ms, first step left out as warm-up),
tokens/s, peak RSS from getrusage (bytes), the settings, torch's version and thread count.
"""

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the caller treats exit code 77 as "skipped"
    print("torch_gpt.py: PyTorch is not installed (Debian: apt-get install python3-torch)",
          file=sys.stderr)
    sys.exit(77)


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.gain


def rope(x, cos, sin):
    """x: [B, H, T, hd]; cos, sin: [T, hd/2]. Rotates pairs (i, i + hd/2) by position."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.proj = torch.nn.Linear(d, d, bias=False)
        self.norm2 = RMSNorm(d)
        self.fc1 = torch.nn.Linear(d, 2 * d_ff, bias=False)
        self.fc2 = torch.nn.Linear(d_ff, d, bias=False)

    def forward(self, x, mask, cos, sin):
        B, T, D = x.shape
        H = self.heads
        q, k, v = self.qkv(self.norm1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        q, k = rope(q, cos[:T], sin[:T]), rope(k, cos[:T], sin[:T])
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
        p = torch.softmax(s.float().masked_fill(mask[:T, :T], float("-inf")), dim=-1)
        y = (p.to(v.dtype) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        gate, up = self.fc1(self.norm2(x)).chunk(2, dim=-1)
        return x + self.fc2(F.silu(gate) * up)


class GPT(torch.nn.Module):
    def __init__(self, vocab, d, layers, heads, d_ff, max_seq):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads, d_ff) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)
        self.register_buffer(
            "mask", torch.triu(torch.ones(max_seq, max_seq, dtype=torch.bool), diagonal=1))
        hd = d // heads
        ang = torch.arange(max_seq, dtype=torch.float64)[:, None] * \
            (10000.0 ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64) / hd))[None, :]
        self.register_buffer("cos", ang.cos().float())
        self.register_buffer("sin", ang.sin().float())
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                torch.nn.init.normal_(p, std=std)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x, self.mask, self.cos, self.sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=672)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no-autocast", action="store_true", help="train in FP32")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    if a.steps < 2 or a.d_model % a.heads:
        ap.error("need --steps >= 2 and --heads dividing --d-model")

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    model = GPT(a.vocab, a.d_model, a.layers, a.heads, a.d_ff, a.seq)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    times = []
    for _ in range(a.steps):
        x = torch.randint(0, a.vocab, (a.batch, a.seq))
        y = torch.randint(0, a.vocab, (a.batch, a.seq))
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not a.no_autocast):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    steady = times[1:]
    med = statistics.median(steady)
    print(json.dumps({
        "tool": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "autocast_bf16": not a.no_autocast, "d_model": a.d_model, "layers": a.layers,
        "heads": a.heads, "d_ff": a.d_ff, "seq": a.seq, "batch": a.batch,
        "parameters": sum(p.numel() for p in model.parameters()),
        "median_step_ms": med, "step_ms": steady,
        "tokens_per_s": a.batch * a.seq / (med / 1e3),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "final_loss": float(loss)}))


if __name__ == "__main__":
    main()
