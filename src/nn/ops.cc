// nn/ops.cc — embedding, RMSNorm, SwiGLU, cross-entropy and residual helpers (nn/ops.h):
// argument checks, kernel dispatch and the OpenMP split.
//
// Each public function checks its arguments once, takes the kernels of the dispatch table below
// (the AVX-512 ones on path avx512, else the scalar reference; nn/ops_kernels.h) and runs them.
// Row-wise work is split into one contiguous range of rows per thread; reductions over rows
// (dgain, dtable) into ranges of whole 16-column blocks, each column summed over all rows in
// token order by one thread. Every output element has one writer and a fixed order of
// additions, so results are bit-identical for any thread count. A call runs on one thread
// unless its size is above the op's threshold (kPar* below): under it a parallel region
// costs more than the second thread saves (measured: docs/results/trainer.md, "Elementwise
// kernels"). The ref:: functions are the same drivers with the scalar table. The attention
// core lives in ops_attention.cc. AdamW's element update is one of these ops (train/optim.h's
// adamw_update derives its constants).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "core/dispatch.h"
#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"
#include "mxtrain/profile.h"
#include "nn/ops_kernels.h"

namespace mxtrain {
namespace {

using opk::Kernels;

constexpr int64_t kColBlock = 16;  // columns per unit of work in reductions over rows

// Parallel thresholds, in elements of the op's main [N, width] operand (N*D, N*F, N*V or n):
// a call parallelises when above. A region of 2 threads costs ~3 us on idle cores; each
// threshold is where the AVX-512 kernel alone takes ~15 us, past which the measured 2-thread
// time was lower. embedding_backward was not faster on 2 threads at any measured size.
constexpr int64_t kParEmbedFwd = 96 * 1024;
constexpr int64_t kParEmbedBwd = 4096 * 1024;
constexpr int64_t kParRmsFwd = 96 * 1024;
constexpr int64_t kParRmsBwd = 24 * 1024;
constexpr int64_t kParSwigluFwd = 48 * 1024;
constexpr int64_t kParSwigluBwd = 16 * 1024;
constexpr int64_t kParCeFwd = 32 * 1024;
constexpr int64_t kParCeBwd = 128 * 1024;
constexpr int64_t kParFlat = 64 * 1024;  // residual, axpy
constexpr int64_t kParAdamW = 32 * 1024;
constexpr int64_t kParReduce = 64 * 1024;  // sum of squares, finite check

// The dispatch table (core/dispatch.h): the scalar kernels, and the AVX-512 ones.
const PathTable<const Kernels*>& ops_table() {
  static const PathTable<const Kernels*> t(
      "elementwise ops and AdamW",
      {{Path::scalar, "opk::kernels_ref (nn/ops_ref.cc)", &opk::kernels_ref()},
       {Path::avx512, "opk::kernels_avx512 (nn/ops_avx512.cc)", &opk::kernels_avx512()}});
  return t;
}

const Kernels& active_kernels() { return *ops_table().get(); }

// Part t of T of [0, n): contiguous, bounds multiples of `grain` except n itself.
std::pair<int64_t, int64_t> share(int64_t n, int64_t grain, int64_t T, int64_t t) {
  const int64_t units = (n + grain - 1) / grain;
  return {std::min(n, units * t / T * grain), std::min(n, units * (t + 1) / T * grain)};
}

// Runs body(T, t) for t < T on the T threads of a new team when work > threshold, else
// body(1, 0) here (also when called from inside a parallel region: then T is 1 as well).
template <class Body>
void run(int64_t work, int64_t threshold, const Body& body) {
  if (work > threshold && omp_get_max_threads() > 1) {
#pragma omp parallel
    body(omp_get_num_threads(), omp_get_thread_num());
  } else {
    body(1, 0);
  }
}

void check_tokens(const int32_t* ids, int64_t N, int64_t V, const char* what) {
  for (int64_t n = 0; n < N; ++n) {
    MXT_CHECK(ids[n] >= 0 && ids[n] < V, what, "[", n, "] = ", ids[n],
              " is outside the vocabulary [0, ", V, "); check the data and vocab_size");
  }
}

// ---- drivers: checks, then the split; `k` is the kernel table ------------------------------

void embedding_forward_k(const Kernels& k, float* out, const int32_t* tokens, int64_t N,
                         const float* table, int64_t V, int64_t D) {
  MXT_CHECK(out && tokens && table, "embedding_forward: null pointer");
  MXT_CHECK(N >= 1 && V >= 1 && D >= 1, "embedding_forward: N, V, D must be >= 1 (got ", N,
            ", ", V, ", ", D, ")");
  check_tokens(tokens, N, V, "token");
  run(N * D, kParEmbedFwd, [&](int T, int t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.embed_fwd(out, tokens, table, D, n0, n1);
  });
}

void embedding_backward_k(const Kernels& k, float* dtable, const float* dout,
                          const int32_t* tokens, int64_t N, int64_t V, int64_t D, Accum mode) {
  MXT_CHECK(dtable && dout && tokens, "embedding_backward: null pointer");
  MXT_CHECK(N >= 1 && V >= 1 && D >= 1, "embedding_backward: N, V, D must be >= 1");
  check_tokens(tokens, N, V, "token");
  if (mode == Accum::write) std::fill_n(dtable, V * D, 0.f);
  run(N * D, kParEmbedBwd, [&](int T, int t) {
    const auto [d0, d1] = share(D, kColBlock, T, t);
    if (d0 < d1) k.embed_bwd(dtable, dout, tokens, N, D, d0, d1);
  });
}

void rmsnorm_forward_k(const Kernels& k, float* out, float* rstd, const float* x,
                       const float* gain, int64_t N, int64_t D, float eps) {
  MXT_CHECK(out && rstd && x && gain, "rmsnorm_forward: null pointer");
  MXT_CHECK(N >= 1 && D >= 1, "rmsnorm_forward: N, D must be >= 1");
  MXT_CHECK(eps > 0.f, "rmsnorm_forward: eps must be > 0 (got ", eps, ")");
  run(N * D, kParRmsFwd, [&](int T, int t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.rms_fwd(out, rstd, x, gain, D, eps, n0, n1);
  });
}

// dx by rows and dgain by column blocks in one parallel region (they are independent).
void rmsnorm_backward_k(const Kernels& k, float* dx, float* dgain, const float* dout,
                        const float* x, const float* gain, const float* rstd, int64_t N,
                        int64_t D, Accum dx_mode, Accum dgain_mode) {
  MXT_CHECK(dx && dgain && dout && x && gain && rstd, "rmsnorm_backward: null pointer");
  MXT_CHECK(N >= 1 && D >= 1, "rmsnorm_backward: N, D must be >= 1");
  run(N * D, kParRmsBwd, [&](int T, int t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.rms_bwd_dx(dx, dout, x, gain, rstd, D, n0, n1, dx_mode == Accum::write);
    const auto [d0, d1] = share(D, kColBlock, T, t);
    if (d0 < d1) k.rms_bwd_dgain(dgain, dout, x, rstd, N, D, d0, d1, dgain_mode == Accum::write);
  });
}

void swiglu_forward_k(const Kernels& k, float* h, const float* a, int64_t N, int64_t F) {
  MXT_CHECK(h && a, "swiglu_forward: null pointer");
  MXT_CHECK(N >= 1 && F >= 1, "swiglu_forward: N, F must be >= 1");
  run(N * F, kParSwigluFwd, [&](int T, int t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.swiglu_fwd(h, a, F, n0, n1);
  });
}

void swiglu_backward_k(const Kernels& k, float* da, const float* dh, const float* a, int64_t N,
                       int64_t F, Accum mode) {
  MXT_CHECK(da && dh && a, "swiglu_backward: null pointer");
  MXT_CHECK(N >= 1 && F >= 1, "swiglu_backward: N, F must be >= 1");
  MXT_CHECK(da != a || mode == Accum::write,
            "swiglu_backward: in place (da == a) needs Accum::write");
  run(N * F, kParSwigluBwd, [&](int T, int t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.swiglu_bwd(da, dh, a, F, n0, n1, mode == Accum::write);
  });
}

double crossentropy_forward_k(const Kernels& k, float* probs, float* losses,
                              const float* logits, const int32_t* targets, int64_t N,
                              int64_t V) {
  MXT_CHECK(probs && logits && targets, "crossentropy_forward: null pointer");
  MXT_CHECK(N >= 1 && V >= 1, "crossentropy_forward: N, V must be >= 1");
  check_tokens(targets, N, V, "target");
  thread_local std::vector<float> own;  // per-token losses when the caller wants none; grown once
  if (!losses) {
    if (own.size() < size_t(N)) own.resize(size_t(N));
    losses = own.data();
  }
  run(N * V, kParCeFwd, [&](int T, int t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.ce_fwd(probs, losses, logits, targets, V, n0, n1);
  });
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) total += losses[n];
  return total / double(N);
}

void crossentropy_backward_k(const Kernels& k, float* dlogits, const float* probs,
                             const int32_t* targets, int64_t N, int64_t V, float dloss) {
  MXT_CHECK(dlogits && probs && targets, "crossentropy_backward: null pointer");
  MXT_CHECK(N >= 1 && V >= 1, "crossentropy_backward: N, V must be >= 1");
  check_tokens(targets, N, V, "target");
  run(N * V, kParCeBwd, [&](int T, int t) {
    const auto [n0, n1] = share(N, 1, T, t);
    if (n0 < n1) k.ce_bwd(dlogits, probs, targets, V, dloss, n0, n1);
  });
}

// Flat element-wise ops: ranges of whole 64-byte lines (16 floats) per thread.
void residual_forward_k(const Kernels& k, float* out, const float* a, const float* b,
                        int64_t n) {
  MXT_CHECK(out && a && b, "residual_forward: null pointer");
  run(n, kParFlat, [&](int T, int t) {
    const auto [i0, i1] = share(n, 16, T, t);
    if (i0 < i1) k.add(out, a, b, i0, i1);
  });
}

void residual_backward_k(const Kernels& k, float* da, float* db, const float* dout, int64_t n) {
  MXT_CHECK(dout, "residual_backward: null dout");
  run(n, kParFlat, [&](int T, int t) {
    const auto [i0, i1] = share(n, 16, T, t);
    if (i0 >= i1) return;
    if (da) k.acc(da, dout, i0, i1);
    if (db) k.acc(db, dout, i0, i1);
  });
}

void axpy_k(const Kernels& k, float* y, const float* x, float alpha, int64_t n) {
  MXT_CHECK(y && x, "axpy: null pointer");
  run(n, kParFlat, [&](int T, int t) {
    const auto [i0, i1] = share(n, 16, T, t);
    if (i0 < i1) k.axpy(y, x, alpha, i0, i1);
  });
}

void adamw_k(const Kernels& k, float* w, const float* g, float* m, float* v, int64_t n,
             const AdamWStep& s) {
  MXT_CHECK(n >= 0 && ((w && g && m && v) || n == 0), "adamw_elements: null pointer");
  run(n, kParAdamW, [&](int T, int t) {
    const auto [i0, i1] = share(n, 16, T, t);
    if (i0 < i1) k.adamw(w, g, m, v, s, i0, i1);
  });
}

// Blocks of kSumSquaresBlock, each summed by one kernel call, then added in block order.
double sum_squares_k(const Kernels& k, const float* x, int64_t n) {
  MXT_CHECK(n >= 0 && (x || n == 0), "sum_squares_elements: null pointer");
  const int64_t nb = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  thread_local std::vector<double> part;
  part.assign(size_t(nb), 0.0);
  double* out = part.data();
  run(n, kParReduce, [&](int T, int t) {
    const auto [b0, b1] = share(nb, 1, T, t);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kSumSquaresBlock;
      out[b] = k.sumsq_block(x + i0, std::min(kSumSquaresBlock, n - i0));
    }
  });
  double s = 0.0;
  for (int64_t b = 0; b < nb; ++b) s += out[b];
  return s;
}

bool all_finite_k(const Kernels& k, const float* x, int64_t n) {
  MXT_CHECK(n >= 0 && (x || n == 0), "all_finite_elements: null pointer");
  std::atomic<bool> bad{false};
  run(n, kParReduce, [&](int T, int t) {
    const auto [i0, i1] = share(n, 16, T, t);
    if (i0 < i1 && k.nonfinite(x + i0, i1 - i0)) bad.store(true, std::memory_order_relaxed);
  });
  return !bad.load();
}

}  // namespace

// ---- public functions: the kernels of the dispatch table's choice --------------------------

void embedding_forward(float* out, const int32_t* tokens, int64_t N, const float* table,
                       int64_t V, int64_t D) {
  MXT_PROFILE(embedding, fwd);
  embedding_forward_k(active_kernels(), out, tokens, N, table, V, D);
}
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t N,
                        int64_t V, int64_t D, Accum mode) {
  MXT_PROFILE(embedding, bwd);
  embedding_backward_k(active_kernels(), dtable, dout, tokens, N, V, D, mode);
}
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* gain, int64_t N,
                     int64_t D, float eps) {
  MXT_PROFILE(norm, fwd);
  rmsnorm_forward_k(active_kernels(), out, rstd, x, gain, N, D, eps);
}
void rmsnorm_backward(float* dx, float* dgain, const float* dout, const float* x,
                      const float* gain, const float* rstd, int64_t N, int64_t D, Accum dx_mode,
                      Accum dgain_mode) {
  MXT_PROFILE(norm, bwd);
  rmsnorm_backward_k(active_kernels(), dx, dgain, dout, x, gain, rstd, N, D, dx_mode,
                     dgain_mode);
}
void swiglu_forward(float* h, const float* a, int64_t N, int64_t F) {
  MXT_PROFILE(swiglu, fwd);
  swiglu_forward_k(active_kernels(), h, a, N, F);
}
void swiglu_backward(float* da, const float* dh, const float* a, int64_t N, int64_t F,
                     Accum mode) {
  MXT_PROFILE(swiglu, bwd);
  swiglu_backward_k(active_kernels(), da, dh, a, N, F, mode);
}
double crossentropy_forward(float* probs, float* losses, const float* logits,
                            const int32_t* targets, int64_t N, int64_t V) {
  MXT_PROFILE(cross_entropy, fwd);
  return crossentropy_forward_k(active_kernels(), probs, losses, logits, targets, N, V);
}
void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                           int64_t N, int64_t V, float dloss) {
  MXT_PROFILE(cross_entropy, bwd);
  crossentropy_backward_k(active_kernels(), dlogits, probs, targets, N, V, dloss);
}
void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  MXT_PROFILE(residual, fwd);
  residual_forward_k(active_kernels(), out, a, b, n);
}
void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  MXT_PROFILE(residual, bwd);
  residual_backward_k(active_kernels(), da, db, dout, n);
}
void axpy(float* y, const float* x, float alpha, int64_t n) {
  axpy_k(active_kernels(), y, x, alpha, n);
}
void adamw_elements(float* w, const float* g, float* m, float* v, int64_t n,
                    const AdamWStep& s) {
  adamw_k(active_kernels(), w, g, m, v, n, s);
}

double sum_squares_elements(const float* x, int64_t n) {
  return sum_squares_k(active_kernels(), x, n);
}
bool all_finite_elements(const float* x, int64_t n) { return all_finite_k(active_kernels(), x, n); }

PathChoice opk::ops_choice() { return ops_table().choice(); }

// ---- the scalar reference (nn/ops_kernels.h) -----------------------------------------------

namespace ref {
void embedding_forward(float* out, const int32_t* tokens, int64_t N, const float* table,
                       int64_t V, int64_t D) {
  embedding_forward_k(opk::kernels_ref(), out, tokens, N, table, V, D);
}
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t N,
                        int64_t V, int64_t D, Accum mode) {
  embedding_backward_k(opk::kernels_ref(), dtable, dout, tokens, N, V, D, mode);
}
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* gain, int64_t N,
                     int64_t D, float eps) {
  rmsnorm_forward_k(opk::kernels_ref(), out, rstd, x, gain, N, D, eps);
}
void rmsnorm_backward(float* dx, float* dgain, const float* dout, const float* x,
                      const float* gain, const float* rstd, int64_t N, int64_t D, Accum dx_mode,
                      Accum dgain_mode) {
  rmsnorm_backward_k(opk::kernels_ref(), dx, dgain, dout, x, gain, rstd, N, D, dx_mode,
                     dgain_mode);
}
void swiglu_forward(float* h, const float* a, int64_t N, int64_t F) {
  swiglu_forward_k(opk::kernels_ref(), h, a, N, F);
}
void swiglu_backward(float* da, const float* dh, const float* a, int64_t N, int64_t F,
                     Accum mode) {
  swiglu_backward_k(opk::kernels_ref(), da, dh, a, N, F, mode);
}
double crossentropy_forward(float* probs, float* losses, const float* logits,
                            const int32_t* targets, int64_t N, int64_t V) {
  return crossentropy_forward_k(opk::kernels_ref(), probs, losses, logits, targets, N, V);
}
void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                           int64_t N, int64_t V, float dloss) {
  crossentropy_backward_k(opk::kernels_ref(), dlogits, probs, targets, N, V, dloss);
}
void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  residual_forward_k(opk::kernels_ref(), out, a, b, n);
}
void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  residual_backward_k(opk::kernels_ref(), da, db, dout, n);
}
void axpy(float* y, const float* x, float alpha, int64_t n) {
  axpy_k(opk::kernels_ref(), y, x, alpha, n);
}
void adamw_elements(float* w, const float* g, float* m, float* v, int64_t n,
                    const AdamWStep& s) {
  adamw_k(opk::kernels_ref(), w, g, m, v, n, s);
}
double sum_squares_elements(const float* x, int64_t n) {
  return sum_squares_k(opk::kernels_ref(), x, n);
}
bool all_finite_elements(const float* x, int64_t n) {
  return all_finite_k(opk::kernels_ref(), x, n);
}
}  // namespace ref

}  // namespace mxtrain
