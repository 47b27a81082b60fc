// tests/nn/flops_test.cc — PaLM's FLOPs per token for the model as built (nn/flops.h): hand
// counts for the shapes of configs/tiny.yaml and configs/tiny-moe.yaml, the parameter count
// against the built model's, and MFU's arithmetic.
#include <gtest/gtest.h>

#include "mxtrain/common.h"
#include "mxtrain/nn/flops.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

// configs/tiny.yaml's model: V 256, d 128, 4 layers, 4 heads, d_ff 384; seq_len 128.
ModelConfig tiny_dense() {
  ModelConfig c;
  c.vocab_size = 256;
  c.d_model = 128;
  c.n_layers = 4;
  c.n_heads = 4;
  c.d_ff = 384;
  c.max_seq_len = 128;
  return c;
}

// configs/tiny-moe.yaml's model: the same with 4 experts of width 192, top-2, every layer.
ModelConfig tiny_moe() {
  ModelConfig c = tiny_dense();
  c.moe_num_experts = 4;
  c.moe_top_k = 2;
  c.moe_d_ff = 192;
  c.moe_every = 1;
  return c;
}

TEST(ModelFlops, TinyDenseMatchesTheHandCount) {
  const ModelFlops f = model_flops(tiny_dense(), 128);
  // Per layer: gains 2·128 = 256, qkv 3·128·128 = 49152, proj 128·128 = 16384,
  // fc1 2·384·128 = 98304, fc2 128·384 = 49152: 213248; 4 layers 852992;
  // + final gain 128 + lm_head 256·128 = 32768: N = 885888.
  EXPECT_EQ(f.n_params, 885888);
  EXPECT_EQ(f.embedding_params, 32768);
  EXPECT_EQ(f.param_flops_per_token, 6.0 * 885888);               // 5315328
  EXPECT_EQ(f.attention_flops_per_token, 12.0 * 4 * 128 * 128);   // 786432
  EXPECT_EQ(f.flops_per_token, 6101760.0);
}

TEST(ModelFlops, TinyMoeCountsTheRouterAndTopKExperts) {
  const ModelFlops f = model_flops(tiny_moe(), 128);
  // Per layer: gains 256, qkv 49152, proj 16384, router 4·128 = 512, and 2 of the 4 experts:
  // 2·(fc1 2·192·128 + fc2 128·192) = 2·73728 = 147456: 213760; 4 layers 855040;
  // + 128 + 32768: N = 887936.
  EXPECT_EQ(f.n_params, 887936);
  EXPECT_EQ(f.flops_per_token, 6.0 * 887936 + 786432);  // 6114048
  // A shorter sequence changes only the attention term.
  EXPECT_EQ(model_flops(tiny_moe(), 64).flops_per_token, 6.0 * 887936 + 12.0 * 4 * 128 * 64);
}

TEST(ModelFlops, PeerShapeMatchesTheCountInTheDocs) {
  // configs/peer256.yaml (docs/config.md, "MFU"): d 256, 4 layers, d_ff 672, V 256, T 256.
  ModelConfig c = tiny_dense();
  c.d_model = 256;
  c.d_ff = 672;
  c.max_seq_len = 256;
  const ModelFlops f = model_flops(c, 256);
  EXPECT_EQ(f.n_params, 4 * (2 * 256 + 4 * 256 * 256 + 3 * 256 * 672) + 256 + 256 * 256);
  EXPECT_EQ(f.n_params, 3180800);
  EXPECT_EQ(f.flops_per_token, 22230528.0);  // 6N = 19084800, 12·4·256·256 = 3145728
}

TEST(ModelFlops, MoeEveryOtherLayerCountsDenseLayersAsDense) {
  ModelConfig c = tiny_moe();
  c.moe_every = 2;  // layers 1 and 3 are MoE, 0 and 2 dense
  EXPECT_EQ(model_flops(c, 128).n_params, (885888 + 887936) / 2);
}

TEST(ModelFlops, NIsTheBuiltModelsParametersLessTheLookupAndTheIdleExperts) {
  for (bool moe : {false, true}) {
    const ModelConfig c = layer_test::tiny_model({.moe_d_ff = moe ? 24 : 0});
    GPT model(c, layer_test::recipe_resolver("bf16"), 1);
    int64_t idle = 0;  // experts a token does not visit: (E - k) · 3 · d · F' per MoE layer
    if (moe)
      idle = int64_t(c.n_layers) * (c.moe_num_experts - c.moe_top_k) * 3 * c.d_model *
             c.expert_d_ff();
    EXPECT_EQ(model_flops(c, c.max_seq_len).n_params,
              model.num_parameters() - int64_t(c.vocab_size) * c.d_model - idle)
        << (moe ? "moe" : "dense");
  }
}

TEST(ModelFlops, BadSequenceLengthIsAnErrorNamingIt) {
  try {
    model_flops(tiny_dense(), 129);
    FAIL() << "no error for seq_len > max_seq_len";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.seq_len"), std::string::npos) << e.what();
  }
}

TEST(Mfu, IsAchievedFlopsOverThePeak) {
  // 20000 tokens/s x 6101760 FLOPs = 122.0352 GFLOP/s; against 459 GFLOP/s: 26.587%.
  EXPECT_DOUBLE_EQ(mfu(20000, 6101760, 459), 20000.0 * 6101760 / 459e9);
  EXPECT_EQ(mfu(20000, 6101760, 0), 0.0);
}

}  // namespace
}  // namespace mxtrain
