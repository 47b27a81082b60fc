// nn/arena.cc — the model's activation memory (mxtrain/nn/arena.h): the residual stream, the
// shared scratch without recompute, the column arena with it, and the shared activation sets.
#include "mxtrain/nn/arena.h"

#include <algorithm>

#include "mxtrain/common.h"
#include "mxtrain/nn/moe.h"

namespace mxtrain {
namespace {

// Exactly n floats (a pass's size; resized when B·T changes).
float* grow(FloatBuffer& b, int64_t n) {
  if (b.size() != size_t(n)) b.resize(size_t(n));
  return b.data();
}
// At least n floats (a buffer several regions of different widths share).
float* at_least(FloatBuffer& b, int64_t n) {
  if (b.size() < size_t(n)) b.resize(size_t(n));
  return b.data();
}

}  // namespace

TokenRows token_rows(const SequenceShard& shard, int B, int T) {
  TokenRows b;
  b.B = B;
  b.T = T;
  b.N = int64_t(B) * T;
  shard.check(b.N);
  b.rows = shard.rows(b.N);
  b.first = shard.first(b.N);
  return b;
}

Arena::Arena(const ModelConfig& cfg, int tp)
    : D_(cfg.d_model), Dl_(cfg.d_model / tp), F_(cfg.d_ff / tp), moe_(cfg.moe_num_experts > 0) {
  // The recompute arena's columns (recompute runs with one rank: D and F are whole).
  const int64_t D = cfg.d_model, F = cfg.d_ff, mF = std::max<int64_t>(F, D);
  mlp_h_ = 2 * F;
  atty_ = 3 * D;
  attn_branch_ = 4 * D;
  dqkv_ = 5 * D;
  width_ = std::max(8 * D, 2 * F + mF);
}

Arena::~Arena() = default;

void Arena::set_recompute(Recompute r) {
  recompute_ = r;
  shared_attn_ = r != Recompute::none ? std::make_unique<AttnActs>() : nullptr;
  shared_mlp_ = r == Recompute::layer ? std::make_unique<MlpActs>() : nullptr;
  shared_moe_ = r == Recompute::layer && moe_ ? std::make_unique<MoEActivations>() : nullptr;
  // Buffers of the other modes, freed (reserve and region make what this one uses).
  if (r == Recompute::layer)
    for (FloatBuffer& m : resid_mid_) m = FloatBuffer();
  else
    shared_mid_ = FloatBuffer();
  if (r == Recompute::none) {
    arena_ = FloatBuffer();
  } else {
    for (FloatBuffer* b : {&lin_in_, &branch_, &dln_, &dbranch_, &dqkv_buf_, &dfc1_, &dh_})
      *b = FloatBuffer();
  }
}

void Arena::set_inference() {
  set_recompute(Recompute::layer);
  inference_ = true;
}

void Arena::reserve(const TokenRows& b, size_t layers, bool backward) {
  resid_.resize(inference_ ? 1 : layers + 1);
  for (FloatBuffer& r : resid_) grow(r, b.rows * D_);
  resid_mid_.resize(layers);
  if (recompute_ != Recompute::none) {
    grow(arena_, b.N * width_);
  } else {  // the Linear inputs [N, D] and [N, F] share one buffer: sized for both up front
    at_least(lin_in_, b.N * std::max(D_, F_));
  }
  if (!backward) return;
  dres(b);
  for (Region r : {Region::dln_mlp, Region::dbranch, Region::dqkv, Region::dfc1, Region::dh})
    region(r, b);
}

float* Arena::resid(size_t l) { return resid_[inference_ ? 0 : l].data(); }

float* Arena::resid_mid(size_t l, const TokenRows& b) {
  if (inference_) return resid_[0].data();
  return grow(recompute_ == Recompute::layer ? shared_mid_ : resid_mid_[l], b.rows * D_);
}

float* Arena::dres(const TokenRows& b) { return grow(dres_, b.rows * D_); }

float* Arena::column(const TokenRows& b, int64_t col) { return arena_.data() + b.N * col; }

float* Arena::region(Region r, const TokenRows& b) {
  const int64_t N = b.N, rows = b.rows;
  if (recompute_ != Recompute::none) {
    switch (r) {
      case Region::qkv:
      case Region::fc1_out:
      case Region::mlp_branch:
      case Region::head_in:
      case Region::dln_attn:
      case Region::dln_head:
      case Region::dfc1: return column(b, 0);
      case Region::atty: return column(b, atty_);
      case Region::attn_in:
      case Region::attn_branch:
      case Region::dbranch: return column(b, attn_branch_);
      case Region::mlp_in:
      case Region::fc2_in:
      case Region::dln_mlp:
      case Region::dh: return column(b, mlp_h_);
      case Region::dqkv: return column(b, dqkv_);
    }
  }
  switch (r) {
    case Region::attn_in:
    case Region::mlp_in:
    case Region::head_in: return at_least(lin_in_, N * D_);
    case Region::fc2_in: return at_least(lin_in_, N * F_);
    case Region::attn_branch:
    case Region::mlp_branch: return grow(branch_, rows * D_);
    case Region::dln_mlp:
    case Region::dln_attn:
    case Region::dln_head: return grow(dln_, rows * D_);
    case Region::dbranch: return grow(dbranch_, N * Dl_);
    case Region::dqkv: return grow(dqkv_buf_, N * 3 * Dl_);
    case Region::fc1_out:
    case Region::dfc1: return grow(dfc1_, N * 2 * F_);
    case Region::dh: return grow(dh_, N * F_);
    case Region::qkv:
    case Region::atty: break;
  }
  MXT_FAIL("internal: arena region ", int(r), " exists only under activation recompute");
}

size_t Arena::stream_bytes() const {
  size_t n = 0;
  for (const FloatBuffer& r : resid_) n += r.size();
  for (const FloatBuffer& m : resid_mid_) n += m.size();
  return n * sizeof(float);
}

}  // namespace mxtrain
