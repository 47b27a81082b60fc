// nn/generate_sampling.cc — sampling, the generation loop with its sliding window, and the
// byte-to-text escaping (nn/generate.h).
//
// Sampling is written so that its result is a function of (logits, options, seed) alone: the
// candidates are ordered by (logit descending, id ascending) with a full comparison sort, the
// weights exp((l - max) / T) are summed in double in that order, and the uniform draw comes
// from splitmix64 (53 bits), not from <random> distributions whose output is left to the
// standard library.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/clock.h"
#include "mxtrain/common.h"
#include "mxtrain/nn/generate.h"

namespace mxtrain {
namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

// ---- sampling --------------------------------------------------------------------------------

void SamplingOptions::validate() const {
  MXT_CHECK(std::isfinite(temperature) && temperature >= 0.f,
            "temperature must be finite and >= 0 (0 = greedy), got ", temperature);
  MXT_CHECK(top_k >= 0, "top-k must be >= 0 (0 = every token), got ", top_k);
}

Sampler::Sampler(const SamplingOptions& opt) : opt_(opt), state_(opt.seed) { opt_.validate(); }

int32_t Sampler::sample(const float* logits, int64_t V) {
  MXT_CHECK(logits && V >= 1, "Sampler: no logits");
  int64_t best = 0;
  for (int64_t i = 0; i < V; ++i) {
    MXT_CHECK(std::isfinite(logits[i]), "the model produced a non-finite logit (", logits[i],
              ") for token ", i, "; the checkpoint's weights are not usable");
    if (logits[i] > logits[best]) best = i;
  }
  if (opt_.temperature == 0.f) return int32_t(best);
  const int64_t k = (opt_.top_k == 0 || opt_.top_k > V) ? V : opt_.top_k;
  order_.resize(size_t(V));
  for (int64_t i = 0; i < V; ++i) order_[size_t(i)] = int32_t(i);
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), before);
  weight_.resize(size_t(k));
  const double mx = logits[order_[0]], t = opt_.temperature;
  double total = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    total += std::exp((double(logits[order_[size_t(j)]]) - mx) / t);
    weight_[size_t(j)] = total;  // cumulative
  }
  const double u = double(splitmix64(state_) >> 11) * 0x1.0p-53 * total;  // [0, total)
  for (int64_t j = 0; j < k; ++j)
    if (u < weight_[size_t(j)]) return order_[size_t(j)];
  return order_[size_t(k - 1)];  // u rounded up to total
}

// ---- generation ------------------------------------------------------------------------------

std::vector<int32_t> generate(InferenceModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt,
                              const std::function<void(int32_t)>& on_token,
                              GenerateStats* stats) {
  const ModelConfig& cfg = model.config();
  const int L = cfg.max_seq_len;
  MXT_CHECK(!prompt.empty(), "the prompt is empty; generation needs at least one token");
  MXT_CHECK(opt.max_new_tokens >= 0, "max-new-tokens must be >= 0, got ", opt.max_new_tokens);
  MXT_CHECK(opt.context_keep >= 0 && opt.context_keep <= L, "context-keep must be between 1 "
            "and max_seq_len = ", L, " (0 = half of it), got ", opt.context_keep);
  for (size_t i = 0; i < prompt.size(); ++i)
    MXT_CHECK(prompt[i] >= 0 && prompt[i] < cfg.vocab_size, "prompt token ", i, " is ",
              prompt[i], ", outside the model's vocabulary [0, ", cfg.vocab_size, ")");
  const int keep = opt.context_keep > 0 ? opt.context_keep : std::max(1, L / 2);
  Sampler sampler(opt.sampling);
  GenerateStats st;
  std::vector<int32_t> out, history(prompt);
  model.reset();
  if (opt.max_new_tokens == 0) {
    if (stats) *stats = st;
    return out;
  }
  std::vector<float> logits(size_t(cfg.vocab_size));
  MXT_CHECK(opt.vocab_limit >= 0 && opt.vocab_limit <= cfg.vocab_size, "vocab_limit must be "
            "between 1 and the model's vocabulary of ", cfg.vocab_size, " (0 = byte-level), got ",
            opt.vocab_limit);
  const int64_t V = opt.vocab_limit > 0 ? opt.vocab_limit : byte_vocab(cfg);
  const std::clock_t c0 = std::clock();
  auto t0 = Clock::now();
  const int n0 = int(std::min<size_t>(prompt.size(), size_t(L)));
  model.append(prompt.data() + prompt.size() - n0, n0, logits.data());
  st.prompt_tokens_read = n0;
  st.prefill_s = seconds_since(t0);
  t0 = Clock::now();
  for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
    const int32_t tok = sampler.sample(logits.data(), V);
    out.push_back(tok);
    history.push_back(tok);
    if (on_token) on_token(tok);
    if (i + 1 == opt.max_new_tokens) break;  // no logits needed after the last token
    if (model.cached() == L) {  // window full: rebuild from the last `keep` tokens
      model.reset();
      model.append(history.data() + history.size() - keep, keep, logits.data());
      ++st.slides;
    } else {
      model.append(&tok, 1, logits.data());
    }
  }
  st.decode_s = seconds_since(t0);
  st.cpu_s = double(std::clock() - c0) / CLOCKS_PER_SEC;
  st.new_tokens = int64_t(out.size());
  if (stats) *stats = st;
  return out;
}

// ---- bytes as text ---------------------------------------------------------------------------

namespace {

std::string hex_escape(uint8_t b) {
  static const char* digits = "0123456789abcdef";
  return std::string{'\\', 'x', digits[b >> 4], digits[b & 15]};
}

// Bytes a UTF-8 sequence starting with `lead` has (2..4), 0 if it cannot start one.
int utf8_length(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether b may follow seq[0..n-1] in a well-formed sequence (no overlongs, no surrogates,
// nothing above U+10FFFF).
bool utf8_continues(const uint8_t* seq, int n, uint8_t b) {
  if (b < 0x80 || b > 0xBF) return false;
  if (n != 1) return true;
  switch (seq[0]) {
    case 0xE0: return b >= 0xA0;
    case 0xED: return b <= 0x9F;
    case 0xF0: return b >= 0x90;
    case 0xF4: return b <= 0x8F;
    default: return true;
  }
}

}  // namespace

std::string ByteEscaper::flush_pending() {
  std::string s;
  for (int i = 0; i < npending_; ++i) s += hex_escape(pending_[i]);
  npending_ = need_ = 0;
  return s;
}

std::string ByteEscaper::feed(uint8_t b) {
  std::string s;
  if (npending_ > 0) {
    if (utf8_continues(pending_, npending_, b)) {
      pending_[npending_++] = b;
      if (npending_ < need_) return s;
      // U+0080..U+009F (C1 controls) are not printable: escaped like other control bytes.
      if (pending_[0] == 0xC2 && pending_[1] < 0xA0) return flush_pending();
      s.assign(reinterpret_cast<const char*>(pending_), size_t(npending_));
      npending_ = need_ = 0;
      return s;
    }
    s = flush_pending();  // a broken sequence: its bytes escaped, b read afresh
  }
  if ((b >= 0x20 && b < 0x7F) || b == '\n' || b == '\t') {
    s += char(b);
  } else if (const int n = utf8_length(b)) {
    pending_[0] = b;
    npending_ = 1;
    need_ = n;
  } else {
    s += hex_escape(b);
  }
  return s;
}

std::string ByteEscaper::finish() { return flush_pending(); }

std::string escape_bytes(const std::string& bytes) {
  ByteEscaper e;
  std::string s;
  for (char c : bytes) s += e.feed(uint8_t(c));
  return s + e.finish();
}

}  // namespace mxtrain
