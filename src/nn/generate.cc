// nn/generate.cc — InferenceModel (nn/generate.h): the GPT's blocks in FP32 over their KV
// caches. append() is GPT::forward_cached at the next free position: the embedding, every
// layer's attention block (q and k rotated to their positions, k and v into the cache, each
// query over the cache) and MLP or MoE block, then the final RMSNorm and lm_head of the rows
// whose logits are wanted (nn/transformer.cc).
#include "mxtrain/nn/generate.h"

#include "mxtrain/common.h"

namespace mxtrain {

InferenceModel::InferenceModel(const ModelConfig& cfg) : model_(cfg) {}

void InferenceModel::append(const int32_t* tokens, int n, float* logits, bool every_position) {
  MXT_CHECK(tokens && logits, "InferenceModel::append: null tokens or logits");
  MXT_CHECK(n >= 1 && int64_t(cached_) + n <= config().max_seq_len, "InferenceModel::append: ",
            n, " tokens after ", cached_, " cached ones exceed max_seq_len = ",
            config().max_seq_len);
  model_.forward_cached(tokens, n, cached_, logits, every_position);
  cached_ += n;
}

}  // namespace mxtrain
