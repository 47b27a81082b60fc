// training.recompute through the trainer (train/trainer.h): the same losses, validation losses
// and final weights as `recompute: none`, bit for bit, with less held for backward.
#include <gtest/gtest.h>

#include <cstring>

#include "mxtrain/train/config.h"
#include "mxtrain/train/memory_check.h"
#include "mxtrain/train/trainer.h"

namespace mxtrain {
namespace {

TrainConfig tiny(const std::string& recompute, bool moe) {
  std::string y = R"(
model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, max_seq_len: 32)";
  if (moe) y += ", moe: {num_experts: 4, top_k: 2, d_ff: 32}";
  y += "}\ntraining: {steps: 6, seq_len: 32, micro_batch_size: 4, grad_accum: 2, lr: 0.01, "
       "warmup_steps: 2, eval_every: 3, eval_batches: 2, recompute: " + recompute +
       "}\nprecision: {recipe: mxfp8}\n";
  return parse_config(y, "recompute-test");
}

TEST(TrainerRecompute, LossesAreBitIdenticalToNone) {
  for (bool moe : {false, true}) {
    TrainOptions o;
    o.progress = false;
    o.print_decisions = false;
    const TrainSummary none = run_training(tiny("none", moe), o);
    ASSERT_EQ(none.losses.size(), 6u);
    for (const char* r : {"attention", "layer"}) {
      const TrainSummary s = run_training(tiny(r, moe), o);
      ASSERT_EQ(s.losses.size(), none.losses.size()) << r;
      for (size_t i = 0; i < s.losses.size(); ++i)
        EXPECT_EQ(std::memcmp(&s.losses[i], &none.losses[i], sizeof(double)), 0)
            << r << " moe=" << moe << " step " << i + 1 << ": " << s.losses[i] << " vs "
            << none.losses[i];
      ASSERT_EQ(s.val_losses.size(), 2u);
      for (size_t i = 0; i < s.val_losses.size(); ++i)
        EXPECT_EQ(s.val_losses[i].second, none.val_losses[i].second) << r << " moe=" << moe;
      EXPECT_LT(s.held_bytes, none.held_bytes) << r << " moe=" << moe;
    }
  }
}

// The start-up memory estimate counts what each mode keeps: one layer's activations plus the
// layers' inputs under `layer`; the MLPs' too under `attention`.
TEST(TrainerRecompute, MemoryEstimateFollowsTheMode) {
  for (bool moe : {false, true}) {
    const MemoryEstimate none = estimate_training_memory(tiny("none", moe));
    const MemoryEstimate attn = estimate_training_memory(tiny("attention", moe));
    const MemoryEstimate layer = estimate_training_memory(tiny("layer", moe));
    EXPECT_LT(attn.activation_bytes, none.activation_bytes);
    EXPECT_LT(layer.activation_bytes, attn.activation_bytes);
    EXPECT_EQ(layer.param_grad_bytes, none.param_grad_bytes);
    EXPECT_EQ(layer.workspace_bytes, none.workspace_bytes);
  }
}

}  // namespace
}  // namespace mxtrain
