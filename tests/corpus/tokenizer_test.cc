// Tests for the tokenizers (corpus/tokenizer.h): byte-exact round trips on awkward text, the
// word-cached encoding equal to SentencePiece's own encoding of the whole text, deterministic
// training, and the refusal of models that are not byte-exact.
#include "mxtrain/corpus/tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "corpus/corpus_test_util.h"
#include "mxtrain/common.h"
#include "mxtrain/corpus/text_input.h"

namespace mxtrain::corpus {
namespace {
using testing::small_tokenizer;

std::vector<int32_t> encode(const Tokenizer& t, std::string_view s) {
  std::vector<int32_t> ids;
  t.encode(s, ids);
  return ids;
}

// Texts SentencePiece alone would not reproduce: malformed UTF-8, U+2581, NUL and control
// bytes, runs of spaces, tabs, CR, a word longer than the cache's limit, no final newline.
using namespace std::string_literals;

const std::vector<std::string>& awkward_texts() {
  static const std::vector<std::string> t = {
      "",
      "\n",
      "\n\n\n",
      " ",
      "   leading and trailing spaces   ",
      "Hello, world.\nThe quick brown fox.\n",
      "tabs\tand\r\nCRLF\r\n",
      "nul\0byte and \x01\x02\x7f controls"s,  // the s literal keeps the NUL
      "bad utf-8: \xff\xfe \xc3\x28 \xe2\x82 \xf0\x9f\x98 end",
      "overlong \xc0\xaf and surrogate \xed\xa0\x80 and too big \xf4\x90\x80\x80",
      "the marker \xE2\x96\x81 itself, \xE2\x96\x81\xE2\x96\x81 twice, a\xE2\x96\x81" "b",
      "unicode: caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 emoji",
      std::string(300, 'x') + " " + std::string(70, 'y') + "z",
      "no final newline",
  };
  return t;
}

TEST(Tokenizer, BytesIsTheIdentityOnBytes) {
  const Tokenizer t = Tokenizer::bytes();
  EXPECT_TRUE(t.is_bytes());
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.id().str(), "bytes");
  EXPECT_TRUE(t.model_bytes().empty());
  for (const std::string& s : awkward_texts()) {
    const std::vector<int32_t> ids = encode(t, s);
    ASSERT_EQ(ids.size(), s.size());
    for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(ids[i], int32_t(uint8_t(s[i])));
    EXPECT_EQ(t.decode(ids), s);
  }
  EXPECT_THROW(t.token_bytes(256), Error);
}

TEST(Tokenizer, SentencePieceRoundTripsEveryByte) {
  const Tokenizer& t = small_tokenizer();
  EXPECT_FALSE(t.is_bytes());
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.id().str().rfind("sentencepiece crc32:", 0), 0u) << t.id().str();
  for (const std::string& s : awkward_texts()) {
    const std::vector<int32_t> ids = encode(t, s);
    EXPECT_EQ(t.decode(ids), s) << s;
    size_t bytes = 0;
    for (int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, t.vocab_size());
      bytes += t.token_bytes(id).size();
    }
    EXPECT_EQ(bytes, s.size()) << "token_bytes must cover the text exactly: " << s;
  }
  // All 256 byte values in one text.
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  EXPECT_EQ(t.decode(encode(t, all + all)), all + all);
}

// On well-formed text without U+2581 the cached word-by-word encoding is SentencePiece's own
// encoding of the whole text (a fortunes file the model was not trained on).
TEST(Tokenizer, EncodingEqualsSentencePieceOnWholeText) {
  const Tokenizer& t = small_tokenizer();
  const std::string text = read_all_text(resolve_text_input({testing::fortunes_file("cookie")}));
  ASSERT_GT(text.size(), 100000u);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(t.model_bytes()).ok());
  std::vector<int> want;
  ASSERT_TRUE(sp.Encode(text, &want).ok());
  Encoder enc(t);
  std::vector<int32_t> got;
  enc.encode(text, got);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "token " << i;
  // Encoded in two halves cut at a line boundary, with the cache warm: the same ids.
  const size_t cut = text.find('\n', text.size() / 2) + 1;
  std::vector<int32_t> halves;
  enc.encode(std::string_view(text).substr(0, cut), halves);
  enc.encode(std::string_view(text).substr(cut), halves);
  EXPECT_EQ(halves, got);
  // A cache small enough to be emptied many times: the same ids.
  Encoder tiny_cache(t, 4096);
  std::vector<int32_t> again;
  tiny_cache.encode(text, again);
  EXPECT_EQ(again, got);
}

TEST(Tokenizer, TrainingIsDeterministicAndReachesTheVocabulary) {
  TokenizerTrainOptions o;
  o.inputs = {testing::fortunes_file()};
  o.vocab_size = 512;
  TokenizerTrainStats st;
  const std::string a = train_tokenizer(o, &st);
  EXPECT_EQ(a, small_tokenizer().model_bytes());
  EXPECT_GT(st.lines_seen, 1000);
  EXPECT_EQ(st.lines_used, st.lines_seen);
  // Sampling 500 lines is deterministic too, and uses exactly 500.
  o.max_sentences = 500;
  TokenizerTrainStats s1, s2;
  EXPECT_EQ(train_tokenizer(o, &s1), train_tokenizer(o, &s2));
  EXPECT_EQ(s1.lines_used, 500);
}

TEST(Tokenizer, TrainingRefusesAnEmptyCorpusAndABadVocabulary) {
  testing::ScratchDir d;
  testing::write_text(d / "empty.txt", "\n\n\n");
  TokenizerTrainOptions o;
  o.inputs = {d / "empty.txt"};
  try {
    train_tokenizer(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is empty"), std::string::npos) << e.what();
  }
  o.inputs = {testing::fortunes_file()};
  o.vocab_size = 100;
  EXPECT_THROW(train_tokenizer(o), Error);
}

// A model with SentencePiece's default settings (NFKC normalization, dummy prefix, extra
// whitespace removed) is refused with the setting named; so is a file that is no model.
TEST(Tokenizer, RefusesModelsThatAreNotByteExact) {
  testing::ScratchDir d;
  const std::string prefix = d / "default";
  const auto st = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + testing::fortunes_file() + " --model_prefix=" + prefix +
      " --vocab_size=400 --model_type=bpe --minloglevel=2");
  ASSERT_TRUE(st.ok()) << st.ToString();
  try {
    Tokenizer::load(prefix + ".model");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("default.model: this SentencePiece model does not encode text byte for "
                     "byte: its normalization is `nmt_nfkc`"),
              std::string::npos)
        << m;
  }
  testing::write_text(d / "junk.model", "this is not a protobuf message at all");
  EXPECT_THROW(Tokenizer::load(d / "junk.model"), Error);
  EXPECT_THROW(Tokenizer::load(d / "missing.model"), Error);
}

}  // namespace
}  // namespace mxtrain::corpus
