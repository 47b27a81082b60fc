// tests/core/peak_test.cc — the machine-peak loops and streams (core/peak_kernels.h) and the
// measurement around them (mxtrain/peak.h).
//
// A peak loop's figure is only as true as its FLOP count, so every loop this CPU can run is
// checked to execute exactly the multiply-adds it is credited with: with inputs exact in BF16
// its accumulators end at iters x accumulators x multiply-adds per instruction x the mean
// product, exactly, and a loop that skipped an instruction, one product of a BF16 pair or a
// lane would miss it. The memory streams are checked byte for byte against the scalar ones on
// ragged sizes and misaligned starts. Timings themselves are not asserted (speed is measured
// in benchmarks); the measurement is checked for its shape: rows, medians inside their range,
// the reference kind and its note.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/peak_kernels.h"
#include "mxtrain/common.h"
#include "mxtrain/isa.h"
#include "mxtrain/peak.h"

namespace mxtrain {
namespace {

// Inputs exact in BF16; a0 != a1 so that a pair computed as twice one product is caught.
constexpr float kA0 = 1.f, kA1 = 2.f, kB = 0x1p-20f;

// Every compute loop this CPU runs, the scalar one first.
std::vector<const kern::PeakLoop*> runnable_loops() {
  std::vector<const kern::PeakLoop*> out{&kern::peak_loop_fp32_ref()};
  if (isa_supported(Isa::avx2)) out.push_back(&kern::peak_loop_fma_avx2());
  if (isa_supported(Isa::avx512)) out.push_back(&kern::peak_loop_fma_avx512());
  if (isa_supported(Isa::avx512) && cpu_features().avx512_bf16)
    out.push_back(&kern::peak_loop_dpbf16_avx512());
  return out;
}

void expect_exact_counts(const kern::PeakLoop& l) {
  // 1, 31, 33, 2^n +- 1 and a few thousand; every sum stays below 2^24 * kB per element, so
  // each partial sum is exact in FP32.
  for (int64_t iters : {1, 2, 31, 33, 255, 257, 4095, 4097}) {
    const double got = l.run(iters, kA0, kA1, kB);
    EXPECT_EQ(got, kern::peak_loop_expected_sum(l, iters, kA0, kA1, kB))
        << l.instruction << ", " << iters << " iterations";
  }
  EXPECT_EQ(l.run(0, kA0, kA1, kB), 0.0) << l.instruction;
}

TEST(PeakLoops, EveryLoopExecutesTheMultiplyAddsItIsCreditedWith) {
  for (const kern::PeakLoop* l : runnable_loops()) expect_exact_counts(*l);
}

TEST(PeakLoops, AmxLoopExecutesTheMultiplyAddsItIsCreditedWith) {
  if (!cpu_features().amx_tile || !cpu_features().amx_bf16)
    GTEST_SKIP() << "not run: this CPU has no AMX-BF16";
  if (!kern::amx_permission()) GTEST_SKIP() << "not run: Linux refused the AMX tile state";
  expect_exact_counts(kern::peak_loop_amx_bf16());
}

TEST(PeakLoops, FlopsPerInstructionAreTheInstructionsWidths) {
  // FLOPs per instruction = 2 x multiply-adds: VDPBF16PS zmm 16 lanes x 2 products, FMA zmm 16
  // lanes, FMA ymm 8, a TDPBF16PS on 16x16 tiles 16 x 16 x 32, the scalar loop 1.
  EXPECT_EQ(kern::peak_loop_dpbf16_avx512().macs_per_instruction, 32);
  EXPECT_EQ(kern::peak_loop_fma_avx512().macs_per_instruction, 16);
  EXPECT_EQ(kern::peak_loop_fma_avx2().macs_per_instruction, 8);
  EXPECT_EQ(kern::peak_loop_amx_bf16().macs_per_instruction, 8192);
  EXPECT_EQ(kern::peak_loop_fp32_ref().macs_per_instruction, 1);
}

// Pattern bytes with guard zones either side of the region a kernel may touch.
struct Guarded {
  static constexpr size_t kGuard = 80;
  std::vector<uint8_t> buf;
  size_t off;
  Guarded(size_t n, size_t offset, uint32_t seed) : buf(n + offset + 2 * kGuard), off(offset) {
    uint32_t s = seed;
    for (uint8_t& b : buf) b = uint8_t((s = s * 1664525u + 1013904223u) >> 24);
  }
  uint8_t* p() { return buf.data() + kGuard + off; }
};

TEST(PeakStreams, Avx512StreamsMatchTheScalarOnesByteForByte) {
  if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  const kern::StreamKernels& ref = kern::stream_kernels_ref();
  const kern::StreamKernels& fast = kern::stream_kernels_avx512();
  for (size_t n : {0, 1, 7, 8, 9, 31, 33, 63, 64, 65, 255, 256, 257, 511, 4097, 65537})
    for (size_t off : {0, 1, 13, 63}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", offset " + std::to_string(off));
      Guarded src(n, off, 7);
      EXPECT_EQ(fast.read(src.p(), n), ref.read(src.p(), n));

      Guarded a(n, off, 9), b(n, off, 9);
      fast.write(a.p(), n, 0xA5);
      ref.write(b.p(), n, 0xA5);
      EXPECT_EQ(a.buf, b.buf);

      Guarded c(n, off, 11), d(n, off, 11);
      fast.copy(c.p(), src.p(), n);
      ref.copy(d.p(), src.p(), n);
      EXPECT_EQ(c.buf, d.buf);
    }
}

TEST(PeakStreams, ScalarReadIsTheWordSumPlusTheTailBytes) {
  // 19 bytes: two little-endian words 0x0807060504030201 and 0x100f0e0d0c0b0a09, then 17, 18, 19.
  std::vector<uint8_t> v(19);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i + 1);
  EXPECT_EQ(kern::stream_kernels_ref().read(v.data(), v.size()),
            0x0807060504030201ull + 0x100f0e0d0c0b0a09ull + 17 + 18 + 19);
}

PeakOptions tiny() {
  PeakOptions o;
  o.reps = 3;
  o.seconds_per_rep = 0.002;
  o.buffer_bytes = 1 << 20;
  o.threads = {2, 1, 2};  // sorted and made unique
  return o;
}

TEST(MeasurePeak, RowsForEveryKindStreamAndThreadCountWithMediansInsideTheirRanges) {
  const MachinePeak p = measure_peak(tiny());
  const std::vector<PeakKind> kinds = available_peak_kinds();
  ASSERT_EQ(p.compute.size(), kinds.size() * 2);
  for (size_t i = 0; i < p.compute.size(); ++i) {
    const ComputePeakRow& r = p.compute[i];
    EXPECT_EQ(r.kind, kinds[i / 2]);
    EXPECT_EQ(r.threads, i % 2 ? 2 : 1);
    EXPECT_EQ(r.reps, 3);
    EXPECT_GT(r.min_gflops, 0);
    EXPECT_LE(r.min_gflops, r.gflops);
    EXPECT_LE(r.gflops, r.max_gflops);
  }
  EXPECT_EQ(p.reference_kind, kinds.front());
  EXPECT_EQ(p.reference_threads, 2);
  EXPECT_EQ(p.reference_gflops, p.compute[1].gflops);
  ASSERT_EQ(p.memory.size(), 6u);
  for (size_t i = 0; i < p.memory.size(); ++i) {
    const BandwidthRow& r = p.memory[i];
    EXPECT_EQ(int(r.stream), int(i / 2));
    EXPECT_EQ(r.buffer_bytes, 1 << 20);
    // Whole passes over the buffer; a copy counts its bytes twice (read and written).
    const int64_t per_pass = r.stream == MemStream::copy ? 2 << 20 : 1 << 20;
    EXPECT_EQ(r.bytes_per_rep % per_pass, 0);
    EXPECT_GE(r.bytes_per_rep, per_pass);
    EXPECT_LE(r.min_gb_per_s, r.gb_per_s);
    EXPECT_LE(r.gb_per_s, r.max_gb_per_s);
  }
  const nlohmann::json j = nlohmann::json::parse(peak_json(p));
  EXPECT_EQ(j.at("reference").at("kind"), peak_kind_name(kinds.front()));
  EXPECT_EQ(j.at("compute").size(), p.compute.size());
  EXPECT_EQ(j.at("memory").at(5).at("stream"), "copy");
}

TEST(MeasurePeak, TheReferenceIsTheBestBf16DotProductOfTheActivePath) {
  const CpuFeatures& f = cpu_features();
  const std::vector<PeakKind> kinds = available_peak_kinds();
  if (f.amx_tile && f.amx_bf16 && kern::amx_permission() && isa_supported(Isa::avx512)) {
    EXPECT_EQ(kinds.front(), PeakKind::amx_bf16);
  } else if (f.avx512_bf16 && isa_supported(Isa::avx512)) {
    EXPECT_EQ(kinds.front(), PeakKind::avx512_bf16);
  }
  EXPECT_EQ(kinds.back(), PeakKind::fp32_ref);  // the scalar path is always there

  set_isa(Isa::scalar);
  PeakOptions o = tiny();
  o.memory = false;
  const MachinePeak p = measure_peak(o);
  clear_isa_override();
  ASSERT_EQ(p.compute.size(), 2u);
  EXPECT_EQ(p.reference_kind, PeakKind::fp32_ref);
  // Says why the reference is not a BF16 dot product: the CPU has none, or the path is forced.
  EXPECT_NE(p.reference_note.find("the reference is the FP32 multiply-add"), std::string::npos)
      << p.reference_note;
}

TEST(MeasurePeak, BadOptionsAreErrorsNamingTheOption) {
  PeakOptions o = tiny();
  o.reps = 0;
  EXPECT_THROW(measure_peak(o), Error);
  o = tiny();
  o.threads = {0};
  try {
    measure_peak(o);
    FAIL() << "no error for 0 threads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("thread counts must be positive"), std::string::npos);
  }
}

}  // namespace
}  // namespace mxtrain
