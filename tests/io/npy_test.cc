// tests/io/npy_test.cc — .npy bytes as numpy.save writes them, headers from several NumPy
// versions, round trips for every supported dtype, and every malformed input refused with
// a message saying what is wrong (never a crash, also for every truncation point).
#include "mxtrain/io/npy.h"

#include <cstring>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"

namespace mxtrain::io {
namespace {

using testing::ScratchDir;

// Builds a .npy byte string from a header text (padded as given) and raw data.
std::vector<uint8_t> npy_bytes(const std::string& header, const std::vector<uint8_t>& data,
                               int major = 1) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(major), 0};
  const size_t n = header.size();
  out.push_back(uint8_t(n));
  out.push_back(uint8_t(n >> 8));
  if (major >= 2) {
    out.push_back(uint8_t(n >> 16));
    out.push_back(uint8_t(n >> 24));
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(Npy, EncodeMatchesNumpySaveBytes) {
  // np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)) with NumPy >= 1.24: the dict,
  // 20 spare spaces for growing axis 0, padding to a 128-byte header, '\n'.
  std::vector<float> v = {0, 1, 2, 3, 4, 5};
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string header = dict + std::string(20, ' ');
  header += std::string(128 - 10 - 1 - header.size(), ' ') + "\n";
  ASSERT_EQ(header.size(), 118u);
  std::vector<uint8_t> want = npy_bytes(header, f32_bytes(v));
  EXPECT_EQ(npy_encode(npy_from_f32(v.data(), {2, 3})), want);
}

TEST(Npy, EncodeScalarAndOneDimShapes) {
  uint8_t x = 9;
  std::vector<uint8_t> b = npy_encode(npy_from_u8(&x, {}));
  std::string text(b.begin() + 10, b.end() - 1);
  EXPECT_EQ(text.rfind("{'descr': '|u1', 'fortran_order': False, 'shape': (), }", 0), 0u);
  EXPECT_EQ(b.size() % 64, 1u);  // header 64-aligned, then one data byte
  std::vector<uint8_t> c = npy_encode(npy_make("<i4", {0}, nullptr));
  std::string text1(c.begin() + 10, c.end());
  EXPECT_EQ(text1.rfind("{'descr': '<i4', 'fortran_order': False, 'shape': (0,), }", 0), 0u);
  EXPECT_EQ(c.size(), 128u);
  EXPECT_EQ(c.back(), '\n');
}

TEST(Npy, DecodesHeadersOfOlderAndOtherWriters) {
  std::vector<float> v = {1.5f, -2.0f, 3.25f};
  // NumPy < 1.14: 16-byte alignment, no spare spaces.
  std::string h1 = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  h1 += std::string(16 - (10 + h1.size() + 1) % 16, ' ') + "\n";
  // Another writer: double quotes, other key order, no trailing comma, no padding.
  std::string h2 = "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<f4\"}\n";
  // Python 2: long suffix.
  std::string h3 = "{'descr': '<f4', 'fortran_order': False, 'shape': (3L,), }\n";
  for (const std::string& h : {h1, h2, h3}) {
    std::vector<uint8_t> b = npy_bytes(h, f32_bytes(v));
    NpyArray a = npy_decode(b.data(), b.size());
    EXPECT_EQ(a.dtype, "<f4") << h;
    EXPECT_EQ(a.shape, std::vector<int64_t>{3}) << h;
    EXPECT_EQ(npy_to_f32(a), v) << h;
  }
  // Version 2.0 and 3.0 headers (4-byte length).
  for (int major : {2, 3}) {
    std::vector<uint8_t> b = npy_bytes(h1, f32_bytes(v), major);
    EXPECT_EQ(npy_to_f32(npy_decode(b.data(), b.size())), v);
  }
  // One-byte kinds may be spelled with '<'; stored canonically as '|'.
  std::vector<uint8_t> b =
      npy_bytes("{'descr': '<u1', 'fortran_order': False, 'shape': (2,)}", {7, 8});
  EXPECT_EQ(npy_decode(b.data(), b.size()).dtype, "|u1");
  // Fortran order is harmless for 1-D.
  b = npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }", f32_bytes(v));
  EXPECT_EQ(npy_to_f32(npy_decode(b.data(), b.size())), v);
}

TEST(Npy, RoundTripEveryDtypeAndAwkwardShapes) {
  const std::vector<std::string> dtypes = {"|b1", "|i1", "|u1", "<i2", "<u2", "<i4",
                                           "<u4", "<i8", "<u8", "<f2", "<f4", "<f8"};
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {1}, {31, 33}, {2, 3, 4}, {1, 0, 5}};
  for (const auto& dt : dtypes) {
    for (const auto& shape : shapes) {
      NpyArray a;
      a.dtype = dt;
      a.shape = shape;
      a.data.resize(size_t(a.numel()) * a.itemsize());
      for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = uint8_t(i * 31 + 1);
      std::vector<uint8_t> enc = npy_encode(a);
      EXPECT_EQ((enc.size() - a.data.size()) % 64, 0u) << dt << shape_str(shape);
      NpyArray b = npy_decode(enc.data(), enc.size());
      EXPECT_EQ(b.dtype, dt);
      EXPECT_EQ(b.shape, shape);
      EXPECT_EQ(b.data, a.data) << dt << shape_str(shape);
    }
  }
}

TEST(Npy, HugeHeaderUsesVersion2) {
  NpyArray a;
  a.dtype = "<f4";
  a.shape.assign(25000, 1);  // header text longer than 65535 bytes
  a.data.assign(4, 0x3f);
  std::vector<uint8_t> enc = npy_encode(a);
  EXPECT_EQ(enc[6], 2);
  EXPECT_EQ((enc.size() - 4) % 64, 0u);
  NpyArray b = npy_decode(enc.data(), enc.size());
  EXPECT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.data, a.data);
}

TEST(Npy, FileRoundTripIsAtomicWrite) {
  ScratchDir d;
  std::vector<float> v = {1, 2, 3, 4};
  write_npy(d / "x.npy", npy_from_f32(v.data(), {2, 2}));
  NpyArray a = read_npy(d / "x.npy");
  npy_require(a, "<f4", 2, "x.npy");
  EXPECT_EQ(npy_to_f32(a), v);
  EXPECT_EQ(testing::list_dir(d.path()), std::vector<std::string>{"x.npy"});
}

TEST(Npy, NotANpyFile) {
  std::string s = "hello, world";
  EXPECT_ERROR_CONTAINS(npy_decode((const uint8_t*)s.data(), s.size(), "in.npy"),
                        "in.npy: not a .npy file");
  EXPECT_ERROR_CONTAINS(npy_decode(nullptr, 0, "in.npy"), "not a .npy file");
  ScratchDir d;
  EXPECT_ERROR_CONTAINS(read_npy(d / "missing.npy"), "file not found");
}

TEST(Npy, EveryTruncationIsAnError) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> enc = npy_encode(npy_from_f32(v.data(), {2, 3}));
  for (size_t n = 0; n < enc.size(); ++n) {
    std::string msg = testing::error_of([&] { npy_decode(enc.data(), n, "t.npy"); });
    const char* want = n < 6 ? "not a .npy file" : "truncated";
    EXPECT_NE(msg.find(want), std::string::npos) << "prefix " << n << ": " << msg;
  }
  std::vector<uint8_t> longer = enc;
  longer.push_back(0);
  EXPECT_ERROR_CONTAINS(npy_decode(longer.data(), longer.size(), "t.npy"),
                        "1 unexpected bytes after the data");
}

TEST(Npy, FlippedHeaderBytesNeverCrash) {
  // Every single-bit corruption of the header decodes to a consistent array or raises
  // mxtrain::Error; nothing else escapes.
  std::vector<float> v(12, 1.0f);
  std::vector<uint8_t> enc = npy_encode(npy_from_f32(v.data(), {3, 4}));
  for (size_t i = 0; i + 48 < enc.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> c = enc;
      c[i] ^= uint8_t(1 << bit);
      try {
        NpyArray a = npy_decode(c.data(), c.size(), "x.npy");
        EXPECT_EQ(a.data.size(), size_t(a.numel()) * a.itemsize()) << i << ":" << bit;
      } catch (const mxtrain::Error&) {
      }
    }
  }
}

TEST(Npy, UnsupportedContentsAreNamed) {
  auto decode = [](const std::string& header, size_t nbytes = 8) {
    std::vector<uint8_t> b = npy_bytes(header, std::vector<uint8_t>(nbytes, 0));
    return npy_decode(b.data(), b.size(), "x.npy");
  };
  EXPECT_ERROR_CONTAINS(decode("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }"),
                        "big-endian dtype '>f4' is not supported");
  EXPECT_ERROR_CONTAINS(decode("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }"),
                        "unsupported dtype '<c8'");
  EXPECT_ERROR_CONTAINS(decode("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"),
                        "unsupported dtype '|O'");
  EXPECT_ERROR_CONTAINS(
      decode("{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (1,), }"),
      "structured dtypes are not supported");
  EXPECT_ERROR_CONTAINS(decode("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }"),
                        "Fortran-order arrays are not supported");
  EXPECT_ERROR_CONTAINS(decode("{'descr': '<f4', 'shape': (2,), }"), "no 'fortran_order' entry");
  EXPECT_ERROR_CONTAINS(decode("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }"),
                        "negative dimension");
  EXPECT_ERROR_CONTAINS(decode("{'descr': '<f4', 'fortran_order': False, 'shape': 'x', }"),
                        "'shape' is not a tuple");
  EXPECT_ERROR_CONTAINS(decode("{'descr': '<f4' 'fortran_order': False}"), "malformed .npy header");
  EXPECT_ERROR_CONTAINS(decode("{'descr': '<f4"), "malformed .npy header");
  EXPECT_ERROR_CONTAINS(decode("['descr']"), "malformed .npy header");
  EXPECT_ERROR_CONTAINS(decode("{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000, "
                               "4000000000, 4000000000), }"),
                        "truncated");
  // Found by fuzz_npy: an empty array whose other dimensions multiply past int64.
  EXPECT_ERROR_CONTAINS(decode("{'descr': '<i2', 'fortran_order': False, 'shape': (2, "
                               "2020320022, 200221, 112, 200221, 11, 0, 11), }", 0),
                        "more than 2^63 elements");
  const std::vector<uint8_t> empty =
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 3000000, 0), }", {});
  const NpyArray e = npy_decode(empty.data(), empty.size(), "x.npy");
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.data.empty());
  std::vector<uint8_t> v4 = npy_bytes("{}", {}, 1);
  v4[6] = 4;
  EXPECT_ERROR_CONTAINS(npy_decode(v4.data(), v4.size(), "x.npy"),
                        "unsupported .npy format version 4.0");
}

TEST(Npy, RequireNamesExpectedAndFound) {
  NpyArray a = npy_make("<f8", {3, 4, 5}, std::vector<double>(60).data());
  EXPECT_ERROR_CONTAINS(npy_require(a, "<f4", 2, "x.npy"),
                        "x.npy: expected dtype float32 ('<f4'), got float64 ('<f8')");
  EXPECT_ERROR_CONTAINS(npy_require(a, "<f8", 2, "x.npy"),
                        "x.npy: expected a 2-D array, got shape (3, 4, 5)");
  npy_require(a, "<f8", 3, "x.npy");
  EXPECT_ERROR_CONTAINS(npy_to_u8(a, "x.npy"), "expected dtype uint8");
}

TEST(Npy, EncodeRejectsInconsistentArrays) {
  NpyArray a;
  a.dtype = "<f4";
  a.shape = {2, 2};
  a.data.resize(15);
  EXPECT_ERROR_CONTAINS(npy_encode(a), "15 data bytes do not match shape (2, 2)");
  a.dtype = ">f4";
  EXPECT_ERROR_CONTAINS(npy_encode(a), "big-endian");
}

}  // namespace
}  // namespace mxtrain::io
