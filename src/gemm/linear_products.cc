// gemm/linear_products.cc — the forward, dgrad and wgrad products of a (grouped) linear layer
// (mxtrain/gemm.h): each operand's copy is the one copies_needed() names for the recipe, role
// and use; one product per non-empty group, BF16 through oneDNN and scaled copies through
// gemm_mx. Inside a SplitSumsScope (parity tests) a forward or dgrad product is computed as a
// row-parallel layer's ranks compute it: each rank's product over its slices of K, copied out
// of the whole operands, then the partial products added in rank order.
#include <cstring>
#include <utility>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"

namespace mxtrain {
namespace {

// The active SplitSumsScope's ranks and blocks (ranks 0: none).
thread_local int split_ranks = 0, split_blocks = 1;

// Copy c of t restricted to the K indices in `runs` ([begin, end) pairs, in order), K running
// along t's columns (k_cols) or rows: a QTensor holding that copy alone, as a rank holding
// those slices would have quantized it (blocks along K never straddle a run's edges).
QTensor k_slices(const QTensor& t, Copy c, bool k_cols,
                 const std::vector<std::pair<int64_t, int64_t>>& runs) {
  int64_t Kl = 0;
  for (const auto& [b, e] : runs) Kl += e - b;
  QTensor o;
  o.rows = k_cols ? t.rows : Kl;
  o.cols = k_cols ? Kl : t.cols;
  o.present = {c};
  if (c == Copy::bf16) {
    o.bf16.resize(size_t(o.rows * o.cols));
    uint16_t* out = o.bf16.data();
    for (int64_t r = 0; r < (k_cols ? t.rows : 1); ++r)
      for (const auto& [b, e] : runs) {
        const size_t n = size_t(k_cols ? e - b : (e - b) * t.cols);
        const uint16_t* in = k_cols ? t.bf16.data() + r * t.cols + b : t.bf16.data() + b * t.cols;
        std::memcpy(out, in, n * sizeof(uint16_t));
        out += n;
      }
    return o;
  }
  const ScaledTensor& m = t.scaled(c);
  MXT_CHECK(m.block > 0 && m.layout != (k_cols ? MXLayout::colwise : MXLayout::rowwise),
            "SplitSumsScope: the ", copy_name(c), " copy's blocks do not run along K");
  ScaledTensor& s = o.scaled(c);
  s.rows = o.rows;
  s.cols = o.cols;
  s.layout = m.layout;
  s.elem = m.elem;
  s.scale_type = m.scale_type;
  s.block = m.block;
  s.has_tensor_scale = m.has_tensor_scale;  // NVFP4: the whole tensor's (agreed) scale
  s.tensor_scale = m.tensor_scale;
  s.rht = m.rht;
  s.data.resize(s.data_bytes());
  s.scales.resize(s.scale_bytes());
  const size_t sb = size_t(scale_type_bytes(m.scale_type));
  const int64_t scols = m.scale_cols();  // scale grid [scale_rows(), scale_cols()], row-major
  uint8_t* out = s.data.data();
  uint8_t* sout = s.scales.data();
  for (const auto& [b, e] : runs)
    MXT_CHECK(b % m.block == 0 && e % m.block == 0, "SplitSumsScope: K slice [", b, ", ", e,
              ") is not whole blocks of ", m.block);
  // Bytes of n elements of a row (4-bit codes two to a byte; b and e are whole blocks, even).
  const auto bytes = [&](int64_t n) { return elem_row_bytes(m.elem, n); };
  const int64_t rb = bytes(m.cols);  // one row of m
  if (k_cols) {
    for (int64_t r = 0; r < m.rows; ++r)
      for (const auto& [b, e] : runs) {
        std::memcpy(out, m.data.data() + r * rb + bytes(b), size_t(bytes(e - b)));
        out += bytes(e - b);
      }
    for (int64_t r = 0; r < m.scale_rows(); ++r)
      for (const auto& [b, e] : runs) {
        const size_t n = size_t((e - b) / m.block) * sb;
        std::memcpy(sout, m.scales.data() + (size_t(r * scols) + size_t(b / m.block)) * sb, n);
        sout += n;
      }
  } else {
    for (const auto& [b, e] : runs) {
      std::memcpy(out, m.data.data() + b * rb, size_t((e - b) * rb));
      out += (e - b) * rb;
      const size_t n = size_t((e - b) / m.block * scols) * sb;
      std::memcpy(sout, m.scales.data() + size_t(b / m.block * scols) * sb, n);
      sout += n;
    }
  }
  return o;
}

// The copy of role's matrix t that `use` reads, present and [rows, cols].
Copy copy_read(const Recipe& r, Role role, Use use, const QTensor& t, int64_t rows,
               int64_t cols, const char* what) {
  const Copy c = copies_needed(r, role, use).only();
  MXT_CHECK(t.has(c), use_name(use), ": the ", what, "'s ", copy_name(c),
            " copy this product reads is missing");
  // Its buffer holds what the copy's element format packs rows x cols into (bf16: a value
  // each; scaled: ScaledTensor::data_bytes()).
  const size_t n = c == Copy::bf16 ? t.bf16.size() : t.scaled(c).data.size();
  const size_t want = c == Copy::bf16 ? size_t(rows * cols)
                                      : size_t(elem_bytes(t.scaled(c).elem, rows, cols));
  MXT_CHECK(t.rows == rows && t.cols == cols && n == want, use_name(use), ": the ", what, "'s ",
            copy_name(c), " copy is ", t.rows, "x", t.cols, " (", n, " elements/bytes), "
            "expected ", rows, "x", cols, " (", want, ")");
  return c;
}

// C [M, N] = op(A) · op(B) from the copies ca of A and cb of B: both BF16, or both scaled.
void product(bool trans_a, const QTensor& A, Copy ca, bool trans_b, const QTensor& B, Copy cb,
             int64_t M, int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate,
             Use use) {
  MXT_CHECK((ca == Copy::bf16) == (cb == Copy::bf16), use_name(use),
            ": one operand is BF16 and the other scaled (", copy_name(ca), ", ", copy_name(cb),
            "); a recipe must scale both or neither");
  if (split_ranks > 1 && !trans_a) {  // SplitSumsScope: the ranks' partial sums, in rank order
    const int P = split_ranks, nb = split_blocks;
    MXT_CHECK(K % (int64_t(P) * nb) == 0, "SplitSumsScope: K = ", K, " is not ", nb,
              " block(s) of ", P, " slices");
    const int64_t Kp = K / (int64_t(P) * nb);
    struct Pause {  // the ranks' own products run unsplit; the scope resumes however this ends
      int ranks;
      ~Pause() { split_ranks = ranks; }
    } pause{P};
    split_ranks = 0;
    std::vector<float> sum(size_t(M * N)), part(size_t(M * N));
    for (int p = 0; p < P; ++p) {
      std::vector<std::pair<int64_t, int64_t>> runs;
      for (int b = 0; b < nb; ++b) runs.emplace_back((b * P + p) * Kp, (b * P + p + 1) * Kp);
      const QTensor a = k_slices(A, ca, true, runs), bq = k_slices(B, cb, trans_b, runs);
      product(false, a, ca, trans_b, bq, cb, M, N, Kp * nb, p == 0 ? sum.data() : part.data(),
              N, false, use);
      if (p > 0)
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const float v = sum[size_t(i * N + j)];
        C[i * ldc + j] = accumulate ? C[i * ldc + j] + v : v;
      }
    return;
  }
  if (ca == Copy::bf16) {
    gemm_bf16(trans_a, trans_b, M, N, K, A.bf16.data(), A.cols, B.bf16.data(), B.cols, C, ldc,
              accumulate);
  } else {
    gemm_mx(trans_a, A.scaled(ca), trans_b, B.scaled(cb), C, ldc, accumulate);
  }
}

}  // namespace

SplitSumsScope::SplitSumsScope(int ranks, int blocks) : active_(ranks > 1) {
  if (!active_) return;
  MXT_CHECK(blocks >= 1, "SplitSumsScope: blocks ", blocks, " must be >= 1");
  MXT_CHECK(split_ranks == 0, "SplitSumsScope: scopes do not nest");
  split_ranks = ranks;
  split_blocks = blocks;
}
SplitSumsScope::~SplitSumsScope() {
  if (!active_) return;
  split_ranks = 0;
  split_blocks = 1;
}

void grouped_forward(const Recipe& r, const GroupList& groups, const QTensor* x,
                     const QTensor* const* w, float* y, int64_t N) {
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const QTensor& wg = *w[g];
    const int64_t K = wg.cols;
    const Copy cx = copy_read(r, Role::input, Use::forward, x[g], n, K, "input");
    const Copy cw = copy_read(r, Role::weight, Use::forward, wg, N, K, "weight");
    product(false, x[g], cx, true, wg, cw, n, N, K, y + groups.offsets[g] * N, N, false,
            Use::forward);
  }
}

void grouped_dgrad(const Recipe& r, const GroupList& groups, const QTensor* dy,
                   const QTensor* const* w, float* dx, int64_t K) {
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const QTensor& wg = *w[g];
    const int64_t N = wg.rows;
    const Copy cd = copy_read(r, Role::grad, Use::dgrad, dy[g], n, N, "gradient");
    const Copy cw = copy_read(r, Role::weight, Use::dgrad, wg, N, K, "weight");
    product(false, dy[g], cd, false, wg, cw, n, K, N, dx + groups.offsets[g] * K, K, false,
            Use::dgrad);
  }
}

void grouped_wgrad(const Recipe& r, const GroupList& groups, const QTensor* dy,
                   const QTensor* x, float* const* dw, bool accumulate) {
  for (int64_t g = 0; g < groups.num_groups(); ++g) {
    const int64_t n = groups.count(g);
    if (n == 0) continue;
    const int64_t N = dy[g].cols, K = x[g].cols;
    const Copy cd = copy_read(r, Role::grad, Use::wgrad, dy[g], n, N, "gradient");
    const Copy cx = copy_read(r, Role::input, Use::wgrad, x[g], n, K, "input");
    product(true, dy[g], cd, false, x[g], cx, N, K, n, dw[g], K, accumulate, Use::wgrad);
  }
}

}  // namespace mxtrain
