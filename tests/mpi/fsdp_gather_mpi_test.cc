// tests/mpi/fsdp_gather_mpi_test.cc — FSDP weight all-gather on real ranks (dist/fsdp.h).
//
// For every recipe and gather mode the weight a layer receives through its FSDP provider is
// byte-identical to quantizing the whole tensor on one process — on shapes whose rows are not
// a multiple of 32 x world and on expert (3-D) weights — and a layer's forward/backward under
// FSDP gives bit-identical outputs to the same layer without FSDP. Bytes per step equal the
// formulas of docs/design.md, "Bytes per step" exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dist/gather_format.h"
#include "mxtrain/common.h"
#include "mxtrain/dist/fsdp.h"

namespace mxtrain::dist {
namespace {

Comm& world() { return Comm::world(); }

// A recipe and gather mode under test.
struct GatherSetup {
  std::string recipe;
  std::string mode;  // bf16: reshard | keep; mxfp8: on-demand | all; 32x32: ""
  std::string label() const { return recipe + (mode.empty() ? "" : "/" + mode); }
  FsdpOptions options() const {
    FsdpOptions o;
    if (recipe == "bf16") o.bf16_reshard_after_forward = mode == "reshard";
    if (recipe == "mxfp8") o.mxfp8_gather = parse_mxfp8_gather(mode);
    return o;
  }
  LinearPrecision precision() const {
    LinearPrecision p;
    p.recipe = get_recipe(recipe);
    return p;
  }
};
const GatherSetup kSetups[] = {{"bf16", "reshard"}, {"bf16", "keep"}, {"mxfp8", "on-demand"},
                         {"mxfp8", "all"}, {"mxfp8-32x32", ""}};

void fill(std::span<float> v, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = nd(rng) * std::ldexp(1.f, int((int64_t(i) / cols * 5 + int64_t(i) % cols / 32) % 13) - 6);
}

void expect_same(const ScaledTensor& a, const ScaledTensor& b, const std::string& what) {
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.cols, b.cols) << what;
  EXPECT_EQ(a.layout, b.layout) << what;
  EXPECT_TRUE(a.data == b.data) << what << ": data bytes differ";
  EXPECT_TRUE(a.scales == b.scales) << what << ": scale bytes differ";
}

using testutil::gather_format;

// Compares the copies `kind` fills with the one-process reference of the full weight.
void expect_cache_matches(const QuantizedWeight& got, const std::vector<float>& full,
                          const std::vector<int64_t>& shape, int64_t group, CopySet kind,
                          const QuantConfig& cfg, const std::string& what) {
  const auto L1 = ShardLayout::make(shape, 1);
  QuantizedWeight want;
  quantize_group_reference(L1, kind, gather_format(kind, cfg), full.data(), group, want);
  ASSERT_TRUE(got.has_all(kind)) << what;
  if (kind.has(Copy::bf16)) {
    EXPECT_TRUE(got.bf16 == want.bf16) << what;
  }
  if (kind.has(Copy::rowwise)) expect_same(got.rowwise, want.rowwise, what + " rowwise");
  if (kind.has(Copy::colwise)) expect_same(got.colwise, want.colwise, what + " colwise");
  if (kind.has(Copy::tile)) expect_same(got.tile, want.tile, what + " tile");
}

// What each setup gathers (docs/design.md, "Bytes per step").
CopySet forward_kind(const GatherSetup& s) {
  if (s.recipe == "bf16") return {Copy::bf16};
  if (s.recipe == "mxfp8-32x32") return {Copy::tile};
  return s.mode == "all" ? CopySet{Copy::rowwise, Copy::colwise} : CopySet{Copy::rowwise};
}
CopySet backward_kind(const GatherSetup& s) {
  if (s.recipe == "mxfp8") return {Copy::colwise};
  return forward_kind(s);
}

// Whether the forward's copies serve dgrad and are kept (post_forward does not reshard).
bool kept_from_forward(const GatherSetup& s) {
  return s.mode == "keep" || s.mode == "all" || s.recipe == "mxfp8-32x32";
}

const std::vector<std::vector<int64_t>> kShapes = {{33, 65}, {100, 64}, {31, 7}, {257, 96}};

TEST(FsdpGather, ProvidedWeightsAreByteIdenticalToOneProcessQuantization) {
  for (const GatherSetup& s : kSetups) {
    std::vector<std::unique_ptr<Linear>> layers;
    std::vector<std::vector<float>> full;
    for (size_t i = 0; i < kShapes.size(); ++i) {
      layers.push_back(std::make_unique<Linear>("l" + std::to_string(i), kShapes[i][1],
                                                kShapes[i][0], false, s.precision()));
      fill(layers.back()->weight.value, kShapes[i][1], uint32_t(17 + i));
      full.emplace_back(layers.back()->weight.value.begin(), layers.back()->weight.value.end());
    }
    Fsdp fsdp(world(), s.options());
    for (auto& l : layers) fsdp.add(*l);
    const QuantConfig cfg = s.precision().recipe.role(Role::weight).quant_config();
    for (int i = 0; i < fsdp.num_modules(); ++i) {
      const std::string what = s.label() + " " + fsdp.layout(i).describe();
      EXPECT_TRUE(layers[size_t(i)]->weight.value.empty()) << "full value freed after sharding";
      fsdp.fetch(i, Use::forward);
      expect_cache_matches(layers[size_t(i)]->weight_cache(), full[size_t(i)], kShapes[size_t(i)],
                           0, forward_kind(s), cfg, what + " forward");
      fsdp.post_forward(i);
    }
    for (int i = fsdp.num_modules() - 1; i >= 0; --i) {
      const std::string what = s.label() + " " + fsdp.layout(i).describe();
      fsdp.fetch(i, Use::dgrad);
      expect_cache_matches(layers[size_t(i)]->weight_cache(), full[size_t(i)], kShapes[size_t(i)],
                           0, backward_kind(s), cfg, what + " backward");
      fsdp.post_backward(i);
      // Copies the forward kept (they serve dgrad) stay for the step's next micro-batch;
      // the others are freed after backward.
      if (kept_from_forward(s))
        EXPECT_GT(layers[size_t(i)]->weight_cache().bytes(), 0u) << "kept after backward";
      else
        EXPECT_EQ(layers[size_t(i)]->weight_cache().bytes(), 0u) << "freed after backward";
    }
    fsdp.reduce_gradients();  // the step's end frees every kept copy
    for (auto& l : layers)
      EXPECT_EQ(l->weight_cache().bytes(), 0u) << s.label() << ": freed at the step's end";
  }
}

// Gradient accumulation with copies kept from forward (they serve dgrad): the micro-batches
// of one step gather and quantize the shard once; the next version gathers again.
TEST(FsdpGather, KeptCopiesServeEveryMicroBatchOfTheStep) {
  for (const GatherSetup& s : kSetups) {
    if (!kept_from_forward(s)) continue;
    Linear l("l", 64, 96, false, s.precision());
    fill(l.weight.value, 64, 5);
    Fsdp fsdp(world(), s.options());
    fsdp.add(l);
    for (int step = 0; step < 2; ++step) {
      for (int micro = 0; micro < 3; ++micro) {
        fsdp.fetch(0, Use::forward);
        fsdp.post_forward(0);
        fsdp.fetch(0, Use::dgrad);
        fsdp.post_backward(0);
      }
      fsdp.reduce_gradients();
      EXPECT_EQ(l.weight_cache().bytes(), 0u) << s.label();
      fsdp.bump_versions();
    }
    EXPECT_EQ(fsdp.stats().allgather_calls, 2) << s.label() << ": one gather per step";
    EXPECT_EQ(fsdp.stats().shard_quantizations, 2) << s.label();
  }
}

// Expert weights [E, out, in] through the packing and a real all-gather (the GroupedLinear
// provider wiring is covered with the layer in fsdp_train_mpi_test.cc).
TEST(FsdpGather, ExpertWeightsAreByteIdenticalPerExpert) {
  const int W = world().size(), r = world().rank();
  const CopySet kinds[] = {{Copy::bf16}, {Copy::rowwise}, {Copy::colwise},
                           {Copy::rowwise, Copy::colwise}, {Copy::tile}};
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {3, 33, 65}, {2, 31, 7}, {4, 64, 96}, {5, 1, 40}}) {
    const auto L = ShardLayout::make(shape, W);
    std::vector<float> full(size_t(shape[0] * shape[1] * shape[2]));
    fill(full, shape[2], 99);
    std::vector<float> shard(size_t(L.shard_numel()));
    slice_shard(L, r, full.data(), shard.data());
    for (CopySet k : kinds) {
      const QuantConfig cfg{};
      const size_t P = packed_bytes(L, k);
      std::vector<uint8_t> send(P), recv(P * size_t(W));
      pack_shard(L, r, shard.data(), k, gather_format(k, cfg), send.data());
      world().allgather(send.data(), recv.data(), P);
      for (int64_t g = 0; g < L.groups; ++g) {
        QuantizedWeight got;
        unpack_group(L, k, gather_format(k, cfg), recv.data(), g, got);
        expect_cache_matches(got, full, shape, g, k, cfg,
                             L.describe() + " " + k.name() + " expert " +
                                 std::to_string(g));
      }
    }
  }
}

// A layer run under FSDP (provider path) gives bit-identical y, dx and dW to the same layer
// holding its whole weight, because it multiplies the same quantized bytes.
TEST(FsdpGather, LayerOutputsMatchUnshardedLayerBitForBit) {
  const int64_t T = 37, in = 65, out = 100;
  std::vector<float> x(size_t(T * in)), dy(size_t(T * out));
  fill(x, in, 5);
  fill(dy, out, 6);
  for (const GatherSetup& s : kSetups) {
    Linear ref("ref", in, out, true, s.precision()), sh("sh", in, out, true, s.precision());
    fill(ref.weight.value, in, 7);
    fill(ref.bias.value, out, 8);
    sh.weight.value = ref.weight.value;
    sh.bias.value = ref.bias.value;
    Fsdp fsdp(world(), s.options());
    const int m = fsdp.add(sh);
    std::vector<float> y_ref(size_t(T * out)), y_sh(size_t(T * out));
    std::vector<float> dx_ref(size_t(T * in)), dx_sh(size_t(T * in));
    LinearSaved a, b;
    ref.forward(x.data(), T, y_ref.data(), a);
    sh.forward(x.data(), T, y_sh.data(), b);
    fsdp.post_forward(m);
    ref.backward(a, dy.data(), dx_ref.data());
    sh.backward(b, dy.data(), dx_sh.data());
    fsdp.post_backward(m);
    EXPECT_TRUE(y_ref == y_sh) << s.label() << ": forward differs";
    EXPECT_TRUE(dx_ref == dx_sh) << s.label() << ": dgrad differs";
    EXPECT_TRUE(ref.weight.grad == sh.weight.grad) << s.label() << ": wgrad differs";
    EXPECT_TRUE(ref.bias.grad == sh.bias.grad) << s.label() << ": bias grad differs";
  }
}

// Bytes per step (docs/design.md, "Bytes per step"), for weights whose `in` is a multiple
// of 32. N = Σ padded element
// counts (rows padded to a multiple of 32·world; equal to out·in for these shapes when
// out is a multiple of 32·world).
TEST(FsdpGather, BytesPerStepMatchFormulas) {
  const int W = world().size();
  const std::vector<std::vector<int64_t>> shapes = {{64, 64}, {96, 128}, {256, 32}, {33, 96}};
  for (const GatherSetup& s : kSetups) {
    std::vector<std::unique_ptr<Linear>> layers;
    for (size_t i = 0; i < shapes.size(); ++i) {
      layers.push_back(std::make_unique<Linear>("b" + std::to_string(i), shapes[i][1],
                                                shapes[i][0], false, s.precision()));
      fill(layers.back()->weight.value, shapes[i][1], uint32_t(i));
    }
    Fsdp fsdp(world(), s.options());
    uint64_t N = 0;
    for (auto& l : layers) N += uint64_t(fsdp.layout(fsdp.add(*l)).padded_numel());
    for (int step = 0; step < 2; ++step) {  // the second step re-quantizes (new version)
      fsdp.reset_stats();
      for (int i = 0; i < fsdp.num_modules(); ++i) {
        fsdp.fetch(i, Use::forward);
        fsdp.post_forward(i);
      }
      for (int i = fsdp.num_modules() - 1; i >= 0; --i) {
        fsdp.fetch(i, Use::dgrad);
        fsdp.post_backward(i);
      }
      fsdp.bump_versions();
      uint64_t want = 0;
      int64_t gathers_per_weight = 1;
      if (s.recipe == "bf16") {
        want = s.mode == "reshard" ? 4 * N : 2 * N;
        gathers_per_weight = s.mode == "reshard" ? 2 : 1;
      } else if (s.recipe == "mxfp8" && s.mode == "on-demand") {
        want = 2 * (N + N / 32);
        gathers_per_weight = 2;
      } else if (s.recipe == "mxfp8") {
        want = 2 * N + 2 * N / 32;
      } else {
        want = N + N / 1024;
      }
      const FsdpStats& st = fsdp.stats();
      EXPECT_EQ(st.allgather_payload_bytes, W > 1 ? want : 0u) << s.label() << " N=" << N;
      EXPECT_EQ(st.allgather_bytes, want / uint64_t(W) * uint64_t(W - 1)) << s.label();
      EXPECT_EQ(st.allgather_calls, gathers_per_weight * int64_t(shapes.size())) << s.label();
      // One pack per kind per step: bf16 reshard gathers the same BF16 pack twice.
      const int64_t kinds_per_weight = s.mode == "on-demand" ? 2 : 1;
      EXPECT_EQ(st.shard_quantizations, kinds_per_weight * int64_t(shapes.size()))
          << s.label() << ": each pack is built once per step";
    }
  }
}

// 4-bit weights: nvfp4 gathers one 16x16-tile copy — ceil(in/2) code bytes a row, one E4M3
// byte per tile and, per rank, the FP32 tensor scale (4 bytes) — within 0.27x of BF16's bytes;
// mxfp4 its rowwise copy for forward and colwise for dgrad (on demand), N/2 + N/32 each.
TEST(FsdpGather, Fp4BytesPerStepMatchFormulas) {
  const int W = world().size();
  const std::vector<std::vector<int64_t>> shapes = {{64, 64}, {96, 128}, {256, 32}, {33, 96}};
  for (const std::string recipe : {"nvfp4", "mxfp4"}) {
    GatherSetup s{recipe, ""};
    std::vector<std::unique_ptr<Linear>> layers;
    for (size_t i = 0; i < shapes.size(); ++i) {
      layers.push_back(std::make_unique<Linear>("f" + std::to_string(i), shapes[i][1],
                                                shapes[i][0], false, s.precision()));
      fill(layers.back()->weight.value, shapes[i][1], uint32_t(i));
    }
    Fsdp fsdp(world(), s.options());
    uint64_t N = 0;
    for (auto& l : layers) N += uint64_t(fsdp.layout(fsdp.add(*l)).padded_numel());
    fsdp.reset_stats();
    for (int i = 0; i < fsdp.num_modules(); ++i) {
      fsdp.fetch(i, Use::forward);
      fsdp.post_forward(i);
    }
    for (int i = fsdp.num_modules() - 1; i >= 0; --i) {
      fsdp.fetch(i, Use::dgrad);
      fsdp.post_backward(i);
    }
    const uint64_t nw = shapes.size();
    const uint64_t want = recipe == "nvfp4" ? N / 2 + N / 256 + 4 * uint64_t(W) * nw
                                            : 2 * (N / 2 + N / 32);
    const FsdpStats& st = fsdp.stats();
    EXPECT_EQ(st.allgather_payload_bytes, W > 1 ? want : 0u) << recipe << " N=" << N;
    EXPECT_EQ(st.allgather_calls, int64_t(nw) * (recipe == "nvfp4" ? 1 : 2)) << recipe;
    if (recipe == "nvfp4") {
      EXPECT_LE(double(want) / double(2 * N), 0.27) << "vs BF16's 2N";
    }
  }
}

// Gradient accumulation: a second micro-batch in the same step gathers again (the weight was
// resharded) but reuses the packed shard: no second pre-all-gather quantization.
TEST(FsdpGather, MicroBatchesOfOneStepQuantizeTheShardOnce) {
  GatherSetup s{"mxfp8", "on-demand"};
  Linear l("l", 64, 96, false, s.precision());
  fill(l.weight.value, 64, 3);
  Fsdp fsdp(world(), s.options());
  fsdp.add(l);
  for (int micro = 0; micro < 3; ++micro) {
    fsdp.fetch(0, Use::forward);
    fsdp.post_forward(0);
    fsdp.fetch(0, Use::dgrad);
    fsdp.post_backward(0);
  }
  EXPECT_EQ(fsdp.stats().allgather_calls, 6);
  EXPECT_EQ(fsdp.stats().shard_quantizations, 2);  // rowwise + colwise, once each
}

TEST(FsdpGather, ParseGatherMode) {
  EXPECT_EQ(parse_mxfp8_gather("on-demand"), Mxfp8Gather::on_demand);
  EXPECT_EQ(parse_mxfp8_gather("all"), Mxfp8Gather::all);
  try {
    parse_mxfp8_gather("sometimes");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid modes: on-demand, all"), std::string::npos);
  }
}

}  // namespace
}  // namespace mxtrain::dist
