// tests/io/safetensors_test.cc — exact file bytes for a known header, files laid out as
// the official writer does (padding, alignment, contiguous data), round trips, and every
// structural fault refused with a message naming it (never a crash, at any truncation).
#include "mxtrain/io/safetensors.h"

#include <cstring>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"

namespace mxtrain::io {
namespace {

using testing::ScratchDir;

// 8-byte little-endian length + header text + data.
std::vector<uint8_t> st_bytes(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::span<const uint8_t> span_of(const std::vector<uint8_t>& v) { return v; }

TEST(Safetensors, KnownFileBytes) {
  // safetensors.numpy.save({"w": np.array([1, 2], '<f4')}, metadata={"format": "pt"})
  const float w[2] = {1.0f, 2.0f};
  std::vector<uint8_t> got =
      safetensors_encode({{"w", "F32", {2}, f32_span(w, 2)}}, {{"format", "pt"}});
  std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(header.size(), 85u);
  header += "   ";  // padded with spaces to 88, a multiple of 8
  std::vector<uint8_t> want = st_bytes(header, {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40});
  EXPECT_EQ(got, want);
}

TEST(Safetensors, NoMetadataMeansNoMetadataKey) {
  std::vector<uint8_t> b = {5};
  std::vector<uint8_t> got = safetensors_encode({{"b", "U8", {}, span_of(b)}});
  std::string header = R"({"b":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(got, st_bytes(header, {5}));
}

TEST(Safetensors, LayoutIsAlignedContiguousAndPadded) {
  std::vector<uint8_t> u8(3, 1), bf16(2 * 5, 2), f32(4 * 7, 3), f64(8 * 1, 4), i64(8 * 2, 5);
  std::vector<StTensorView> views = {{"a.u8", "U8", {3}, u8},       {"b.bf16", "BF16", {5}, bf16},
                                     {"c.f32", "F32", {7}, f32},    {"d.f64", "F64", {1}, f64},
                                     {"e.i64", "I64", {2, 1}, i64}, {"f.empty", "F32", {0, 4}, {}}};
  std::vector<uint8_t> file = safetensors_encode(views, {{"k", "v"}});
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(file[8 + n - 1] == ' ' || file[8 + n - 1] == '}', true);
  Safetensors st = safetensors_decode(file.data(), file.size());
  // File order: 8-byte items, then 4, 2, 1 (names break ties).
  std::vector<std::string> order;
  for (const auto& t : st.tensors) order.push_back(t.name);
  EXPECT_EQ(order,
            (std::vector<std::string>{"d.f64", "e.i64", "c.f32", "f.empty", "b.bf16", "a.u8"}));
  for (const auto& v : views) {
    const StTensor* t = st.find(v.name);
    ASSERT_NE(t, nullptr) << v.name;
    EXPECT_EQ(t->dtype, v.dtype);
    EXPECT_EQ(t->shape, v.shape);
    EXPECT_EQ(t->data, std::vector<uint8_t>(v.data.begin(), v.data.end())) << v.name;
    // Absolute position of the tensor in the file is a multiple of its item size.
    const size_t pos =
        size_t(std::search(file.begin() + 8 + n, file.end(), t->data.begin(), t->data.end()) -
               file.begin());
    if (!t->data.empty()) {
      EXPECT_EQ(pos % st_dtype_size(t->dtype), 0u) << v.name;
    }
  }
  EXPECT_EQ(st.metadata, (std::map<std::string, std::string>{{"k", "v"}}));
  EXPECT_EQ(st.find("missing"), nullptr);
}

TEST(Safetensors, ReadsHeadersSpelledDifferently) {
  // Key order, whitespace and an empty metadata object differ from what we write.
  std::string header =
      "{ \"x\" : {\"data_offsets\": [0, 4], \"shape\": [2], \"dtype\": \"I16\"},\n"
      "  \"__metadata__\": {} }";
  std::vector<uint8_t> file = st_bytes(header, {1, 0, 0xff, 0xff});
  Safetensors st = safetensors_decode(file.data(), file.size());
  ASSERT_EQ(st.tensors.size(), 1u);
  EXPECT_EQ(st.tensors[0].name, "x");
  EXPECT_EQ(st.tensors[0].data, (std::vector<uint8_t>{1, 0, 0xff, 0xff}));
  EXPECT_TRUE(st.metadata.empty());
}

TEST(Safetensors, FileRoundTrip) {
  ScratchDir d;
  std::vector<float> w(33 * 31);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i) * 0.25f - 7.0f;
  std::vector<uint8_t> bf(2 * 3, 0x7f);
  write_safetensors(d / "m.safetensors",
                    {{"layer.0.weight", "F32", {33, 31}, f32_span(w.data(), w.size())},
                     {"layer.0.bf16", "BF16", {3}, bf}},
                    {{"step", "12"}});
  Safetensors st = read_safetensors(d / "m.safetensors");
  const StTensor* t = st.find("layer.0.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->data.size(), w.size() * 4);
  EXPECT_EQ(std::memcmp(t->data.data(), w.data(), t->data.size()), 0);
  EXPECT_EQ(t->numel(), 33 * 31);
  EXPECT_EQ(st.metadata.at("step"), "12");
  EXPECT_EQ(testing::list_dir(d.path()), std::vector<std::string>{"m.safetensors"});
}

TEST(Safetensors, SerializeRejectsBadTensors) {
  std::vector<uint8_t> four(4), three(3);
  EXPECT_ERROR_CONTAINS(safetensors_encode({{"a", "F32", {1}, four}, {"a", "F32", {1}, four}}),
                        "duplicate tensor name 'a'");
  EXPECT_ERROR_CONTAINS(safetensors_encode({{"a", "F32", {1}, three}}),
                        "tensor 'a' has 3 bytes but shape (1,) of F32 needs 4");
  EXPECT_ERROR_CONTAINS(safetensors_encode({{"a", "F17", {1}, four}}),
                        "unsupported safetensors dtype 'F17'");
  EXPECT_ERROR_CONTAINS(safetensors_encode({{"__metadata__", "U8", {4}, four}}), "reserved");
  EXPECT_ERROR_CONTAINS(safetensors_encode({{"", "U8", {4}, four}}), "name is empty");
  EXPECT_ERROR_CONTAINS(safetensors_encode({{"a", "U8", {-4}, four}}), "negative dimension");
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const float w[3] = {1, 2, 3};
  std::vector<uint8_t> file = safetensors_encode({{"w", "F32", {3}, f32_span(w, 3)}});
  for (size_t n = 0; n < file.size(); ++n) {
    std::string msg = testing::error_of([&] { safetensors_decode(file.data(), n, "m.st"); });
    EXPECT_NE(msg.find("truncated"), std::string::npos) << "prefix " << n << ": " << msg;
    EXPECT_EQ(msg.rfind("m.st: ", 0), 0u) << msg;
  }
}

TEST(Safetensors, StructuralFaultsAreNamed) {
  auto decode = [](const std::string& header, std::vector<uint8_t> data) {
    std::vector<uint8_t> file = st_bytes(header, data);
    return safetensors_decode(file.data(), file.size(), "m.st");
  };
  const std::vector<uint8_t> d8(8, 0);
  EXPECT_ERROR_CONTAINS(decode("[1, 2]", {}), "not a safetensors file");
  EXPECT_ERROR_CONTAINS(decode("{\"a\": ", d8), "safetensors header: not valid JSON");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]},"
             " \"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]}}",
             d8),
      "safetensors header: a: duplicate key");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [-8, 0]}}", d8),
      "tensor 'a': 'data_offsets' must be two byte offsets >= 0, got -8 (negative)");
  EXPECT_ERROR_CONTAINS(decode("{\"a\": 3}", d8), "tensor 'a' is not described by an object");
  EXPECT_ERROR_CONTAINS(decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [8]}}", d8),
                        "tensor 'a' has no 'data_offsets'");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"Q8\", \"shape\": [8], \"data_offsets\": [0, 8]}}", d8),
      "unsupported dtype 'Q8'");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [-8], \"data_offsets\": [0, 8]}}", d8),
      "'shape' entries must be non-negative integers");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0]}}", d8),
      "'data_offsets' must be [begin, end]");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [8, 0]}}", d8),
      "are reversed");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 9]}}", d8),
      "data_offsets [0, 9] are out of range");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", d8),
      "dtype/shape size mismatch: shape (3,) of F32 needs 12 bytes, data_offsets give 8");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [6], \"data_offsets\": [0, 6]},"
             " \"b\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [4, 8]}}",
             d8),
      "tensors 'a' and 'b' overlap");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]},"
             " \"b\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [4, 8]}}",
             d8),
      "gap of 2 bytes before tensor 'b'");
  EXPECT_ERROR_CONTAINS(
      decode("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", d8),
      "4 unexpected bytes after the last tensor");
  EXPECT_ERROR_CONTAINS(decode("{\"__metadata__\": {\"k\": 1}}", {}), "entry 'k' is not a string");
  EXPECT_ERROR_CONTAINS(decode("{\"__metadata__\": [1]}", {}), "must be an object of strings");
  // Header length beyond the file.
  std::vector<uint8_t> bad = st_bytes("{}", {});
  bad[0] = 200;
  EXPECT_ERROR_CONTAINS(safetensors_decode(bad.data(), bad.size(), "m.st"),
                        "header length 200 goes beyond the end of the 10-byte file");
  bad.assign(16, 0xff);
  EXPECT_ERROR_CONTAINS(safetensors_decode(bad.data(), bad.size(), "m.st"), "goes beyond the end");
  ScratchDir d;
  EXPECT_ERROR_CONTAINS(read_safetensors(d / "none.safetensors"), "file not found");
}

TEST(Safetensors, FlippedHeaderBytesNeverCrash) {
  // Every single-byte corruption of the header either still decodes to a consistent file
  // or raises mxtrain::Error — nothing else escapes.
  std::vector<uint8_t> a(12, 1), b(2, 2);
  std::vector<uint8_t> file =
      safetensors_encode({{"a", "F32", {3}, a}, {"b", "U8", {2}, b}}, {{"m", "x"}});
  for (size_t i = 0; i < file.size() - 14; ++i) {
    for (uint8_t flip : {uint8_t(0x01), uint8_t(0x20), uint8_t(0x80)}) {
      std::vector<uint8_t> c = file;
      c[i] ^= flip;
      try {
        Safetensors st = safetensors_decode(c.data(), c.size(), "m.st");
        size_t total = 0;
        for (const auto& t : st.tensors) total += t.data.size();
        EXPECT_EQ(total, 14u) << "byte " << i;
      } catch (const mxtrain::Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace mxtrain::io
