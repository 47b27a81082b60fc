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
#include <regex>
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

// SentencePiece skips training sentences longer than this (its --max_sentence_length, set
// below); such lines are left out here, so that they take no place in the sample.
constexpr size_t kMaxSentenceBytes = 16384;

// A SentencePiece training failure in mxtrain's terms: its source locations and internal
// conditions left out, the two failures a user causes said with mxtrain's own option.
std::string explain_failure(const std::string& status, int vocab_size) {
  const std::regex too_high(R"(Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+))");
  const std::regex too_few(R"(Vocabulary size is smaller than required_chars\. (\d+) vs (\d+))");
  std::smatch m;
  if (std::regex_search(status, m, too_high))
    return "--vocab-size " + std::to_string(vocab_size) + " is more pieces than this text can "
           "fill (at most " + m[2].str() + "): lower --vocab-size, or give more text";
  if (std::regex_search(status, m, too_few))
    return "--vocab-size " + std::to_string(vocab_size) + " cannot hold the " + m[2].str() +
           " distinct characters of the text (each becomes a piece): raise --vocab-size above " +
           m[2].str();
  // "Internal: ./src/trainer_interface.cc(428) [cond] text" -> "text"
  std::string s = std::regex_replace(status, std::regex(R"(\S+\.cc\(\d+\) \[[^\]]*\]\s*)"), "");
  s = std::regex_replace(s, std::regex(R"(^\w+: )"), "");
  return "SentencePiece training failed" + (s.empty() ? std::string() : ": " + s);
}

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
      if (j - i > kMaxSentenceBytes) {
        ++st.lines_too_long;
      } else if (j > i) {
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
  MXT_CHECK(!lines.empty() || st.lines_too_long == 0, "every line of the text input (",
            reader.input().description, ") is longer than ", kMaxSentenceBytes, " bytes, the "
            "longest sentence SentencePiece trains on: break the text into lines");
  MXT_CHECK(!lines.empty(), "the text input (", reader.input().description,
            ") is empty: there is nothing to train a tokenizer on");
  st.lines_used = int64_t(lines.size());
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  const std::string args =
      "--model_type=bpe --vocab_size=" + std::to_string(opt.vocab_size) +
      " --normalization_rule_name=identity --add_dummy_prefix=false"
      " --remove_extra_whitespaces=false --byte_fallback=true --split_by_whitespace=true"
      " --input_sentence_size=0 --shuffle_input_sentence=false --max_sentence_length=" +
      std::to_string(kMaxSentenceBytes) +
      " --num_threads=" + std::to_string(threads) + " --minloglevel=2";
  sentencepiece::logging::SetMinLogLevel(2);
  sentencepiece::SetRandomGeneratorSeed(1);
  Sentences it(lines);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  MXT_CHECK(status.ok(), explain_failure(status.ToString(), opt.vocab_size));
  MXT_CHECK(!model.empty(), "SentencePiece training produced no model");
  if (stats) *stats = st;
  return model;
}

}  // namespace mxtrain::corpus
