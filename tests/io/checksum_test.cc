// tests/io/checksum_test.cc — CRC-32 known-answer vectors (the standard check value of
// CRC-32/ISO-HDLC and other published values) and the slicing-by-8 path against the
// bit-serial reference on every length around the 8-byte step, split at every point.
#include "mxtrain/io/checksum.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mxtrain::io {
namespace {

uint32_t crc_str(const std::string& s) { return crc32(s.data(), s.size()); }

TEST(Crc32, KnownAnswers) {
  EXPECT_EQ(crc_str(""), 0x00000000u);
  EXPECT_EQ(crc_str("a"), 0xE8B7BE43u);
  EXPECT_EQ(crc_str("abc"), 0x352441C2u);
  EXPECT_EQ(crc_str("123456789"), 0xCBF43926u);  // the catalogue check value
  EXPECT_EQ(crc_str("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
  EXPECT_EQ(crc32_ref("123456789", 9), 0xCBF43926u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(crc32(zeros.data(), zeros.size()),
            0x190A55ADu);  // RFC 3720 patterns; CRC-32 values as zlib.crc32
  EXPECT_EQ(crc32(ones.data(), ones.size()), 0xFF6CAB0Bu);
  EXPECT_EQ(crc32_hex(0xCBF43926u), "cbf43926");
  EXPECT_EQ(crc32_hex(0x1u), "00000001");
}

TEST(Crc32, FastPathMatchesReferenceAndChunking) {
  std::vector<uint8_t> buf(1000);
  uint32_t x = 12345;
  for (auto& b : buf) {
    x = x * 1664525u + 1013904223u;
    b = uint8_t(x >> 24);
  }
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 255, 257, 1000}) {
    const uint32_t want = crc32_ref(buf.data(), n);
    EXPECT_EQ(crc32(buf.data(), n), want) << n;
    EXPECT_EQ(crc32(buf.data() + 1, n ? n - 1 : 0), crc32_ref(buf.data() + 1, n ? n - 1 : 0));
    for (size_t split = 0; split <= n; split += (n > 40 ? 13 : 1))
      EXPECT_EQ(crc32_update(crc32(buf.data(), split), buf.data() + split, n - split), want)
          << n << " split " << split;
  }
}

TEST(Crc32, DetectsEverySingleBitFlip) {
  std::string s = "model.safetensors payload";
  const uint32_t base = crc_str(s);
  for (size_t i = 0; i < s.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string c = s;
      c[i] = char(c[i] ^ (1 << bit));
      EXPECT_NE(crc_str(c), base) << i << ":" << bit;
    }
}

}  // namespace
}  // namespace mxtrain::io
