// tests/alloc/steady_alloc_test.cc — the training step allocates nothing in the steady state.
//
// This binary replaces the global operator new/delete with counting versions (that is why it
// is its own executable). A GPT is built for each recipe, dense and MoE (and a few with
// activation recompute), and run for warm-up steps (forward + backward + AdamW on every
// parameter, which bumps every weight's version so
// each step re-quantizes the weights), which size every buffer and workspace; two more steps
// must then make no heap allocation in the engine's code. The steps run on one batch with
// learning rate 0, so an MoE layer routes the same way every step: expert row counts — hence
// buffer sizes and oneDNN primitive shapes — do not change (with changing counts, buffers
// grow to the largest count seen and stay). oneDNN's execute keeps a small argument map per
// call on the heap; those allocations are counted apart and bounded in bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "gemm/onednn_call.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/train/optim.h"
#include "nn/layer_test_util.h"

// The replacement delete frees what the replacement new got from malloc/aligned_alloc.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<long> g_news{0}, g_bytes{0};           // by the engine's own code
std::atomic<long> g_dnnl_news{0}, g_dnnl_bytes{0};  // inside oneDNN's execute
std::atomic<bool> g_counting{false};
// MXTRAIN_ALLOC_TRAP=1 stops at the first counted allocation (run under gdb to see where).
const bool g_trap = std::getenv("MXTRAIN_ALLOC_TRAP") != nullptr;

void count_one(std::size_t n) {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  if (mxtrain::gemm_detail::in_onednn_call()) {
    g_dnnl_news.fetch_add(1, std::memory_order_relaxed);
    g_dnnl_bytes.fetch_add(long(n), std::memory_order_relaxed);
    return;
  }
  g_news.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(long(n), std::memory_order_relaxed);
  if (g_trap) std::raise(SIGTRAP);
}
}  // namespace

void* operator new(std::size_t n) {
  count_one(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  count_one(n);
  const std::size_t al = std::size_t(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace mxtrain {
namespace {

struct Case {
  std::string recipe;
  bool defer, moe;
  Recompute recompute = Recompute::none;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.recipe << (c.defer ? " defer" : "") << (c.moe ? " MoE" : "") << " recompute "
      << recompute_name(c.recompute);
}

// One optimizer step as the trainer runs it: forward + backward, then AdamW everywhere.
void train_step(GPT& m, const std::vector<Parameter*>& params,
                std::vector<std::vector<float>>& mom, std::vector<std::vector<float>>& vel,
                const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt, int B, int T,
                int64_t t) {
  m.clear_grad();  // as the trainer: the first contribution writes, nothing is zero-filled
  m.forward_backward(tok.data(), tgt.data(), B, T, 1.f);
  AdamWHyper h{0.f, 0.9f, 0.95f, 1e-8f, 0.1f};  // lr 0: same routing every step
  int i = 0;
  for (Parameter* p : params) {
    adamw_update(p->value.data(), p->grad.data(), mom[i].data(), vel[i].data(), p->numel(), h,
                 t, p->shape.size() >= 2);
    ++p->version;
    ++i;
  }
}

class SteadyAlloc : public ::testing::TestWithParam<Case> {};

TEST_P(SteadyAlloc, NoHeapAllocationAfterWarmUp) {
  const Case c = GetParam();
  const int B = 2, T = 64;
  GPT m(layer_test::tiny_model({.d_model = 64, .n_layers = 2, .n_heads = 2, .d_ff = 96,
                                .max_seq_len = 64, .moe_d_ff = c.moe ? 64 : 0}),
        layer_test::recipe_resolver(c.recipe, c.defer), 7);
  m.set_recompute(c.recompute);
  const std::vector<Parameter*> params = m.parameters();
  std::vector<std::vector<float>> mom, vel;
  for (Parameter* p : params) {
    mom.emplace_back(size_t(p->numel()), 0.f);
    vel.emplace_back(size_t(p->numel()), 0.f);
  }
  std::mt19937 rng(3);
  std::vector<int32_t> tok(B * T), tgt(B * T);
  auto refill = [&] {
    for (auto& x : tok) x = int32_t(rng() % 256);
    for (auto& x : tgt) x = int32_t(rng() % 256);
  };
  int64_t t = 0;
  refill();
  for (int w = 0; w < 3; ++w) train_step(m, params, mom, vel, tok, tgt, B, T, ++t);
  g_news = 0;
  g_dnnl_news = 0;
  g_dnnl_bytes = 0;
  g_counting = true;
  train_step(m, params, mom, vel, tok, tgt, B, T, ++t);
  train_step(m, params, mom, vel, tok, tgt, B, T, ++t);
  g_counting = false;
  EXPECT_EQ(g_news.load(), 0) << c.recipe << (c.defer ? " defer" : "") << (c.moe ? " MoE" : "")
                              << ": heap allocations in two steady-state steps";
  // oneDNN's own per-execute bookkeeping (bf16 products only): a few small objects, never a
  // buffer — far below one page per call, so no page faults and no zero-fill.
  RecordProperty("onednn_allocations", int(g_dnnl_news.load()));
  RecordProperty("onednn_bytes", int(g_dnnl_bytes.load()));
  std::printf("oneDNN execute: %ld allocations, %ld bytes in two steps\n", g_dnnl_news.load(),
              g_dnnl_bytes.load());
  EXPECT_LE(g_dnnl_bytes.load(), 64 * 1024) << "oneDNN allocated buffers in the steady state";
}

// GPT::reserve (the trainer calls it when it builds the model) sizes the model's own buffers:
// the first step after it allocates at least their bytes less than the first step of a model
// without it (the layers' saved copies and workspaces are still sized by that first step).
TEST(SteadyAllocReserve, FirstStepAllocatesNoneOfTheModelsOwnBuffers) {
  for (const bool moe : {false, true}) {
    const int B = 2, T = 64;
    const ModelConfig cfg = layer_test::tiny_model(
        {.d_model = 64, .n_layers = 2, .n_heads = 2, .d_ff = 96, .max_seq_len = 64,
         .moe_d_ff = moe ? 64 : 0});
    GPT lazy(cfg, layer_test::recipe_resolver("mxfp8"), 7);
    GPT planned(cfg, layer_test::recipe_resolver("mxfp8"), 7);
    planned.reserve(B, T);
    std::vector<int32_t> tok(B * T), tgt(B * T);
    for (int i = 0; i < B * T; ++i) tok[i] = i % 256, tgt[i] = (i * 7) % 256;
    long bytes[2];
    GPT* models[2] = {&lazy, &planned};
    for (int k = 0; k < 2; ++k) {
      g_bytes = 0;
      g_counting = true;
      models[k]->clear_grad();
      models[k]->forward_backward(tok.data(), tgt.data(), B, T, 1.f);
      g_counting = false;
      bytes[k] = g_bytes.load();
    }
    size_t own = lazy.activation_bytes();
    for (Parameter* p : lazy.parameters()) own += p->grad.size() * sizeof(float);
    EXPECT_GE(bytes[0] - bytes[1], long(own))
        << (moe ? "MoE" : "dense") << ": first step allocated " << bytes[0] << " bytes without "
        << "reserve, " << bytes[1] << " with it; the model's own buffers are " << own;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, SteadyAlloc,
    ::testing::Values(Case{"bf16", false, false}, Case{"mxfp8", false, false},
                      Case{"mxfp8", true, false}, Case{"mxfp8-32x32", false, false},
                      Case{"bf16", false, true}, Case{"mxfp8", false, true},
                      Case{"mxfp8-32x32", true, true},
                      Case{"mxfp8", false, false, Recompute::layer},
                      Case{"bf16", false, true, Recompute::layer},
                      Case{"mxfp8", true, true, Recompute::attention},
                      Case{"nvfp4", false, false}, Case{"nvfp4", true, true},
                      Case{"mxfp4", false, true}),
    [](const ::testing::TestParamInfo<Case>& i) {
      std::string n = i.param.recipe + (i.param.defer ? "_defer" : "") + (i.param.moe ? "_moe" : "");
      if (i.param.recompute != Recompute::none)
        n += std::string("_recompute_") + recompute_name(i.param.recompute);
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace mxtrain
