// tests/mpi/fsdp_train_mpi_test.cc — FSDP gradients, optimizer shards and checkpoints on real
// ranks (dist/fsdp.h), each compared with a one-process computation done on every rank.
//
// - reduce-scatter of grads + AdamW on shards = AdamW on the whole tensor with the mean grad;
// - a 3-Linear model (and a GroupedLinear model) trained a few steps with W ranks, each rank
//   one micro-batch, matches one process running the W micro-batches with grad accumulation;
// - gather_full / scatter_full round trips for values and AdamW moments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/dist/fsdp.h"

namespace mxtrain::dist {
namespace {

Comm& world() { return Comm::world(); }

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

struct AdamW {
  float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  // The same update as train/optim.h adamw_update.
  void step(float* w, const float* g, float* m, float* v, size_t n, int64_t t, bool decay) const {
    const float bc1 = 1.f - std::pow(b1, float(t)), bc2 = 1.f - std::pow(b2, float(t));
    const float step_size = lr / bc1, inv_sqrt_bc2 = 1.f / std::sqrt(bc2);
    const float d = decay ? lr * wd : 0.f;
    for (size_t i = 0; i < n; ++i) {
      m[i] = b1 * m[i] + (1.f - b1) * g[i];
      v[i] = b2 * v[i] + (1.f - b2) * g[i] * g[i];
      w[i] -= d * w[i];
      w[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
    }
  }
};

// A parameter's storage holding v.
FloatBuffer buffer(std::span<const float> v) { return FloatBuffer(v.begin(), v.end()); }

// max |a - b| / max |b|: relative to the tensor's scale, so elements near zero do not dominate.
double rel_err(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - double(b[i])));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

LinearPrecision precision(const std::string& recipe) {
  LinearPrecision p;
  p.recipe = get_recipe(recipe);
  return p;
}

FsdpOptions options(const std::string& mode) {
  FsdpOptions o;
  if (mode == "keep") o.bf16_reshard_after_forward = false;
  if (mode == "all") o.mxfp8_gather = Mxfp8Gather::all;
  return o;
}

// Tolerance for reduce-scatter + AdamW vs the one-process update: the only difference is the
// order MPI sums the W gradients in (FP32), a few units in the last place of the mean grad;
// AdamW's update is smooth in g away from |g| ~ eps.
constexpr double kUpdateTol = 1e-6;

TEST(FsdpTrain, ReduceScatterAndShardedAdamWMatchFullUpdate) {
  const int W = world().size(), r = world().rank();
  const std::vector<std::vector<int64_t>> shapes = {{33, 65}, {100, 64}, {31, 7}};
  std::vector<std::unique_ptr<Linear>> layers;
  std::vector<std::vector<float>> w_ref, b_ref, m_ref, v_ref, bm_ref, bv_ref;
  for (size_t i = 0; i < shapes.size(); ++i) {
    layers.push_back(std::make_unique<Linear>("l" + std::to_string(i), shapes[i][1],
                                              shapes[i][0], true, precision("bf16")));
    layers[i]->weight.value = buffer(randn(size_t(shapes[i][0] * shapes[i][1]), uint32_t(i)));
    layers[i]->bias.value = buffer(randn(size_t(shapes[i][0]), uint32_t(100 + i)));
    w_ref.emplace_back(layers[i]->weight.value.begin(), layers[i]->weight.value.end());
    b_ref.emplace_back(layers[i]->bias.value.begin(), layers[i]->bias.value.end());
  }
  Fsdp fsdp(world(), FsdpOptions{});
  for (auto& l : layers) fsdp.add(*l);
  const AdamW opt;
  for (int64_t t = 1; t <= 2; ++t) {
    for (size_t i = 0; i < layers.size(); ++i) {
      const size_t n = w_ref[i].size(), nb = b_ref[i].size();
      // Rank k's full-size gradient; every rank can compute every rank's.
      std::vector<float> mean(n, 0.f), bmean(nb, 0.f);
      for (int k = 0; k < W; ++k) {
        const auto g = randn(n, uint32_t(1000 * t + 10 * i + k)), gb = randn(nb, uint32_t(7 + k));
        for (size_t j = 0; j < n; ++j) mean[j] += g[j];
        for (size_t j = 0; j < nb; ++j) bmean[j] += gb[j];
        if (k == r) {
          layers[i]->weight.grad = buffer(g);
          layers[i]->bias.grad = buffer(gb);
        }
      }
      for (float& x : mean) x /= float(W);
      for (float& x : bmean) x /= float(W);
      if (t == 1) {
        m_ref.emplace_back(n, 0.f), v_ref.emplace_back(n, 0.f);
        bm_ref.emplace_back(nb, 0.f), bv_ref.emplace_back(nb, 0.f);
      }
      opt.step(w_ref[i].data(), mean.data(), m_ref[i].data(), v_ref[i].data(), n, t, true);
      opt.step(b_ref[i].data(), bmean.data(), bm_ref[i].data(), bv_ref[i].data(), nb, t, false);
    }
    fsdp.reduce_gradients();
    for (ShardView& s : fsdp.shards()) {
      opt.step(s.value.data(), s.grad.data(), s.m.data(), s.v.data(), s.value.size(), t, s.decay);
      ++*s.version;
    }
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string name = layers[i]->weight.name;
    const auto w = fsdp.gather_full(name, ShardField::value);
    const auto m = fsdp.gather_full(name, ShardField::m);
    const auto v = fsdp.gather_full(name, ShardField::v);
    if (r == 0) {
      EXPECT_LE(rel_err(w, w_ref[i]), kUpdateTol) << name;
      EXPECT_LE(rel_err(m, m_ref[i]), kUpdateTol) << name;
      EXPECT_LE(rel_err(v, v_ref[i]), kUpdateTol) << name;
    } else {
      EXPECT_TRUE(w.empty());
    }
    EXPECT_LE(rel_err(layers[i]->bias.value, b_ref[i]), kUpdateTol) << "replicated bias " << i;
  }
  // Padding of the shards stays exactly zero.
  for (const ShardView& s : fsdp.shards())
    if (!s.replicated) {
      int64_t nonzero = 0;
      for (float x : s.value) nonzero += x != 0.f;
      EXPECT_LE(nonzero, s.numel_valid) << s.name;
    }
}

// y = L3(relu(L2(relu(L1(x))))), loss = 0.5 Σ (y - target)² / T. Each rank's micro-batch is
// generated from (step, rank); the reference runs all of them in one process.
struct Mlp {
  std::vector<std::unique_ptr<Linear>> l;
  Mlp(const std::string& recipe, int64_t d_in, int64_t h1, int64_t h2, int64_t d_out) {
    const int64_t dims[] = {d_in, h1, h2, d_out};
    for (int i = 0; i < 3; ++i) {
      l.push_back(std::make_unique<Linear>("mlp." + std::to_string(i), dims[i], dims[i + 1],
                                           true, precision(recipe)));
      l.back()->weight.value = buffer(randn(size_t(dims[i] * dims[i + 1]), uint32_t(50 + i),
                                     1.f / std::sqrt(float(dims[i]))));
      l.back()->bias.value = buffer(randn(size_t(dims[i + 1]), uint32_t(60 + i), 0.1f));
    }
  }
  // Forward + backward of one micro-batch; fsdp (optional) gets its post_* hooks.
  void micro_batch(const std::vector<float>& x, const std::vector<float>& target, int64_t T,
                   Fsdp* fsdp) {
    std::vector<std::vector<float>> act(4), pre(3);
    act[0] = x;
    std::vector<LinearSaved> saved(3);
    for (int i = 0; i < 3; ++i) {
      pre[i].resize(size_t(T * l[i]->out_features()));
      l[i]->forward(act[i].data(), T, pre[i].data(), saved[i]);
      if (fsdp) fsdp->post_forward(i);
      act[i + 1] = pre[i];
      if (i < 2)
        for (float& a : act[i + 1]) a = std::max(a, 0.f);
    }
    std::vector<float> d(act[3].size());
    for (size_t j = 0; j < d.size(); ++j) d[j] = (act[3][j] - target[j]) / float(T);
    for (int i = 2; i >= 0; --i) {
      std::vector<float> dx(i > 0 ? size_t(T * l[i]->in_features()) : 0);
      l[i]->backward(saved[i], d.data(), i > 0 ? dx.data() : nullptr);
      if (fsdp) fsdp->post_backward(i);
      if (i > 0) {
        for (size_t j = 0; j < dx.size(); ++j)
          if (pre[i - 1][j] <= 0.f) dx[j] = 0.f;
        d = std::move(dx);
      }
    }
  }
  void zero_grad() {
    for (auto& x : l) x->weight.zero_grad(), x->bias.zero_grad();
  }
};

void make_batch(int64_t step, int rank, int64_t T, int64_t d_in, int64_t d_out,
                std::vector<float>& x, std::vector<float>& target) {
  x = randn(size_t(T * d_in), uint32_t(10000 + 100 * step + rank));
  target = randn(size_t(T * d_out), uint32_t(20000 + 100 * step + rank));
}

// Tolerance for W ranks vs one process after a few AdamW steps: the gradient sums differ in
// FP32 order (~1e-7 relative); later steps quantize weights that differ by that much, which
// can move an element across an FP8/BF16 rounding boundary, a change far below 1e-4 of the
// weights' scale after a few steps (measured: <= 6e-8 at 2 and 4 ranks).
constexpr double kTrainTol = 1e-4;

TEST(FsdpTrain, ThreeLinearModelMatchesOneProcess) {
  const int W = world().size(), r = world().rank();
  const int64_t T = 24, d_in = 40, h1 = 72, h2 = 33, d_out = 16, steps = 3;
  const AdamW opt;
  const std::pair<std::string, std::string> setups[] = {
      {"bf16", "reshard"}, {"bf16", "keep"}, {"mxfp8", "on-demand"}, {"mxfp8", "all"},
      {"mxfp8-32x32", ""}, {"blockwise", ""}, {"fp8-current", ""}, {"fp8-delayed", ""},
      {"nvfp4", ""},       {"mxfp4", "on-demand"}};
  for (const auto& [recipe, mode] : setups) {
    const std::string label = recipe + "/" + mode;
    Mlp ref(recipe, d_in, h1, h2, d_out), sh(recipe, d_in, h1, h2, d_out);
    Fsdp fsdp(world(), options(mode));
    for (auto& l : sh.l) fsdp.add(*l);
    fsdp.set_input_grad_needed(0, false);
    std::vector<float> x, target;
    std::map<Parameter*, std::pair<std::vector<float>, std::vector<float>>> adam_state;
    for (int64_t step = 0; step < steps; ++step) {
      // Reference: all W micro-batches, accumulated, mean, AdamW.
      ref.zero_grad();
      for (int k = 0; k < W; ++k) {
        make_batch(step, k, T, d_in, d_out, x, target);
        ref.micro_batch(x, target, T, nullptr);
      }
      for (auto& l : ref.l)
        for (Parameter* p : {&l->weight, &l->bias}) {
          for (float& g : p->grad) g /= float(W);
          auto& [m, v] = adam_state[p];
          m.resize(p->value.size(), 0.f);
          v.resize(p->value.size(), 0.f);
          opt.step(p->value.data(), p->grad.data(), m.data(), v.data(), p->value.size(), step + 1,
                   p->shape.size() >= 2);
          ++p->version;
        }
      // FSDP: this rank's micro-batch, reduce-scatter, AdamW on shards.
      sh.zero_grad();
      make_batch(step, r, T, d_in, d_out, x, target);
      sh.micro_batch(x, target, T, &fsdp);
      fsdp.reduce_gradients();
      for (ShardView& s : fsdp.shards())
        opt.step(s.value.data(), s.grad.data(), s.m.data(), s.v.data(), s.value.size(), step + 1,
                 s.decay);
      fsdp.bump_versions();
    }
    for (int i = 0; i < 3; ++i) {
      const auto w = fsdp.gather_full(sh.l[size_t(i)]->weight.name, ShardField::value);
      if (r == 0) {
        EXPECT_LE(rel_err(w, ref.l[size_t(i)]->weight.value), kTrainTol) << label << " layer " << i;
      }
      EXPECT_LE(rel_err(sh.l[size_t(i)]->bias.value, ref.l[size_t(i)]->bias.value), kTrainTol)
          << label << " bias " << i;
    }
    // The weights moved: the comparison is not of untouched initial values.
    const auto w0 = fsdp.gather_full(sh.l[0]->weight.name, ShardField::value);
    if (r == 0) {
      Mlp init(recipe, d_in, h1, h2, d_out);
      EXPECT_GT(rel_err(w0, init.l[0]->weight.value), 1e-3) << label;
    }
  }
}

// Expert weights under FSDP: a GroupedLinear [E, out, in] whose experts get 0, ragged and
// >32 token rows. Outputs equal the unsharded layer bit for bit; a few AdamW steps with W
// ranks (each its own tokens) match one process running every rank's tokens.
TEST(FsdpTrain, GroupedLinearMatchesOneProcess) {
  const int W = world().size(), r = world().rank();
  const int64_t E = 3, in = 40, out = 33, steps = 2;
  const std::vector<int64_t> counts = {5, 0, 37};  // per micro-batch
  const int64_t T = 42;
  const AdamW opt;
  for (const std::string recipe :
       {"bf16", "mxfp8", "mxfp8-32x32", "blockwise", "fp8-current", "fp8-delayed", "nvfp4",
        "mxfp4"}) {
    GroupedLinear ref("experts", E, in, out, precision(recipe));
    GroupedLinear sh("experts", E, in, out, precision(recipe));
    ref.weight.value = buffer(randn(size_t(E * out * in), 77, 0.2f));
    sh.weight.value = ref.weight.value;
    Fsdp fsdp(world(), FsdpOptions{});
    fsdp.add(sh);
    const GroupList groups = GroupList::from_counts(counts, T);
    std::vector<float> m_ref(ref.weight.value.size(), 0.f), v_ref(m_ref.size(), 0.f);
    for (int64_t step = 0; step < steps; ++step) {
      ref.weight.zero_grad();
      sh.weight.zero_grad();
      for (int k = 0; k < W; ++k) {
        const auto x = randn(size_t(T * in), uint32_t(300 + 10 * step + k));
        const auto dy = randn(size_t(T * out), uint32_t(400 + 10 * step + k));
        std::vector<float> y(size_t(T * out)), dx(size_t(T * in));
        GroupedLinearSaved s;
        ref.forward(x.data(), T, groups, y.data(), s);
        ref.backward(s, dy.data(), dx.data());
        if (k != r) continue;
        std::vector<float> y2(y.size()), dx2(dx.size());
        sh.forward(x.data(), T, groups, y2.data(), s);
        fsdp.post_forward(0);
        sh.backward(s, dy.data(), dx2.data());
        fsdp.post_backward(0);
        EXPECT_TRUE(y == y2) << recipe << ": expert forward differs from the unsharded layer";
        EXPECT_TRUE(dx == dx2) << recipe << ": expert dgrad differs from the unsharded layer";
      }
      for (float& g : ref.weight.grad) g /= float(W);
      opt.step(ref.weight.value.data(), ref.weight.grad.data(), m_ref.data(), v_ref.data(),
               m_ref.size(), step + 1, true);
      ++ref.weight.version;
      fsdp.reduce_gradients();
      for (ShardView& s : fsdp.shards())
        opt.step(s.value.data(), s.grad.data(), s.m.data(), s.v.data(), s.value.size(), step + 1,
                 s.decay);
      fsdp.bump_versions();
    }
    const auto w = fsdp.gather_full("experts.weight", ShardField::value);
    if (r == 0) {
      EXPECT_LE(rel_err(w, ref.weight.value), kTrainTol) << recipe;
    }
  }
}

// Single-file checkpoints: whole tensors set on rank 0 reach every rank's shard, and gather
// back unchanged. The full tensor does not depend on the world size, so a checkpoint written
// with one world size loads with another.
TEST(FsdpTrain, CheckpointScatterGatherRoundTrip) {
  const int r = world().rank();
  Linear a("a", 65, 33, true, precision("mxfp8")), b("b", 7, 100, false, precision("bf16"));
  GroupedLinear e("e", 2, 40, 31, precision("mxfp8-32x32"));
  Parameter norm;
  norm.init("norm.gain", {16});
  for (Parameter* p : {&a.weight, &a.bias, &b.weight, &e.weight, &norm})
    p->value = buffer(randn(size_t(p->numel()), 1));
  Fsdp fsdp(world(), FsdpOptions{});
  fsdp.add(a);
  fsdp.add(b);
  fsdp.add(e);
  fsdp.add_replicated(norm);
  const auto params = fsdp.params();
  ASSERT_EQ(params.size(), 5u);
  EXPECT_EQ(params[0].name, "a.weight");
  EXPECT_TRUE(params[0].sharded);
  EXPECT_EQ(params[2].shape, (std::vector<int64_t>{2, 31, 40}));
  EXPECT_EQ(params[3].name, "a.bias");
  EXPECT_FALSE(params[3].sharded);
  uint32_t seed = 500;
  for (const auto& info : params)
    for (ShardField f : {ShardField::value, ShardField::m, ShardField::v}) {
      int64_t n = 1;
      for (auto d : info.shape) n *= d;
      const auto full = randn(size_t(n), seed++);
      fsdp.scatter_full(info.name, f, r == 0 ? full.data() : nullptr, 0);
      const auto back = fsdp.gather_full(info.name, f, 0);
      if (r == 0) {
        EXPECT_TRUE(std::equal(back.begin(), back.end(), full.begin(), full.end())) << info.name;
      } else {
        EXPECT_TRUE(back.empty());
      }
      if (info.sharded) {  // this rank's shard is its slice of the whole tensor
        const ShardLayout& L = fsdp.layout(info.module);
        std::vector<float> want(size_t(L.shard_numel()));
        slice_shard(L, r, full.data(), want.data());
        const ShardView v = fsdp.shards()[size_t(info.module)];
        const std::span<float> got = f == ShardField::value ? v.value : f == ShardField::m ? v.m : v.v;
        EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << info.name;
      }
    }
  EXPECT_THROW(fsdp.gather_full("no.such.weight", ShardField::value), Error);
  EXPECT_THROW(fsdp.scatter_full("no.such.weight", ShardField::value, nullptr, 1 % world().size()),
               Error);
}

}  // namespace
}  // namespace mxtrain::dist
