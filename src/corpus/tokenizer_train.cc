// corpus/tokenizer_train.cc — training a byte-exact BPE SentencePiece model
// (corpus/tokenizer.h, train_tokenizer).
//
// The lines of the input (corpus/text_input.h; empty lines skipped) are the training
// sentences. When there are more than max_sentences, a uniform sample of them is taken by
// reservoir sampling with a fixed std::mt19937_64 stream, so the same input always gives the
// same model. The settings are those corpus/sp_spec.h requires: BPE, identity normalization, no
// dummy prefix, spaces kept as they are, byte fallback; the rest are SentencePiece's defaults.
#include <omp.h>
#include <random>
#include <sentencepiece_trainer.h>

#include "mxtrain/common.h"
#include "mxtrain/corpus/text_input.h"
#include "mxtrain/corpus/tokenizer.h"

// libsentencepiece exports its log threshold without declaring it in the installed headers;
// training logs every merge at INFO level otherwise.
namespace sentencepiece::logging {
void SetMinLogLevel(int v);
}  // namespace sentencepiece::logging

namespace mxtrain::corpus {
namespace {

class Sentences : public sentencepiece::SentenceIterator {
 public:
  explicit Sentences(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t i_ = 0;
};

}  // namespace

std::string train_tokenizer(const TokenizerTrainOptions& opt, TokenizerTrainStats* stats) {
  MXT_CHECK(opt.vocab_size >= 260 && opt.vocab_size <= (1 << 24), "--vocab-size must be between "
            "260 (256 byte pieces, <unk>, <s>, </s> and one more) and 16777216, got ",
            opt.vocab_size);
  MXT_CHECK(opt.max_sentences >= 1, "--max-sentences must be >= 1, got ", opt.max_sentences);
  TextReader reader(resolve_text_input(opt.inputs));
  TokenizerTrainStats st;
  std::vector<std::string> lines;
  std::mt19937_64 rng(0x5EED70CE);  // its output is fixed by the standard
  std::string chunk;
  while (reader.read(chunk)) {
    st.text_bytes += chunk.size();
    for (size_t i = 0; i < chunk.size();) {
      size_t j = chunk.find('\n', i);
      if (j == std::string::npos) j = chunk.size();
      if (j > i) {
        ++st.lines_seen;
        if (int64_t(lines.size()) < opt.max_sentences) {
          lines.emplace_back(chunk, i, j - i);
        } else {  // reservoir sampling: line n replaces a random one with probability k/n
          const uint64_t r = rng() % uint64_t(st.lines_seen);
          if (r < uint64_t(opt.max_sentences)) lines[size_t(r)].assign(chunk, i, j - i);
        }
      }
      i = j + 1;
    }
  }
  MXT_CHECK(!lines.empty(), "the text input (", reader.input().description,
            ") is empty: there is nothing to train a tokenizer on");
  st.lines_used = int64_t(lines.size());
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  const std::string args =
      "--model_type=bpe --vocab_size=" + std::to_string(opt.vocab_size) +
      " --normalization_rule_name=identity --add_dummy_prefix=false"
      " --remove_extra_whitespaces=false --byte_fallback=true --split_by_whitespace=true"
      " --input_sentence_size=0 --shuffle_input_sentence=false --max_sentence_length=16384"
      " --num_threads=" + std::to_string(threads) + " --minloglevel=2";
  sentencepiece::logging::SetMinLogLevel(2);
  sentencepiece::SetRandomGeneratorSeed(1);
  Sentences it(lines);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  MXT_CHECK(status.ok(), "SentencePiece training failed: ", status.ToString());
  MXT_CHECK(!model.empty(), "SentencePiece training produced no model");
  if (stats) *stats = st;
  return model;
}

}  // namespace mxtrain::corpus
