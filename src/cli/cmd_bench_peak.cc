// cli/cmd_bench_peak.cc — `mxtrain bench peak`: this machine's dot-product peak and memory
// bandwidth at 1 thread and at all threads (mxtrain/peak.h), as a table or as JSON.
//
// The reference peak it names is the one `bench gemm`, `bench linear` and the trainer's MFU
// are percentages of; its --json output is what docs/results/peak.md's raw rows hold. A line
// per figure on stderr shows progress (a few seconds in all with the defaults).
#include <omp.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/values.h"
#include "mxtrain/isa.h"
#include "mxtrain/peak.h"

namespace mxtrain::cli {
namespace {

struct BenchPeakOptions {
  bool json = false, quiet = false, memory = true, compute = true;
  int reps = 7;
  double rep_ms = 50;
  int64_t buffer_mib = 0;
  std::vector<int> threads;
};

int run_bench_peak(const BenchPeakOptions& o) {
  PeakOptions po;
  po.reps = o.reps;
  po.seconds_per_rep = o.rep_ms / 1e3;
  po.buffer_bytes = o.buffer_mib << 20;
  po.threads = o.threads;
  po.memory = o.memory;
  po.compute = o.compute;
  if (!o.quiet)
    po.on_figure = [](const std::string& what) {
      std::fprintf(stderr, "bench peak: measuring %s\n", what.c_str());
    };
  const MachinePeak p = measure_peak(po);
  if (o.json) {
    std::cout << peak_json(p) << std::endl;
    return 0;
  }
  std::printf("CPU: %s; kernel path %s; %d OpenMP threads; last-level cache %.0f MiB\n",
              p.cpu.empty() ? "(unknown)" : p.cpu.c_str(), isa_name(active_isa()),
              omp_get_max_threads(), double(p.llc_bytes) / 1048576.0);
  if (!p.compute.empty()) {
    std::printf("\ncompute peak: independent register-only loops, median of %d repetitions "
                "[least - greatest]\n",
                po.reps);
    std::printf("%-12s %-28s %8s %5s %8s %11s %21s\n", "kind", "instruction", "FLOP/ins", "acc",
                "threads", "GFLOP/s", "range");
    for (const ComputePeakRow& r : p.compute)
      std::printf("%-12s %-28s %8.0f %5d %8d %11.1f %10.1f - %8.1f\n", peak_kind_name(r.kind),
                  r.instruction.c_str(), r.flops_per_instruction, r.accumulators, r.threads,
                  r.gflops, r.min_gflops, r.max_gflops);
    std::printf("reference peak: %s at %d thread(s): %.1f GFLOP/s%s%s\n",
                peak_kind_name(p.reference_kind), p.reference_threads, p.reference_gflops,
                p.reference_note.empty() ? "" : "\n  note: ", p.reference_note.c_str());
  }
  if (!p.memory.empty()) {
    std::printf("\nmemory bandwidth: buffers of %.0f MiB, median of %d repetitions [least - "
                "greatest]; copy counts bytes read + written\n",
                double(p.memory.front().buffer_bytes) / 1048576.0, po.reps);
    std::printf("%-6s %-34s %8s %9s %19s\n", "stream", "kernel", "threads", "GB/s", "range");
    for (const BandwidthRow& r : p.memory)
      std::printf("%-6s %-34s %8d %9.2f %8.2f - %8.2f\n", mem_stream_name(r.stream),
                  r.kernel.c_str(), r.threads, r.gb_per_s, r.min_gb_per_s, r.max_gb_per_s);
  }
  return 0;
}

}  // namespace

MXT_REGISTER_COMMAND("bench peak", [](CLI::App& app) {
  auto opts = std::make_shared<BenchPeakOptions>();
  CLI::App* sub = mxtrain::cli::group(app, "bench", "Benchmarks")->add_subcommand(
      "peak",
      "This machine's limits: the BF16 dot-product peak (VDPBF16PS; AMX TDPBF16PS where "
      "present; FP32 FMA, labelled, on CPUs with neither) and memory bandwidth (read, write, "
      "copy over buffers several times the last-level cache), at 1 thread and all threads. "
      "JSON: cpu, llc_bytes, kernel_path, reference {kind, threads, gflops, note}, compute "
      "[{kind, instruction, flops_per_instruction, accumulators, threads, reps, gflops, "
      "min_gflops, max_gflops, seconds_per_rep}], memory [{stream, kernel, threads, reps, "
      "buffer_bytes, bytes_per_rep, gb_per_s, min_gb_per_s, max_gb_per_s}]");
  sub->add_flag("--json", opts->json, "Print one JSON object instead of a table");
  sub->add_flag("--quiet", opts->quiet, "No progress lines on stderr");
  sub->add_option("--reps", opts->reps, "Timed repetitions per figure; the median is "
                                        "reported with the range (default 7)")
      ->check(number_at_least(0, /*exclusive=*/true));
  sub->add_option("--rep-ms", opts->rep_ms, "Target length of one repetition in ms (default 50)")
      ->check(number_at_least(0, /*exclusive=*/true));
  sub->add_option("--buffer-mib", opts->buffer_mib,
                  "Size of each memory-stream buffer in MiB (default: 4x the last-level cache, "
                  "at least 64)")
      ->check(number_at_least(0, /*exclusive=*/true));
  sub->add_option("--threads", opts->threads,
                  "Thread counts to measure (default 1 and the OpenMP maximum)")
      ->delimiter(',')
      ->check(number_at_least(0, /*exclusive=*/true));
  sub->add_flag("!--no-memory", opts->memory, "Skip the memory-bandwidth figures");
  sub->add_flag("!--no-compute", opts->compute, "Skip the compute-peak figures");
  sub->callback([opts] { exit_code() = run_bench_peak(*opts); });
});

}  // namespace mxtrain::cli
