// tests/nn/generate_test.cc — text generation (nn/generate.h): the KV-cache forward against
// GPT's full-sequence forward (dense and MoE, prompt read in one pass or token by token),
// generate()'s sliding window against a full-forward reference, the sampler (seeds, greedy,
// top-k, temperature, option errors) and the byte-to-text escaping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/generate.h"
#include "mxtrain/nn/transformer.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

// The MoE config is tiny-moe.yaml's shape, smaller. init_std 0.2 (10x the default) gives
// peaked attention and routing, so a wrong position or expert shows in the logits.
ModelConfig small(bool moe) {
  ModelConfig c = layer_test::tiny_model({.d_model = 32, .n_layers = 3, .n_heads = 4, .d_ff = 48,
                                          .max_seq_len = 16, .moe_d_ff = moe ? 24 : 0});
  c.init_std = 0.2f;
  return c;
}

// A GPT on the FP32 reference path (its forward is the function InferenceModel computes) and
// an InferenceModel holding the same weights.
struct Pair {
  GPT gpt;
  InferenceModel inf;
  explicit Pair(const ModelConfig& c) : gpt(c, layer_test::recipe_resolver("bf16"), 7), inf(c) {
    gpt.set_fp32_reference(true);
    std::vector<Parameter*> src = gpt.parameters(), dst = inf.parameters();
    EXPECT_EQ(src.size(), dst.size());
    for (size_t i = 0; i < std::min(src.size(), dst.size()); ++i) {
      EXPECT_EQ(src[i]->name, dst[i]->name);
      EXPECT_EQ(src[i]->shape, dst[i]->shape);
      dst[i]->value = src[i]->value;
    }
  }
  // Logits [T, V] of GPT's forward over tokens.
  std::vector<float> full(const std::vector<int32_t>& t) {
    std::vector<float> l(t.size() * size_t(gpt.config().vocab_size));
    gpt.forward_logits(t.data(), 1, int(t.size()), l.data());
    return l;
  }
};

std::vector<int32_t> random_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % 256);
  return t;
}

// The two forwards can differ only in how gemm_f32 orders its FP32 sums for n new rows
// against B*T rows (attention, norms and routing use the same operation order in both; on
// the AVX-512 machine the tests were written on the logits came out bit-identical). FP32
// rounding of <= 48-term dot products through 3 layers is ~1e-6 relative; 1e-4 of the
// largest logit is far above that and far below what a wrong position, cache entry or expert
// changes (an attention window one key off moves logits by > 1).
constexpr double kLogitTol = 1e-4;

void expect_close(const float* got, const float* want, int64_t n, const std::string& what) {
  double scale = 1.0, worst = 0.0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, double(std::fabs(want[i])));
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  EXPECT_LE(worst, kLogitTol * scale) << what << ": worst difference " << worst;
}

void cache_matches_full_forward(bool moe) {
  const ModelConfig c = small(moe);
  Pair p(c);
  const int T = c.max_seq_len, V = c.vocab_size;
  const std::vector<int32_t> tok = random_tokens(T, moe ? 3 : 4);
  const std::vector<float> ref = p.full(tok);
  // Prompt of 5 tokens in one pass (every position), then one token at a time.
  std::vector<float> got(size_t(T) * V);
  p.inf.reset();
  p.inf.append(tok.data(), 5, got.data(), /*every_position=*/true);
  for (int t = 5; t < T; ++t) p.inf.append(&tok[size_t(t)], 1, got.data() + size_t(t) * V);
  EXPECT_EQ(p.inf.cached(), T);
  for (int t = 0; t < T; ++t)
    expect_close(got.data() + size_t(t) * V, ref.data() + size_t(t) * V, V,
                 "position " + std::to_string(t));
  // The whole window in one pass, last position only.
  std::vector<float> last(static_cast<size_t>(V));
  p.inf.reset();
  p.inf.append(tok.data(), T, last.data());
  expect_close(last.data(), ref.data() + size_t(T - 1) * V, V, "one pass, last position");
}

TEST(InferenceModel, KvCacheMatchesFullForwardDense) { cache_matches_full_forward(false); }
TEST(InferenceModel, KvCacheMatchesFullForwardMoE) { cache_matches_full_forward(true); }

TEST(InferenceModel, ParametersAreNamedLikeTheTrainingModel) {
  InferenceModel m(small(true));
  std::vector<Parameter*> ps = m.parameters();
  EXPECT_EQ(ps.front()->name, "embed.weight");
  EXPECT_EQ(ps[1]->name, "layers.0.attention.norm.gain");
  EXPECT_EQ(ps[5]->name, "layers.0.mlp.router.weight");
  EXPECT_EQ(ps.back()->name, "lm_head.weight");
  for (Parameter* p : ps) EXPECT_EQ(int64_t(p->value.size()), p->numel()) << p->name;
}

TEST(InferenceModel, FullWindowAndBadTokensAreErrors) {
  const ModelConfig c = small(false);
  InferenceModel m(c);
  std::vector<float> logits(size_t(c.vocab_size));
  const std::vector<int32_t> tok = random_tokens(c.max_seq_len, 1);
  m.append(tok.data(), c.max_seq_len, logits.data());
  EXPECT_THROW(m.append(tok.data(), 1, logits.data()), Error);
  m.reset();
  const int32_t bad = c.vocab_size;
  EXPECT_THROW(m.append(&bad, 1, logits.data()), Error);
  EXPECT_EQ(m.cached(), 0);
}

// ---- generate() ------------------------------------------------------------------------------

// Greedy generation with GPT's full forward and the documented window rule: the model reads
// at most max_seq_len tokens; when a new token arrives at a full window, the window becomes
// the last `keep` tokens.
std::vector<int32_t> reference_greedy(Pair& p, const std::vector<int32_t>& prompt, int n,
                                      int keep) {
  const int L = p.gpt.config().max_seq_len, V = p.gpt.config().vocab_size;
  std::vector<int32_t> hist = prompt, out;
  size_t w = hist.size() > size_t(L) ? hist.size() - L : 0;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> win(hist.begin() + long(w), hist.end());
    const std::vector<float> l = p.full(win);
    const float* last = l.data() + (win.size() - 1) * size_t(V);
    const int32_t tok = int32_t(std::max_element(last, last + 256) - last);
    if (hist.size() - w == size_t(L)) w = hist.size() + 1 - size_t(keep);
    hist.push_back(tok);
    out.push_back(tok);
  }
  return out;
}

void sliding_window_matches_reference(bool moe, int keep) {
  const ModelConfig c = small(moe);
  Pair p(c);
  GenerateOptions opt;
  opt.max_new_tokens = 40;  // crosses the 16-token window several times
  opt.sampling.temperature = 0.f;
  opt.context_keep = keep;
  for (int plen : {3, 20}) {  // 20 > max_seq_len: only the last 16 are read
    const std::vector<int32_t> prompt = random_tokens(plen, 9);
    GenerateStats st;
    std::vector<int32_t> seen;
    const std::vector<int32_t> got =
        generate(p.inf, prompt, opt, [&](int32_t t) { seen.push_back(t); }, &st);
    const int k = keep > 0 ? keep : c.max_seq_len / 2;
    EXPECT_EQ(got, reference_greedy(p, prompt, 40, k)) << "prompt " << plen << ", keep " << k;
    EXPECT_EQ(seen, got);
    EXPECT_EQ(st.new_tokens, 40);
    EXPECT_EQ(st.prompt_tokens_read, std::min(plen, c.max_seq_len));
    EXPECT_GT(st.slides, 0);
  }
}

TEST(Generate, SlidingWindowMatchesFullForwardReferenceDense) {
  sliding_window_matches_reference(false, 0);
  sliding_window_matches_reference(false, 16);  // keep the full window: rebuild every token
}
TEST(Generate, SlidingWindowMatchesFullForwardReferenceMoE) {
  sliding_window_matches_reference(true, 5);
}

std::vector<int32_t> run(InferenceModel& m, float temperature, int top_k, uint64_t seed,
                         int n = 30) {
  GenerateOptions opt;
  opt.max_new_tokens = n;
  opt.sampling = {temperature, top_k, seed};
  return generate(m, random_tokens(4, 2), opt);
}

TEST(Generate, SeedsGreedyAndTopK) {
  Pair p(small(false));
  InferenceModel& m = p.inf;
  const std::vector<int32_t> a = run(m, 1.f, 0, 1);
  EXPECT_EQ(a, run(m, 1.f, 0, 1));   // same seed, same tokens
  EXPECT_NE(a, run(m, 1.f, 0, 2));   // 30 draws from ~256 tokens: equal by chance ~never
  const std::vector<int32_t> g = run(m, 0.f, 40, 1);
  EXPECT_EQ(g, run(m, 0.f, 40, 12345));  // greedy ignores the seed
  EXPECT_EQ(g, run(m, 0.f, 0, 7));
  EXPECT_EQ(g, run(m, 1.f, 1, 3));       // top-k 1 is greedy
  EXPECT_EQ(g, run(m, 5.f, 1, 4));
  EXPECT_TRUE(run(m, 1.f, 0, 1, 0).empty());
}

TEST(Generate, BadOptionsAreErrors) {
  InferenceModel m(small(false));
  GenerateOptions opt;
  EXPECT_THROW(generate(m, {}, opt), Error);  // empty prompt
  EXPECT_THROW(generate(m, {256}, opt), Error);
  EXPECT_THROW(generate(m, {-1}, opt), Error);
  opt.max_new_tokens = -1;
  EXPECT_THROW(generate(m, {1}, opt), Error);
  opt = GenerateOptions{};
  opt.context_keep = 17;
  EXPECT_THROW(generate(m, {1}, opt), Error);
  opt = GenerateOptions{};
  for (float t : {-0.5f, NAN, INFINITY}) {
    opt.sampling.temperature = t;
    EXPECT_THROW(generate(m, {1}, opt), Error) << t;
  }
  opt = GenerateOptions{};
  opt.sampling.top_k = -1;
  EXPECT_THROW(generate(m, {1}, opt), Error);
}

// ---- Sampler ---------------------------------------------------------------------------------

TEST(Sampler, FrequenciesFollowTheTemperedSoftmaxOverTopK) {
  // p = 0.1, 0.2, 0.3, 0.4 at T = 1; at T = 0.5 they become p^2 normalised. 40000 draws: the
  // standard error of a frequency is <= 0.0025, so 0.01 is 4 sigma.
  const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f),
                                     std::log(0.4f)};
  auto freq = [&](float temp, int k) {
    Sampler s({temp, k, 99});
    std::vector<double> f(4, 0.0);
    for (int i = 0; i < 40000; ++i) f[size_t(s.sample(logits.data(), 4))] += 1.0 / 40000;
    return f;
  };
  std::vector<double> f = freq(1.f, 0);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[size_t(i)], 0.1 * (i + 1), 0.01) << i;
  f = freq(0.5f, 0);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[size_t(i)], (i + 1) * (i + 1) / 30.0, 0.01) << i;
  f = freq(1.f, 2);  // top-2: 0.3 and 0.4 renormalised
  EXPECT_EQ(f[0] + f[1], 0.0);
  EXPECT_NEAR(f[2], 3.0 / 7.0, 0.01);
}

TEST(Sampler, GreedyTiesGoToTheLowerIdAndNonFiniteLogitsAreErrors) {
  const std::vector<float> tie = {0.f, 2.f, 2.f, 1.f};
  Sampler g({0.f, 0, 1});
  EXPECT_EQ(g.sample(tie.data(), 4), 1);
  Sampler k1({1.f, 1, 1});
  EXPECT_EQ(k1.sample(tie.data(), 4), 1);
  const std::vector<float> bad = {0.f, NAN};
  EXPECT_THROW(g.sample(bad.data(), 2), Error);
  EXPECT_THROW(Sampler({-1.f, 0, 1}), Error);
  EXPECT_THROW(Sampler({1.f, -2, 1}), Error);
}

// ---- text ------------------------------------------------------------------------------------

TEST(ByteEscaper, ReadableTextPassesOtherBytesAreEscaped) {
  EXPECT_EQ(escape_bytes("Hi there!\n\tok"), "Hi there!\n\tok");
  EXPECT_EQ(escape_bytes(std::string("a\0b\r\x7f", 5)), "a\\x00b\\x0d\\x7f");
  const std::string utf8 = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";  // café € 😀
  EXPECT_EQ(escape_bytes(utf8), utf8);
  EXPECT_EQ(escape_bytes("\x80x"), "\\x80x");                  // lone continuation byte
  EXPECT_EQ(escape_bytes("\xc0\x80"), "\\xc0\\x80");           // overlong
  EXPECT_EQ(escape_bytes("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // surrogate
  EXPECT_EQ(escape_bytes("\xe2\x82"), "\\xe2\\x82");           // cut short at the end
  EXPECT_EQ(escape_bytes("\xe2\x82z"), "\\xe2\\x82z");         // cut short by ASCII
  EXPECT_EQ(escape_bytes("\xc2\x85"), "\\xc2\\x85");           // C1 control (NEL)
  // A sequence split across feed() calls is held back, then printed whole.
  ByteEscaper e;
  EXPECT_EQ(e.feed(0xe2), "");
  EXPECT_EQ(e.feed(0x82), "");
  EXPECT_EQ(e.feed(0xac), "\xe2\x82\xac");
  EXPECT_EQ(e.feed(0xf0), "");
  EXPECT_EQ(e.finish(), "\\xf0");
}

}  // namespace
}  // namespace mxtrain
