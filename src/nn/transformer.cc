// nn/transformer.cc — the GPT model (nn/transformer.h): the embedding, the stack of blocks
// (nn/blocks.h), the head, the arena (nn/arena.h) and the parameter list. Config checks and
// the module description are in model_config.cc.
//
// A pass reads top to bottom like llm.c's gpt2_forward / gpt2_backward: the embedding, each
// layer's attention and MLP block, the head; the backward walks the layers in reverse. Every
// activation the backward needs lives in its block's buffers, reused across micro-batches
// (grown when B·T grows, never shrunk); the residual stream and the scratch live in the arena.
// Under activation recompute each block's forward runs again just before its backward, into
// the shared set and the arena. What is saved between forward and backward is in
// docs/design.md, "Saved for backward": the inputs of the Linears (ln1, ln2, h, lnf) are read
// only by those Linears' wgrad, so a Linear that keeps its own copy takes them from the arena's
// shared scratch, overwritten by the next one; a Linear that keeps a reference (defer on, the
// FP32 reference, a column Linear under sequence parallelism) and an MoE block (its router
// backward reads its input) get a per-block FP32 input. GEMMs go through Linear /
// GroupedLinear in the precision the resolver chose; attention multiplies BF16 operands (FP32
// in the reference mode); everything else is FP32 (nn/ops.h, nn/moe.h).
#include "mxtrain/nn/transformer.h"

#include <algorithm>
#include <cmath>

#include "mxtrain/common.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/ops.h"
#include "nn/block_util.h"

namespace mxtrain {

GPT::GPT(const ModelConfig& cfg, const LinearPrecisionFn& resolver, uint64_t seed,
         const ModelParallel& parallel)
    : GPT(cfg, resolver, seed, parallel, true) {}

GPT::GPT(const ModelConfig& cfg)
    : GPT(cfg, [](const ModuleInfo&) { return LinearPrecision{}; }, 0, {}, false) {
  set_fp32_reference(true);
  arena_.set_inference();
  share_activations();
  for (Parameter* p : params_) p->grad = FloatBuffer();  // no backward: no gradients
}

GPT::GPT(const ModelConfig& cfg, const LinearPrecisionFn& resolver, uint64_t seed,
         const ModelParallel& parallel, bool random_init)
    : cfg_(cfg), par_(parallel), arena_(cfg, parallel.tp_size()) {
  MXT_CHECK(bool(resolver), "GPT: no precision resolver given");
  const std::vector<ModuleInfo> mods = describe_modules(cfg_);  // validates
  shard_ = {par_.sequence_parallel && par_.tp_size() > 1 ? par_.tp : nullptr, &pstats_};
  if (cfg_.rope_theta > 0.f)
    rope_ = RopeTable(cfg_.max_seq_len, cfg_.d_model / cfg_.n_heads, cfg_.rope_theta);
  // Each module's precision, asked in the description's order (the blocks build their layers
  // in it).
  auto prec = [&](const std::string& module) {
    for (const ModuleInfo& m : mods)
      if (m.module == module) {
        LinearPrecision p = resolver(m);
        p.validate();
        return p;
      }
    MXT_FAIL("GPT: internal error, module ", module, " not described");
  };
  const BlockContext c{cfg_,    par_,        shard_,           &pstats_, &clock_,
                       cfg_.rope_theta > 0.f ? &rope_ : nullptr, seed,     random_init,
                       prec};
  embed_.init("embed.weight", {cfg_.vocab_size, cfg_.d_model});
  c.init(embed_, cfg_.init_std);
  layers_.reserve(size_t(cfg_.n_layers));
  for (int i = 0; i < cfg_.n_layers; ++i) {
    std::unique_ptr<FeedForward> mlp;
    AttentionBlock attention(c, i);  // before the MLP: the resolver sees qkv, proj, fc1, fc2
    if (cfg_.is_moe_layer(i))
      mlp = std::make_unique<MoeBlock>(c, i);
    else
      mlp = std::make_unique<MlpBlock>(c, i);
    layers_.push_back(Layer{std::move(attention), std::move(mlp)});
  }
  head_ = std::make_unique<LmHead>(c);
  params_.push_back(&embed_);
  for (Layer& L : layers_) {
    L.attention.parameters(params_);
    L.mlp->parameters(params_);
  }
  head_->parameters(params_);
  // Under sequence parallelism every replicated parameter sees this rank's tokens only: its
  // gradient is this rank's part of the group's sum.
  shard_.mark_partial_grads(params_);
}

GPT::~GPT() = default;

int64_t GPT::num_parameters() const {
  int64_t n = 0;
  for (const Parameter* p : params_) n += p->numel();
  return n;
}

void GPT::zero_grad() {
  for (Parameter* p : params_) p->zero_grad();
}

void GPT::clear_grad() {
  for (Parameter* p : params_) p->clear_grad();
}

void GPT::layers(std::vector<Linear*>& linears, std::vector<GroupedLinear*>& grouped) {
  for (Layer& L : layers_) {
    linears.push_back(&L.attention.qkv);
    linears.push_back(&L.attention.proj);
    L.mlp->layers(linears, grouped);
  }
  linears.push_back(&head_->lm_head);
}

Linear* GPT::linear(const std::string& module) {
  std::vector<Linear*> ls;
  std::vector<GroupedLinear*> gs;
  layers(ls, gs);
  for (Linear* l : ls)
    if (l->name() == module) return l;
  return nullptr;
}

GroupedLinear* GPT::grouped_linear(const std::string& module) {
  std::vector<Linear*> ls;
  std::vector<GroupedLinear*> gs;
  layers(ls, gs);
  for (GroupedLinear* g : gs)
    if (g->name() == module) return g;
  return nullptr;
}

const MoELayer* GPT::moe_layer(int layer) const {
  MXT_CHECK(layer >= 0 && layer < int(layers_.size()), "GPT: layer ", layer,
            " out of range [0, ", layers_.size(), ")");
  return layers_[size_t(layer)].mlp->moe();
}

void GPT::set_module_hook(ModuleHook hook) {
  std::vector<Linear*> ls;
  std::vector<GroupedLinear*> gs;
  layers(ls, gs);
  auto each = [&](auto* layer) {
    if (!hook) return layer->set_hook({});
    layer->set_hook([hook, name = layer->name()](ModuleEvent e) { hook(name, e); });
  };
  for (Linear* l : ls) each(l);
  for (GroupedLinear* g : gs) each(g);
}

void GPT::set_fp32_reference(bool on) {
  for (Layer& L : layers_) {
    L.attention.set_fp32_reference(on);
    L.mlp->set_fp32_reference(on);
  }
  head_->lm_head.set_fp32_reference(on);
}

void GPT::set_split_sums(int tp, int etp) {
  MXT_CHECK(tp >= 1 && etp >= 1 && par_.tp_size() == 1 && par_.etp_size() == 1,
            "GPT::set_split_sums: a one-process model and counts >= 1");
  MXT_CHECK(cfg_.n_heads % tp == 0 && cfg_.d_ff % tp == 0 && cfg_.expert_d_ff() % etp == 0,
            "GPT::set_split_sums: tp ", tp, " and etp ", etp, " must divide the heads and d_ff");
  for (Layer& L : layers_) {
    L.attention.set_split_sums(tp);
    L.mlp->set_split_sums(tp, etp);
  }
}

void GPT::set_swiglu_input(SwigluInput s, ScaleRounding rounding) {
  swiglu_ = s;
  for (Layer& L : layers_) L.mlp->set_swiglu_input(s, rounding);
}

void GPT::set_recompute(Recompute r) {
  MXT_CHECK(r == Recompute::none || par_.tp_size() == 1, "activation recompute (",
            recompute_name(r), ") is not built for tensor parallelism; use recompute: none");
  arena_.set_recompute(r);
  share_activations();
}

void GPT::share_activations() {
  for (Layer& L : layers_) {
    L.attention.share_activations(arena_.shared_attention());
    L.mlp->share_activations(arena_.shared_mlp(), arena_.shared_moe());
  }
}

size_t GPT::activation_bytes() const {
  size_t n = arena_.stream_bytes() + head_->activation_bytes();
  for (const Layer& L : layers_) n += L.attention.activation_bytes() + L.mlp->activation_bytes();
  return n;
}

TokenRows GPT::rows_of(int B, int T) const {
  MXT_CHECK(B >= 1, "GPT: batch size must be >= 1, got ", B);
  MXT_CHECK(T >= 1 && T <= cfg_.max_seq_len, "GPT: sequence length ", T,
            " must be between 1 and model.max_seq_len = ", cfg_.max_seq_len);
  return token_rows(shard_, B, T);
}

void GPT::reserve(int B, int T) {
  MXT_CHECK(B >= 1 && T >= 1 && T <= cfg_.max_seq_len, "GPT::reserve: batch ", B,
            " and sequence length ", T, " must be >= 1 (and T <= max_seq_len = ",
            cfg_.max_seq_len, ")");
  const TokenRows b = rows_of(B, T);
  arena_.reserve(b, layers_.size(), /*backward=*/true);
  for (Layer& L : layers_) {
    L.attention.reserve(b, arena_);
    L.mlp->reserve(b, arena_);
  }
  head_->reserve(b, arena_);
  // A parameter whose value is held elsewhere (FSDP shards) gets no gradient buffer here: the
  // holder lends one while its module's backward runs (ModuleEvent::backward_start).
  for (Parameter* p : params_)
    if (!p->value.empty() && p->grad.size() != size_t(p->numel()))
      p->grad.assign(size_t(p->numel()), 0.f);
}

// ---- forward / backward ---------------------------------------------------------------------

void GPT::run_blocks(const int32_t* tokens, const TokenRows& b, double& aux, size_t& held) {
  embedding_forward(arena_.resid(0), tokens + b.first, b.rows, embed_.value.data(),
                    cfg_.vocab_size, cfg_.d_model);
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    L.attention.forward(arena_.resid(l), b, arena_.resid_mid(l, b), arena_);
    aux += L.mlp->forward(arena_.resid_mid(l, b), b, arena_.resid(l + 1), arena_);
    held += L.attention.held_bytes() + L.mlp->held_bytes();  // what stays until the backward
  }
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  MXT_CHECK(tokens, "GPT: null tokens");
  MXT_CHECK(!arena_.inference(), "GPT: an inference model runs forward_cached only");
  const TokenRows b = rows_of(B, T);
  arena_.reserve(b, layers_.size());
  double aux = 0.0;
  size_t held = 0;
  run_blocks(tokens, b, aux, held);
  double loss = head_->forward(arena_.resid(layers_.size()),
                               targets ? targets + b.first : nullptr, b, arena_);
  held += head_->held_bytes();
  if (targets) {  // the mean over the group's equal shares of the N tokens (nothing without
                  // sequence parallelism); the MoE losses are the ranks' parts of the batch's
    double sums[2] = {loss, aux};
    shard_.sum(sums, cfg_.moe_num_experts ? 2 : 1);
    loss = sums[0] / double(shard_.parts());
    aux = sums[1];
  }
  last_ = {loss, float(aux), held + activation_bytes()};
  return float(loss);
}

float GPT::forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T) {
  MXT_CHECK(targets, "GPT: null targets");
  const ForwardOnlyScope no_backward;
  return forward(tokens, targets, B, T);
}

void GPT::forward_logits(const int32_t* tokens, int B, int T, float* logits) {
  MXT_CHECK(logits, "GPT: null logits");
  MXT_CHECK(!shard_.split(), "GPT: forward_logits under sequence parallelism (each rank holds a "
            "share of the logits); run inference in one process");
  const ForwardOnlyScope no_backward;
  forward(tokens, nullptr, B, T);
  std::copy_n(head_->logits(), size_t(B) * size_t(T) * size_t(cfg_.vocab_size), logits);
}

void GPT::forward_cached(const int32_t* tokens, int n, int pos, float* logits,
                         bool every_position) {
  MXT_CHECK(arena_.inference(), "GPT: forward_cached needs an inference model (GPT(config))");
  MXT_CHECK(tokens && logits, "GPT: null tokens or logits");
  MXT_CHECK(n >= 1 && pos >= 0 && int64_t(pos) + n <= cfg_.max_seq_len, "GPT: ", n,
            " tokens after ", pos, " cached ones exceed max_seq_len = ", cfg_.max_seq_len);
  const TokenRows b{1, n, n, 0, n, pos};
  const ForwardOnlyScope no_backward;
  arena_.reserve(b, layers_.size());
  double aux = 0.0;
  size_t held = 0;
  run_blocks(tokens, b, aux, held);  // the stream updated in place
  const int64_t first = every_position ? 0 : n - 1;  // the rows whose logits are wanted
  head_->logits_of(arena_.resid(0) + first * cfg_.d_model, n - first, logits, b, arena_);
}

float GPT::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                            float grad_scale) {
  MXT_CHECK(std::isfinite(grad_scale), "GPT: grad_scale must be finite, got ", grad_scale);
  MXT_CHECK(targets, "GPT: null targets");
  const float loss = forward(tokens, targets, B, T);
  const TokenRows b = rows_of(B, T);
  for (Parameter* p : params_)  // FSDP lends the gradients of what it holds (reserve())
    if (!p->value.empty() && p->grad.size() != size_t(p->numel()))
      p->grad.assign(size_t(p->numel()), 0.f);
  const float daux = grad_scale * cfg_.aux_loss_coef;
  const Recompute rc = arena_.recompute();
  // dres is the gradient w.r.t. the residual stream: the final norm writes it, each block adds
  // its share. Every other buffer is written by its first producer: nothing is zero-filled.
  float* dres = arena_.dres(b);
  head_->backward(dres, arena_.resid(layers_.size()), targets + b.first, b,
                  grad_scale / float(b.N), arena_);
  for (size_t l = layers_.size(); l-- > 0;) {
    Layer& L = layers_[l];
    if (rc == Recompute::layer) {  // the MLP's input again, then its activations
      L.attention.recompute(arena_.resid(l), b, arena_.resid_mid(l, b), arena_);
      L.mlp->recompute(arena_.resid_mid(l, b), b, arena_);
    }
    L.mlp->backward(dres, arena_.resid_mid(l, b), b, daux, arena_);
    if (rc != Recompute::none) L.attention.recompute(arena_.resid(l), b, nullptr, arena_);
    L.attention.backward(dres, arena_.resid(l), b, arena_);
  }
  embedding_backward(embed_.grad.data(), dres, tokens + b.first, b.rows, cfg_.vocab_size,
                     cfg_.d_model, take_grad_mode(embed_));
  // Every parameter with a gradient here received a contribution above; this only guards the
  // contract that a cleared gradient reads as zero after a backward.
  for (Parameter* p : params_)
    if (!p->grad_live) p->zero_grad();
  return loss;
}

}  // namespace mxtrain
