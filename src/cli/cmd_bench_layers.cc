// cli/cmd_bench_layers.cc — `mxtrain bench-layers`: stage 1 of adaptive FP8
// (docs/adaptive.md §2). Times forward+backward of every layer kind of a model at the per-rank
// shapes TP/EP/ETP imply, over a token sweep, in BF16 and the FP8 recipe back to back, and
// writes the report `mxtrain policy merge` reads.
//
// The plan and the sweep loop are policy/bench_layers.h; this file supplies the model's
// modules (nn/transformer.h describe_modules) and the timer: one real Linear / GroupedLinear
// per recipe on the same random normal data, `warmup` untimed then `iters` timed
// forward+backward iterations, the recipes alternating iteration by iteration so BF16 and
// FP8 see the same machine conditions; the weight's version is bumped every `micro_batches`
// iterations (default 1: every iteration pays for quantizing the weight, as a step without
// gradient accumulation does).
//
// Under mpirun (docs/distributed.md, "Parallel layouts") every rank times its share at the
// layout --tp / --ep / --sequence-parallel give, with the layer's communication in the timed
// step, as the trainer runs it: a column-parallel layer all-reduces its input gradient (with
// sequence parallelism: gathers its input's copies in forward and backward, reduce-scatters
// the input gradient), a row-parallel one all-reduces its output (reduce-scatters it, and
// gathers the output gradient's copies); an expert layer at ep > 1 exchanges its rows with the
// other ranks (column_grouped: its input rows as FP8 or BF16 payloads, its input gradient back
// in FP32; row_grouped: its output back in FP32, its output gradient toward the experts as
// payloads). At etp > 1 the received rows are all-gathered over the etp group as payloads and
// each rank runs its slice of the experts on the group's rows, its partial sums (fc1's input
// gradient, fc2's output) reduce-scattered back before they return. With --sp-wire rowwise
// the sequence-parallel gathers carry one per-token copy and the wgrad copies are made from
// it, as the trainer does. BF16 and FP8 therefore each pay their own wire. Rank 0 writes the
// report; one process times the per-rank shapes alone.
#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/values.h"
#include "mxtrain/common.h"
#include "mxtrain/dist/mesh.h"
#include "mxtrain/gemm.h"
#include "mxtrain/io/output_check.h"
#include "mxtrain/nn/grouped_linear.h"
#include "mxtrain/nn/linear.h"
#include "mxtrain/nn/parallel.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/policy/bench_layers.h"
#include "mxtrain/policy/report.h"
#include "mxtrain/recipe.h"
#include "mxtrain/train/config.h"

namespace mxtrain::cli {
namespace {

using policy::BenchCase;
using policy::TimingRequest;

std::vector<float> random_normal(int64_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

using Clock = std::chrono::steady_clock;

// One layer under test: a step (forward + backward) and a weight-version bump.
struct Subject {
  std::function<void()> step, bump;
};

double time_ms(const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The layout layers are timed at: the mesh's groups under mpirun (null: one process).
struct Layout {
  dist::Mesh* mesh = nullptr;
  bool sp = false;
  SequenceWire wire = SequenceWire::exact;
  std::unique_ptr<Collectives> tp, ep, etp;
  int tp_size() const { return tp ? tp->size() : 1; }
  int etp_size() const { return etp ? etp->size() : 1; }
};
Layout g_layout;

// Rows per rank of an even split of n rows over p ranks (the last takes the rest).
std::vector<size_t> even_split(int64_t n, int p) {
  std::vector<size_t> v(size_t(p), size_t(n / p));
  v.back() += size_t(n % p);
  return v;
}

// One layer's communication around its products at the layout (see the file's header); each
// function runs the step's collectives with its recipe's wire format.
struct Wire {
  const BenchCase* c = nullptr;
  const Recipe* r = nullptr;
  int64_t rows = 0;
  std::vector<uint8_t> send, recv, gathered;
  std::vector<float> shard, full, part;
  std::vector<size_t> send_rows, recv_rows, sb, rb;

  bool dense_tp() const { return !c->grouped() && c->kind != "duplicated" && g_layout.tp != nullptr; }
  bool column() const { return c->kind == "layernorm_column" || c->kind == "column"; }
  bool experts() const { return c->grouped() && (g_layout.ep || g_layout.etp); }

  // Rows exchanged with every ep rank, payloads of `bytes` each (toward: send_rows out); at
  // ep 1 the rows stay.
  void a2a(const void* s, void* d, size_t bytes, bool toward) {
    if (!g_layout.ep) {
      std::memcpy(d, s, size_t(rows) * bytes);
      return;
    }
    const auto& out = toward ? send_rows : recv_rows;
    const auto& in = toward ? recv_rows : send_rows;
    sb.resize(out.size());
    rb.resize(in.size());
    for (size_t i = 0; i < out.size(); ++i) {
      sb[i] = out[i] * bytes;
      rb[i] = in[i] * bytes;
    }
    g_layout.ep->alltoallv(s, sb.data(), d, rb.data());
  }
  // x [rows, D] -> full [rows·etp, D]: payloads to the experts' ranks, then all-gathered over
  // the etp group (every etp rank runs its slice of the experts on the group's rows).
  void payload_to_experts(const float* x, int64_t D, const TensorFormat& f) {
    const size_t b = row_payload_bytes(f, D);
    const int E = g_layout.etp_size();
    send.resize(b * size_t(rows));
    recv.resize(b * size_t(rows));
    float scale = pack_rows(x, rows, D, f, send.data());
    if (row_payload_has_tensor_scale(f) && g_layout.ep) {  // NVFP4: the packs' tensor scales
      thread_local std::vector<float> scales;
      scales.resize(size_t(g_layout.ep->size()));
      g_layout.ep->allgather(&scale, scales.data(), sizeof(float));
    }
    a2a(send.data(), recv.data(), b, true);
    const uint8_t* in = recv.data();
    if (E > 1) {
      gathered.resize(b * size_t(rows) * size_t(E));
      g_layout.etp->allgather(recv.data(), gathered.data(), b * size_t(rows));
      in = gathered.data();
    }
    full.resize(size_t(rows * E * D));
    unpack_rows(in, rows * E, D, f, full.data(), scale);  // timing: one scale for all rows
  }
  // y [rows·etp, D] partial sums over the etp group -> full [rows, D]: summed over etp (each
  // rank keeps its own rows) and sent back to the tokens' ranks in FP32.
  void fp32_back(const float* y, int64_t D) {
    if (g_layout.etp_size() > 1) {
      part.resize(size_t(rows * D));
      g_layout.etp->reduce_scatter_sum(y, part.data(), size_t(rows * D));
      y = part.data();
    }
    full.resize(size_t(rows * D));
    a2a(y, full.data(), sizeof(float) * size_t(D), false);
  }
};

// Times one layer shape in every requested recipe on the same data, alternating the recipes
// iteration by iteration.
std::vector<std::vector<double>> time_layer(const TimingRequest& req) {
  const BenchCase& c = *req.c;
  const int64_t rows = req.rows;
  const uint32_t seed = 1234;
  // Expert layers at etp > 1 run the etp group's rows: E x rows, E x each expert's count.
  const int E = c.grouped() && g_layout.mesh ? g_layout.etp_size() : 1;
  const int64_t Erows = rows * E;
  const auto x = random_normal(Erows * c.in, seed, 1.f);
  const auto dy = random_normal(Erows * c.out, seed + 1, 1e-2f);
  const auto w = random_normal(int64_t(std::max(c.num_gemms, 1)) * c.in * c.out, seed + 2,
                               1.f / std::sqrt(float(c.in)));
  std::vector<float> y(size_t(Erows * c.out)), dx(size_t(Erows * c.in));
  GroupList groups;
  if (c.grouped()) {
    std::vector<int64_t> counts = req.group_rows;
    for (int64_t& n : counts) n *= E;
    groups = GroupList::from_counts(counts, Erows);
  }
  const int T = g_layout.tp_size();
  const bool sp = g_layout.sp && !c.grouped() && c.kind != "duplicated" && g_layout.tp;
  MXT_CHECK(!sp || rows % T == 0, "bench-layers: ", rows, " tokens do not split over tp ", T,
            " ranks for sequence parallelism; give --tokens that tp divides");
  const int64_t Ns = rows / T;

  // Layers, their saved state and wires live until the end of the function.
  std::vector<std::unique_ptr<Linear>> linears;
  std::vector<std::unique_ptr<GroupedLinear>> grouped;
  std::vector<std::unique_ptr<LinearSaved>> lsaved;
  std::vector<std::unique_ptr<GroupedLinearSaved>> gsaved;
  std::vector<std::unique_ptr<Wire>> wires;
  std::vector<Subject> subjects;
  for (const std::string& name : req.recipes) {
    LinearPrecision prec;
    prec.recipe = get_recipe(name);
    Wire* wi = wires.emplace_back(std::make_unique<Wire>()).get();
    wi->c = &c;
    wi->rows = rows;
    if (g_layout.ep) wi->send_rows = wi->recv_rows = even_split(rows, g_layout.ep->size());
    if (!c.grouped()) {
      // The layer does its role's collectives itself (nn/linear.h), on the wire the recipe
      // chooses: a column layer under sequence parallelism takes this rank's Ns rows and
      // gives Ns·tp, a row layer the reverse; dx comes back summed over the group.
      LinearParallel role;
      if (wi->dense_tp())
        role = {wi->column() ? ParallelMode::column : ParallelMode::row, g_layout.tp.get(), sp,
                g_layout.wire, nullptr};
      Linear* layer = linears
                          .emplace_back(std::make_unique<Linear>("bench", c.in, c.out, false,
                                                                 prec, role))
                          .get();
      layer->weight.value.assign(w.begin(), w.end());
      wi->r = &layer->precision().recipe;
      LinearSaved* saved = lsaved.emplace_back(std::make_unique<LinearSaved>()).get();
      const int64_t in_rows = sp && wi->column() ? Ns : rows;
      subjects.push_back({[&, layer, saved, in_rows] {
                            layer->forward(x.data(), in_rows, y.data(), *saved);
                            layer->backward(*saved, dy.data(), dx.data());
                          },
                          [layer] { ++layer->weight.version; }});
    } else {
      GroupedLinear* layer = grouped.emplace_back(std::make_unique<GroupedLinear>(
                                                      "bench", c.num_gemms, c.in, c.out, prec))
                                 .get();
      layer->weight.value.assign(w.begin(), w.end());
      wi->r = &layer->precision().recipe;
      if (g_layout.etp)  // NVFP4: each expert's tensor scales agreed over the etp group
        layer->set_amax_agree(counted_amax_agree(*g_layout.etp, nullptr, nullptr));
      GroupedLinearSaved* saved =
          gsaved.emplace_back(std::make_unique<GroupedLinearSaved>()).get();
      subjects.push_back({[&, layer, saved, wi] {
                            if (!wi->experts()) {
                              layer->forward(x.data(), rows, groups, y.data(), *saved);
                              layer->backward(*saved, dy.data(), dx.data());
                              return;
                            }
                            const Recipe& r = *wi->r;
                            if (c.kind == "column_grouped") {  // fc1: rows in, dx back
                              wi->payload_to_experts(x.data(), c.in, r.role(Role::input));
                              layer->forward(wi->full.data(), Erows, groups, y.data(), *saved);
                              layer->backward(*saved, dy.data(), dx.data());
                              wi->fp32_back(dx.data(), c.in);
                            } else {  // fc2: output back, dy toward the experts
                              layer->forward(x.data(), Erows, groups, y.data(), *saved);
                              wi->fp32_back(y.data(), c.out);
                              wi->payload_to_experts(dy.data(), c.out, r.role(Role::grad));
                              layer->backward(*saved, wi->full.data(), dx.data());
                            }
                          },
                          [layer] { ++layer->weight.version; }});
    }
  }
  std::vector<std::vector<double>> ms(subjects.size());
  for (int i = 0; i < req.warmup + req.iters; ++i) {
    for (size_t s = 0; s < subjects.size(); ++s) {
      if (i % req.micro_batches == 0) subjects[s].bump();
      const double t = time_ms(subjects[s].step);
      if (i >= req.warmup) ms[s].push_back(t);
    }
  }
  return ms;
}

struct BenchLayersCli {
  std::string config, report, recipe;
  int tp = 1, ep = 1, etp = 1;
  bool sequence_parallel = false;
  SequenceWire sp_wire = SequenceWire::exact;
  std::vector<std::string> precisions{"bf16", "fp8"};
  std::vector<int64_t> tokens;
  int warmup = 2, iters = 5, micro_batches = 1;
  double zipf = 1.2;
  bool quiet = false;
};

int run_bench_layers_cli(const BenchLayersCli& o) {
  // Under mpirun: the layout's groups (collective; a layout the world cannot hold is refused
  // on every rank). Rank 0 alone prints and writes the report.
  std::unique_ptr<dist::Mesh> mesh;
  if (dist::launched_by_mpi() && dist::Comm::world().size() > 1) {
    mesh = std::make_unique<dist::Mesh>(
        dist::Comm::world(), dist::MeshShape{o.tp, o.ep, o.etp, o.sequence_parallel, o.sp_wire});
    g_layout.mesh = mesh.get();
    g_layout.sp = o.sequence_parallel;
    g_layout.wire = o.sp_wire;
    if (o.tp > 1) g_layout.tp = dist::comm_collectives(mesh->tp());
    if (o.ep > 1) g_layout.ep = dist::comm_collectives(mesh->ep());
    if (o.etp > 1) g_layout.etp = dist::comm_collectives(mesh->etp());
  }
  MXT_CHECK(!o.sequence_parallel || o.tp > 1, "--sequence-parallel needs --tp > 1");
  MXT_CHECK(o.sp_wire == SequenceWire::exact || o.sequence_parallel,
            "--sp-wire rowwise needs --sequence-parallel");
  const bool lead = !mesh || mesh->rank() == 0;
  if (lead) {  // before minutes of measuring
    io::check_output_file(o.report, "--report");
    io::check_outputs_apart({{"--report", o.report}}, {{"--config", o.config}});
  }
  const TrainConfig cfg = load_config(o.config);
  policy::BenchLayersOptions bo;
  bo.par = {o.tp, o.ep, o.etp};
  bo.model = o.config;
  bo.tokens = o.tokens;
  bo.warmup = o.warmup;
  bo.iters = o.iters;
  bo.micro_batches = o.micro_batches;
  bo.zipf_exponent = o.zipf;
  // The decision point: the token count the trainer will decide with.
  auto ov = cfg.precision.fp8_dynamic_num_tokens.find("");
  bo.train_tokens = ov != cfg.precision.fp8_dynamic_num_tokens.end()
                        ? ov->second
                        : int64_t(cfg.training.seq_len) * cfg.training.micro_batch_size;
  // FP8 recipe: --recipe, else a recipe named in --precisions, else the config's if it is
  // FP8, else mxfp8.
  std::string recipe = o.recipe;
  bo.time_bf16 = bo.time_fp8 = false;
  for (const std::string& p : o.precisions) {
    if (p == "bf16") {
      bo.time_bf16 = true;
      continue;
    }
    if (p != "fp8") {
      MXT_CHECK(get_recipe(p).quantized(), "--precisions: ", p, " is not an FP8 recipe; use bf16, "
                "fp8 or an FP8 recipe name");
      MXT_CHECK(recipe.empty() || recipe == p, "--precisions names ", p, " but --recipe is ",
                recipe);
      recipe = p;
    }
    bo.time_fp8 = true;
  }
  if (recipe.empty()) {
    const Recipe& rc = cfg.precision.recipe;
    recipe = rc.quantized() ? rc.name : "mxfp8";
  }
  // Before anything is printed or timed: an unknown name is one error line.
  MXT_CHECK(get_recipe(recipe).quantized(), "--recipe ", recipe, " is not an FP8 recipe");
  check_products_built(get_recipe(recipe));
  bo.recipe = recipe;

  std::vector<policy::BenchModule> modules;
  // The LM head is replicated under tensor parallelism (nn/transformer.h): timed whole.
  for (const ModuleInfo& m : describe_modules(cfg.model))
    modules.push_back({m.layer < 0 ? "duplicated" : m.kind, m.name, m.is_expert, m.in, m.out,
                       m.num_experts, m.top_k});
  const auto cases = policy::plan_bench_cases(modules, bo.par);
  if (!o.quiet && lead) {
    std::fprintf(stderr, "bench-layers: %s, tp=%d ep=%d etp=%d%s, %s vs bf16, %zu layer shapes, "
                 "warmup %d, iters %d; %s\n", o.config.c_str(), o.tp, o.ep, o.etp,
                 o.sequence_parallel ? " (sequence parallel)" : "", recipe.c_str(),
                 cases.size(), o.warmup, o.iters,
                 mesh ? ("layout " + mesh->describe() + ", communication timed").c_str()
                      : "one process: per-rank shapes, no communication");
    for (const auto& c : cases)
      std::fprintf(stderr, "  %s  (%d module%s)\n", c.label().c_str(), c.modules,
                   c.modules == 1 ? "" : "s");
  }

  const auto start = Clock::now();
  policy::BenchProgress progress;
  if (!o.quiet && lead)
    progress = [&](size_t done, size_t total, const std::string& what) {
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      std::fprintf(stderr, "[%3zu/%zu %6.1fs] %s\n", done, total, s, what.c_str());
    };
  policy::Report r = policy::run_bench_layers(cases, bo, time_layer, progress);
  g_layout = Layout{};
  if (!lead) return 0;
  policy::save_report(r, o.report);

  std::printf("%-44s %8s %10s %10s %16s\n", "layer", "tokens", "bf16_ms", "fp8_ms",
              "speedup");
  for (const auto& p : r.points) {
    std::string layer = p.kind + "/" + p.name;
    layer += p.num_gemms ? " etp=" + std::to_string(p.etp) + " g=" + std::to_string(p.num_gemms)
                         : " tp=" + std::to_string(p.tp);
    char sp[64] = "-";
    if (p.paired()) std::snprintf(sp, sizeof sp, "%.3f +- %.3f", p.speedup(), p.spread());
    std::printf("%-44s %8lld %10.3f %10.3f %16s\n", layer.c_str(), (long long)p.tokens,
                p.bf16 ? p.bf16->ms : NAN, p.fp8 ? p.fp8->ms : NAN, sp);
  }
  std::printf("wrote %s (%zu points)\n", o.report.c_str(), r.points.size());
  return 0;
}

}  // namespace

MXT_REGISTER_COMMAND("bench-layers", [](CLI::App& app) {
  auto o = std::make_shared<BenchLayersCli>();
  CLI::App* sub = app.add_subcommand(
      "bench-layers",
      "Adaptive FP8 stage 1: time forward+backward of each layer kind of a model (per-rank "
      "shapes for the given TP/EP/ETP) over a token sweep in BF16 and FP8, and write the "
      "report `mxtrain policy merge` reads");
  sub->add_option("--config", o->config, "Model/training config (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--report", o->report, "Report file to write (JSON, atomically)")->required();
  sub->add_option("--tp", o->tp, "Tensor-parallel size: column kinds divide out, row kinds "
                                 "divide in (default 1)")
      ->check(whole_number(1));
  sub->add_option("--ep", o->ep, "Expert-parallel size: local experts = experts / ep (default 1)")
      ->check(whole_number(1));
  sub->add_option("--etp", o->etp, "Expert tensor-parallel size (default 1)")
      ->check(whole_number(1));
  sub->add_flag("--sequence-parallel", o->sequence_parallel,
                "With --tp under mpirun: time the sequence-parallel gathers and "
                "reduce-scatters instead of all-reduces");
  sub->add_option_function<std::string>(
      "--sp-wire", [o](const std::string& w) { o->sp_wire = parse_sequence_wire(w); },
      "With --sequence-parallel: what the all-gathers carry, exact (default) or rowwise "
      "(parallel.sp_wire)");
  sub->add_option("--precisions", o->precisions,
                  "Precisions to time: bf16 and fp8 (or an FP8 recipe name) (default bf16,fp8)")
      ->delimiter(',');
  sub->add_option("--recipe", o->recipe,
                  "FP8 recipe, any of `mxtrain recipes` with products (default: the "
                  "config's recipe if FP8, else mxfp8)");
  sub->add_option("--tokens", o->tokens,
                  "Token counts (seq_len x micro_batch) to sweep; experts run tokens x top_k "
                  "rows (default: seq_len x micro_batch x 2^k, k = -4..2)")
      ->delimiter(',')
      ->check(whole_number(1));
  sub->add_option("--warmup", o->warmup, "Untimed iterations per point and precision (default 2)")
      ->check(whole_number(0));
  sub->add_option("--iters", o->iters, "Timed iterations; median and spread (default 5)")
      ->check(whole_number(1));
  sub->add_option("--micro-batches", o->micro_batches,
                  "Iterations per weight version (default 1: every iteration quantizes the "
                  "weight)")
      ->check(whole_number(1));
  sub->add_option("--zipf-exponent", o->zipf,
                  "Skew of the expert token split, rows of expert g ~ 1/(g+1)^s (default 1.2; "
                  "0 = even)")
      ->check(number_at_least(0));
  sub->add_flag("--quiet", o->quiet, "No banner and no progress lines");
  sub->callback([o] { exit_code() = run_bench_layers_cli(*o); });
});

}  // namespace mxtrain::cli
