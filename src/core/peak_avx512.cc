// core/peak_avx512.cc — the AVX-512 loops of mxtrain/peak.h (core/peak_kernels.h): VDPBF16PS
// and VFMADD231PS on zmm registers, and the memory streams with 64-byte loads and
// non-temporal stores. Compiled with the AVX-512 flags; called only when the CPU has them
// (VDPBF16PS: and AVX512-BF16).
//
// kAcc accumulators (24 of the 32 zmm registers; the two inputs take two more) cover the
// latency of one dot product or FMA at the issue rate of every core this targets (Zen 4: 6
// cycles at one 512-bit op per cycle; Sapphire Rapids: 4-5 cycles at two per cycle). The
// empty asm statements make every accumulator's start opaque, so the compiler cannot merge
// accumulators that would otherwise hold the same value all along.
#include <immintrin.h>

#include <cstring>

#include "core/peak_kernels.h"

namespace mxtrain::kern {
namespace {

constexpr int kAcc = 24;

inline uint32_t bf16_bits(float x) { return __builtin_bit_cast(uint32_t, x) >> 16; }

template <class V>
inline void opaque(V& v) {
  asm("" : "+v"(v));
}

// Runs `iters` iterations of step(acc) on each of the kAcc accumulators (started at 0) and
// returns the sum of all their lanes.
template <class Step>
double accumulate(int64_t iters, Step step) {
  __m512 acc[kAcc];
#pragma GCC unroll 24
  for (int j = 0; j < kAcc; ++j) {
    acc[j] = _mm512_setzero_ps();
    opaque(acc[j]);
  }
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < kAcc; ++j) acc[j] = step(acc[j]);
  }
  __m512 s = acc[0];
#pragma GCC unroll 24
  for (int j = 1; j < kAcc; ++j) s = _mm512_add_ps(s, acc[j]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  double r = 0;
  for (float v : out) r += v;
  return r;
}

double dpbf16_run(int64_t iters, float a0, float a1, float b) {
  // Each 32-bit lane holds a BF16 pair: the even (low) element a0 or b, the odd one a1 or b.
  const __m512bh va = (__m512bh)_mm512_set1_epi32(int(bf16_bits(a1) << 16 | bf16_bits(a0)));
  const __m512bh vb = (__m512bh)_mm512_set1_epi32(int(bf16_bits(b) << 16 | bf16_bits(b)));
  return accumulate(iters, [&](__m512 acc) { return _mm512_dpbf16_ps(acc, va, vb); });
}

double fma_run(int64_t iters, float a0, float a1, float b) {
  const __m512 va = _mm512_setr_ps(a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1);
  const __m512 vb = _mm512_set1_ps(b);
  return accumulate(iters, [&](__m512 acc) { return _mm512_fmadd_ps(va, vb, acc); });
}

uint64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + i + 64));
    s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p + i + 128));
    s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p + i + 192));
  }
  for (; i + 64 <= n; i += 64) s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
  alignas(64) uint64_t lanes[8];  // (GCC 12's _mm512_reduce_add_epi64 warns about itself)
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
  uint64_t s = 0;
  for (uint64_t w : lanes) s += w;
  return s + stream_kernels_ref().read(p + i, n - i);  // i is a multiple of 8: same words
}

// Bytes before the first 64-byte boundary at or after p (at most n).
inline size_t head_bytes(const uint8_t* p, size_t n) {
  const size_t h = (64 - (reinterpret_cast<uintptr_t>(p) & 63)) & 63;
  return h < n ? h : n;
}

void write_avx512(uint8_t* p, size_t n, uint8_t v) {
  size_t i = head_bytes(p, n);
  std::memset(p, v, i);
  const __m512i vv = _mm512_set1_epi8(char(v));
  for (; i + 64 <= n; i += 64) _mm512_stream_si512(reinterpret_cast<__m512i*>(p + i), vv);
  std::memset(p + i, v, n - i);
  _mm_sfence();
}

void copy_avx512(uint8_t* dst, const uint8_t* src, size_t n) {
  size_t i = head_bytes(dst, n);
  std::memcpy(dst, src, i);
  for (; i + 64 <= n; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
}

}  // namespace

const PeakLoop& peak_loop_dpbf16_avx512() {
  static const PeakLoop l{PeakKind::avx512_bf16, "vdpbf16ps zmm", kAcc, 32.0, dpbf16_run};
  return l;
}

const PeakLoop& peak_loop_fma_avx512() {
  static const PeakLoop l{PeakKind::fp32_fma, "vfmadd231ps zmm", kAcc, 16.0, fma_run};
  return l;
}

const StreamKernels& stream_kernels_avx512() {
  static const StreamKernels k{"zmm loads + vpaddq", "zmm non-temporal stores",
                               "zmm loads + non-temporal stores", read_avx512, write_avx512,
                               copy_avx512};
  return k;
}

}  // namespace mxtrain::kern
