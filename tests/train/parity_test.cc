// MX training tracks BF16 (docs/numerics.md, "Parity with BF16"): a tiny GPT trained 40 steps
// on the fortunes text at four seeds per recipe; each MX recipe's final validation loss,
// averaged over the seeds, stays within kParityBound of BF16's average at the same seeds
// (same initial weights, same batches: the seeds pair the runs). The per-step loss bound of
// trainer_test alone would let a badly degraded MX recipe pass.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mxtrain/train/trainer.h"

namespace mxtrain {
namespace {

// The bound, from measurements of this config (40 steps, fortunes, AVX-512 machine): BF16's
// final validation loss spans 3.247-3.415 over seeds 1-5, a seed-to-seed spread of +-2.5%
// around its mean. An MX recipe paired with BF16 at the same seed differs by -0.6% to +1.7%
// at one seed, and on the mean of seeds 1-4 by +0.30% (mxfp8 3.3368 vs 3.3268), +0.43%
// (mxfp8-32x32) and +0.38% (mxfp8-e5m2grad); one seed's paired differences scatter by about
// 0.9%, so a mean of four by about 0.45%. 1.5% is some three of those, three fifths of the
// seed spread: every sound recipe passes, and a quantizer whose every scale is one too large
// (each product 2-4x off) fails at +2.1% to +2.4%. Subtler damage passes: with a mantissa
// bit dropped from every code the means moved +0.1% to +1.3% (docs/numerics.md has both).
constexpr double kParityBound = 0.015;

double mean_final_val_loss(const std::string& recipe) {
  double sum = 0;
  const std::vector<int> seeds{1, 2, 3, 4};
  for (int seed : seeds) {
    const TrainConfig c = parse_config(
        "model: {d_model: 64, n_layers: 2, n_heads: 2, d_ff: 128, max_seq_len: 64}\n"
        "training: {steps: 40, seq_len: 64, micro_batch_size: 8, lr: 0.01, warmup_steps: 5, "
        "eval_every: 0, eval_batches: 8, seed: " + std::to_string(seed) + "}\n"
        "precision: {recipe: " + recipe + "}\n",
        "parity-test");
    TrainOptions o;
    o.progress = false;
    o.print_decisions = false;
    const TrainSummary s = run_training(c, o);
    EXPECT_EQ(s.skipped_steps, 0) << recipe << " seed " << seed;
    sum += s.final_val_loss;
  }
  return sum / double(seeds.size());
}

TEST(Parity, EveryMxRecipeStaysNearBf16) {
  omp_set_num_threads(1);  // a model this small runs faster on one thread than on two
  const double bf16 = mean_final_val_loss("bf16");
  // BF16 itself learned (ln 256 = 5.55 is a uniform byte model).
  EXPECT_GT(bf16, 2.8);
  EXPECT_LT(bf16, 3.6);
  for (const char* recipe :
       {"mxfp8", "mxfp8-32x32", "mxfp8-e5m2grad", "blockwise", "fp8-current", "fp8-delayed"}) {
    const double mx = mean_final_val_loss(recipe);
    const double rel = (mx - bf16) / bf16;
    std::printf("parity: %-15s mean final val loss %.4f, bf16 %.4f (%+.2f%%, bound %.1f%%)\n",
                recipe, mx, bf16, 100 * rel, 100 * kParityBound);
    EXPECT_LE(std::abs(rel), kParityBound)
        << recipe << ": mean final validation loss " << mx << " vs bf16 " << bf16;
  }
}

}  // namespace
}  // namespace mxtrain
