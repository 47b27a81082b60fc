// Tests for token shards and prepare-data (corpus/shards.h, corpus/prepare.h): the header
// format, the tokens and text bytes written (exactly the input's, in order, for any thread
// count and shard size), the validation split at a line boundary, reads across shard
// boundaries, every refusal (truncated, corrupted, mixed or missing shards, empty corpus, an
// output path that is not a shard directory), and that reading does not keep pages resident.
#include <gtest/gtest.h>
#include <omp.h>

#include <fstream>

#include "corpus/corpus_test_util.h"
#include "mxtrain/common.h"
#include "mxtrain/corpus/prepare.h"
#include "mxtrain/corpus/shards.h"
#include "mxtrain/corpus/text_input.h"

namespace mxtrain::corpus {
namespace {
using testing::ScratchDir;
using io::testing::error_of;
using testing::write_text;
namespace fs = std::filesystem;

// Lines of varying length, numbered, so that any reordering or loss shows.
std::string numbered_text(int lines) {
  std::string s;
  for (int i = 0; i < lines; ++i) {
    s += "line " + std::to_string(i) + ":";
    for (int k = 0; k < i % 13; ++k) s += " word" + std::to_string(k * i % 97);
    s += '\n';
  }
  return s;
}

std::vector<int32_t> all_train(const TokenShards& s) {
  std::vector<int32_t> v(size_t(s.train_tokens()));
  s.read_train(0, s.train_tokens(), v.data());
  return v;
}
std::vector<int32_t> all_val(const TokenShards& s) {
  std::vector<int32_t> v(size_t(s.val_tokens()));
  s.read_val(0, s.val_tokens(), v.data());
  return v;
}


TEST(ShardHeader, RoundTripsAndRefusesDamage) {
  ShardHeader h;
  h.token_bytes = 4;
  h.tokens = 123456789012ull;
  h.text_bytes = 987654321098ull;
  h.tokenizer = {TokenizerKind::sentencepiece, 0xDEADBEEF, 100000};
  h.split = ShardSplit::val;
  h.data_crc32 = 0x12345678;
  const std::vector<uint8_t> b = encode_shard_header(h);
  ASSERT_EQ(b.size(), kShardHeaderBytes);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 8), "MXTSHARD");
  const ShardHeader d = decode_shard_header(b.data(), b.size(), "h");
  EXPECT_EQ(d.version, 1u);
  EXPECT_EQ(d.token_bytes, 4u);
  EXPECT_EQ(d.tokens, h.tokens);
  EXPECT_EQ(d.text_bytes, h.text_bytes);
  EXPECT_EQ(d.tokenizer, h.tokenizer);
  EXPECT_EQ(d.split, ShardSplit::val);
  EXPECT_EQ(d.data_crc32, h.data_crc32);
  for (size_t i : {0u, 9u, 20u, 33u, 45u, 61u}) {  // any flipped byte is refused
    std::vector<uint8_t> bad = b;
    bad[i] ^= 0x10;
    EXPECT_THROW(decode_shard_header(bad.data(), bad.size(), "h"), Error) << "byte " << i;
  }
  EXPECT_NE(error_of([&] { decode_shard_header(b.data(), 40, "h"); }).find("truncated"),
            std::string::npos);
  EXPECT_EQ(token_width(256), 2u);
  EXPECT_EQ(token_width(65536), 2u);
  EXPECT_EQ(token_width(65537), 4u);
}

// Byte-level shards hold exactly the input's bytes: train then val is the text, the split
// lies at a line boundary near the requested fraction, and small shards read back seamlessly.
TEST(PrepareData, ByteShardsHoldTheTextInOrder) {
  ScratchDir d;
  const std::string text = numbered_text(3000);
  write_text(d / "in.txt", text);
  PrepareOptions o;
  o.inputs = {d / "in.txt"};
  o.out_dir = d / "shards";
  o.val_fraction = 0.1;
  o.shard_tokens = 7777;  // many shards
  o.chunk_bytes = 5000;   // many chunks
  const PrepareStats st = prepare_data(o, Tokenizer::bytes());
  EXPECT_EQ(st.text_bytes, text.size());
  EXPECT_EQ(uint64_t(st.train_tokens + st.val_tokens), text.size());
  const TokenShards s = TokenShards::open(o.out_dir);
  EXPECT_EQ(s.tokenizer().str(), "bytes");
  EXPECT_EQ(int64_t(s.manifest().train.size()), (st.train_tokens + 7776) / 7777);
  EXPECT_FALSE(fs::exists(d / "shards/tokenizer.model"));
  std::string got;
  for (int32_t t : all_train(s)) got += char(t);
  const size_t ntrain = got.size();
  for (int32_t t : all_val(s)) got += char(t);
  EXPECT_EQ(got, text);
  EXPECT_EQ(text[ntrain - 1], '\n') << "the validation text starts at a line";
  EXPECT_NEAR(double(text.size() - ntrain) / double(text.size()), 0.1, 0.01);
  EXPECT_EQ(s.train_text_bytes(), ntrain);
  EXPECT_EQ(s.val_text_bytes(), text.size() - ntrain);
  // A read spanning three shards.
  std::vector<int32_t> span(20000);
  s.read_train(7000, 20000, span.data());
  for (size_t i = 0; i < span.size(); ++i) ASSERT_EQ(span[i], uint8_t(text[7000 + i])) << i;
  EXPECT_THROW(s.read_train(s.train_tokens() - 5, 6, span.data()), Error);
  EXPECT_THROW(s.read_val(-1, 2, span.data()), Error);
}

// SentencePiece shards decode to the text; the files are the same for 1 and 2 threads and
// the tokenizer is copied next to them.
TEST(PrepareData, SentencePieceShardsDecodeToTheTextForAnyThreadCount) {
  ScratchDir d;
  const Tokenizer& tok = testing::small_tokenizer();
  const std::string text = read_all_text(resolve_text_input({testing::fortunes_file("science")}));
  write_text(d / "in.txt", text);
  PrepareOptions o;
  o.inputs = {d / "in.txt"};
  o.chunk_bytes = 20000;
  std::vector<std::string> files[2];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    o.out_dir = d / ("s" + std::to_string(threads));
    o.shard_tokens = 10000;
    prepare_data(o, tok);
    for (const auto& e : fs::directory_iterator(o.out_dir)) {
      std::ifstream f(e.path(), std::ios::binary);
      files[threads - 1].push_back(e.path().filename().string() + ":" +
                                   std::string(std::istreambuf_iterator<char>(f), {}));
    }
    std::sort(files[threads - 1].begin(), files[threads - 1].end());
  }
  omp_set_num_threads(2);
  EXPECT_EQ(files[0], files[1]);
  const TokenShards s = TokenShards::open(d / "s2");
  EXPECT_EQ(s.tokenizer(), tok.id());
  EXPECT_EQ(s.manifest().token_bytes, 2u);
  const std::string back = tok.decode(all_train(s)) + tok.decode(all_val(s));
  EXPECT_EQ(back, text);
  EXPECT_EQ(s.train_text_bytes() + s.val_text_bytes(), text.size());
  EXPECT_EQ(Tokenizer::load(d / "s2/tokenizer.model").id(), tok.id());
  // The same ids as encoding the whole text at once.
  std::vector<int32_t> whole;
  tok.encode(text, whole);
  std::vector<int32_t> both = all_train(s), val = all_val(s);
  both.insert(both.end(), val.begin(), val.end());
  EXPECT_EQ(both, whole);
}

TEST(PrepareData, RefusesEmptyInputAndForeignOutput) {
  ScratchDir d;
  write_text(d / "empty.txt", "");
  PrepareOptions o;
  o.inputs = {d / "empty.txt"};
  o.out_dir = d / "out";
  EXPECT_NE(error_of([&] { prepare_data(o, Tokenizer::bytes()); }).find("is empty"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(o.out_dir));
  // A directory with other files is never replaced.
  write_text(d / "in.txt", numbered_text(200));
  fs::create_directories(d / "mine");
  write_text(d / "mine/keep.txt", "precious");
  o.inputs = {d / "in.txt"};
  o.out_dir = d / "mine";
  EXPECT_NE(error_of([&] { prepare_data(o, Tokenizer::bytes()); })
                .find("the directory exists and holds files mxtrain did not write (keep.txt)"),
            std::string::npos);
  EXPECT_TRUE(fs::exists(d / "mine/keep.txt"));
  o.out_dir = d / "out";
  o.val_fraction = 0.6;
  EXPECT_THROW(prepare_data(o, Tokenizer::bytes()), Error);
  // A single line too short to leave anything after the split point.
  write_text(d / "one.txt", "x");
  o.inputs = {d / "one.txt"};
  o.val_fraction = 0.05;
  EXPECT_THROW(prepare_data(o, Tokenizer::bytes()), Error);
  EXPECT_FALSE(fs::exists(o.out_dir));
  o.inputs = {d / "missing.txt"};
  EXPECT_NE(error_of([&] { prepare_data(o, Tokenizer::bytes()); }).find("does not exist"),
            std::string::npos);
}

// Damaged directories: each is refused at open, naming the file and the problem.
TEST(TokenShards, RefusesTruncatedCorruptedMixedAndMissingShards) {
  ScratchDir d;
  write_text(d / "in.txt", numbered_text(2000));
  PrepareOptions o;
  o.inputs = {d / "in.txt"};
  o.out_dir = d / "a";
  o.shard_tokens = 20000;
  prepare_data(o, Tokenizer::bytes());
  o.out_dir = d / "b";
  prepare_data(o, testing::small_tokenizer());
  auto fresh = [&](const std::string& name) {
    fs::remove_all(d / name);
    fs::copy(d / "a", d / name);
    return d / name;
  };
  EXPECT_NO_THROW(TokenShards::open(fresh("ok")));

  const std::string t = fresh("trunc");
  fs::resize_file(t + "/train_00001.bin", fs::file_size(t + "/train_00001.bin") - 3);
  EXPECT_NE(error_of([&] { TokenShards::open(t); }).find("train_00001.bin: "),
            std::string::npos);
  EXPECT_NE(error_of([&] { TokenShards::open(t); }).find("(truncated)"), std::string::npos);

  const std::string c = fresh("corrupt");
  {
    std::fstream f(c + "/train_00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x7f');
  }
  EXPECT_NE(error_of([&] { TokenShards::open(c); }).find("data checksum mismatch"),
            std::string::npos);

  const std::string m = fresh("mixed");  // the validation shard of a SentencePiece run
  fs::copy_file(d / "b/val.bin", m + "/val.bin", fs::copy_options::overwrite_existing);
  EXPECT_NE(error_of([&] { TokenShards::open(m); }).find("does not match shards.json"),
            std::string::npos);

  const std::string g = fresh("gone");
  fs::remove(g + "/train_00002.bin");
  EXPECT_NE(error_of([&] { TokenShards::open(g); }).find("the shard directory is incomplete"),
            std::string::npos);

  const std::string j = fresh("json");
  write_text(j + "/shards.json", "{\"format\": \"mxtrain-token-shards\", \"version\": 1}");
  EXPECT_NE(error_of([&] { TokenShards::open(j); }).find("malformed manifest"), std::string::npos);

  EXPECT_NE(error_of([&] { TokenShards::open(d.path()); }).find("not a token-shard "
                                                                      "directory"),
            std::string::npos);
  EXPECT_FALSE(TokenShards::is_shard_dir(d.path()));
  EXPECT_TRUE(TokenShards::is_shard_dir(d / "a"));
}

// Resident file-backed memory of this process, from /proc/self/status (KiB).
int64_t rss_file_kib() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    int64_t v;
    if (key == "RssFile:" && (f >> v)) return v;
  }
  return -1;
}

// Reading a whole 8 MB shard window by window leaves (almost) none of it resident: the
// process's memory does not grow with the corpus.
TEST(TokenShards, ReadingDoesNotKeepPagesResident) {
  ScratchDir d;
  std::string text;
  while (text.size() < (8u << 20)) text += numbered_text(500);
  write_text(d / "in.txt", text);
  PrepareOptions o;
  o.inputs = {d / "in.txt"};
  o.out_dir = d / "s";
  prepare_data(o, Tokenizer::bytes());
  const TokenShards s = TokenShards::open(o.out_dir);
  ASSERT_GT(s.train_tokens(), 7 << 20);
  const int64_t before = rss_file_kib();
  ASSERT_GE(before, 0);
  std::vector<int32_t> w(129);
  uint64_t sum = 0;
  for (int64_t p = 0; p + 129 <= s.train_tokens(); p += 128) {
    s.read_train(p, 129, w.data());
    sum += uint64_t(w[0]);
  }
  EXPECT_GT(sum, 0u);
  // Each window's pages (and what the kernel mapped around them) are released after the read;
  // without that, 16 MiB of the shard (2 bytes a token) would now be resident.
  EXPECT_LT(rss_file_kib() - before, 1024) << "KiB of the shard stayed resident";
}

}  // namespace
}  // namespace mxtrain::corpus
