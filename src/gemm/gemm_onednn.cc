// gemm/gemm_onednn.cc — BF16 and FP32 matrix products through oneDNN's matmul primitive.
//
// This is the only file that talks to oneDNN. gemm_bf16 / gemm_f32 (mxtrain/gemm.h) check
// their arguments, describe the operands with memory descriptors whose strides express the
// transposes and leading dimensions, and run a cached matmul primitive. Accumulation into C
// uses a sum post-op (oneDNN 2.6 has no beta on matmul). One global CPU engine and one stream
// per calling thread serve every call; oneDNN's CPU runtime in this build is OpenMP-threaded,
// so a single call already uses all threads.
//
// Which primitive (gemm_shapes(), mxtrain/gemm.h). oneDNN 2.6 has two x86 matmuls for these
// products: brgemm ("brg:..."), generated for one exact shape, and its JIT GEMM driver
// ("gemm:jit"), which takes M and K when it runs (DNNL_RUNTIME_DIM_VAL). Creating a primitive
// costs 0.3-0.8 ms, several times a small product, so primitives are cached; but an MoE
// expert's row count changes every step, and with exact shapes each new count built a new
// primitive. Inside a VaryingRowsScope one primitive per (transposes, N, strides) serves every
// M and K: M is the row count of the forward and dgrad products, K that of the wgrad. Dense
// products keep exact shapes: the GEMM driver allocates its packing buffers on every call,
// and with this process's allocator settings (cli/main.cc) those come back as fresh pages, so
// at fixed shapes brgemm, which works in the scratchpad given here, is faster
// (docs/results/gemm.md, "Primitive shapes"). The cache's key is the primitive's shape:
// (data type, transposes, M or -1, N, K or -1, leading dimensions, accumulate).
#include <dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/env_override.h"
#include "mxtrain/common.h"
#include "mxtrain/formats.h"
#include "mxtrain/gemm.h"
#include "gemm/onednn_call.h"

namespace mxtrain {
namespace {

thread_local int onednn_depth = 0;  // > 0 inside dnnl_primitive_execute (onednn_call.h)
std::atomic<long> primitives_created{0};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One in-order stream per calling thread, so concurrent callers never share a stream.
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       bool>;

struct Cache {
  std::mutex mu;
  std::map<Key, dnnl::matmul> prims;
};

Cache& cache() {
  static Cache c;
  return c;
}

// Stored matrix of logical shape [rows, cols]: trans means it is stored [cols, rows] with
// row stride ld, so logical (r, c) lives at c*ld + r.
dnnl::memory::desc md(dnnl::memory::data_type dt, int64_t rows, int64_t cols, bool trans,
                      int64_t ld) {
  dnnl::memory::dims dims{rows, cols};
  dnnl::memory::dims strides = trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc(dims, dt, strides);
}

// The shaping MXTRAIN_GEMM_SHAPES names.
GemmShapes shapes_from_env(const char* e) {
  const std::optional<GemmShapes> s = gemm_shapes_from_name(e);
  MXT_CHECK(s, "MXTRAIN_GEMM_SHAPES=", e, " is not a choice: use exact or runtime");
  return *s;
}

// set_gemm_shapes()'s shaping, else MXTRAIN_GEMM_SHAPES's.
constinit EnvOverride<GemmShapes> shapes_choice{"MXTRAIN_GEMM_SHAPES", shapes_from_env};

thread_local bool varying_rows = false;  // inside a VaryingRowsScope

// runtime: M and K are DNNL_RUNTIME_DIM_VAL in the primitive, given at each execution.
dnnl::matmul get_primitive(dnnl::memory::data_type in_dt, bool ta, bool tb, int64_t M,
                           int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                           bool accumulate, bool runtime) {
  if (runtime) M = K = DNNL_RUNTIME_DIM_VAL;
  Key key{int(in_dt), ta, tb, M, N, K, lda, ldb, ldc, accumulate};
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.prims.find(key);
    if (it != c.prims.end()) return it->second;
  }
  using dt = dnnl::memory::data_type;
  auto a_md = md(in_dt, M, K, ta, lda);
  auto b_md = md(in_dt, K, N, tb, ldb);
  auto c_md = md(dt::f32, M, N, false, ldc);
  dnnl::matmul::desc desc(a_md, b_md, c_md);
  dnnl::primitive_attr attr;
  // The caller passes the scratchpad (a per-thread buffer grown once), so executing a cached
  // primitive allocates no workspace.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd(desc, attr, engine());
  dnnl::matmul prim(pd);
  primitives_created.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(c.mu);
  // Bound the cache: shapes in training are few, but a benchmark sweep may create many.
  if (c.prims.size() > 4096) c.prims.clear();
  c.prims.emplace(key, prim);
  return prim;
}

void check_args(const char* fn, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                const void* A, int64_t lda, const void* B, int64_t ldb, const void* C,
                int64_t ldc) {
  MXT_CHECK(M >= 0 && N >= 0 && K >= 0, fn, ": negative dimension M=", M, " N=", N, " K=", K);
  MXT_CHECK(C != nullptr || M * N == 0, fn, ": C is null");
  MXT_CHECK((A != nullptr && B != nullptr) || M * N * K == 0, fn, ": A or B is null");
  // A stored [M,K] (or [K,M] when transposed); its row stride must cover its width.
  int64_t a_w = ta ? M : K, b_w = tb ? K : N;
  MXT_CHECK(lda >= std::max<int64_t>(a_w, 1), fn, ": lda=", lda,
            " is smaller than A's stored width ", a_w,
            (ta ? " (A is stored [K,M] when trans_a)" : " (A is stored [M,K])"));
  MXT_CHECK(ldb >= std::max<int64_t>(b_w, 1), fn, ": ldb=", ldb,
            " is smaller than B's stored width ", b_w,
            (tb ? " (B is stored [N,K] when trans_b)" : " (B is stored [K,N])"));
  MXT_CHECK(ldc >= std::max<int64_t>(N, 1), fn, ": ldc=", ldc, " is smaller than N=", N);
}

// Degenerate shapes oneDNN need not see: nothing to write, or an empty sum over K.
bool handle_degenerate(int64_t M, int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate) {
  if (M == 0 || N == 0) return true;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.f;
    return true;
  }
  return false;
}

// The three memory objects of one primitive's call, made once per (thread, key) and pointed
// at each call's buffers with set_data_handle: a steady-state call allocates nothing here
// (oneDNN's execute itself keeps a small argument map per call).
struct CallMemories {
  dnnl::memory a, b, c, pad;
  size_t pad_bytes = 0;
};

void run(dnnl::memory::data_type in_dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
         const void* A, int64_t lda, const void* B, int64_t ldb, float* C, int64_t ldc,
         bool accumulate, bool rethrow_unimplemented = false) {
  const bool runtime = gemm_shapes() == GemmShapes::runtime;
  dnnl::matmul prim;
  try {
    prim = get_primitive(in_dt, ta, tb, M, N, K, lda, ldb, ldc, accumulate, runtime);
  } catch (const dnnl::error& e) {
    if (rethrow_unimplemented && e.status == dnnl_unimplemented) throw;  // caller falls back
    MXT_FAIL("oneDNN could not create a matmul for M=", M, " N=", N, " K=", K, ": ", e.what());
  }
  using dt = dnnl::memory::data_type;
  // Keyed by the call's shape and the primitive's shaping: the scratchpad is that primitive's.
  thread_local std::map<std::pair<Key, bool>, CallMemories> mems;
  const std::pair<Key, bool> key{{int(in_dt), ta, tb, M, N, K, lda, ldb, ldc, accumulate},
                                 runtime};
  auto it = mems.find(key);
  if (it == mems.end()) {
    if (mems.size() > 4096) mems.clear();
    const dnnl::memory::desc pad_md = prim.get_primitive_desc() == nullptr
        ? dnnl::memory::desc()
        : dnnl::matmul::primitive_desc(const_cast<dnnl_primitive_desc_t>(
              prim.get_primitive_desc())).scratchpad_desc();
    it = mems.emplace(key, CallMemories{dnnl::memory(md(in_dt, M, K, ta, lda), engine(), nullptr),
                                        dnnl::memory(md(in_dt, K, N, tb, ldb), engine(), nullptr),
                                        dnnl::memory(md(dt::f32, M, N, false, ldc), engine(),
                                                     nullptr),
                                        dnnl::memory(pad_md, engine(), nullptr),
                                        pad_md.get_size()})
             .first;
  }
  CallMemories& m = it->second;
  m.a.set_data_handle(const_cast<void*>(A));
  m.b.set_data_handle(const_cast<void*>(B));
  m.c.set_data_handle(C);
  // Scratchpad: this thread's buffer, grown to the largest size any primitive asked for.
  thread_local std::vector<uint8_t> pad_buf;
  if (m.pad_bytes > pad_buf.size()) pad_buf.resize(m.pad_bytes);
  m.pad.set_data_handle(pad_buf.data());
  dnnl::stream& s = stream();
  const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m.a.get()},
                                   {DNNL_ARG_WEIGHTS, m.b.get()},
                                   {DNNL_ARG_DST, m.c.get()},
                                   {DNNL_ARG_SCRATCHPAD, m.pad.get()}};
  ++onednn_depth;
  const dnnl_status_t st = dnnl_primitive_execute(prim.get(), s.get(), 4, args);
  --onednn_depth;
  dnnl::error::wrap_c_api(st, "could not execute a matmul");
  s.wait();
}

// Dense FP32 copy of a stored BF16 matrix (rows x width, row stride ld). Exact.
std::vector<float> widen(const uint16_t* X, int64_t rows, int64_t width, int64_t ld) {
  std::vector<float> out(size_t(rows * width));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) out[size_t(r * width + c)] = bf16_to_f32(X[r * ld + c]);
  return out;
}

}  // namespace

GemmShapes gemm_shapes() {
  return shapes_choice.get().value_or(varying_rows ? GemmShapes::runtime : GemmShapes::exact);
}
VaryingRowsScope::VaryingRowsScope() : prev_(varying_rows) { varying_rows = true; }
VaryingRowsScope::~VaryingRowsScope() { varying_rows = prev_; }
void set_gemm_shapes(GemmShapes s) { shapes_choice.set(s); }
void clear_gemm_shapes_override() { shapes_choice.clear(); }
const char* gemm_shapes_name(GemmShapes s) {
  return s == GemmShapes::exact ? "exact" : "runtime";
}
std::optional<GemmShapes> gemm_shapes_from_name(const std::string& name) {
  for (GemmShapes s : {GemmShapes::exact, GemmShapes::runtime})
    if (name == gemm_shapes_name(s)) return s;
  return std::nullopt;
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc,
               bool accumulate) {
  check_args("gemm_bf16", trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  if (handle_degenerate(M, N, K, C, ldc, accumulate)) return;
  static std::atomic<bool> bf16_unavailable{false};
  if (!bf16_unavailable.load(std::memory_order_relaxed)) {
    try {
      run(dnnl::memory::data_type::bf16, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc,
          accumulate, /*rethrow_unimplemented=*/true);
      return;
    } catch (const dnnl::error&) {
      // oneDNN has no BF16 matmul on CPUs without AVX-512: widen to FP32 (exact) instead.
      bf16_unavailable = true;
    }
  }
  int64_t a_rows = trans_a ? K : M, a_w = trans_a ? M : K;
  int64_t b_rows = trans_b ? N : K, b_w = trans_b ? K : N;
  std::vector<float> a32 = widen(A, a_rows, a_w, lda), b32 = widen(B, b_rows, b_w, ldb);
  run(dnnl::memory::data_type::f32, trans_a, trans_b, M, N, K, a32.data(), a_w, b32.data(),
      b_w, C, ldc, accumulate);
}

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
              int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  check_args("gemm_f32", trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  if (handle_degenerate(M, N, K, C, ldc, accumulate)) return;
  run(dnnl::memory::data_type::f32, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc,
      accumulate);
}

namespace gemm_detail {
bool in_onednn_call() { return onednn_depth > 0; }
long onednn_primitives_created() { return primitives_created.load(); }
}  // namespace gemm_detail

}  // namespace mxtrain
