// train/profile_report.cc — the `--profile-steps` table and JSON (train/profile_report.h).
#include "train/profile_report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace mxtrain {

using prof::Group;
using prof::Pass;
using prof::Region;

std::array<double, prof::kCells> region_flops(const ModelConfig& cfg, int64_t tokens, int T) {
  std::array<double, prof::kCells> f{};
  const double n = double(tokens), d = cfg.d_model;
  auto add = [&](Region r, double fwd) {
    f[size_t(prof::cell_index(r, Pass::fwd))] += fwd;
    f[size_t(prof::cell_index(r, Pass::bwd))] += 2 * fwd;  // dgrad + wgrad
  };
  for (const ModuleInfo& m : describe_modules(cfg))
    add(prof::product_region(m.module), 2 * n * m.top_k * double(m.in) * double(m.out));
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (cfg.is_moe_layer(l)) add(Region::router, 2 * n * d * cfg.moe_num_experts);
    add(Region::attention, 4 * n * double(T) * d);  // q·kᵀ and p·v over the T x T scores
  }
  return f;
}

ProfileReport make_profile_report(const prof::Profiler& profiler,
                                  const std::vector<int64_t>& steps_run, const ModelConfig& cfg,
                                  int64_t tokens_per_step, int T, double flops_per_token,
                                  double peak_gflops,
                                  const std::string& peak_source, const std::string& recipe,
                                  int world_size) {
  ProfileReport r;
  r.steps = steps_run;
  r.tokens_per_step = tokens_per_step;
  r.flops_per_token = flops_per_token;
  r.peak_gflops = peak_gflops;
  r.peak_source = peak_source;
  r.recipe = recipe;
  r.world_size = world_size;
  const auto& steps = profiler.steps();
  const double n = double(std::max<size_t>(steps.size(), 1));
  std::array<double, prof::kCells> ms{}, calls{};
  for (const prof::StepProfile& s : steps) {
    r.step_ms.push_back(s.step_ms);
    r.mean_step_ms += s.step_ms / n;
    for (int c = 0; c < prof::kCells; ++c) {
      ms[size_t(c)] += s.ms[size_t(c)] / n;
      calls[size_t(c)] += double(s.calls[size_t(c)]) / n;
    }
  }
  if (peak_gflops > 0 && r.mean_step_ms > 0)
    r.mfu = double(tokens_per_step) * flops_per_token / (r.mean_step_ms * 1e6) / peak_gflops;
  const std::array<double, prof::kCells> flops = region_flops(cfg, tokens_per_step, T);
  for (int ri = 0; ri < int(Region::count); ++ri)
    for (int pi = 0; pi < int(Pass::count); ++pi) {
      const Region reg = Region(ri);
      const Pass pass = Pass(pi);
      const int c = prof::cell_index(reg, pass);
      const Group g = prof::region_group(reg);
      const bool always = pass == Pass::none && (g == Group::data || g == Group::optimizer ||
                                                 g == Group::communication ||
                                                 g == Group::wait || g == Group::other);
      if (!always && calls[size_t(c)] == 0) continue;
      ProfileRow row{reg, pass};
      row.ms = ms[size_t(c)];
      row.share = r.mean_step_ms > 0 ? row.ms / r.mean_step_ms : 0;
      row.calls = calls[size_t(c)];
      row.flops = flops[size_t(c)];
      if (row.flops > 0 && row.ms > 0) {
        row.gflops = row.flops / (row.ms * 1e6);
        if (peak_gflops > 0) row.pct_of_peak = 100 * row.gflops / peak_gflops;
      }
      r.rows_sum_ms += row.ms;
      r.rows.push_back(row);
    }
  std::stable_sort(r.rows.begin(), r.rows.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return prof::region_group(a.region) < prof::region_group(b.region);
  });
  return r;
}

std::string profile_table(const ProfileReport& r) {
  std::string out;
  char buf[256];
  const int64_t first = r.steps.empty() ? 0 : r.steps.front();
  const int64_t last = r.steps.empty() ? 0 : r.steps.back();
  std::snprintf(buf, sizeof buf,
                "profile of steps %lld-%lld (%zu step%s after a warm-up step), recipe %s%s: "
                "mean step %.2f ms, %lld tokens per step\n",
                (long long)first, (long long)last, r.steps.size(), r.steps.size() == 1 ? "" : "s",
                r.recipe.c_str(),
                r.world_size > 1 ? ", rank 0" : "", r.mean_step_ms, (long long)r.tokens_per_step);
  out += buf;
  std::snprintf(buf, sizeof buf, "%-24s %10s %7s %7s %9s %7s\n", "region", "ms/step", "share",
                "calls", "GFLOP/s", "%peak");
  out += buf;
  Group shown = Group(255);
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const ProfileRow& row = r.rows[i];
    const Group g = prof::region_group(row.region);
    if (g != shown) {
      shown = g;
      double ms = 0, fl = 0;
      size_t members = 0;
      for (const ProfileRow& o : r.rows)
        if (prof::region_group(o.region) == g) {
          ms += o.ms;
          fl += o.flops;
          ++members;
        }
      if (members > 1) {  // a group of several rows: its subtotal first
        std::snprintf(buf, sizeof buf, "%-24s %10.2f %6.1f%%", prof::group_name(g), ms,
                      r.mean_step_ms > 0 ? 100 * ms / r.mean_step_ms : 0.0);
        out += buf;
        if (fl > 0 && ms > 0) {
          const double gf = fl / (ms * 1e6);
          std::snprintf(buf, sizeof buf, " %7s %9.1f", "", gf);
          out += buf;
          if (r.peak_gflops > 0) {
            std::snprintf(buf, sizeof buf, " %6.1f%%", 100 * gf / r.peak_gflops);
            out += buf;
          }
        }
        out += "\n";
      }
    }
    std::string name = prof::region_name(row.region);
    if (row.pass != Pass::none) name = "  " + name + " " + prof::pass_name(row.pass);
    std::snprintf(buf, sizeof buf, "%-24s %10.2f %6.1f%% %7.1f", name.c_str(), row.ms,
                  100 * row.share, row.calls);
    out += buf;
    if (row.gflops > 0) {
      std::snprintf(buf, sizeof buf, " %9.1f", row.gflops);
      out += buf;
      if (r.peak_gflops > 0) {
        std::snprintf(buf, sizeof buf, " %6.1f%%", row.pct_of_peak);
        out += buf;
      }
    }
    out += "\n";
  }
  std::snprintf(buf, sizeof buf, "%-24s %10.2f %6.1f%%\n", "total (rows)", r.rows_sum_ms,
                r.mean_step_ms > 0 ? 100 * r.rows_sum_ms / r.mean_step_ms : 0.0);
  out += buf;
  if (r.peak_gflops > 0) {
    std::snprintf(buf, sizeof buf,
                  "MFU %.1f%% (%.3g FLOPs per token); %%peak against %.1f GFLOP/s, %s; FLOPs as "
                  "counted for MFU (attention: the whole T x T)\n",
                  100 * r.mfu, r.flops_per_token, r.peak_gflops, r.peak_source.c_str());
    out += buf;
  }
  return out;
}

std::string profile_json(const ProfileReport& r, int indent) {
  nlohmann::json j = {{"steps", r.steps},
                      {"step_ms", r.step_ms},
                      {"mean_step_ms", r.mean_step_ms},
                      {"rows_sum_ms", r.rows_sum_ms},
                      {"tokens_per_step", r.tokens_per_step},
                      {"flops_per_token", r.flops_per_token},
                      {"peak_gflops", r.peak_gflops},
                      {"peak_source", r.peak_source},
                      {"mfu", r.mfu},
                      {"recipe", r.recipe},
                      {"world_size", r.world_size}};
  j["rows"] = nlohmann::json::array();
  for (const ProfileRow& row : r.rows)
    j["rows"].push_back({{"region", prof::region_name(row.region)},
                         {"pass", prof::pass_name(row.pass)},
                         {"group", prof::group_name(prof::region_group(row.region))},
                         {"ms", row.ms},
                         {"share", row.share},
                         {"calls", row.calls},
                         {"flops", row.flops},
                         {"gflops", row.gflops},
                         {"pct_of_peak", row.pct_of_peak}});
  return j.dump(indent);
}

}  // namespace mxtrain
