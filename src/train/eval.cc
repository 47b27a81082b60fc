// train/eval.cc — held-out evaluation in windows over the validation split (train/eval.h).
#include "mxtrain/train/eval.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {

EvalResult evaluate(InferenceModel& model, const corpus::Tokenizer& tok, const TokenData& data,
                    int seq_len, int64_t max_tokens,
                    const std::function<void(int64_t, int64_t)>& progress) {
  const ModelConfig& m = model.config();
  MXT_CHECK(seq_len >= 1 && seq_len <= m.max_seq_len, "--seq-len must be between 1 and the "
            "model's max_seq_len = ", m.max_seq_len, ", got ", seq_len);
  MXT_CHECK(max_tokens >= 0, "--max-tokens must be >= 0 (0 = the whole split), got ",
            max_tokens);
  const int64_t n = data.val_tokens();
  MXT_CHECK(n >= 2, "the validation split has ", n, " token(s); evaluation needs at least 2");
  const int64_t total = max_tokens > 0 ? std::min(max_tokens, n - 1) : n - 1;
  const int64_t V = m.vocab_size;
  std::vector<int32_t> win(size_t(seq_len) + 1);
  std::vector<float> logits(size_t(seq_len) * size_t(V));
  std::vector<float> losses(static_cast<size_t>(seq_len));
  EvalResult r;
  double nats = 0;
  for (int64_t pos = 0; pos < total; pos += seq_len) {
    const int T = int(std::min<int64_t>(seq_len, total - pos));
    data.read_val(pos, T + 1, win.data());
    model.reset();
    model.append(win.data(), T, logits.data(), /*every_position=*/true);
    crossentropy_forward(logits.data(), losses.data(), logits.data(), win.data() + 1, T, V);
    for (int t = 0; t < T; ++t) {
      nats += losses[size_t(t)];
      r.bytes += tok.token_bytes(win[size_t(t) + 1]).size();
    }
    r.tokens += T;
    ++r.windows;
    if (progress) progress(r.tokens, total);
  }
  r.loss = nats / double(r.tokens);
  r.perplexity = std::exp(r.loss);
  r.nats_per_byte = r.bytes > 0 ? nats / double(r.bytes) : 0;
  r.bits_per_byte = r.nats_per_byte / std::log(2.0);
  return r;
}

}  // namespace mxtrain
