"""tests/python/test_hf_export.py — `mxtrain export --format hf` and `mxtrain import` /
`train --init-from`, refereed by Hugging Face transformers (5.25) itself, offline
(HF_HUB_OFFLINE=1; every model is built here from a config, nothing is downloaded), and the
exported tokenizer by the `sentencepiece` package. mxtrain runs as a program ($MXTRAIN_BIN).

Reference functions: transformers.LlamaForCausalLM / MixtralForCausalLM .from_pretrained(dir)
(forward: model(ids).logits; greedy: model.generate(do_sample=False)), their constructors from
LlamaConfig / MixtralConfig and .save_pretrained(dir); sentencepiece.SentencePieceProcessor(
model_file=...).encode(text).

Export (models trained by mxtrain for 10 steps from a wide initialisation, init_std 0.3, so that
greedy decoding visits many tokens; the test requires at least 10 distinct ones of 20):
- a dense model with a 600-piece SentencePiece tokenizer (untied head) loads with
  LlamaForCausalLM.from_pretrained, a byte-level MoE model with MixtralForCausalLM; the
  last-position logits of a prompt equal `mxtrain generate --logits-out` within LOGIT_RTOL of
  the largest logit, and model.generate's 20-token greedy continuation equals `mxtrain generate
  --temperature 0`'s token for token (ids of the vocabulary above the tokenizer's 600 pieces
  are suppressed, suppress_tokens, as mxtrain never samples them; no EOS stop, as mxtrain has
  none);
- the exported tokenizer.model is the training tokenizer byte for byte, loads in sentencepiece
  and encodes a test text (several lines, runs of spaces, a tab, digits, accents, typographic
  quotes) to the ids of `mxtrain tokenizer encode`; the prompt's ids from generate equal
  sentencepiece's; tokenizer_config.json asks transformers for no dummy prefix and no BOS/EOS
  and AutoTokenizer.from_pretrained (transformers' fast tokenizer, converted through protobuf)
  gives the same ids and decodes the text back. Named difference: text
  holding U+2581 ("▁", SentencePiece's own space mark):
  sentencepiece reads it as a space, mxtrain encodes its three UTF-8 bytes as byte pieces so
  that decoding gives the text back (docs/data.md, "Tokenizer"); asserted.
- a model whose head is tied (a transformers Llama with tie_word_embeddings, imported): export
  writes it tied again (no lm_head.weight, tie_word_embeddings true) and it loads.

Import (transformers models with random weights, saved with save_pretrained: a tied Llama, an
untied Llama with rope_theta 5e5 and rms_norm_eps 1e-5 in transformers 5's `rope_parameters`,
and a Mixtral with its config defaults, rope_theta 1e6):
- `mxtrain import` reads it; `mxtrain generate` on the imported checkpoint gives transformers'
  logits within LOGIT_RTOL of the largest and its greedy continuation;
- exact round trip: `mxtrain export` of the import holds every tensor of the save_pretrained
  file byte for byte (and no other), the same tie setting, and from_pretrained of it gives the
  original model's logits bit for bit;
- `train --init-from DIR` reads the same weights: one training step from it and one step of
  `train --resume` from the imported checkpoint (same config, seed, batch) write byte-identical
  model.safetensors, and so identical logits.

"Identical" above: the weights are compared as bytes and must be equal; mxtrain's logits of
two checkpoints with equal weights must be equal bytes; mxtrain's forward against transformers'
forward (two FP32 implementations) must agree within LOGIT_RTOL = 1e-4 of max |logit| — they
differ only in FP32 summation order and in the rotary angles, which transformers computes in
FP32 (inv_freq, then t·inv_freq) and mxtrain in FP64 before rounding, about 1e-6 relative
(measured values are printed).

Run by CTest as python_test_hf_export; exits 77 (skipped) without torch, transformers,
sentencepiece or safetensors unless MXTRAIN_REQUIRE_CHECKS=1 (checks_env.py).
"""

import json
import os
import subprocess
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from checks_env import require

torch, transformers, spm, _ = require("torch", "transformers", "sentencepiece", "safetensors")
warnings.filterwarnings("ignore", message=".*Enum subclass.*")

import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          MixtralConfig, MixtralForCausalLM)

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

MXTRAIN = os.environ.get("MXTRAIN_BIN", "build/mxtrain")
FORTUNES = "/usr/share/games/fortunes"
LOGIT_RTOL = 1e-4  # of max |logit|: FP32 summation order and RoPE angle rounding, see above
NEW_TOKENS = 20
TEXT = ("The computer is  down.\n\tTabs and   spaces, numbers 12345, accents ünïcödé — "
        "“quotes”.\n leading space\nlast line without a newline")


def run(*args):
    r = subprocess.run([MXTRAIN, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"mxtrain {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


# ---- transformers' side -----------------------------------------------------------------

def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1]


def hf_greedy(model, ids, vocab_limit):
    """model.generate's greedy continuation: no EOS stop, ids >= vocab_limit suppressed."""
    V = model.config.vocab_size
    gc = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                          pad_token_id=0, bos_token_id=None,
                          suppress_tokens=list(range(vocab_limit, V)) if vocab_limit < V else None)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                                                            dtype=torch.long),
                             generation_config=gc)
    return out[0, len(ids):].tolist()


def load(directory):
    with open(os.path.join(directory, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    cls = {"LlamaForCausalLM": LlamaForCausalLM, "MixtralForCausalLM": MixtralForCausalLM}[arch]
    m = cls.from_pretrained(directory, local_files_only=True)
    check(type(m) is cls and m.dtype == torch.float32, f"{directory}: {type(m)} {m.dtype}")
    return m.eval()


# ---- mxtrain's side ---------------------------------------------------------------------

def mx_generate(ckpt, prompt, logits_path):
    g = json.loads(run("generate", "--checkpoint", ckpt, "--prompt", prompt, "--temperature", "0",
                       "--max-new-tokens", str(NEW_TOKENS), "--json", "--quiet",
                       "--logits-out", logits_path))
    return g, np.load(logits_path)


def compare(name, model, ckpt, prompt, vocab_limit, work, min_distinct):
    """mxtrain generate on ckpt against transformers' model: logits and greedy continuation."""
    g, want = mx_generate(ckpt, prompt, os.path.join(work, name + "_logits.npy"))
    got = hf_logits(model, g["prompt_tokens"]).double().numpy()
    err = float(np.max(np.abs(got - want)))
    scale = float(np.max(np.abs(want)))
    print(f"{name}: {type(model).__name__}, last-position logits max |diff| {err:.3g} of max "
          f"|logit| {scale:.3g} ({err / scale:.3g} relative)")
    check(err <= LOGIT_RTOL * scale, f"{name}: logits differ by {err} (limit {LOGIT_RTOL} x "
          f"{scale})")
    cont = hf_greedy(model, g["prompt_tokens"], vocab_limit)
    check(cont == g["tokens"], f"{name}: transformers' greedy continuation {cont} != "
          f"mxtrain's {g['tokens']}")
    check(len(set(cont)) >= min_distinct, f"{name}: the continuation {cont} is too repetitive "
          f"to compare")
    print(f"{name}: greedy continuation equal, {len(cont)} tokens ({len(set(cont))} distinct)")
    return g


# ---- export -----------------------------------------------------------------------------

def test_export_dense_sentencepiece(work):
    p = lambda *x: os.path.join(work, *x)  # noqa: E731
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
    run("export", "--checkpoint", p("dense_ck"), "--format", "hf", "--out", p("dense_hf"),
        "--quiet")
    model = load(p("dense_hf"))
    check(model.config.vocab_size == 640 and not model.config.tie_word_embeddings,
          f"config: {model.config}")
    g = compare("dense", model, p("dense_ck"), "The computer is", 600, work, 10)

    # The tokenizer: the training one, byte for byte; sentencepiece encodes as mxtrain does.
    with open(p("dense_hf", "tokenizer.model"), "rb") as a, open(p("tok.model"), "rb") as b:
        check(a.read() == b.read(), "tokenizer.model is not the training tokenizer")
    sp = spm.SentencePieceProcessor(model_file=p("dense_hf", "tokenizer.model"))
    check(sp.vocab_size() == 600, f"sentencepiece vocabulary {sp.vocab_size()}")
    with open(p("text.txt"), "w", encoding="utf-8") as f:
        f.write(TEXT)
    mine = json.loads(run("tokenizer", "encode", "--tokenizer", p("dense_hf", "tokenizer.model"),
                          "--input", p("text.txt"), "--json"))["ids"]
    theirs = sp.encode(TEXT)
    check(mine == theirs, f"mxtrain's ids {mine} != sentencepiece's {theirs}")
    check(sp.decode(theirs) == TEXT, "sentencepiece does not decode the text back")
    check(g["prompt_tokens"] == sp.encode("The computer is"), "generate's prompt ids")
    # Named difference: U+2581 in the text.
    mark = "a \u2581 b"
    m2 = json.loads(run("tokenizer", "encode", "--tokenizer", p("tok.model"), "--text", mark,
                        "--json"))["ids"]
    s2 = sp.encode(mark)
    as_bytes = b"".join(bytes([int(sp.id_to_piece(i)[3:5], 16)]) if sp.is_byte(i) else
                        sp.id_to_piece(i).replace("\u2581", " ").encode() for i in m2)
    check(m2 != s2 and as_bytes == mark.encode() and
          s2 == sp.encode(mark.replace("\u2581", " ")),
          f"U+2581: mxtrain {m2} (should spell the text's bytes), sentencepiece {s2} (should "
          f"read the mark as a space)")
    print(f"tokenizer: sentencepiece encodes the {len(TEXT)}-character test text to mxtrain's "
          f"{len(mine)} ids; U+2581 differs as named (mxtrain byte pieces, sentencepiece a space)")
    # transformers' tokenizer: the settings that make its conversion encode as SentencePiece
    # does (no dummy prefix, no BOS/EOS added); the conversion of tokenizer.model into
    # transformers' fast tokenizer goes through protobuf (pinned in the environment).
    with open(p("dense_hf", "tokenizer_config.json")) as f:
        tc = json.load(f)
    check(tc["add_prefix_space"] is False and tc["legacy"] is True and
          tc["add_bos_token"] is False and tc["add_eos_token"] is False, f"tokenizer_config {tc}")
    require("google.protobuf")
    tk = transformers.AutoTokenizer.from_pretrained(p("dense_hf"))
    ids = tk(TEXT, add_special_tokens=False)["input_ids"]
    check(ids == theirs and tk.decode(ids) == TEXT, f"AutoTokenizer: {ids[:8]} vs {theirs[:8]}")
    print(f"AutoTokenizer ({type(tk).__name__}): the same ids, decodes the text back")


def test_export_moe_bytes(work):
    p = lambda *x: os.path.join(work, *x)  # noqa: E731
    with open(p("moe.yaml"), "w") as f:
        f.write(f"""model: {{d_model: 64, n_layers: 2, n_heads: 2, d_ff: 96, max_seq_len: 48,
         init_std: 0.3, moe: {{num_experts: 4, top_k: 2, d_ff: 48}}}}
training: {{steps: 10, seq_len: 48, micro_batch_size: 8, lr: 0.001, warmup_steps: 2,
            eval_every: 0, eval_batches: 2}}
data: {{path: {os.path.join(FORTUNES, "computers")}}}
precision: {{recipe: mxfp8}}
""")
    run("train", "--config", p("moe.yaml"), "--checkpoint-dir", p("moe_ck"), "--quiet")
    run("export", "--checkpoint", p("moe_ck"), "--format", "hf", "--out", p("moe_hf"), "--quiet")
    model = load(p("moe_hf"))
    check(isinstance(model, MixtralForCausalLM) and model.config.num_local_experts == 4, "moe")
    check(not os.path.exists(p("moe_hf", "tokenizer.model")), "byte-level export has a tokenizer")
    compare("moe", model, p("moe_ck"), "Computers are", 256, work, 10)


# ---- import -----------------------------------------------------------------------------

def mx_model_yaml(cfg, moe):
    """The mxtrain model section of a transformers config (what import records), so that
    `train --resume` from the imported checkpoint accepts the config."""
    rope = (cfg.rope_parameters or {}).get("rope_theta", getattr(cfg, "rope_theta", None))
    m = (f"d_model: {cfg.hidden_size}, n_layers: {cfg.num_hidden_layers}, "
         f"n_heads: {cfg.num_attention_heads}, d_ff: {cfg.intermediate_size}, "
         f"max_seq_len: {cfg.max_position_embeddings}, vocab_size: {cfg.vocab_size}, "
         f"init_std: {cfg.initializer_range}, rope_theta: {rope}, rms_eps: {cfg.rms_norm_eps}")
    if moe:
        m += (f", moe: {{num_experts: {cfg.num_local_experts}, top_k: "
              f"{cfg.num_experts_per_tok}, d_ff: {cfg.intermediate_size}, aux_loss_coef: "
              f"{cfg.router_aux_loss_coef}}}")
    return "{" + m + "}"


def check_import(name, model, work, prompt):
    p = lambda *x: os.path.join(work, name + "_" + x[0], *x[1:])  # noqa: E731
    src = os.path.join(work, name + "_hf")
    model.save_pretrained(src)
    moe = isinstance(model, MixtralForCausalLM)
    cfg_yaml = os.path.join(work, name + ".yaml")
    with open(cfg_yaml, "w") as f:
        f.write(f"""model: {mx_model_yaml(model.config, moe)}
training: {{steps: 1, seq_len: 32, micro_batch_size: 4, lr: 0.001, warmup_steps: 0,
            eval_every: 0, eval_batches: 1}}
data: {{path: {os.path.join(FORTUNES, "computers")}}}
precision: {{recipe: mxfp8}}
""")
    run("import", "--format", "hf", "--input", src, "--out", p("ck"), "--config", cfg_yaml,
        "--quiet")
    compare(name + " import", model, p("ck"), prompt, model.config.vocab_size, work, 5)

    # Exact round trip: the export of the import is the save_pretrained file, tensor for tensor.
    out = json.loads(run("export", "--checkpoint", p("ck"), "--out", p("re"), "--json",
                         "--quiet"))
    tied = bool(model.config.tie_word_embeddings)
    check(out["tied"] == tied, f"{name}: export tied={out['tied']}, the model's {tied}")
    a, b = load_file(os.path.join(src, "model.safetensors")), load_file(p("re",
                                                                         "model.safetensors"))
    check(sorted(a) == sorted(b), f"{name}: tensor names differ: {sorted(set(a) ^ set(b))}")
    for k in a:
        check(a[k].dtype == b[k].dtype == np.float32 and a[k].shape == b[k].shape and
              a[k].tobytes() == b[k].tobytes(), f"{name}: tensor {k} changed in the round trip")
    back = load(p("re"))
    check(back.config.tie_word_embeddings == tied, f"{name}: reloaded tie setting")
    ids = list(prompt.encode())
    check(torch.equal(hf_logits(back, ids), hf_logits(model, ids)),
          f"{name}: the re-export's logits are not the original model's bit for bit")
    print(f"{name}: round trip exact ({len(a)} tensors byte-equal, tie_word_embeddings {tied}); "
          f"from_pretrained of the re-export gives the same logits bit for bit")

    # train --init-from reads what import reads: one step from each, the same bytes.
    run("train", "--config", cfg_yaml, "--checkpoint-dir", p("ck"), "--resume", "--quiet")
    run("train", "--config", cfg_yaml, "--init-from", src, "--checkpoint-dir", p("init"),
        "--quiet")
    with open(p("ck", "step_1", "model.safetensors"), "rb") as f1, \
            open(p("init", "step_1", "model.safetensors"), "rb") as f2:
        check(f1.read() == f2.read(), f"{name}: a step from --init-from and a step from the "
              f"import give different weights")
    _, l1 = mx_generate(p("ck"), prompt, p("l1.npy"))
    _, l2 = mx_generate(p("init"), prompt, p("l2.npy"))
    check(l1.tobytes() == l2.tobytes(), f"{name}: --init-from and import logits differ")
    print(f"{name}: train --init-from and train --resume from the import: identical step-1 "
          f"weights and logits")


def test_imports(work):
    torch.manual_seed(5)
    common = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, max_position_embeddings=64, initializer_range=0.2)
    tied = LlamaForCausalLM(LlamaConfig(intermediate_size=96, tie_word_embeddings=True,
                                        **common)).eval()
    check(tied.lm_head.weight.data_ptr() == tied.model.embed_tokens.weight.data_ptr(), "tied")
    check_import("llama_tied", tied, work, "The computer is")
    untied = LlamaForCausalLM(LlamaConfig(
        intermediate_size=80, tie_word_embeddings=False, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, **common)).eval()
    check_import("llama", untied, work, "Keyboards")
    mixtral = MixtralForCausalLM(MixtralConfig(intermediate_size=48, num_local_experts=4,
                                               num_experts_per_tok=2, **common)).eval()
    check(mixtral.config.rope_parameters["rope_theta"] == 1e6, "Mixtral's default rope_theta")
    check_import("mixtral", mixtral, work, "Computers are")


def main():
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="mxt_hf_") as work:
        test_export_dense_sentencepiece(work)
        test_export_moe_bytes(work)
        test_imports(work)
    print("test_hf_export: all checks passed")


if __name__ == "__main__":
    main()
