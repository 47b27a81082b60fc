// mxtrain/train/eval.h — held-out evaluation of a trained model (`mxtrain eval`).
//
// The model (nn/generate.h, FP32 from the checkpoint's master weights) reads the validation
// split in consecutive windows of seq_len tokens, each predicting its next tokens, so every
// token after the first is predicted exactly once (the last window may be shorter); with
// max_tokens > 0 only the first max_tokens predictions count. Reported per token (loss in nats,
// perplexity = e^loss) and per byte of text (the targets' bytes, corpus/tokenizer.h
// token_bytes): bits per byte = total nats / ln 2 / bytes. For a byte-level model nats per
// byte equal the loss.
#pragma once

#include <cstdint>
#include <functional>

#include "mxtrain/corpus/tokenizer.h"
#include "mxtrain/nn/generate.h"
#include "mxtrain/train/data.h"

namespace mxtrain {

struct EvalResult {
  int64_t tokens = 0;    // predictions counted
  uint64_t bytes = 0;    // bytes of text those tokens stand for
  double loss = 0;       // mean nats per token
  double perplexity = 0;
  double nats_per_byte = 0, bits_per_byte = 0;
  int64_t windows = 0;
};

// `progress(done, total)` sees the predictions made so far after each window.
EvalResult evaluate(InferenceModel& model, const corpus::Tokenizer& tok, const TokenData& data,
                    int seq_len, int64_t max_tokens = 0,
                    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace mxtrain
