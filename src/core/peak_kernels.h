// core/peak_kernels.h — private: the loops behind mxtrain/peak.h.
//
// peak.cc (API, dispatch, threads, timing) calls them through these descriptors. Each
// instruction set has its own file compiled with its own flags: peak_ref.cc (the scalar path:
// a portable multiply-add loop, and memset/memcpy/a word sum for the memory streams),
// peak_avx2.cc (FP32 FMA on ymm), peak_avx512.cc (VDPBF16PS and FP32 FMA on zmm, streams
// with non-temporal stores) and peak_amx.cc (TDPBF16PS on tiles).
//
// Compute loops. run(iters, a0, a1, b) executes `iters` iterations of `accumulators`
// independent instructions (no memory operands, no dependence between them within an
// iteration) and returns the sum over every accumulator element at the end. The inputs
// alternate a0, a1 along the products (BF16 pairs: the even product takes a0, the odd one
// a1; FP32 lanes and scalar accumulators: even ones a0, odd ones a1), all times b, and every
// accumulator starts at 0. With values exact in BF16 and small enough counts, the sum is
// exactly iters · accumulators · macs_per_instruction · (a0 + a1) / 2 · b — which is how the
// tests check that the FLOPs counted (2 per multiply-add) are the FLOPs executed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mxtrain/peak.h"

namespace mxtrain::kern {

struct PeakLoop {
  PeakKind kind;
  const char* instruction;        // e.g. "vdpbf16ps zmm"
  int accumulators;               // independent instructions per iteration
  double macs_per_instruction;    // multiply-adds (FLOPs / 2)
  double (*run)(int64_t iters, float a0, float a1, float b);
};

// Memory streams over [p, p + n) (any alignment, any n): read returns the wrapping sum of
// the little-endian 64-bit words of the first n & ~7 bytes plus the remaining bytes; write
// stores byte v everywhere; copy copies src to dst (not overlapping). Non-temporal stores
// are fenced before returning.
struct StreamKernels {
  const char *read_name, *write_name, *copy_name;
  uint64_t (*read)(const uint8_t* p, size_t n);
  void (*write)(uint8_t* p, size_t n, uint8_t v);
  void (*copy)(uint8_t* dst, const uint8_t* src, size_t n);
};

// peak_ref.cc — always present.
const PeakLoop& peak_loop_fp32_ref();
const StreamKernels& stream_kernels_ref();
// peak_avx2.cc — call only when active_isa() >= Isa::avx2.
const PeakLoop& peak_loop_fma_avx2();
// peak_avx512.cc — call only when active_isa() >= Isa::avx512 (dpbf16: and AVX512-BF16).
const PeakLoop& peak_loop_fma_avx512();
const PeakLoop& peak_loop_dpbf16_avx512();
const StreamKernels& stream_kernels_avx512();
// peak_amx.cc — call only on CPUs with AMX-BF16, after amx_permission() returned true; each
// call configures the calling thread's tiles and releases them before returning.
const PeakLoop& peak_loop_amx_bf16();

// Asks Linux for the AMX tile-data state (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA) once per
// process; true when it is granted (the CPU then runs tile instructions in every thread).
bool amx_permission();

// Closed form the loops' sums must equal (see above), for the tests.
inline double peak_loop_expected_sum(const PeakLoop& l, int64_t iters, float a0, float a1,
                                     float b) {
  return double(iters) * l.accumulators * l.macs_per_instruction * (double(a0) + a1) / 2 * b;
}

}  // namespace mxtrain::kern
