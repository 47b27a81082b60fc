// mxtrain/dist/fsdp.h — fully sharded data parallel training with quantized all-gather
// (docs/design.md, "FSDP"), over the communication layer of dist/comm.h.
//
// An Fsdp object wraps the model's Linear and GroupedLinear layers ("modules", added in
// forward order). For each it keeps the FP32 master shard and AdamW moments of this rank's
// rows (dist/shard.h: 32-row-aligned, padded, experts never split inside a 32-row block) and
// installs a weight provider in the layer. When the layer needs its weight, the provider
// quantizes the local shard ("pre all-gather", cached per parameter version), all-gathers one
// packed buffer, and rebuilds the full quantized weight ("post all-gather"), byte-identical to
// quantizing the whole weight on one process. What travels follows the layer's recipe:
//   bf16         BF16 shard before forward; again before backward when resharded after
//                forward (bf16_reshard_after_forward, default on): 2N or 4N bytes per step
//   mxfp8        on-demand: rowwise before forward (dropped after forward), colwise before
//                backward: 2(N + N/32). all: rowwise + colwise before forward, kept until
//                backward: 2N + 2N/32
//   mxfp8-32x32  one FP8 payload + one tile-scale grid before forward, kept for backward:
//                N + N/1024
//   blockwise    as mxfp8-32x32 with FP32 scales per 128x128 tile: N + N/4096
//   fp8-current, fp8-delayed  one FP8 payload + one FP32 scale per tensor (per expert), kept
//                for backward: N + 4·E; the scale is agreed first (current: the all-reduced
//                amax of the whole weight; delayed: the layer's amax history)
// N = the padded element count (ShardLayout::padded_numel(); equals out·in when out is a
// multiple of 32·world); the formulas are exact when `in` is a multiple of 32.
//
// Prefetch: Fsdp knows the module order. When module i's provider runs for forward it starts
// the non-blocking all-gathers of modules i+1 .. i+prefetch_depth for forward before waiting
// for its own; for backward, modules i-1 .. i-prefetch_depth. prefetch() starts one
// explicitly. All ranks must call the layers in the same order (they run the same model), so
// collectives match. MPI moves a non-blocking collective only when the library is entered:
// poll() tests every collective in flight, and the model's module hook calls it at every
// module boundary (train/param_sync_fsdp.cc), so transfers advance between layers. With
// progress_thread a thread also enters MPI every 100 us while anything is in flight
// (Comm::start_progress_thread; needs MPI_THREAD_MULTIPLE), so transfers advance during the
// GEMMs too — at the price of the CPU time the copies take from computation (off by default:
// on a machine without spare cores it measured slower, docs/results/fsdp.md).
//
// The caller (trainer or model) calls post_forward(i) after module i's forward and
// post_backward(i) after its backward: they drop the gathered full weights as the mode says
// — after forward when resharded, else at reduce_gradients() (the copies serve the backward
// and every micro-batch of the step). Without them everything stays cached (more memory,
// same numbers).
//
// Gradients (ZeRO-3): a sharded module's full-size gradient exists only while its backward
// runs. pre_backward(i) lends the layer a full-size buffer from a pool (Parameter::grad,
// cleared, so the layer's wgrad writes it); post_backward(i) starts a non-blocking
// reduce-scatter (FP32 sum) of it into this rank's shard grad, so the transfer overlaps the
// next module's backward. A layout without padding rows is sent from the lent buffer itself,
// which returns to the pool when the transfer completes; a padded one is copied into a send
// buffer first and returns at once. The pool holds as many buffers as are lent or in flight
// at once (two for a dense model): a module is lent the buffer it had last time when that is
// free, else the smallest free one that fits, so consecutive modules settle on buffers of
// their own sizes.
// Each micro-batch is reduce-scattered: the shard grad of a step is the sum over ranks and
// micro-batches (the first result is written into it, later ones added).
// reduce_gradients() completes the reduce-scatters in flight and divides by the world size,
// so a shard grad is the mean over ranks — the gradient of the global batch when every rank's
// loss is the mean over an equal share of it. A module whose backward ran without
// pre_backward (its layer accumulated into its own full-size Parameter::grad) is
// reduce-scattered there instead, from that buffer, which is left as is.
//
// Other parameters (embeddings, norms, router, biases, an LM head outside a Linear) are
// replicated: every rank holds the whole value; reduce_gradients() all-reduces their grads
// (mean) and counts those bytes as allreduce_bytes. The optimizer updates them identically on
// every rank.
//
// Optimizer: shards() exposes value/grad/m/v spans for every sharded and replicated
// parameter; run AdamW (train/optim.h adamw_update) on each, then bump *version (or call
// bump_versions()) so every quantized copy is rebuilt. Padding entries of a shard are zero
// with zero grads and stay zero under AdamW.
//
// A training step with FSDP (every rank runs the same code on its share of the batch):
//   Fsdp fsdp(Comm::world(), opt);                 // collective
//   for (Linear* l : layers_in_forward_order) fsdp.add(*l);
//   for (Parameter* p : other_params) fsdp.add_replicated(*p);
//   fsdp.set_input_grad_needed(0, false);          // the first layer computes no dx
//   each step: fsdp.reset_stats(); model.clear_grad();
//     micro-batches: forward (post_forward(i) after module i), backward (pre_backward(i)
//     before module i's, post_backward(i) after)
//     fsdp.reduce_gradients(); s = fsdp.grad_sum_squares_checked(); if s is not finite,
//     skip; else clip with sqrt(s)
//     for (ShardView& s : fsdp.shards()) { adamw_update(s.value, s.grad, s.m, s.v, ...); }
//     fsdp.bump_versions();
//
// Lifetime: the layers must outlive the Fsdp object; its destructor removes the providers and
// completes gathers still in flight (except while an exception unwinds: dist/comm.h, "Errors").
// With free_full_values the layers' Parameter::value is emptied after the shard is taken;
// use gather_full() to read a whole weight (checkpoints).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mxtrain/dist/comm.h"
#include "mxtrain/dist/shard.h"
#include "mxtrain/nn/grouped_linear.h"
#include "mxtrain/nn/linear.h"

namespace mxtrain::dist {

enum class Mxfp8Gather : uint8_t { on_demand, all };
const char* mxfp8_gather_name(Mxfp8Gather m);          // "on-demand" | "all"
Mxfp8Gather parse_mxfp8_gather(const std::string& s);  // throws listing the valid names

struct FsdpOptions {
  Mxfp8Gather mxfp8_gather = Mxfp8Gather::on_demand;
  bool bf16_reshard_after_forward = true;
  bool auto_prefetch = true;     // start module i±1's gather from module i's provider
  int prefetch_depth = 1;        // ... and those of modules up to i±prefetch_depth (>= 1)
  bool progress_thread = false;  // drive transfers from a thread (dist/comm.h) where MPI can
  bool free_full_values = true;  // empty the layers' Parameter::value after sharding
  bool broadcast_initial = true; // start from rank 0's values (else each rank's own)
  // The gradient mean's denominator (0: the communicator's size). Expert weights sharded over
  // the expert-data-parallel ranks divide by the dense data-parallel size (dist/mesh.h).
  int grad_divisor = 0;
};

// One parameter's optimizer view on this rank. Sharded: this rank's padded shard
// [rows_per_rank * in]; replicated: the whole parameter.
struct ShardView {
  std::string name;
  std::span<float> value, grad, m, v;
  int64_t numel_valid = 0;  // entries that are not padding
  bool decay = false;       // matrices (>= 2-D) get weight decay
  bool replicated = false;
  uint64_t* version = nullptr;  // bump after changing value
};

// Per-step counters (reset_stats() at the start of a step). Bytes are what this rank sent
// (dist/comm.h): an all-gather of a P-byte pack sends (W-1)·P. allgather_payload_bytes is the
// size of the gathered weights, W·P per gather: the "bytes per step" quantity of
// docs/design.md.
// With one process nothing is gathered and all byte counts are 0.
// Times: *_ms is the exposed time (in the start calls, polls and waits, when this rank
// computed nothing); *_span_ms sums each collective's time from start to observed completion
// (in flight, overlapped or not). Without prefetch a gather's span is about its exposed time.
struct FsdpStats {
  uint64_t allgather_bytes = 0;
  uint64_t allgather_payload_bytes = 0;
  double allgather_ms = 0;
  double allgather_span_ms = 0;
  int64_t allgather_calls = 0;
  uint64_t reduce_scatter_bytes = 0;
  double reduce_scatter_ms = 0;
  double reduce_scatter_span_ms = 0;
  uint64_t allreduce_bytes = 0;     // replicated parameters' gradients
  double allreduce_ms = 0;
  int64_t shard_quantizations = 0;  // pre-all-gather packs built (cached per version)
};

enum class ShardField : uint8_t { value, grad, m, v };

struct FsdpParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  bool sharded = false;
  int module = -1;  // module index when sharded
};

class Fsdp {
 public:
  explicit Fsdp(Comm& comm, FsdpOptions opt = {});
  ~Fsdp();
  Fsdp(const Fsdp&) = delete;
  Fsdp& operator=(const Fsdp&) = delete;

  // Collective. Shards the layer's weight (and replicates its bias). Returns the module
  // index (forward order). Every rank must add the same layers with the same shapes and
  // recipes in the same order; a mismatch throws on every rank (Comm::check_consistent).
  int add(Linear& layer);
  int add(GroupedLinear& layer);
  // Collective. A parameter kept whole on every rank (grads all-reduced).
  void add_replicated(Parameter& p);

  int num_modules() const;
  const ShardLayout& layout(int module) const;
  const std::string& module_name(int module) const;
  int world() const;
  int rank() const;
  const FsdpOptions& options() const { return opt_; }

  // ---- weights --------------------------------------------------------------------------
  // Starts the all-gather module `module` needs for `use`, unless its weight for that use is
  // already cached or in flight.
  void prefetch(int module, Use use);
  // Fills the layer's weight cache(s) for `use` exactly as its provider would (gathers if
  // needed). For tools and benchmarks that drive gathers without running the layer.
  void fetch(int module, Use use);
  void post_forward(int module);
  // Lends the layer a full-size gradient buffer for its backward ("Gradients" above).
  void pre_backward(int module);
  // Also completes and frees any gather of this module still in flight, and starts the
  // reduce-scatter of the gradient lent by pre_backward.
  void post_backward(int module);
  // Drives every collective in flight (MPI_Test) without waiting.
  void poll();
  // false for a layer whose input gradient is never computed (the model's first layer): its
  // backward weight is then never needed, so it is not prefetched. Default true.
  void set_input_grad_needed(int module, bool needed);
  // Drops every gathered weight and completes every in-flight gather.
  void release_all();

  // ---- gradients and optimizer ----------------------------------------------------------
  // Collective, once per step after its last micro-batch: frees the gathered copies kept
  // for the step, completes the modules' reduce-scatters (and reduce-scatters the grads of
  // modules whose backward ran without pre_backward), divides by the world size (mean), and
  // all-reduces (mean) the replicated grads. The next contribution starts a new sum.
  void reduce_gradients();
  std::vector<ShardView> shards();
  // Collective: Σ grad² over the whole model (each element once), after reduce_gradients().
  double grad_sum_squares();
  // Its parts: per sharded module in add() order (collective; every rank gets the sums over
  // the shards), and over the replicated parameters (this rank's, identical on every rank).
  std::vector<double> module_grad_sum_squares();
  double replicated_grad_sum_squares();
  // Collective: true when every gradient element on every rank is finite.
  bool grads_finite();
  // Collective: grad_sum_squares() in one read of the gradients and one all-reduce, non-finite
  // when any gradient element on any rank is (!grads_finite()): squares of finite floats
  // summed in double cannot overflow, so a sum of them is finite exactly when they all are.
  double grad_sum_squares_checked();
  void bump_versions();

  // ---- checkpoints ------------------------------------------------------------------------
  std::vector<FsdpParamInfo> params() const;
  // Collective: the whole parameter (or its grad/m/v) [shape] on `root`, empty elsewhere.
  FloatBuffer gather_full(const std::string& name, ShardField field, int root = 0);
  // Collective: sets the whole parameter field from `full` [shape] given on `root` (ignored
  // elsewhere, may be null there); each rank keeps its shard. Works for any world size the
  // checkpoint was written with. Setting `value` bumps the version.
  void scatter_full(const std::string& name, ShardField field, const float* full, int root = 0);

  // ---- counters ---------------------------------------------------------------------------
  const FsdpStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

  struct Module;
  struct Replicated;
  struct GradState;

 private:
  void provide(int module, Use use, int64_t expert, QuantizedWeight& cache);
  void start_gather(int module, int kind);
  const float* tensor_scales(Module& m);
  void wait_gather(int module, int kind);
  int kind_for(int module, Use use) const;
  bool cache_has(int module, Use use) const;
  void drop(int module, bool caches);
  void start_reduce(int module, const float* full, int pool_index);
  void finish_reduce();
  int add_module(std::unique_ptr<Module> m);
  Module& mod(int module);
  const Module& mod(int module) const;

  Comm& comm_;
  std::unique_ptr<Collectives> coll_;  // comm_ as the layers' Collectives (allreduce_amax)
  FsdpOptions opt_;
  std::vector<std::unique_ptr<Module>> modules_;
  std::vector<std::unique_ptr<Replicated>> replicated_;
  std::unique_ptr<GradState> gs_;
  FsdpStats stats_;
};

// ---- benchmark helper ---------------------------------------------------------------------

struct FsdpBenchConfig {
  std::string recipe;  // "bf16" | "mxfp8" | "mxfp8-32x32"
  std::string mode;    // "reshard" | "keep" (bf16), "on-demand" | "all" (mxfp8), "" otherwise
  int prefetch = 0;    // modules gathered ahead (0: none)
  double compute_ms = 0;  // simulated compute per module use (0: none, gathers back to back)
  bool progress_thread = false;
};

struct FsdpBenchRow {
  FsdpBenchConfig config;
  int world = 1;
  uint64_t payload_bytes_per_step = 0;  // gathered weights (docs/design.md, "Bytes per step")
  uint64_t sent_bytes_per_step = 0;     // this rank
  int64_t gathers_per_step = 0;
  double allgather_ms_per_step = 0;     // exposed time in the all-gathers, median over steps
  double allgather_ms_min = 0;          // fastest step (least disturbed by other load)
  double allgather_total_ms_per_step = 0;  // gathers' time in flight (start to completion)
  double step_ms = 0;                   // quantize + gather + rebuild of every weight, median
};

// Collective. Builds Linear layers of the given [out, in] shapes for every config, shards
// them, and runs `steps` (after one warm-up) simulated training steps of weight traffic per
// config: forward fetch + post_forward over the modules in order, backward fetch +
// post_backward in reverse, then a version bump (an optimizer step, so every step quantizes
// the shards again). The configs take turns step by step, so machine noise hits them alike.
// Without compute, every gather starts after a barrier (not counted), so allgather time is
// the transfer, not waiting for a slower rank, and there is no prefetch. With compute_ms > 0
// each module's use is followed by that much busy work (no MPI calls in it, like a GEMM) and
// a poll(), one barrier starts the step, and `prefetch` modules are gathered ahead: the
// exposed time then shows what prefetching hides. Returns this rank's figures per config.
std::vector<FsdpBenchRow> bench_weight_gathers(Comm& comm,
                                               const std::vector<std::vector<int64_t>>& shapes,
                                               const std::vector<FsdpBenchConfig>& configs,
                                               int steps);

}  // namespace mxtrain::dist
