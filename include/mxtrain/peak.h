// mxtrain/peak.h — what this machine can do at most: its dot-product peak (GFLOP/s) and its
// memory bandwidth (GB/s), measured, at 1 thread and at all threads.
//
// The compute peak is an independent loop of independent instructions on registers (no memory
// operand), with enough accumulators to hide the instruction's latency, run by every thread
// at once:
//   amx_bf16     TDPBF16PS on AMX tiles (16x16 FP32 += 16x32 BF16 · 32x16 BF16:
//                16384 FLOPs per instruction), CPUs with AMX-BF16 only;
//   avx512_bf16  VDPBF16PS zmm (16 lanes x 2 products x 2 ops = 64 FLOPs per instruction);
//   fp32_fma     VFMADD231PS zmm (32 FLOPs) or ymm (16 FLOPs) on CPUs without AVX-512;
//   fp32_ref     a portable C++ multiply-add loop (the scalar path; 2 FLOPs per multiply-add,
//                whatever instructions the compiler's baseline x86-64 code uses).
// The reference peak that other figures are a percentage of (bench gemm/linear, MFU) is the
// best BF16 dot product the active kernel path reaches: AMX where present, else VDPBF16PS;
// on a CPU with neither it is the FP32 FMA peak, and `reference_note` says so.
//
// Memory bandwidth: read (sum of 64-bit words), write (non-temporal stores on AVX-512,
// memset on the scalar path) and copy (loads + non-temporal stores; memcpy on the scalar
// path) over a buffer several times the last-level cache, each thread on its own slice.
// Bytes counted are those the program asks for: read n, write n, copy 2n (n read and n
// written) per pass; a write's read-for-ownership traffic, if any, is not counted.
//
// Every figure is the median of `reps` timed repetitions (after one untimed one), with the
// least and greatest beside it. Kernels: core/peak_kernels.h (picked by active_isa() and the
// CPU's AVX512-BF16 / AMX-BF16 bits, isa.h). docs/results/peak.md has the figures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mxtrain {

enum class PeakKind { fp32_ref, fp32_fma, avx512_bf16, amx_bf16 };

const char* peak_kind_name(PeakKind k);  // "fp32_ref", "fp32_fma", "avx512_bf16", "amx_bf16"

// One compute loop at one thread count.
struct ComputePeakRow {
  PeakKind kind;
  std::string instruction;      // e.g. "vdpbf16ps zmm"
  double flops_per_instruction; // 64 for VDPBF16PS zmm
  int accumulators;             // independent accumulators per thread
  int threads;
  int reps;
  double gflops, min_gflops, max_gflops;  // median, least, greatest over reps
  double seconds_per_rep;       // median wall time of one repetition
};

enum class MemStream { read, write, copy };
const char* mem_stream_name(MemStream s);  // "read", "write", "copy"

// One memory stream at one thread count.
struct BandwidthRow {
  MemStream stream;
  std::string kernel;      // e.g. "avx512 loads + vpaddq", "memcpy"
  int threads;
  int reps;
  int64_t buffer_bytes;    // bytes of each buffer (copy uses two)
  int64_t bytes_per_rep;   // bytes counted per repetition (see above)
  double gb_per_s, min_gb_per_s, max_gb_per_s;  // median, least, greatest (1 GB = 1e9 bytes)
};

struct PeakOptions {
  int reps = 7;                   // timed repetitions per figure
  double seconds_per_rep = 0.05;  // target wall time of one repetition
  int64_t buffer_bytes = 0;       // memory streams; 0: 4x the last-level cache, >= 64 MiB
  bool compute = true, memory = true;
  std::vector<int> threads;       // empty: {1, omp_get_max_threads()} (one entry if equal)
  // Called before each figure is measured with what it is (e.g. "read, 2 threads"), for a
  // progress display; may be empty.
  std::function<void(const std::string&)> on_figure;
};

struct MachinePeak {
  std::string cpu;                     // cpuid brand string
  std::vector<ComputePeakRow> compute;
  std::vector<BandwidthRow> memory;
  // The reference: the best BF16 dot-product kind available (see above) at the most threads.
  PeakKind reference_kind = PeakKind::fp32_ref;
  int reference_threads = 0;
  double reference_gflops = 0;         // 0 when compute was not measured
  std::string reference_note;          // e.g. "no AVX512-BF16 and no AMX-BF16: FP32 FMA peak"
  int64_t llc_bytes = 0;               // last-level cache size used to size the buffers
};

// The compute kinds the active kernel path can run, best (the reference) first.
std::vector<PeakKind> available_peak_kinds();

// Measures everything PeakOptions asks for (a few seconds with the defaults).
MachinePeak measure_peak(const PeakOptions& o = {});

// The reference peak only, at `threads` threads (0: omp_get_max_threads()), with a short run
// (5 repetitions of 20 ms): for figures that report a percentage of it in the same run.
ComputePeakRow measure_reference_peak(int threads = 0);

// The peak a figure is reported as a percentage of: a figure given by the user (a --peak /
// --peak-gflops option) or the reference peak measured now at `threads` (0: all) threads.
struct ReferencePeak {
  double gflops = 0;
  bool measured = false;
  PeakKind kind = PeakKind::fp32_ref;  // when measured
  int threads = 0;                     // when measured
  std::string describe() const;        // e.g. "459.1 GFLOP/s (avx512_bf16, 2 threads, measured)"
};
ReferencePeak reference_peak(double given_gflops, int threads = 0);

// One JSON object: cpu, llc_bytes, kernel_path, reference {kind, threads, gflops, note} (when
// compute was measured), compute [...], memory [...] — the fields of the structs above,
// named as written there.
std::string peak_json(const MachinePeak& p, int indent = 1);

// Last-level cache size in bytes (sysfs, which reports the cache a core really shares; 32 MiB
// when it cannot be read).
int64_t last_level_cache_bytes();

}  // namespace mxtrain
