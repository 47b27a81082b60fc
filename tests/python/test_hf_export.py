"""tests/python/test_hf_export.py — `mxtrain export --format hf` checked by an independent
loader: Hugging Face's LlamaForCausalLM / MixtralForCausalLM forward written out here in
PyTorch, following transformers' conventions, reading only the exported
directory (config.json + model.safetensors, parsed with json and numpy). Nothing of mxtrain's
model code is used: mxtrain runs as a program ($MXTRAIN_BIN).

Two models are trained for a few steps and exported: a dense one with a SentencePiece
tokenizer (Llama) and a byte-level MoE one (Mixtral). They start from a wide initialisation
(init_std 0.3) so that greedy decoding visits many different tokens: a briefly trained small
model repeats one token, which would make the comparison of continuations trivial (the test
requires at least 10 distinct tokens). For each, the last-position logits of a
prompt must equal `mxtrain generate --logits-out` within 1e-4 of the largest logit (both are
FP32 forwards of the same weights; they differ in summation order and in the rotary angles,
which HF computes in FP32 and mxtrain in FP64 before rounding, ~1e-6 relative), and the 20-token
greedy continuation must equal `mxtrain generate --temperature 0`'s token for token.

Exits 77 (CTest: skipped) when PyTorch is not importable (checks_env.py). Run by CTest as python_test_hf_export.
"""

import json
import os
import subprocess
import sys
import tempfile

from checks_env import require

torch = require("torch")

import numpy as np

MXTRAIN = os.environ.get("MXTRAIN_BIN", "build/mxtrain")
FORTUNES = "/usr/share/games/fortunes"
LOGIT_RTOL = 1e-4  # of max |logit|: FP32 summation order and RoPE angle rounding, see above
NEW_TOKENS = 20


def run(*args):
    r = subprocess.run([MXTRAIN, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"mxtrain {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


# ---- reading the export: safetensors with json + numpy ----------------------------------

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    check(meta.get("format") == "pt", f"{path}: metadata format {meta!r} (transformers wants pt)")
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        raw = body[b:e]
        if t["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            a = u.view(np.float32)
        else:
            a = np.frombuffer(raw, dtype=ST_DTYPES[t["dtype"]]).astype(np.float32)
        out[name] = torch.from_numpy(a.reshape(t["shape"]).copy())
    return out


# ---- transformers' Llama / Mixtral forward, written out ---------------------------------

class HfModel:
    """LlamaForCausalLM / MixtralForCausalLM inference in FP32, eager attention, no cache."""

    def __init__(self, directory):
        with open(os.path.join(directory, "config.json")) as f:
            self.cfg = json.load(f)
        self.w = read_safetensors(os.path.join(directory, "model.safetensors"))
        c = self.cfg
        self.arch = c["architectures"][0]
        self.D = c["hidden_size"]
        self.H = c["num_attention_heads"]
        self.KV = c.get("num_key_value_heads", self.H)
        self.hd = c.get("head_dim") or self.D // self.H
        self.L = c["num_hidden_layers"]
        self.eps = c["rms_norm_eps"]
        self.theta = c.get("rope_theta", 10000.0)
        check(c["hidden_act"] == "silu", "hidden_act")
        check(self.KV == self.H, "this reference does not repeat k/v heads")

    def rmsnorm(self, x, weight):
        # LlamaRMSNorm: the variance in FP32, x * rsqrt(var + eps), then weight * x.
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return weight * h.to(x.dtype)

    def rope(self, T):
        # LlamaRotaryEmbedding (default rope_type): inv_freq in FP32, emb = cat(freqs, freqs).
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.int64).float()
                                         / self.hd))
        t = torch.arange(T, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def attention(self, i, x, cos, sin):
        p = f"model.layers.{i}.self_attn."
        T = x.shape[0]
        q = (x @ self.w[p + "q_proj.weight"].T).view(T, self.H, self.hd).transpose(0, 1)
        k = (x @ self.w[p + "k_proj.weight"].T).view(T, self.KV, self.hd).transpose(0, 1)
        v = (x @ self.w[p + "v_proj.weight"].T).view(T, self.KV, self.hd).transpose(0, 1)
        q = q * cos + self.rotate_half(q) * sin  # apply_rotary_pos_emb
        k = k * cos + self.rotate_half(k) * sin
        scores = (q @ k.transpose(1, 2)) * (self.hd ** -0.5)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        out = (probs @ v).transpose(0, 1).reshape(T, self.H * self.hd)
        return out @ self.w[p + "o_proj.weight"].T

    def mlp(self, i, x):
        p = f"model.layers.{i}."
        if self.arch == "LlamaForCausalLM":  # LlamaMLP: down(silu(gate(x)) * up(x))
            g = x @ self.w[p + "mlp.gate_proj.weight"].T
            u = x @ self.w[p + "mlp.up_proj.weight"].T
            return (torch.nn.functional.silu(g) * u) @ self.w[p + "mlp.down_proj.weight"].T
        # MixtralSparseMoeBlock: softmax over all experts (FP32), top-k, renormalised weights,
        # each expert w2(silu(w1(x)) * w3(x)), summed with the weights.
        b = p + "block_sparse_moe."
        k = self.cfg["num_experts_per_tok"]
        router_logits = x @ self.w[b + "gate.weight"].T
        weights = torch.softmax(router_logits, dim=1, dtype=torch.float32)
        weights, chosen = torch.topk(weights, k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.cfg["num_local_experts"]):
            rows, slot = torch.where(chosen == e)
            if rows.numel() == 0:
                continue
            xe = x[rows]
            ex = f"{b}experts.{e}."
            h = torch.nn.functional.silu(xe @ self.w[ex + "w1.weight"].T) * (
                xe @ self.w[ex + "w3.weight"].T)
            ye = h @ self.w[ex + "w2.weight"].T
            out.index_add_(0, rows, ye * weights[rows, slot, None])
        return out

    def logits(self, ids):
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids)]
        cos, sin = self.rope(len(ids))
        for i in range(self.L):
            p = f"model.layers.{i}."
            x = x + self.attention(i, self.rmsnorm(x, self.w[p + "input_layernorm.weight"]),
                                   cos, sin)
            x = x + self.mlp(i, self.rmsnorm(x, self.w[p + "post_attention_layernorm.weight"]))
        x = self.rmsnorm(x, self.w["model.norm.weight"])
        head = (self.w["model.embed_tokens.weight"] if self.cfg.get("tie_word_embeddings")
                else self.w["lm_head.weight"])
        return x @ head.T

    def greedy(self, ids, n, vocab_limit):
        ids = list(ids)
        out = []
        for _ in range(n):
            last = self.logits(ids[-self.cfg["max_position_embeddings"]:])[-1, :vocab_limit]
            tok = int(torch.argmax(last))
            out.append(tok)
            ids.append(tok)
        return out


# ---- the two models ---------------------------------------------------------------------

def check_export(name, ckpt, export_dir, prompt, vocab_limit, work):
    run("export", "--checkpoint", ckpt, "--format", "hf", "--out", export_dir, "--quiet")
    model = HfModel(export_dir)
    logits_path = os.path.join(work, name + "_logits.npy")
    g = json.loads(run("generate", "--checkpoint", ckpt, "--prompt", prompt, "--temperature", "0",
                       "--max-new-tokens", str(NEW_TOKENS), "--json", "--quiet",
                       "--logits-out", logits_path))
    want = torch.from_numpy(np.load(logits_path))
    with torch.no_grad():
        got = model.logits(g["prompt_tokens"])[-1]
        err = float((got - want).abs().max())
        scale = float(want.abs().max())
        print(f"{name}: {model.arch}, {len(model.w)} tensors, last-position logits max |diff| "
              f"{err:.3g} of max |logit| {scale:.3g} ({err / scale:.3g} relative)")
        check(err <= LOGIT_RTOL * scale,
              f"{name}: logits differ by {err} (limit {LOGIT_RTOL} x {scale})")
        cont = model.greedy(g["prompt_tokens"], NEW_TOKENS, vocab_limit)
    print(f"{name}: greedy continuation {cont}")
    check(cont == g["tokens"], f"{name}: greedy continuation {cont} != mxtrain's {g['tokens']}")
    check(len(set(cont)) >= 10, f"{name}: the continuation {cont} is too repetitive to compare")
    return model


def main():
    with tempfile.TemporaryDirectory(prefix="mxt_hf_") as work:
        p = lambda *x: os.path.join(work, *x)
        # Dense model, SentencePiece tokenizer: Llama.
        text = os.path.join(FORTUNES, "computers")
        run("tokenizer", "train", "--input", text, "--vocab-size", "600", "--out", p("tok.model"),
            "--quiet")
        run("prepare-data", "--input", text, "--tokenizer", p("tok.model"), "--out", p("shards"),
            "--quiet")
        with open(p("dense.yaml"), "w") as f:
            f.write(f"""model: {{vocab_size: 640, d_model: 64, n_layers: 2, n_heads: 4, d_ff: 96,
         max_seq_len: 48, init_std: 0.3, tokenizer: {p("tok.model")}}}
training: {{steps: 10, seq_len: 48, micro_batch_size: 8, lr: 0.001, warmup_steps: 2,
            eval_every: 0, eval_batches: 2}}
data: {{path: {p("shards")}}}
precision: {{recipe: mxfp8}}
""")
        run("train", "--config", p("dense.yaml"), "--checkpoint-dir", p("dense_ck"), "--quiet")
        m = check_export("dense", p("dense_ck"), p("dense_hf"), "The computer is", 600, work)
        check(m.arch == "LlamaForCausalLM", m.arch)
        with open(p("dense_hf", "tokenizer.model"), "rb") as a, open(p("tok.model"), "rb") as b:
            check(a.read() == b.read(), "tokenizer.model is not the training tokenizer")
        check(m.cfg["vocab_size"] == 640 and m.cfg["tie_word_embeddings"] is False, m.cfg)

        # Byte-level MoE model: Mixtral.
        with open(p("moe.yaml"), "w") as f:
            f.write(f"""model: {{d_model: 64, n_layers: 2, n_heads: 2, d_ff: 96, max_seq_len: 48,
         init_std: 0.3, moe: {{num_experts: 4, top_k: 2, d_ff: 48}}}}
training: {{steps: 10, seq_len: 48, micro_batch_size: 8, lr: 0.001, warmup_steps: 2,
            eval_every: 0, eval_batches: 2}}
data: {{path: {text}}}
precision: {{recipe: mxfp8}}
""")
        run("train", "--config", p("moe.yaml"), "--checkpoint-dir", p("moe_ck"), "--quiet")
        m = check_export("moe", p("moe_ck"), p("moe_hf"), "Computers are", 256, work)
        check(m.arch == "MixtralForCausalLM", m.arch)
        check(not os.path.exists(p("moe_hf", "tokenizer.model")), "byte-level export has a tokenizer")
    print("test_hf_export: all checks passed")


if __name__ == "__main__":
    main()
