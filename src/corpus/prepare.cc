// corpus/prepare.cc — text -> token shards (corpus/prepare.h).
#include "mxtrain/corpus/prepare.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "mxtrain/common.h"
#include "mxtrain/corpus/text_input.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/output_dir.h"

namespace mxtrain::corpus {
namespace {

// The training shards: a new file every `limit` tokens.
class TrainShards {
 public:
  TrainShards(io::AtomicDir& dir, const Tokenizer& tok, int64_t limit)
      : dir_(dir), tok_(tok), limit_(limit) {}
  void append(const int32_t* ids, size_t n) {
    while (n > 0) {
      if (!cur_) {
        char name[32];
        std::snprintf(name, sizeof name, "train_%05zu.bin", files_.size());
        files_.push_back({name, {}});
        cur_ = std::make_unique<ShardWriter>(dir_.file(name), tok_.id(), ShardSplit::train);
      }
      const size_t take = std::min<size_t>(n, size_t(limit_ - int64_t(cur_->tokens())));
      cur_->append(ids, take, text_bytes(tok_, ids, take));
      ids += take;
      n -= take;
      if (int64_t(cur_->tokens()) == limit_) close();
    }
  }
  std::vector<ShardFile> finish() {
    close();
    return std::move(files_);
  }
  static uint64_t text_bytes(const Tokenizer& tok, const int32_t* ids, size_t n) {
    uint64_t b = 0;
    for (size_t i = 0; i < n; ++i) b += tok.token_bytes(ids[i]).size();
    return b;
  }

 private:
  void close() {
    if (cur_) files_.back().header = cur_->finish();
    cur_.reset();
  }
  io::AtomicDir& dir_;
  const Tokenizer& tok_;
  int64_t limit_;
  std::unique_ptr<ShardWriter> cur_;
  std::vector<ShardFile> files_;
};

}  // namespace

PrepareStats prepare_data(const PrepareOptions& opt, const Tokenizer& tok,
                          const PrepareProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  MXT_CHECK(opt.val_fraction > 0 && opt.val_fraction < 0.5, "--val-fraction must be in (0, 0.5), "
            "got ", opt.val_fraction);
  MXT_CHECK(opt.shard_tokens >= 1, "--shard-tokens must be >= 1, got ", opt.shard_tokens);
  MXT_CHECK(!opt.out_dir.empty(), "--out is empty; give the directory to write the shards to");
  MXT_CHECK(opt.chunk_bytes >= 1, "prepare_data: chunk_bytes must be >= 1");
  namespace fs = std::filesystem;
  io::check_replaceable_dir(opt.out_dir, "--out");  // an earlier output, empty, or new
  const TextInput in = resolve_text_input(opt.inputs);
  MXT_CHECK(in.input_bytes > 0, "the text input (", in.description, ") is empty: there is "
            "nothing to tokenize");
  const uint64_t split_at = uint64_t(double(in.input_bytes) * (1.0 - opt.val_fraction));

  const fs::path parent = fs::absolute(opt.out_dir).parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  MXT_CHECK(!ec, "cannot create ", parent.string(), ": ", ec.message());
  io::AtomicDir out(opt.out_dir);
  const int P = std::max(1, omp_get_max_threads());
  std::vector<std::unique_ptr<Encoder>> enc;
  for (int p = 0; p < P; ++p) enc.push_back(std::make_unique<Encoder>(tok));
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(P));
  TrainShards train(out, tok, opt.shard_tokens);
  std::unique_ptr<ShardWriter> val;
  PrepareStats st;
  st.input_bytes = in.input_bytes;

  // Encodes `text` in P parts cut at line boundaries and appends the ids in order.
  auto encode_into = [&](std::string_view text, bool to_val) {
    st.text_bytes += text.size();
    std::vector<size_t> cut(size_t(P) + 1, text.size());
    cut[0] = 0;
    for (int p = 1; p < P; ++p) {
      const size_t at = std::max(cut[size_t(p) - 1], text.size() * size_t(p) / size_t(P));
      const size_t nl = text.find('\n', at);
      cut[size_t(p)] = nl == std::string_view::npos ? text.size() : nl + 1;
    }
#pragma omp parallel for num_threads(P) schedule(static, 1)
    for (int p = 0; p < P; ++p) {
      ids[size_t(p)].clear();
      enc[size_t(p)]->encode(text.substr(cut[size_t(p)], cut[size_t(p) + 1] - cut[size_t(p)]),
                             ids[size_t(p)]);
    }
    for (const std::vector<int32_t>& v : ids) {
      if (to_val)
        val->append(v.data(), v.size(), TrainShards::text_bytes(tok, v.data(), v.size()));
      else
        train.append(v.data(), v.size());
    }
  };

  TextReader reader(in);
  std::string chunk;
  uint64_t before = 0;
  while (reader.read(chunk, opt.chunk_bytes)) {
    const uint64_t after = reader.position();
    std::string_view text = chunk;
    if (!val && after > split_at) {
      // The validation text starts at the first line after the split point, placed in this
      // chunk in proportion to the input bytes it covers.
      const double f = after > before ? double(split_at - std::min(split_at, before)) /
                                            double(after - before) : 0.0;
      // Cut after a newline, else before a space (a text of one long line), else there.
      const size_t at = std::min(text.size(), size_t(f * double(text.size())));
      size_t c = at == 0 ? 0 : text.find('\n', at - 1);
      if (c != std::string_view::npos && at > 0) {
        ++c;
      } else if (at > 0) {
        c = text.find(' ', at);
        if (c == std::string_view::npos) c = at;
      }
      encode_into(text.substr(0, c), false);
      val = std::make_unique<ShardWriter>(out.file("val.bin"), tok.id(), ShardSplit::val);
      text = text.substr(c);
    }
    if (!text.empty()) encode_into(text, bool(val));
    before = after;
    if (progress) progress(reader.input_bytes_read(), in.input_bytes);
  }
  MXT_CHECK(st.text_bytes > 0, "the text input (", in.description, ") is empty: there is "
            "nothing to tokenize");
  ShardManifest m;
  m.tokenizer = tok.id();
  m.token_bytes = token_width(tok.vocab_size());
  m.train = train.finish();
  MXT_CHECK(val, "internal error: no validation split");
  m.val = {"val.bin", val->finish()};
  m.input_bytes = in.input_bytes;
  m.val_fraction = opt.val_fraction;
  m.source = in.description;
  for (const ShardFile& f : m.train) st.train_tokens += int64_t(f.header.tokens);
  st.val_tokens = int64_t(m.val.header.tokens);
  st.train_shards = int(m.train.size());
  MXT_CHECK(st.train_tokens > 0, "the training split is empty: the input (", in.input_bytes,
            " bytes) is too small for --val-fraction ", opt.val_fraction);
  MXT_CHECK(st.val_tokens > 0, "the validation split is empty: the input's last line starts "
            "before the split point; raise --val-fraction or give more text");
  if (!tok.is_bytes()) out.write("tokenizer.model", tok.model_bytes());
  out.write(kShardManifest, manifest_json(m));
  io::commit_output_dir(out, "--out", "mxtrain prepare-data");
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace mxtrain::corpus
