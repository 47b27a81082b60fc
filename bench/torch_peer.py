"""bench/torch_peer.py — the PyTorch 2 peer: transformers' LlamaForCausalLM trained on the CPU
from the initial weights of an `mxtrain export --format hf` directory, as a user of the field
would train the same model.

mxtrain's GPT is a Llama (docs/hf.md), so the exported directory's config builds the same model
in transformers; its weights are mxtrain's initial weights. Modes:

  eager          bf16 autocast (torch.autocast('cpu', bfloat16)), SDPA attention
  compile        the same under torch.compile (inductor, CPU): forward and backward compiled
  torchao-mxfp8  torchao's emulated MXFP8 training (torchao.prototype.moe_training,
                 MXFP8TrainingOpConfig from MXFP8_EMULATED_RCEIL via quantize_): every Linear of
                 the decoder layers quantizes its input, weight and output gradient to E4M3 with
                 E8M0 scales per 32 (rceil), dequantizes and multiplies (no FP8 arithmetic on a
                 CPU); the LM head stays in BF16 as in mxtrain's recipes (precision.lm_head)

The optimizer is mxtrain's: AdamW (betas 0.9/0.95, eps 1e-8, decoupled weight decay on
parameters of two or more dimensions), global-norm clipping, linear warmup then cosine decay to
min_lr over --total-steps (train/optim.cc lr_at). Batches:

  --data random          random tokens (speed only)
  --data SHARD_DIR       mxtrain's token shards, drawn exactly as `mxtrain train` draws them:
                         sequence i of step s starts at splitmix64(seed ^ splitmix64(s *
                         0x100000001B3 + i)) mod (train tokens - T - 1) over the concatenated
                         training shards (src/train/data.cc), so both see the same batches

Prints one JSON object (median step ms over the steps after the first, tokens/s, per-step
losses, versions, threads); --metrics-out also writes one JSON line per step ({"step", "loss",
"step_ms"}) and a summary line, in the form of `mxtrain train --metrics-out`.
--profile-steps N profiles N steps after the first with torch.profiler and writes the operator
table (self CPU time per step of the 60 costliest operators, JSON) to --profile-out.

    python bench/torch_peer.py --hf DIR --mode eager|compile|torchao-mxfp8 [--steps 10]
        [--batch 8] [--seq 256] [--data random|DIR] [--seed 1234] [--lr 3e-3 ...]
"""

import argparse
import json
import math
import os
import statistics
import time

MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class Shards:
    """The training split of an mxtrain shard directory (docs/data.md, "Token shards")."""

    def __init__(self, d):
        import numpy as np
        man = json.load(open(os.path.join(d, "shards.json")))
        parts = []
        for s in man["train"] if "train" in man else man["shards"]:
            path = os.path.join(d, s["file"] if isinstance(s, dict) else s)
            raw = open(path, "rb").read()
            assert raw[:8] == b"MXTSHARD", f"{path}: not a token shard"
            width = int.from_bytes(raw[12:16], "little")
            split = int.from_bytes(raw[44:48], "little")
            if split != 0:
                continue
            parts.append(np.frombuffer(raw[64:], dtype=np.uint16 if width == 2 else np.uint32))
        self.tokens = np.concatenate(parts).astype(np.int64)

    def batch(self, seed, step, batch, T):
        import torch
        rng = len(self.tokens) - T - 1
        rows = []
        for i in range(batch):
            h = splitmix64(seed ^ splitmix64((step * 0x100000001B3 + i) & MASK64))
            off = h % rng
            rows.append(self.tokens[off:off + T + 1])
        import numpy as np
        a = torch.from_numpy(np.stack(rows))
        return a[:, :-1].contiguous(), a[:, 1:].contiguous()


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def lr_at(step, warmup, total, lr, min_lr):
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    decay = total - warmup
    if decay <= 0:
        return lr
    p = min(1.0, (step - warmup) / decay)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hf", required=True, help="`mxtrain export --format hf` directory")
    ap.add_argument("--mode", choices=("eager", "compile", "torchao-mxfp8"), default="eager")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--data", default="random")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--total-steps", type=int, default=0, help="schedule length (default --steps)")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--metrics-out")
    ap.add_argument("--profile-steps", type=int, default=0)
    ap.add_argument("--profile-out")
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be >= 2 (the first step is not timed)")
    if a.profile_steps and not a.profile_out:
        ap.error("--profile-steps needs --profile-out")

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import torch.nn.functional as F
    from transformers import LlamaForCausalLM

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM.from_pretrained(a.hf, attn_implementation="sdpa",
                                             dtype=torch.float32)
    model.train()
    vocab = model.config.vocab_size
    if a.mode == "torchao-mxfp8":
        import torchao
        from torchao.prototype.moe_training.config import (MXFP8TrainingOpConfig,
                                                           MXFP8TrainingRecipe)
        from torchao.quantization import quantize_
        cfg = MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_EMULATED_RCEIL)
        linears = [m for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear)]
        quantize_(model.model.layers, cfg,
                  filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear))
        # The emulated product multiplies the dequantized operands in their original dtype and
        # needs both alike: the weights are the FP32 masters, so inputs that autocast made
        # BF16 (attention's output) are widened (exactly) and quantized from FP32, as
        # mxtrain quantizes its FP32 activations.
        for m in linears:
            m.register_forward_pre_hook(lambda mod, args: (args[0].float(),) + tuple(args[1:]))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=a.mode != "torchao-mxfp8")

    def loss_of(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=x, use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))

    step_fn = torch.compile(loss_of) if a.mode == "compile" else loss_of
    shards = None if a.data == "random" else Shards(a.data)
    gen = torch.Generator().manual_seed(a.seed)
    total = a.total_steps or a.steps
    times, losses = [], []
    prof = None
    metrics = open(a.metrics_out, "w") if a.metrics_out else None
    t_start = time.perf_counter()
    for step in range(a.steps):
        if shards is not None:
            x, y = shards.batch(a.seed, step, a.batch, a.seq)
        else:
            t = torch.randint(0, vocab, (a.batch, a.seq + 1), generator=gen)
            x, y = t[:, :-1], t[:, 1:]
        if a.profile_steps and step == 1:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.warmup, total, a.lr, a.min_lr)
        loss = step_fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        lv = float(loss.detach())
        ms = (time.perf_counter() - t0) * 1e3
        if prof is not None and step == a.profile_steps:
            prof.__exit__(None, None, None)
            ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
            n = a.profile_steps
            write_json(a.profile_out, {
                "steps": n, "ops": [{"op": e.key, "self_ms_per_step": e.self_cpu_time_total / 1e3 / n,
                                     "total_ms_per_step": e.cpu_time_total / 1e3 / n,
                                     "calls_per_step": e.count / n} for e in ops[:60]],
                "self_ms_per_step_all": sum(e.self_cpu_time_total for e in ops) / 1e3 / n})
            prof = None
        times.append(ms)
        losses.append(lv)
        if metrics:
            metrics.write(json.dumps({"step": step + 1, "loss": lv, "step_ms": ms}) + "\n")
    steady = times[1:]
    med = statistics.median(steady)
    out = {
        "tool": "pytorch " + a.mode, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "mode": a.mode, "d_model": model.config.hidden_size,
        "layers": model.config.num_hidden_layers, "heads": model.config.num_attention_heads,
        "d_ff": model.config.intermediate_size, "seq": a.seq, "batch": a.batch,
        "parameters": sum(p.numel() for p in model.parameters()), "steps": a.steps,
        "median_step_ms": med, "first_step_ms": times[0], "step_ms": steady,
        "tokens_per_s": a.batch * a.seq / (med / 1e3),
        "wall_s": time.perf_counter() - t_start, "losses": losses, "final_loss": losses[-1]}
    if a.mode == "torchao-mxfp8":
        out["torchao"] = torchao.__version__
    if metrics:
        metrics.write(json.dumps({"summary": True, "steps": a.steps, "median_step_ms": med,
                                  "final_loss": losses[-1]}) + "\n")
        metrics.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
