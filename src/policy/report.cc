// policy/report.cc — the benchmark report: statistics, strict JSON load, canonical save.
//
// Validation has one implementation: parse_report checks every field of a JSON text;
// validate_report runs it over report_to_json of a struct, so files and in-memory reports
// obey the same rules and report the same JSON paths.
#include "mxtrain/policy/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "mxtrain/common.h"
#include "mxtrain/stats.h"
#include "mxtrain/io/atomic_file.h"
#include "policy/json_util.h"

namespace mxtrain::policy {

using detail::fail_at;
using detail::flat_object;
using detail::json;
using detail::Object;
using detail::ordered_json;

const std::vector<std::string>& dense_kinds() {
  static const std::vector<std::string> k{"layernorm_column", "column", "row", "duplicated"};
  return k;
}
const std::vector<std::string>& grouped_kinds() {
  static const std::vector<std::string> k{"column_grouped", "row_grouped"};
  return k;
}
bool is_dense_kind(const std::string& kind) {
  const auto& k = dense_kinds();
  return std::find(k.begin(), k.end(), kind) != k.end();
}
bool is_grouped_kind(const std::string& kind) {
  const auto& k = grouped_kinds();
  return std::find(k.begin(), k.end(), kind) != k.end();
}
std::string all_kinds_list() {
  std::string s;
  for (const auto* v : {&dense_kinds(), &grouped_kinds()})
    for (const auto& k : *v) s += (s.empty() ? "" : ", ") + k;
  return s;
}

Timing timing_from_samples(std::vector<double> ms) {
  MXT_CHECK(!ms.empty(), "timing_from_samples: no timed iterations");
  const double median = median_of(ms);
  const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
  MXT_CHECK(median > 0 && std::isfinite(median),
            "timing_from_samples: median time must be > 0, got ", median);
  return {median, (*hi - *lo) / median};
}

double speedup_of(const Timing& bf16, const Timing& fp8) { return bf16.ms / fp8.ms; }

double speedup_spread_of(const Timing& bf16, const Timing& fp8) {
  return speedup_of(bf16, fp8) * 0.5 * (bf16.spread + fp8.spread);
}

double Point::speedup() const {
  MXT_CHECK(paired(), "Point::speedup: ", kind, "/", name, " tokens=", tokens,
            " lacks a bf16 or fp8 timing");
  return speedup_of(*bf16, *fp8);
}

double Point::spread() const {
  MXT_CHECK(paired(), "Point::spread: ", kind, "/", name, " tokens=", tokens,
            " lacks a bf16 or fp8 timing");
  return speedup_spread_of(*bf16, *fp8);
}

namespace {

// The identity of a point within a report: everything but the timings.
using PointKey = std::tuple<std::string, std::string, int, int, int>;
PointKey key_of(const Point& p) { return {p.kind, p.name, p.tp, p.etp, p.num_gemms}; }

std::string key_text(const Point& p) {
  std::ostringstream os;
  os << p.kind << "/" << p.name;
  if (is_grouped_kind(p.kind)) os << " etp=" << p.etp << " num_gemms=" << p.num_gemms;
  else os << " tp=" << p.tp;
  return os.str();
}

std::optional<Timing> parse_side(Object& o, const std::string& side) {
  const std::string ms = side + "_ms", sp = side + "_spread";
  if (!o.has(ms) && !o.has(sp)) return std::nullopt;
  Timing t;
  t.ms = o.number(ms, 0.0);
  t.spread = o.number_nonneg(sp);
  return t;
}

void check_derived(Object& o, const std::string& key, double stored, double derived,
                   double scale, const std::string& from) {
  if (std::fabs(stored - derived) > kDerivedTolerance * scale) {
    std::ostringstream os;
    os.precision(6);
    os << stored << " disagrees with " << derived << " computed from " << from
       << " (derived field; fix or drop the timings)";
    fail_at(o.source(), o.key_path(key), os.str());
  }
}

Point parse_point(const json& pj, const std::string& source, const std::string& path) {
  Object o(pj, source, path);
  Point p;
  p.kind = o.string("kind");
  if (!is_dense_kind(p.kind) && !is_grouped_kind(p.kind))
    fail_at(source, o.key_path("kind"),
            "unknown kind \"" + p.kind + "\" (valid: " + all_kinds_list() + ")");
  p.name = o.string("name");
  if (is_dense_kind(p.kind)) {
    p.tp = int(o.integer("tp", 1));
  } else {
    p.etp = int(o.integer("etp", 1));
    p.num_gemms = int(o.integer("num_gemms", 1));
    p.top_k = int(o.integer_or("top_k", 1, 0));
  }
  p.in = o.integer("in", 1);
  p.out = o.integer("out", 1);
  p.tokens = o.integer("tokens", 1);
  p.padded_tokens = o.integer_or("padded_tokens", 1, p.tokens);
  if (p.padded_tokens < p.tokens)
    fail_at(source, o.key_path("padded_tokens"),
            std::to_string(p.padded_tokens) + " is less than tokens " + std::to_string(p.tokens));
  p.bf16 = parse_side(o, "bf16");
  p.fp8 = parse_side(o, "fp8");
  if (!p.bf16 && !p.fp8)
    fail_at(source, path, "has no timing: give bf16_ms and bf16_spread, fp8_ms and fp8_spread, "
                          "or both");
  if (p.paired()) {
    const double s = p.speedup(), sp = p.spread();
    check_derived(o, "speedup", o.number("speedup", 0.0), s, s, "bf16_ms / fp8_ms");
    check_derived(o, "spread", o.number_nonneg("spread"), sp, s,
                  "speedup * (bf16_spread + fp8_spread) / 2");
  } else {
    for (const char* k : {"speedup", "spread"})
      if (o.has(k))
        fail_at(source, o.key_path(k), "needs both a bf16 and an fp8 timing in the same point");
  }
  o.finish();
  return p;
}

// Within one report: at most one timing per side for a point, one shape per key.
void check_points_consistent(const Report& r, const std::string& source) {
  std::map<PointKey, size_t> shape_of;
  std::map<std::pair<PointKey, int64_t>, std::pair<long, long>> sides;  // bf16, fp8 index
  for (size_t i = 0; i < r.points.size(); ++i) {
    const Point& p = r.points[i];
    const std::string path = detail::index_path("points", i);
    auto [it, fresh] = shape_of.emplace(key_of(p), i);
    if (!fresh) {
      const Point& q = r.points[it->second];
      if (q.in != p.in || q.out != p.out)
        fail_at(source, path,
                key_text(p) + " has shape in=" + std::to_string(p.in) + " out=" +
                    std::to_string(p.out) + " but points[" + std::to_string(it->second) +
                    "] has in=" + std::to_string(q.in) + " out=" + std::to_string(q.out));
    }
    auto& s = sides.try_emplace({key_of(p), p.tokens}, -1L, -1L).first->second;
    for (int side = 0; side < 2; ++side) {
      const bool present = side == 0 ? p.bf16.has_value() : p.fp8.has_value();
      long& slot = side == 0 ? s.first : s.second;
      if (!present) continue;
      if (slot >= 0)
        fail_at(source, path,
                std::string("second ") + (side == 0 ? "bf16" : "fp8") + " timing of " +
                    key_text(p) + " tokens=" + std::to_string(p.tokens) + " (first in points[" +
                    std::to_string(slot) + "]); a report holds one timing per side and point");
      slot = long(i);
    }
  }
}

}  // namespace

Report parse_report(const std::string& json_text, const std::string& source) {
  json j = detail::parse_json_strict(json_text, source);
  Object top(j, source, "");
  Report r;
  r.source = source;
  r.version = int(top.integer("version", 0));
  if (r.version != kReportVersion)
    fail_at(source, "version",
            "unsupported report version " + std::to_string(r.version) + " (this build reads " +
                std::to_string(kReportVersion) + ")");
  {
    Object m(top.at("machine"), source, "machine");
    r.machine.cpu = m.string("cpu", true);
    r.machine.isa = m.string("isa", true);
    r.machine.threads = int(m.integer("threads", 1));
    r.machine.hostname = m.string("hostname", true);
    m.finish();
  }
  r.recipe = top.string("recipe");
  r.tp = int(top.integer("tp", 1));
  r.ep = int(top.integer("ep", 1));
  r.etp = int(top.integer("etp", 1));
  r.model = top.string("model", true);
  r.warmup = int(top.integer_or("warmup", 0, 0));
  r.iters = int(top.integer_or("iters", 0, 0));
  const json& pts = top.at("points");
  if (!pts.is_array())
    fail_at(source, "points", "must be an array, got " + detail::describe_value(pts));
  for (size_t i = 0; i < pts.size(); ++i)
    r.points.push_back(parse_point(pts[i], source, detail::index_path("points", i)));
  top.finish();
  check_points_consistent(r, source);
  return r;
}

Report load_report(const std::string& path) {
  return parse_report(detail::read_text_file(path, "report"), path);
}

std::string report_to_json(const Report& r) {
  ordered_json machine;
  machine["cpu"] = r.machine.cpu;
  machine["isa"] = r.machine.isa;
  machine["threads"] = r.machine.threads;
  machine["hostname"] = r.machine.hostname;
  std::ostringstream os;
  os << "{\n  \"version\": " << r.version << ",\n  \"machine\": " << flat_object(machine)
     << ",\n  \"recipe\": " << json(r.recipe).dump() << ",\n  \"tp\": " << r.tp
     << ",\n  \"ep\": " << r.ep << ",\n  \"etp\": " << r.etp
     << ",\n  \"model\": " << json(r.model).dump() << ",\n";
  if (r.warmup) os << "  \"warmup\": " << r.warmup << ",\n";
  if (r.iters) os << "  \"iters\": " << r.iters << ",\n";
  os << "  \"points\": [";
  for (size_t i = 0; i < r.points.size(); ++i) {
    const Point& p = r.points[i];
    ordered_json o;
    o["kind"] = p.kind;
    o["name"] = p.name;
    if (is_grouped_kind(p.kind)) {
      o["etp"] = p.etp;
      o["num_gemms"] = p.num_gemms;
      if (p.top_k) o["top_k"] = p.top_k;
    } else {
      o["tp"] = p.tp;
    }
    o["in"] = p.in;
    o["out"] = p.out;
    o["tokens"] = p.tokens;
    o["padded_tokens"] = p.padded_tokens ? p.padded_tokens : p.tokens;
    if (p.bf16) {
      o["bf16_ms"] = p.bf16->ms;
      o["bf16_spread"] = p.bf16->spread;
    }
    if (p.fp8) {
      o["fp8_ms"] = p.fp8->ms;
      o["fp8_spread"] = p.fp8->spread;
    }
    if (p.paired()) {
      o["speedup"] = p.speedup();
      o["spread"] = p.spread();
    }
    os << (i ? ",\n    " : "\n    ") << flat_object(o);
  }
  os << (r.points.empty() ? "]\n}\n" : "\n  ]\n}\n");
  return os.str();
}

void validate_report(const Report& r, const std::string& source) {
  parse_report(report_to_json(r), source);
}

void save_report(const Report& r, const std::string& path) {
  std::string text = report_to_json(r);
  parse_report(text, path);  // validate before anything is written
  io::write_file_atomic(path, text);
}

}  // namespace mxtrain::policy
