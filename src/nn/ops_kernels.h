// nn/ops_kernels.h — private: the kernel layer behind nn/ops.h, and the scalar reference.
//
// ops.cc checks arguments, takes the kernels its dispatch table picks and splits the work over
// OpenMP threads; the kernels below do no checks and work on one range each:
//   rows [n0, n1) for row-wise work, columns [d0, d1) (over all N rows, in token order) for
//   reductions over rows, elements [i0, i1) for flat element-wise work.
// Every output element is written by exactly one call, so the result never depends on the
// split. ops_ref.cc holds the scalar kernels (the reference: plain loops, std::exp), and
// ops_avx512.cc the AVX-512 ones. Which AVX-512 kernels reproduce the reference bit for bit
// and which do not (vectorised exp, reassociated row sums) is listed in ops_avx512.cc.
//
// The ref:: functions are the public functions of nn/ops.h run with the scalar table,
// whatever the active ISA; tests compare the dispatched functions against them.
#pragma once

#include <cstdint>

#include "core/dispatch.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {

namespace opk {

struct Kernels {
  // out[n] = table[tokens[n]]; out: [N, D].
  void (*embed_fwd)(float* out, const int32_t* tokens, const float* table, int64_t D,
                    int64_t n0, int64_t n1);
  // dtable[tokens[n], d] += dout[n, d] for all n in token order, d in [d0, d1).
  void (*embed_bwd)(float* dtable, const float* dout, const int32_t* tokens, int64_t N,
                    int64_t D, int64_t d0, int64_t d1);
  // RMSNorm rows: out, x: [N, D]; rstd: [N].
  void (*rms_fwd)(float* out, float* rstd, const float* x, const float* gain, int64_t D,
                  float eps, int64_t n0, int64_t n1);
  // The backward kernels below add into their output, or (write = true) store the same value
  // into it as if it had been zero: 0 + t, so writing equals zero-fill-then-add bit for bit.
  // dx rows += (see ops.cc for the formula).
  void (*rms_bwd_dx)(float* dx, const float* dout, const float* x, const float* gain,
                     const float* rstd, int64_t D, int64_t n0, int64_t n1, bool write);
  // dgain[d] += sum_n dout[n, d] * x[n, d] * rstd[n], d in [d0, d1), n in token order.
  void (*rms_bwd_dgain)(float* dgain, const float* dout, const float* x, const float* rstd,
                        int64_t N, int64_t D, int64_t d0, int64_t d1, bool write);
  // SwiGLU rows: h: [N, F]; a, da: [N, 2F]; dh: [N, F].
  void (*swiglu_fwd)(float* h, const float* a, int64_t F, int64_t n0, int64_t n1);
  void (*swiglu_bwd)(float* da, const float* dh, const float* a, int64_t F, int64_t n0,
                     int64_t n1, bool write);
  // Softmax cross-entropy rows: probs, logits, dlogits: [N, V]; losses, targets: [N].
  void (*ce_fwd)(float* probs, float* losses, const float* logits, const int32_t* targets,
                 int64_t V, int64_t n0, int64_t n1);
  void (*ce_bwd)(float* dlogits, const float* probs, const int32_t* targets, int64_t V,
                 float dloss, int64_t n0, int64_t n1);
  // Flat element-wise: out = a + b; y += x; y += alpha * x.
  void (*add)(float* out, const float* a, const float* b, int64_t i0, int64_t i1);
  void (*acc)(float* y, const float* x, int64_t i0, int64_t i1);
  void (*axpy)(float* y, const float* x, float alpha, int64_t i0, int64_t i1);
  // AdamW over elements [i0, i1) of w, m, v from g (nn/ops.h adamw_elements).
  void (*adamw)(float* w, const float* g, float* m, float* v, const AdamWStep& s, int64_t i0,
                int64_t i1);
  // Σ x[i]² over x [n] (n <= kSumSquaresBlock) in the 32-accumulator order of nn/ops.h's
  // sum_squares_elements; whether x [n] holds a NaN or Inf.
  double (*sumsq_block)(const float* x, int64_t n);
  bool (*nonfinite)(const float* x, int64_t n);
};

// What the dispatch table (ops.cc) chooses now (mxtrain info).
PathChoice ops_choice();

const Kernels& kernels_ref();     // ops_ref.cc
const Kernels& kernels_avx512();  // ops_avx512.cc

}  // namespace opk

// The scalar reference of every function in nn/ops.h (same contracts, same argument checks).
namespace ref {
void embedding_forward(float* out, const int32_t* tokens, int64_t N, const float* table,
                       int64_t V, int64_t D);
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t N,
                        int64_t V, int64_t D, Accum mode = Accum::add);
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* gain, int64_t N,
                     int64_t D, float eps);
void rmsnorm_backward(float* dx, float* dgain, const float* dout, const float* x,
                      const float* gain, const float* rstd, int64_t N, int64_t D,
                      Accum dx_mode = Accum::add, Accum dgain_mode = Accum::add);
void swiglu_forward(float* h, const float* a, int64_t N, int64_t F);
void swiglu_backward(float* da, const float* dh, const float* a, int64_t N, int64_t F,
                     Accum mode = Accum::add);
double crossentropy_forward(float* probs, float* losses, const float* logits,
                            const int32_t* targets, int64_t N, int64_t V);
void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                           int64_t N, int64_t V, float dloss);
void residual_forward(float* out, const float* a, const float* b, int64_t n);
void residual_backward(float* da, float* db, const float* dout, int64_t n);
void axpy(float* y, const float* x, float alpha, int64_t n);
void adamw_elements(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);
double sum_squares_elements(const float* x, int64_t n);
bool all_finite_elements(const float* x, int64_t n);
}  // namespace ref

}  // namespace mxtrain
