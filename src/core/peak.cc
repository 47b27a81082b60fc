// core/peak.cc — mxtrain/peak.h: which peak loops the active kernel path can run, and the
// timing around them (threads, calibration, repetitions, medians).
//
// Every figure is taken the same way: calibrate the work of one repetition to about
// seconds_per_rep on one thread, run it once untimed at the thread count (clocks, page
// faults, the OpenMP team), then time `reps` repetitions. In a repetition every thread runs
// the whole loop (compute) or its own slice of the buffer (memory) between two barriers; the
// wall time between them is the repetition's time, so the slowest thread sets it.
#include "mxtrain/peak.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/peak_kernels.h"
#include "mxtrain/aligned.h"
#include "mxtrain/common.h"
#include "mxtrain/isa.h"

namespace mxtrain {
namespace {

// Inputs of the compute loops: exact in BF16, and small, so accumulators never overflow or
// reach subnormals however long a loop runs (they stop growing once b is below their ulp).
constexpr float kA0 = 1.f, kA1 = 2.f, kB = 0x1p-20f;

std::vector<const kern::PeakLoop*> loops_for_active_path() {
  const Isa isa = active_isa();
  const CpuFeatures& f = cpu_features();
  std::vector<const kern::PeakLoop*> out;
  if (isa >= Isa::avx512) {
    if (f.amx_tile && f.amx_bf16 && kern::amx_permission())
      out.push_back(&kern::peak_loop_amx_bf16());
    if (f.avx512_bf16) out.push_back(&kern::peak_loop_dpbf16_avx512());
    out.push_back(&kern::peak_loop_fma_avx512());
  } else if (isa == Isa::avx2) {
    out.push_back(&kern::peak_loop_fma_avx2());
  }
  out.push_back(&kern::peak_loop_fp32_ref());
  return out;
}

const kern::StreamKernels& streams_for_active_path() {
  return active_isa() >= Isa::avx512 ? kern::stream_kernels_avx512() : kern::stream_kernels_ref();
}

// Says why the reference is not a BF16 dot product, or why AMX is not in it ("" when the
// reference is the best this CPU has).
std::string reference_note(PeakKind ref) {
  const CpuFeatures& f = cpu_features();
  const bool amx = f.amx_tile && f.amx_bf16;
  if (ref == PeakKind::amx_bf16) return "";
  if (ref == PeakKind::avx512_bf16)
    return amx ? "the CPU has AMX-BF16 but Linux did not grant the tile state (arch_prctl "
                 "ARCH_REQ_XCOMP_PERM): the reference is VDPBF16PS"
               : "";
  const std::string what = ref == PeakKind::fp32_fma
                               ? "the FP32 FMA peak"
                               : "the FP32 multiply-add peak of the scalar path";
  if (!f.avx512_bf16 && !amx) return "no AVX512-BF16 and no AMX-BF16 on this CPU: the reference is " + what;
  return std::string("kernel path ") + isa_name(active_isa()) +
         " (no BF16 dot products on it): the reference is " + what;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs `work(thread, threads)` on `threads` threads between two barriers; returns the wall
// seconds and the number of threads the team really had.
template <class Work>
std::pair<double, int> timed_team(int threads, Work&& work) {
  Clock::time_point t0, t1;
  int team = 1;
#pragma omp parallel num_threads(threads)
  {
#pragma omp barrier
#pragma omp master
    {
      team = omp_get_num_threads();
      t0 = Clock::now();
    }
    work(omp_get_thread_num(), omp_get_num_threads());
#pragma omp barrier
#pragma omp master
    t1 = Clock::now();
  }
  return {std::chrono::duration<double>(t1 - t0).count(), team};
}

// Iterations of `l` that take about `seconds` on one thread.
int64_t calibrate(const kern::PeakLoop& l, double seconds) {
  volatile double sink = 0;
  int64_t it = 256;
  for (;;) {
    const auto t0 = Clock::now();
    sink = sink + l.run(it, kA0, kA1, kB);
    const double t = seconds_since(t0);
    if (t >= 2e-3 || it >= (int64_t(1) << 40)) return std::max<int64_t>(1, int64_t(it * seconds / t));
    it *= t > 0 ? std::clamp<int64_t>(int64_t(2e-3 / t) + 1, 2, 64) : 64;
  }
}

ComputePeakRow measure_loop(const kern::PeakLoop& l, int threads, int reps, double seconds) {
  const int64_t iters = calibrate(l, seconds);
  std::vector<double> sink(size_t(threads), 0.0);
  auto work = [&](int t, int) { sink[size_t(t)] += l.run(iters, kA0, kA1, kB); };
  timed_team(threads, work);  // untimed
  std::vector<double> gflops, secs;
  const double flops_per_thread = double(iters) * l.accumulators * l.macs_per_instruction * 2;
  for (int r = 0; r < reps; ++r) {
    const auto [s, team] = timed_team(threads, work);
    secs.push_back(s);
    gflops.push_back(flops_per_thread * team / s / 1e9);
  }
  volatile double keep = sink[0];
  (void)keep;
  ComputePeakRow row;
  row.kind = l.kind;
  row.instruction = l.instruction;
  row.flops_per_instruction = 2 * l.macs_per_instruction;
  row.accumulators = l.accumulators;
  row.threads = threads;
  row.reps = reps;
  row.gflops = median(gflops);
  row.min_gflops = *std::min_element(gflops.begin(), gflops.end());
  row.max_gflops = *std::max_element(gflops.begin(), gflops.end());
  row.seconds_per_rep = median(secs);
  return row;
}

// One thread's part of [0, n): cut at multiples of 64 bytes.
std::pair<size_t, size_t> slice(size_t n, int t, int nt) {
  const size_t lo = (n * size_t(t) / size_t(nt)) & ~size_t(63);
  const size_t hi = t + 1 == nt ? n : (n * size_t(t + 1) / size_t(nt)) & ~size_t(63);
  return {lo, hi};
}

BandwidthRow measure_stream(const kern::StreamKernels& k, MemStream s, int threads, int reps,
                            double seconds, ByteBuffer& src, ByteBuffer& dst) {
  const size_t n = src.size();
  std::vector<uint64_t> sink(size_t(threads), 0);
  int passes = 1;
  auto work = [&](int t, int nt) {
    const auto [lo, hi] = slice(n, t, nt);
    for (int p = 0; p < passes; ++p) {
      if (s == MemStream::read) sink[size_t(t)] += k.read(src.data() + lo, hi - lo);
      else if (s == MemStream::write) k.write(dst.data() + lo, hi - lo, uint8_t(p + 1));
      else k.copy(dst.data() + lo, src.data() + lo, hi - lo);
    }
  };
  const double t_pass = timed_team(threads, work).first;  // untimed; sizes a repetition
  passes = std::max(1, int(seconds / std::max(t_pass, 1e-9) + 0.5));
  const int64_t bytes = int64_t(passes) * int64_t(n) * (s == MemStream::copy ? 2 : 1);
  std::vector<double> gbs;
  for (int r = 0; r < reps; ++r) gbs.push_back(double(bytes) / timed_team(threads, work).first / 1e9);
  volatile uint64_t keep = sink[0];
  (void)keep;
  BandwidthRow row;
  row.stream = s;
  row.kernel = s == MemStream::read ? k.read_name : s == MemStream::write ? k.write_name : k.copy_name;
  row.threads = threads;
  row.reps = reps;
  row.buffer_bytes = int64_t(n);
  row.bytes_per_rep = bytes;
  row.gb_per_s = median(gbs);
  row.min_gb_per_s = *std::min_element(gbs.begin(), gbs.end());
  row.max_gb_per_s = *std::max_element(gbs.begin(), gbs.end());
  return row;
}

int64_t read_sysfs_int(const std::string& path, const char* fmt) {
  long v = -1;
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    if (std::fscanf(f, fmt, &v) != 1) v = -1;
    std::fclose(f);
  }
  return v;
}

}  // namespace

const char* peak_kind_name(PeakKind k) {
  switch (k) {
    case PeakKind::fp32_ref: return "fp32_ref";
    case PeakKind::fp32_fma: return "fp32_fma";
    case PeakKind::avx512_bf16: return "avx512_bf16";
    case PeakKind::amx_bf16: return "amx_bf16";
  }
  return "?";
}

const char* mem_stream_name(MemStream s) {
  switch (s) {
    case MemStream::read: return "read";
    case MemStream::write: return "write";
    case MemStream::copy: return "copy";
  }
  return "?";
}

int64_t last_level_cache_bytes() {
  int best_level = 0;
  int64_t bytes = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    const int64_t level = read_sysfs_int(dir + "/level", "%ld");
    const int64_t kib = read_sysfs_int(dir + "/size", "%ldK");
    if (level > best_level && kib > 0) {
      best_level = int(level);
      bytes = kib << 10;
    }
  }
  return bytes > 0 ? bytes : int64_t(32) << 20;
}

std::vector<PeakKind> available_peak_kinds() {
  std::vector<PeakKind> out;
  for (const kern::PeakLoop* l : loops_for_active_path()) out.push_back(l->kind);
  return out;
}

MachinePeak measure_peak(const PeakOptions& o) {
  MXT_CHECK(o.reps > 0, "peak: reps must be positive (got ", o.reps, ")");
  MXT_CHECK(o.seconds_per_rep > 0, "peak: seconds per repetition must be positive (got ",
            o.seconds_per_rep, ")");
  MXT_CHECK(o.buffer_bytes >= 0, "peak: buffer bytes must not be negative (got ",
            o.buffer_bytes, ")");
  std::vector<int> threads = o.threads;
  if (threads.empty()) threads = {1, omp_get_max_threads()};
  for (int t : threads) MXT_CHECK(t > 0, "peak: thread counts must be positive (got ", t, ")");
  std::sort(threads.begin(), threads.end());
  threads.erase(std::unique(threads.begin(), threads.end()), threads.end());

  MachinePeak p;
  p.cpu = cpu_features().brand;
  p.llc_bytes = last_level_cache_bytes();
  if (o.compute) {
    const std::vector<const kern::PeakLoop*> loops = loops_for_active_path();
    for (const kern::PeakLoop* l : loops)
      for (int t : threads) {
        if (o.on_figure) o.on_figure(l->instruction + (", " + std::to_string(t)) + " thread(s)");
        p.compute.push_back(measure_loop(*l, t, o.reps, o.seconds_per_rep));
      }
    p.reference_kind = loops.front()->kind;
    p.reference_threads = threads.back();
    p.reference_gflops = p.compute[threads.size() - 1].gflops;
    p.reference_note = reference_note(p.reference_kind);
  }
  if (o.memory) {
    const int64_t n = o.buffer_bytes > 0 ? o.buffer_bytes
                                         : std::max<int64_t>(4 * p.llc_bytes, int64_t(64) << 20);
    ByteBuffer src(static_cast<size_t>(n)), dst(static_cast<size_t>(n));
    for (size_t i = 0; i < src.size(); i += 4096) src[i] = uint8_t(i >> 12);
    const kern::StreamKernels& k = streams_for_active_path();
    for (MemStream s : {MemStream::read, MemStream::write, MemStream::copy})
      for (int t : threads) {
        if (o.on_figure)
          o.on_figure(std::string(mem_stream_name(s)) + ", " + std::to_string(t) + " thread(s)");
        p.memory.push_back(measure_stream(k, s, t, o.reps, o.seconds_per_rep, src, dst));
      }
  }
  return p;
}

ComputePeakRow measure_reference_peak(int threads) {
  MXT_CHECK(threads >= 0, "peak: thread count must not be negative (got ", threads, ")");
  return measure_loop(*loops_for_active_path().front(), threads > 0 ? threads : omp_get_max_threads(),
                      5, 0.02);
}

ReferencePeak reference_peak(double given_gflops, int threads) {
  MXT_CHECK(given_gflops >= 0, "peak: a given peak must be positive GFLOP/s (got ", given_gflops,
            ")");
  ReferencePeak r;
  if (given_gflops > 0) {
    r.gflops = given_gflops;
    return r;
  }
  // The greatest of the repetitions, not their median: the figure is what the machine can
  // do, and work elsewhere on it only ever slows a repetition (a median of five 20 ms runs
  // taken while another process had a core read half the peak, and MFU twice too high).
  const ComputePeakRow row = measure_reference_peak(threads);
  r.gflops = row.max_gflops;
  r.measured = true;
  r.kind = row.kind;
  r.threads = row.threads;
  return r;
}

std::string ReferencePeak::describe() const {
  char buf[160];
  if (measured)
    std::snprintf(buf, sizeof buf, "%.1f GFLOP/s (%s, %d thread%s, measured in this run)", gflops,
                  peak_kind_name(kind), threads, threads == 1 ? "" : "s");
  else
    std::snprintf(buf, sizeof buf, "%.1f GFLOP/s (given)", gflops);
  return buf;
}

std::string peak_json(const MachinePeak& p, int indent) {
  nlohmann::json j;
  j["cpu"] = p.cpu;
  j["llc_bytes"] = p.llc_bytes;
  j["kernel_path"] = isa_name(active_isa());
  if (!p.compute.empty())
    j["reference"] = {{"kind", peak_kind_name(p.reference_kind)},
                      {"threads", p.reference_threads},
                      {"gflops", p.reference_gflops},
                      {"note", p.reference_note}};
  j["compute"] = nlohmann::json::array();
  for (const ComputePeakRow& r : p.compute)
    j["compute"].push_back({{"kind", peak_kind_name(r.kind)},
                            {"instruction", r.instruction},
                            {"flops_per_instruction", r.flops_per_instruction},
                            {"accumulators", r.accumulators},
                            {"threads", r.threads},
                            {"reps", r.reps},
                            {"gflops", r.gflops},
                            {"min_gflops", r.min_gflops},
                            {"max_gflops", r.max_gflops},
                            {"seconds_per_rep", r.seconds_per_rep}});
  j["memory"] = nlohmann::json::array();
  for (const BandwidthRow& r : p.memory)
    j["memory"].push_back({{"stream", mem_stream_name(r.stream)},
                           {"kernel", r.kernel},
                           {"threads", r.threads},
                           {"reps", r.reps},
                           {"buffer_bytes", r.buffer_bytes},
                           {"bytes_per_rep", r.bytes_per_rep},
                           {"gb_per_s", r.gb_per_s},
                           {"min_gb_per_s", r.min_gb_per_s},
                           {"max_gb_per_s", r.max_gb_per_s}});
  return j.dump(indent);
}

}  // namespace mxtrain
