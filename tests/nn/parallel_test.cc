// tests/nn/parallel_test.cc — the one-process pieces of the parallel layouts (nn/parallel.h,
// nn/parameter.h): slicing whole tensors into ranks' parts and back, and expert parallelism's
// row payloads, byte for byte against the quantizers they are made of.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "mxtrain/nn/parallel.h"
#include "mxtrain/nn/parameter.h"
#include "mxtrain/quantize.h"
#include "mxtrain/recipe.h"

namespace mxtrain {
namespace {

std::vector<float> iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i);
  return v;
}

// Every rank's slice, put back, is the whole tensor; a slice holds what the split says: qkv
// [3D, D] in 3 blocks (rank r: rows r·D/W.. of q, of k and of v), proj [D, D] by columns, an
// expert tensor [E, out, in] by experts.
TEST(ParamSplit, SlicesTileTheWholeTensor) {
  struct Case {
    std::vector<int64_t> shape;
    int dim, parts, count;
  };
  for (const Case& c : {Case{{12, 4}, 0, 3, 2}, Case{{8, 8}, 1, 1, 4}, Case{{6, 5, 3}, 0, 1, 3},
                        Case{{4, 6, 2}, 1, 2, 3}, Case{{1, 7}, 1, 1, 7}}) {
    int64_t n = 1;
    for (int64_t d : c.shape) n *= d;
    const std::vector<float> whole = iota(n);
    std::vector<float> back(size_t(n), -1.f);
    for (int r = 0; r < c.count; ++r) {
      ParamSplit s;
      s.cuts.push_back({ParamSplit::Over::tp, c.dim, c.parts, c.count, r});
      s.full_shape = c.shape;
      const std::vector<int64_t> ls = slice_shape(s);
      int64_t ln = 1;
      for (int64_t d : ls) ln *= d;
      EXPECT_EQ(ln * c.count, n);
      std::vector<float> local(static_cast<size_t>(ln));
      slice_of(s, whole.data(), local.data());
      place_slice(s, local.data(), back.data());
    }
    EXPECT_EQ(back, whole);
  }
  // qkv [6, 2] over 2 ranks: rank 1 holds q row 1, k row 1 (row 3), v row 1 (row 5).
  ParamSplit q;
  q.cuts.push_back({ParamSplit::Over::tp, 0, 3, 2, 1});
  q.full_shape = {6, 2};
  std::vector<float> local(6);
  const std::vector<float> whole = iota(12);
  slice_of(q, whole.data(), local.data());
  EXPECT_EQ(local, (std::vector<float>{2, 3, 6, 7, 10, 11}));
}

// Two cuts compose: an expert tensor [4, 6, 3] over ep 2 (experts) and etp 3 (its hidden dim,
// in 2 blocks: gate and up) — every (ep, etp) slice, put back, is the whole tensor, and a slice
// holds what both cuts say.
TEST(ParamSplit, TwoCutsCompose) {
  const std::vector<float> whole = iota(4 * 6 * 3);
  std::vector<float> back(whole.size(), -1.f);
  ParamSplit s;
  s.cuts.push_back({ParamSplit::Over::ep, 0, 1, 2, 0});
  s.cuts.push_back({ParamSplit::Over::etp, 1, 2, 3, 0});
  s.full_shape = {4, 6, 3};
  EXPECT_TRUE(s.expert());
  for (int e = 0; e < 2; ++e)
    for (int t = 0; t < 3; ++t) {
      const ParamSplit st = s.at(0, e, t);
      EXPECT_EQ(slice_shape(st), (std::vector<int64_t>{2, 2, 3}));
      std::vector<float> local(12);
      slice_of(st, whole.data(), local.data());
      // expert 2e + i, rows t (gate) and 3 + t (up)
      for (int i = 0; i < 2; ++i)
        for (int h = 0; h < 2; ++h)
          for (int c = 0; c < 3; ++c)
            EXPECT_EQ(local[size_t((i * 2 + h) * 3 + c)],
                      whole[size_t(((2 * e + i) * 6 + h * 3 + t) * 3 + c)]);
      place_slice(st, local.data(), back.data());
    }
  EXPECT_EQ(back, whole);
}

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  // Magnitudes over many binades, so blocks get different scales and small values fall below
  // their block's normal range.
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = nd(rng) * std::ldexp(1.f, int(i % 23) - 11);
  return v;
}

// A row payload arrives as the rowwise quantization's values (dequantize of quantize), BF16
// values for bf16, and FP32 as it was for a per-tensor format; its size is a row's codes and
// scales.
TEST(RowPayload, ArrivesAsTheRowwiseCopysValues) {
  // 300 rows: the threaded copy loops run (from 256 rows on).
  for (int64_t rows : {37, 300})
  for (int64_t D : {1, 31, 33, 128, 129, 257})
    for (const char* name :
         {"bf16", "mxfp8", "mxfp8-e5m2grad", "blockwise", "fp8-current", "mxfp4", "nvfp4"})
      for (Role role : {Role::input, Role::grad}) {
        SCOPED_TRACE(std::string(name) + " D=" + std::to_string(D) + " rows=" +
                     std::to_string(rows));
        const TensorFormat f = get_recipe(name).role(role);
        const std::vector<float> x = randn(rows * D, uint32_t(D));
        std::vector<uint8_t> buf(row_payload_bytes(f, D) * size_t(rows));
        const float scale = pack_rows(x.data(), rows, D, f, buf.data());
        std::vector<float> got(size_t(rows * D)), want(size_t(rows * D));
        unpack_rows(buf.data(), rows, D, f, got.data(), scale);
        if (!f.quantized()) {
          EXPECT_EQ(row_payload_bytes(f, D), size_t(2 * D));
          std::vector<uint16_t> b(size_t(rows * D));
          f32_to_bf16_array(x.data(), b.data(), rows * D);
          bf16_to_f32_array(b.data(), want.data(), rows * D);
        } else if (!row_payload_quantizes(f)) {
          EXPECT_EQ(row_payload_bytes(f, D), size_t(4 * D));
          want = x;
        } else {
          const int64_t B = block_edge(f.block), sb = scale_type_bytes(f.scale);
          EXPECT_EQ(row_payload_bytes(f, D),
                    size_t(elem_row_bytes(f.elem, D) + ceil_div(D, B) * sb));
          QTensor q;
          make_copies(x.data(), rows, D, f, q, {Copy::rowwise});
          dequantize(q.rowwise, want.data());
          // NVFP4: the pack's tensor scale is the rowwise copy's of all the rows (their amax).
          EXPECT_EQ(row_payload_has_tensor_scale(f), q.rowwise.has_tensor_scale);
          EXPECT_EQ(scale, q.rowwise.has_tensor_scale ? q.rowwise.tensor_scale : 0.f);
        }
        EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()), 0);
        std::vector<float> rt = x;
        row_round_trip(rt.data(), rows, D, f);
        EXPECT_EQ(std::memcmp(rt.data(), want.data(), sizeof(float) * rt.size()), 0);
      }
  // MXFP8 rows of 2048: (2048 + 64) / 4096 of BF16's bytes; MXFP4 (1024 + 64) / 4096 = 0.266,
  // NVFP4 (1024 + 128) / 4096 = 0.281 (4-bit expert dispatch; the goal is <= 0.30x), its
  // tensor scale (4 bytes) sent once per pack beside the rows.
  EXPECT_EQ(row_payload_bytes(get_recipe("mxfp8").role(Role::input), 2048), 2048u + 64u);
  EXPECT_EQ(row_payload_bytes(get_recipe("mxfp4").role(Role::input), 2048), 1024u + 64u);
  EXPECT_EQ(row_payload_bytes(get_recipe("nvfp4").role(Role::input), 2048), 1024u + 128u);
  EXPECT_LE((1024.0 + 128) / 4096, 0.30);
  EXPECT_TRUE(row_payload_has_tensor_scale(get_recipe("nvfp4").role(Role::grad)));
  EXPECT_FALSE(row_payload_has_tensor_scale(get_recipe("mxfp4").role(Role::input)));
  EXPECT_FALSE(row_payload_quantizes(get_recipe("fp8-current").role(Role::input)));
}

// A stochastically rounded payload (NVFP4's gradient rows) draws its bits with the key it is
// given: the rowwise copy made with that key, the same bytes for the same key, other bytes
// for another micro-batch's key (its step) or another tensor's.
TEST(RowPayload, StochasticRowsDrawTheBitsOfTheirKey) {
  const TensorFormat f = get_recipe("nvfp4").role(Role::grad);
  ASSERT_TRUE(f.stochastic);
  for (int64_t rows : {1, 17, 300})
    for (int64_t D : {15, 33, 129}) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " D=" + std::to_string(D));
      const std::vector<float> x = randn(rows * D, uint32_t(7 * D + rows));
      const size_t P = row_payload_bytes(f, D) * size_t(rows);
      auto pack = [&](const SrKey& k) {
        std::vector<uint8_t> b(P);
        const float s = pack_rows(x.data(), rows, D, f, b.data(), &k);
        std::vector<uint8_t> t(sizeof s);
        std::memcpy(t.data(), &s, sizeof s);
        b.insert(b.end(), t.begin(), t.end());
        return b;
      };
      const SrKey k{5, 3, 0xABCDu}, next_step{5, 4, 0xABCDu}, other{5, 3, 0xABCEu};
      const std::vector<uint8_t> a = pack(k);
      EXPECT_EQ(a, pack(k));
      EXPECT_NE(a, pack(next_step));
      EXPECT_NE(a, pack(other));
      // The values are the rowwise copy's made with the key, and the round trip gives them.
      QTensor q;
      make_copies(x.data(), rows, D, f, q, {Copy::rowwise}, nullptr, &k);
      std::vector<float> want(size_t(rows * D)), rt = x;
      dequantize(q.rowwise, want.data());
      row_round_trip(rt.data(), rows, D, f, &k);
      EXPECT_EQ(std::memcmp(rt.data(), want.data(), sizeof(float) * rt.size()), 0);
    }
}

// A group of one rank: its maximum is its own. It records what allreduce_max was given and
// reports 8 bytes sent per value, after a pause of pause_ms.
struct OneRank : Collectives {
  int size() const override { return 1; }
  int rank() const override { return 0; }
  uint64_t allreduce_sum(float*, size_t) override { return 0; }
  uint64_t allreduce_sum(double*, size_t) override { return 0; }
  uint64_t allreduce_max(int64_t* x, size_t n) override {
    for (size_t i = 0; i < n; ++i) seen.push_back(x[i]);
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    return 8 * n;
  }
  uint64_t allgather(const void*, void*, size_t) override { return 0; }
  uint64_t allgatherv(const void*, size_t, void*, const size_t*) override { return 0; }
  uint64_t reduce_scatter_sum(const float*, float*, size_t) override { return 0; }
  uint64_t alltoall(const void*, void*, size_t) override { return 0; }
  uint64_t alltoallv(const void*, const size_t*, void*, const size_t*) override { return 0; }
  std::vector<int64_t> seen;
  int pause_ms = 0;
};

// An agreed amax (nn/parallel.h, allreduce_amax) over a group of one rank is the rank's own;
// NaN wins over Inf and every finite value, as in fp4_amax.
TEST(AgreedAmax, OneRankKeepsItsOwnAndNanWins) {
  OneRank g;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float a[4] = {0.f, 3.5f, inf, nan};
  EXPECT_EQ(allreduce_amax(g, a, 4), 32u);
  EXPECT_EQ(a[0], 0.f);
  EXPECT_EQ(a[1], 3.5f);
  EXPECT_EQ(a[2], inf);
  EXPECT_TRUE(std::isnan(a[3]));
  // The integers the maximum is taken over order as the amaxes do, NaN above Inf.
  ASSERT_EQ(g.seen.size(), 4u);
  EXPECT_LT(g.seen[0], g.seen[1]);
  EXPECT_LT(g.seen[1], g.seen[2]);
  EXPECT_LT(g.seen[2], g.seen[3]);
}

// counted_amax_agree is allreduce_amax that adds the bytes it sent and the time it took to
// the caller's counters (the layers' tp_* / ep_* stats); null counters count nothing.
TEST(AgreedAmax, CountedAgreementAddsItsBytesAndTime) {
  OneRank g;
  g.pause_ms = 3;
  uint64_t bytes = 5;
  double ms = 1.0;
  const AmaxAgree agree = counted_amax_agree(g, &bytes, &ms);
  float a[3] = {2.f, std::numeric_limits<float>::quiet_NaN(), 0.25f};
  agree(a, 3);
  EXPECT_EQ(bytes, 5u + 24u);
  EXPECT_GE(ms, 1.0 + 3.0) << "the pause inside the collective is in its time";
  EXPECT_EQ(a[0], 2.f);
  EXPECT_TRUE(std::isnan(a[1]));
  EXPECT_EQ(a[2], 0.25f);
  EXPECT_EQ(g.seen.size(), 3u);
  const AmaxAgree bytes_only = counted_amax_agree(g, &bytes, nullptr);
  bytes_only(a, 2);
  EXPECT_EQ(bytes, 29u + 16u);
  counted_amax_agree(g, nullptr, nullptr)(a, 1);
  EXPECT_EQ(g.seen.size(), 6u);
  EXPECT_EQ(bytes, 45u);
}

}  // namespace
}  // namespace mxtrain
