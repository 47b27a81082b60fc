// nn/mlp_block.cc — the feed-forward blocks and the LM head (mxtrain/nn/blocks.h):
//   MlpBlock  ln2 = rmsnorm(x) [rows, D]; a = fc1(ln2) [N, 2F/tp] (column-parallel: gathers ln2
//             under SP); h = silu(gate) · up [N, F/tp]; out = x + fc2(h) [rows, D] (row-parallel)
//   MoeBlock  ln2 = rmsnorm(x); out = x + experts(ln2) (nn/moe.h: router, dispatch, grouped
//             SwiGLU experts, combine), on this rank's rows
//   LmHead    logits = lm_head(rmsnorm(x)) [rows, V], softmax cross-entropy in place
// SwiGLU's input a is kept in FP32, FP8 or 4 bits (nn/fp8_activation.h): quantized, fc1 writes
// a into the arena's fc1_out region (the backward's dfc1 scratch, free during the forward),
// SwiGLU reads it there and only the quantized copy stays; the backward dequantizes it into
// dfc1 and runs SwiGLU's backward in place. Under the whole-layer recompute the copy is not
// kept at all: the recomputed pass rounds a to the codes and back in place, where SwiGLU's
// backward reads it.
#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/nn/arena.h"
#include "mxtrain/nn/blocks.h"
#include "nn/block_util.h"

namespace mxtrain {

using namespace nn_detail;
using Region = Arena::Region;

// ---- the common part --------------------------------------------------------------------------

FeedForward::FeedForward(const BlockContext& c, int layer)
    : D_(c.cfg.d_model), eps_(c.cfg.rms_eps) {
  init_ones(norm, "layers." + std::to_string(layer) + ".mlp.norm.gain", D_);
}

// ---- dense ------------------------------------------------------------------------------------

struct MlpBlock::View {
  float *ln2, *rstd2, *a, *h, *branch;  // a: fc1's FP32 output
  Fp8Activation* a8;                    // set: SwiGLU's input is kept here (FP8 / 4 bits)
  LinearSaved *s_fc1, *s_fc2;
};

MlpBlock::MlpBlock(const BlockContext& c, int layer) : FeedForward(c, layer) {
  const ModelConfig& cfg = c.cfg;
  const int tp = c.par.tp_size();
  MXT_CHECK(cfg.d_ff % tp == 0, "tensor parallelism ", tp, " must divide model.d_ff (",
            cfg.d_ff, ")");
  const int64_t D = D_, F = cfg.d_ff;
  F_ = F / tp;
  const std::string p = "layers." + std::to_string(layer) + ".mlp";
  // This rank's slices of gate and up; fc2's matching input columns.
  fc1 = Linear(p + ".fc1", D, 2 * F_, false, c.precision(p + ".fc1"),
               c.role(ParallelMode::column));
  fc2 = Linear(p + ".fc2", F_, D, false, c.precision(p + ".fc2"), c.role(ParallelMode::row));
  c.init(fc1.weight, cfg.init_std, tp_split(c.par, {2 * F, D}, 0, 2));
  c.init(fc2.weight, c.std_out(), tp_split(c.par, {D, F}, 1, 1));
  fc1.set_rounding_clock(c.clock);
  fc2.set_rounding_clock(c.clock);
}

SwigluStorage MlpBlock::storage() const {
  return fc1.fp32_reference() ? SwigluStorage{} : swiglu_storage(swiglu_, fc1.precision());
}

MlpBlock::View MlpBlock::view(const TokenRows& b, Arena& a) {
  MlpActs& M = acts();
  View v{};
  v.s_fc1 = &M.s_fc1;
  v.s_fc2 = &M.s_fc2;
  v.rstd2 = grow(M.rstd2, b.rows);
  v.branch = a.region(Region::mlp_branch, b);
  v.ln2 = input_buffer(fc1, M.ln2, b.rows * D_, a.region(Region::mlp_in, b));
  if (storage().kind != SwigluStorage::fp32) {  // only the quantized copy stays
    M.fc1_out = FloatBuffer();
    v.a = a.region(Region::fc1_out, b);
    v.a8 = &M.fc1_out8;
  } else {
    v.a = grow(M.fc1_out, b.N * 2 * F_);
    M.fc1_out8.clear();
  }
  v.h = input_buffer(fc2, M.h, b.N * F_, a.region(Region::fc2_in, b));
  return v;
}

void MlpBlock::reserve(const TokenRows& b, Arena& a) { view(b, a); }

double MlpBlock::forward(const float* x, const TokenRows& b, float* out, Arena& a) {
  return run(x, b, out, a, false);
}

void MlpBlock::recompute(const float* x, const TokenRows& b, Arena& a) {
  run(x, b, nullptr, a, true);
}

// x: [rows, D]; out: [rows, D] = x + mlp(x), or (recompute) nothing: what the backward reads,
// fc2's saved copy without its product.
double MlpBlock::run(const float* x, const TokenRows& b, float* out, Arena& a, bool recompute) {
  const View v = view(b, a);
  const int64_t N = b.N, F = F_;
  rmsnorm_forward(v.ln2, v.rstd2, x, norm.value.data(), b.rows, D_, eps_);
  if (recompute)
    fc1.recompute(v.ln2, b.rows, v.a, *v.s_fc1);
  else
    fc1.forward(v.ln2, b.rows, v.a, *v.s_fc1);
  swiglu_forward(v.h, v.a, N, F);
  // SwiGLU's input in FP8 or 4 bits, [2N, F]: kept as codes (not for a forward without a
  // backward); under the whole-layer recompute only the recomputed pass rounds it, in place,
  // for SwiGLU's backward to read there.
  if (v.a8 && !shared_ && !forward_only()) v.a8->keep(v.a, 2 * N, F, storage(), rounding_);
  if (v.a8 && recompute) v.a8->round_trip(v.a, 2 * N, F, storage(), rounding_);
  if (recompute) {
    fc2.save_input(v.h, N, *v.s_fc2);
    return 0.0;
  }
  {
    SplitSumsScope split(split_tp_, 1);
    fc2.forward(v.h, N, v.branch, *v.s_fc2);  // the hidden slices' partial sums, summed
  }
  residual_forward(out, x, v.branch, b.rows * D_);
  return 0.0;
}

void MlpBlock::backward(float* dres, const float* x, const TokenRows& b, float, Arena& a) {
  const View v = view(b, a);
  float* dh = a.region(Region::dh, b);
  float* dfc1 = a.region(Region::dfc1, b);
  float* dln = a.region(Region::dln_mlp, b);
  fc2.backward(*v.s_fc2, dres, dh);
  const float* act = v.a;
  if (v.a8 && !shared_) {  // dequantized into dfc1, then SwiGLU's backward runs in place
    v.a8->restore(dfc1);
    act = dfc1;
  }
  swiglu_backward(dfc1, dh, act, b.N, F_, Accum::write);
  {
    SplitSumsScope split(split_tp_, 2);  // gate, up
    fc1.backward(*v.s_fc1, dfc1, dln);   // every slice's input gradient, summed over the group
  }
  rmsnorm_backward(dres, norm.grad.data(), dln, x, norm.value.data(), v.rstd2, b.rows, D_,
                   Accum::add, take_grad_mode(norm));
}

void MlpBlock::share_activations(MlpActs* mlp, MoEActivations*) {
  if (mlp) own_ = MlpActs{};
  shared_ = mlp;
}

void MlpBlock::set_fp32_reference(bool on) {
  fc1.set_fp32_reference(on);
  fc2.set_fp32_reference(on);
}

void MlpBlock::set_swiglu_input(SwigluInput s, ScaleRounding rounding) {
  swiglu_ = s;
  rounding_ = rounding;
}

void MlpBlock::parameters(std::vector<Parameter*>& out) {
  for (Parameter* p : {&norm, &fc1.weight, &fc2.weight}) out.push_back(p);
}

void MlpBlock::layers(std::vector<Linear*>& linears, std::vector<GroupedLinear*>&) {
  linears.push_back(&fc1);
  linears.push_back(&fc2);
}

size_t MlpBlock::held_bytes() const {
  return shared_ ? 0 : own_.s_fc1.held_bytes() + own_.s_fc2.held_bytes();
}

size_t MlpBlock::activation_bytes() const {
  const MlpActs& m = own_;
  return (m.ln2.size() + m.rstd2.size() + m.fc1_out.size() + m.h.size()) * sizeof(float) +
         m.fc1_out8.bytes();
}

// ---- mixture of experts -----------------------------------------------------------------------

struct MoeBlock::View {
  float *ln2, *rstd2, *branch;
};

MoeBlock::MoeBlock(const BlockContext& c, int layer) : FeedForward(c, layer) {
  const ModelConfig& cfg = c.cfg;
  MXT_CHECK(c.par.tp_size() == 1 || c.shard.split(), "tensor parallelism on an MoE model needs "
            "sequence parallelism (each rank routes its own share of the tokens)");
  const std::string p = "layers." + std::to_string(layer) + ".mlp";
  const LinearPrecision p1 = c.precision(p + ".experts.fc1");  // the description's order
  const LinearPrecision p2 = c.precision(p + ".experts.fc2");
  // Under expert parallelism this rank's E / ep experts (nn/moe.h).
  const int64_t E = cfg.moe_num_experts, Fe = cfg.expert_d_ff(), D = D_;
  experts = MoELayer(p, D, Fe, E, cfg.moe_top_k, p1, p2, c.par.ep, c.stats, c.par.etp);
  c.init(experts.router, cfg.init_std);
  c.init(experts.fc1.weight, cfg.init_std, expert_split(c.par, {E, 2 * Fe, D}, 1, 2));
  c.init(experts.fc2.weight, c.std_out(), expert_split(c.par, {E, D, Fe}, 2, 1));
  // Under sequence parallelism the group's shards make one micro-batch (nn/moe.h).
  if (c.shard.split()) experts.set_token_group(c.shard.group);
  experts.fc1.set_rounding_clock(c.clock);
  experts.fc2.set_rounding_clock(c.clock);
}

// ln2 is always the block's (the router's backward reads it).
MoeBlock::View MoeBlock::view(const TokenRows& b, Arena& a) {
  MlpActs& M = acts();
  View v{};
  v.rstd2 = grow(M.rstd2, b.rows);
  v.branch = a.region(Region::mlp_branch, b);
  v.ln2 = grow(M.ln2, b.N * D_);
  return v;
}

void MoeBlock::reserve(const TokenRows& b, Arena& a) {
  view(b, a);
  experts.reserve(b.N);
}

double MoeBlock::forward(const float* x, const TokenRows& b, float* out, Arena& a) {
  const View v = view(b, a);
  rmsnorm_forward(v.ln2, v.rstd2, x, norm.value.data(), b.rows, D_, eps_);
  const double aux = experts.forward(v.ln2, b.rows, v.branch);  // this rank's rows
  residual_forward(out, x, v.branch, b.rows * D_);
  return aux;
}

void MoeBlock::recompute(const float* x, const TokenRows& b, Arena& a) {
  const View v = view(b, a);
  rmsnorm_forward(v.ln2, v.rstd2, x, norm.value.data(), b.rows, D_, eps_);
  experts.recompute(v.ln2, b.rows, v.branch);
}

void MoeBlock::backward(float* dres, const float* x, const TokenRows& b, float daux, Arena& a) {
  const View v = view(b, a);
  float* dln = a.region(Region::dln_mlp, b);
  experts.backward(dres, daux, dln, Accum::write);
  rmsnorm_backward(dres, norm.grad.data(), dln, x, norm.value.data(), v.rstd2, b.rows, D_,
                   Accum::add, take_grad_mode(norm));
}

void MoeBlock::share_activations(MlpActs* mlp, MoEActivations* moe) {
  if (mlp) own_ = MlpActs{};
  shared_ = mlp;
  experts.share_activations(moe);
}

void MoeBlock::parameters(std::vector<Parameter*>& out) {
  for (Parameter* p : {&norm, &experts.router, &experts.fc1.weight, &experts.fc2.weight})
    out.push_back(p);
}

void MoeBlock::layers(std::vector<Linear*>&, std::vector<GroupedLinear*>& grouped) {
  grouped.push_back(&experts.fc1);
  grouped.push_back(&experts.fc2);
}

size_t MoeBlock::held_bytes() const { return shared_ ? 0 : experts.held_bytes(); }

size_t MoeBlock::activation_bytes() const {
  const MlpActs& m = own_;
  return (m.ln2.size() + m.rstd2.size() + m.fc1_out.size() + m.h.size()) * sizeof(float) +
         m.fc1_out8.bytes() + (shared_ ? 0 : experts.activation_bytes());
}

// ---- head -------------------------------------------------------------------------------------

LmHead::LmHead(const BlockContext& c)
    : D_(c.cfg.d_model), V_(c.cfg.vocab_size), eps_(c.cfg.rms_eps) {
  init_ones(norm, "final_norm.gain", D_);
  lm_head = Linear("lm_head", D_, V_, false, c.precision("lm_head"));
  c.init(lm_head.weight, c.cfg.init_std);
  lm_head.set_rounding_clock(c.clock);
}

float* LmHead::input(const TokenRows& b, Arena& a) {
  return input_buffer(lm_head, ln_, b.rows * D_, a.region(Region::head_in, b));
}

void LmHead::reserve(const TokenRows& b, Arena& a) {
  input(b, a);
  grow(rstd_, b.rows);
  grow(logits_, b.rows * V_);
}

double LmHead::forward(const float* x, const int32_t* targets, const TokenRows& b, Arena& a) {
  float* ln = input(b, a);
  rmsnorm_forward(ln, grow(rstd_, b.rows), x, norm.value.data(), b.rows, D_, eps_);
  lm_head.forward(ln, b.rows, grow(logits_, b.rows * V_), saved_);
  // Softmax in place: logits_ holds the probabilities from here on (without targets it keeps
  // the logits).
  return targets ? crossentropy_forward(logits_.data(), nullptr, logits_.data(), targets, b.rows,
                                        V_)
                 : 0.0;
}

void LmHead::backward(float* dres, const float* x, const int32_t* targets, const TokenRows& b,
                      float scale, Arena& a) {
  // logits_ holds the probabilities; turn them into dlogits in place.
  crossentropy_backward(logits_.data(), logits_.data(), targets, b.rows, V_, scale);
  float* dln = a.region(Region::dln_head, b);
  lm_head.backward(saved_, logits_.data(), dln);
  rmsnorm_backward(dres, norm.grad.data(), dln, x, norm.value.data(), rstd_.data(), b.rows, D_,
                   Accum::write, take_grad_mode(norm));
}

void LmHead::logits_of(const float* x, int64_t rows, float* logits, const TokenRows& b,
                       Arena& a) {
  float* ln = input(b, a);
  rmsnorm_forward(ln, grow(rstd_, b.rows), x, norm.value.data(), rows, D_, eps_);
  lm_head.forward(ln, rows, logits, saved_);
}

void LmHead::parameters(std::vector<Parameter*>& out) {
  out.push_back(&norm);
  out.push_back(&lm_head.weight);
}

size_t LmHead::activation_bytes() const {
  return (ln_.size() + rstd_.size() + logits_.size()) * sizeof(float);
}

}  // namespace mxtrain
