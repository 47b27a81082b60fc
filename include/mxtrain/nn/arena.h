// mxtrain/nn/arena.h — where a model's activations live between forward and backward, and
// the scratch its blocks share (docs/design.md, "Saved for backward", "Activation recompute").
//
// A block keeps what its backward reads in its own activation set (nn/blocks.h: AttnActs,
// MlpActs, an MoE layer's MoEActivations) and writes what dies within a pass into a Region of
// the arena, shared by every block. The arena holds:
//   - the residual stream: the input of each layer and the MLP's input after its attention
//     (resid, resid_mid: [rows, D]), and its gradient [rows, D];
//   - without recompute, the shared scratch: one Linear input that the Linear copies (the
//     norms' and SwiGLU's outputs: in_*), a branch output before the residual add, and the
//     backward's scratch gradients;
//   - with recompute (Recompute), one arena of N × max(8D, 2F + max(F, D)) floats in columns
//     of N rows that holds the forward's scratch, the recomputed tensors and the backward's
//     gradients: the MLP phases use [a = dfc1 = branch : 2F][ln2 = h = dh = dln : max(F, D)]
//     (fc2 writes its output over a, dead by then), the attention phases [qkv : 3D][atty : D]
//     [ln1 = branch = dbranch : D][dqkv : 3D], dln over qkv once attention's backward has read
//     it; and the activation sets the recomputed blocks share (attention: every block's,
//     layer: every block's and resid_mid);
//   - for inference (set_inference), the shared sets of `layer` and one residual-stream
//     buffer that every block updates in place: nothing is kept for a backward.
// A region is reused only once what was there is dead (the order is in nn/transformer.cc).
// Buffers grow to a pass's size and are never shrunk below it (a smaller B·T reuses them).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mxtrain/aligned.h"
#include "mxtrain/nn/blocks.h"

namespace mxtrain {

struct MoEActivations;  // nn/moe.h

class Arena {
 public:
  // Scratch a pass writes and forgets: [N, width] (N: all the micro-batch's tokens) unless
  // said [rows, width] (rows: this rank's share under sequence parallelism). D = d_model,
  // Dl = D / tp, F = the dense MLP's d_ff / tp.
  enum class Region : uint8_t {
    attn_in,      // RMSNorm output read by qkv, when qkv keeps its own copy [N, D]
    qkv,          // qkv's output, recomputed (recompute only) [N, 3Dl]
    atty,         // attention's output, recomputed (recompute only) [N, Dl]
    attn_branch,  // proj's output [rows, D]
    mlp_in,       // RMSNorm output read by fc1, when fc1 keeps its own copy [N, D]
    fc1_out,      // fc1's output, when SwiGLU's input is kept in FP8 [N, 2F]
    fc2_in,       // SwiGLU's output read by fc2, when fc2 keeps its own copy [N, F]
    mlp_branch,   // fc2's (the experts') output [rows, D]
    head_in,      // the final RMSNorm's output, when lm_head keeps its own copy [rows, D]
    dln_mlp,      // gradient of the MLP's RMSNorm output [rows, D]
    dln_attn,     // of the attention's [rows, D]
    dln_head,     // of the final one [rows, D]
    dbranch,      // of attention's output [N, Dl]
    dqkv,         // of qkv's output [N, 3Dl]
    dfc1,         // of fc1's output [N, 2F]
    dh,           // of SwiGLU's output [N, F]
  };

  Arena(const ModelConfig& cfg, int tp);
  ~Arena();

  // Activation recompute: frees what the mode does not use and makes the shared sets.
  void set_recompute(Recompute r);
  Recompute recompute() const { return recompute_; }
  // Inference (one way): every block's activations shared, the residual stream in place.
  void set_inference();
  bool inference() const { return inference_; }
  // The sets the blocks share (null when they keep their own): attention blocks' with any
  // recompute or in inference; MLP (and MoE) blocks' under the whole-layer recompute or in
  // inference.
  AttnActs* shared_attention() { return shared_attn_.get(); }
  MlpActs* shared_mlp() { return shared_mlp_.get(); }
  MoEActivations* shared_moe() { return shared_moe_.get(); }

  // Sizes the residual stream of `layers` layers, the shared forward scratch and the
  // recompute arena for a pass (and with `backward`, the backward's scratch).
  void reserve(const TokenRows& b, size_t layers, bool backward = false);
  // The residual stream [rows, D]: resid(l) is the input of layer l (resid(L): the final
  // norm's), resid_mid(l) the MLP's input in layer l. In inference every one is the same.
  float* resid(size_t l);
  float* resid_mid(size_t l, const TokenRows& b);
  // Its gradient [rows, D]: the final norm's backward writes it, every block adds its share.
  float* dres(const TokenRows& b);
  float* region(Region r, const TokenRows& b);
  // Bytes of the residual stream kept for backward (FP32).
  size_t stream_bytes() const;

 private:
  float* column(const TokenRows& b, int64_t col);
  int64_t D_, Dl_, F_, width_;
  int64_t mlp_h_, atty_, attn_branch_, dqkv_;  // the recompute arena's columns
  bool moe_ = false;  // the model has MoE blocks (a shared MoEActivations under `layer`)
  Recompute recompute_ = Recompute::none;
  bool inference_ = false;
  std::vector<FloatBuffer> resid_, resid_mid_;
  FloatBuffer shared_mid_, dres_;
  FloatBuffer lin_in_, branch_, dln_, dbranch_, dqkv_buf_, dfc1_, dh_;  // without recompute
  FloatBuffer arena_;                                                   // with recompute
  std::unique_ptr<AttnActs> shared_attn_;
  std::unique_ptr<MlpActs> shared_mlp_;
  std::unique_ptr<MoEActivations> shared_moe_;
};

}  // namespace mxtrain
