// fuzz/fuzz_corpus.cc — the two readers of untrusted corpus files on arbitrary bytes: the
// SentencePiece model settings (the protobuf wire format, corpus/sp_spec.h) and the token-shard
// header (corpus/shards.h). Each either returns or throws mxtrain::Error; never crashes. A
// header that decodes must encode back to the same 64 bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "corpus/sp_spec.h"
#include "mxtrain/common.h"
#include "mxtrain/corpus/shards.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mxtrain::corpus;
  try {
    const detail::SpSpec s =
        detail::read_sp_spec(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    (void)detail::sp_spec_problem(s);
  } catch (const mxtrain::Error&) {
  }
  ShardHeader h;
  try {
    h = decode_shard_header(data, size, "fuzz.bin");
  } catch (const mxtrain::Error&) {
    return 0;
  }
  const std::vector<uint8_t> again = encode_shard_header(h);
  if (std::memcmp(again.data(), data, kShardHeaderBytes) != 0) std::abort();
  return 0;
}
