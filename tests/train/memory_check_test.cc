// Tests for train/memory_check.h: the estimate's parameter count matches the model that is
// built, impossible configs are refused with the estimate and the limit, and the cgroup
// limit is read.
#include "mxtrain/train/memory_check.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/transformer.h"

namespace mxtrain {
namespace {

TrainConfig config(const std::string& model, const std::string& training = "") {
  return parse_config("model: {" + model + "}\ntraining: {" + training +
                          "}\nprecision: {recipe: mxfp8}\n",
                      "m.yaml");
}

TEST(MemoryCheck, ParameterCountMatchesTheBuiltModel) {
  for (const std::string& model :
       {std::string("d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, max_seq_len: 32"),
        std::string("d_model: 32, n_layers: 3, n_heads: 2, d_ff: 64, max_seq_len: 32, "
        "moe: {num_experts: 4, top_k: 2, d_ff: 48, every: 2}")}) {
    TrainConfig c = config(model, "seq_len: 32, micro_batch_size: 2");
    GPT gpt(c.model, [](const ModuleInfo&) { return LinearPrecision{}; }, 1);
    EXPECT_EQ(estimate_training_memory(c).parameters, double(gpt.num_parameters())) << model;
  }
}

TEST(MemoryCheck, EstimateAddsUp) {
  TrainConfig c = config("d_model: 64, n_layers: 2, n_heads: 2, d_ff: 128, max_seq_len: 32",
                         "seq_len: 32, micro_batch_size: 4");
  c.precision.swiglu_input = SwigluInput::fp32;
  const MemoryEstimate e = estimate_training_memory(c);
  EXPECT_EQ(e.param_grad_bytes, 8 * e.parameters);
  EXPECT_EQ(e.optimizer_bytes, 8 * e.parameters);
  EXPECT_EQ(e.quantized_bytes, e.parameters);  // mxfp8: one byte per weight
  // Activations: 128 tokens x 2 layers x (7*64 + 2 + 3*128) floats + logits and grads.
  EXPECT_EQ(e.activation_bytes, 4.0 * 128 * 2 * (7 * 64 + 2 + 3 * 128) + 8.0 * 128 * 256);
  EXPECT_EQ(e.workspace_bytes, 8.0 * 128 * 256);
  // swiglu_input fp8: the fc1 output (2 x 128 floats per token) takes 1 + 1/32 bytes each;
  // auto (the default) does the same under mxfp8, and keeps FP32 with defer on or under bf16.
  const double fp8_act = e.activation_bytes - 128.0 * 2 * 2 * 128 * (4 - 33 / 32.0);
  c.precision.swiglu_input = SwigluInput::fp8;
  EXPECT_EQ(estimate_training_memory(c).activation_bytes, fp8_act);
  c.precision.swiglu_input = SwigluInput::follow_fc1;
  EXPECT_EQ(estimate_training_memory(c).activation_bytes, fp8_act);
  c.precision.defer_backward_quant = true;
  EXPECT_EQ(estimate_training_memory(c).activation_bytes, e.activation_bytes);
  c.precision.defer_backward_quant = false;
  c.precision.recipe = get_recipe("bf16");
  EXPECT_EQ(estimate_training_memory(c).activation_bytes, e.activation_bytes);
  // swiglu_input fp4 under a 4-bit recipe: 1/2 + 1/16 bytes each (NVFP4), 1/2 + 1/32 (MXFP4).
  c.precision.swiglu_input = SwigluInput::fp4;
  c.precision.recipe = get_recipe("nvfp4");
  EXPECT_EQ(estimate_training_memory(c).activation_bytes,
            e.activation_bytes - 128.0 * 2 * 2 * 128 * (4 - 9 / 16.0));
  c.precision.recipe = get_recipe("mxfp4");
  EXPECT_EQ(estimate_training_memory(c).activation_bytes,
            e.activation_bytes - 128.0 * 2 * 2 * 128 * (4 - 17 / 32.0));
}

TEST(MemoryCheck, ImpossibleConfigsAreRefusedWithEstimateAndLimit) {
  const MemoryLimit limit{24.0 * (1 << 30), "physical memory"};
  const std::string base = "n_heads: 2, d_ff: 384, max_seq_len: 128";
  for (const std::string& model : std::vector<std::string>{
           "d_model: 128, n_layers: 1000000, " + base,
           "d_model: 1000000, n_layers: 4, n_heads: 4, d_ff: 384, max_seq_len: 128",
           "d_model: 16384, n_layers: 4, " + base}) {
    try {
      check_training_memory(config(model), limit);
      ADD_FAILURE() << "not refused: " << model;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("model does not fit in memory: it needs at least ", 0), 0u) << msg;
      EXPECT_NE(msg.find("but the limit is 24.0 GiB (physical memory); shrink the model or "
                         "the micro-batch, or pass --ignore-memory-check"),
                std::string::npos)
          << msg;
    }
  }
  // The shipped configs fit in 24 GiB.
  check_training_memory(config("d_model: 128, n_layers: 4, " + base), limit);
}

TEST(MemoryCheck, CgroupLimitIsTheSmallerOne) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/mxt_memory_max_test";
  std::ofstream(path) << "1073741824\n";
  MemoryLimit l = machine_memory_limit(path);
  EXPECT_EQ(l.bytes, 1073741824.0);
  EXPECT_EQ(l.source, "cgroup limit " + path);
  std::ofstream(path) << "max\n";
  l = machine_memory_limit(path);
  EXPECT_EQ(l.source, "physical memory");
  EXPECT_GT(l.bytes, 1073741824.0);
  std::remove(path.c_str());
}

TEST(MemoryCheck, FormatBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1.5 * (1 << 30)), "1.5 GiB");
}

}  // namespace
}  // namespace mxtrain
