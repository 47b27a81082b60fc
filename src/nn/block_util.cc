// nn/block_util.cc — the blocks' initial values (nn/block_util.h) and BlockContext.
#include "nn/block_util.h"

#include <algorithm>
#include <cmath>

#include "mxtrain/nn/blocks.h"

namespace mxtrain::nn_detail {
namespace {

// splitmix64's output function of a state.
uint64_t splitmix_out(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // splitmix64's increment

// N(0, std^2) values from a stream keyed by (seed, parameter name): independent of creation
// order and thread count, identical on every rank. Element pair (2q, 2q+1) is one Box-Muller
// draw from the stream's calls 2q and 2q+1 (splitmix64: call c reads state s0 + (c+1)·gamma),
// so any range of the tensor can be made on its own: out [n] = elements [begin, begin + n).
void normal_values(const std::string& name, float std, uint64_t seed, int64_t begin, int64_t n,
                   float* out) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the name
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  const uint64_t s0 = seed ^ (h * kGamma);
  const int64_t end = begin + n;
  for (int64_t q = begin / 2; 2 * q < end; ++q) {  // the pairs the range touches
    const uint64_t c = uint64_t(2 * q);
    const double u1 = (double(splitmix_out(s0 + (c + 1) * kGamma) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = double(splitmix_out(s0 + (c + 2) * kGamma) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
    if (2 * q >= begin) out[2 * q - begin] = float(std * r * std::cos(a));
    if (2 * q + 1 >= begin && 2 * q + 1 < end) out[2 * q + 1 - begin] = float(std * r * std::sin(a));
  }
}

}  // namespace

void init_normal(Parameter& p, float std, uint64_t seed, const ParamSplit& split) {
  if (!split.sliced()) {
    normal_values(p.name, std, seed, 0, int64_t(p.value.size()), p.value.data());
    return;
  }
  for (const SliceRun& r : slice_runs(split))
    normal_values(p.name, std, seed, r.whole, r.length, p.value.data() + r.local);
  p.split = split;
}

void init_ones(Parameter& p, std::string name, int64_t n) {
  p.init(std::move(name), {n});
  std::fill(p.value.begin(), p.value.end(), 1.f);
}

ParamSplit tp_split(const ModelParallel& par, std::vector<int64_t> full_shape, int dim,
                    int parts) {
  ParamSplit s;
  if (par.tp_size() == 1) return s;
  s.cuts.push_back({ParamSplit::Over::tp, dim, parts, par.tp_size(), par.tp_rank()});
  s.full_shape = std::move(full_shape);
  return s;
}

ParamSplit expert_split(const ModelParallel& par, std::vector<int64_t> full_shape, int dim,
                        int parts) {
  ParamSplit s;
  if (par.ep_size() > 1)
    s.cuts.push_back({ParamSplit::Over::ep, 0, 1, par.ep_size(), par.ep_rank()});
  if (par.etp_size() > 1)
    s.cuts.push_back({ParamSplit::Over::etp, dim, parts, par.etp_size(), par.etp_rank()});
  if (s.sliced()) s.full_shape = std::move(full_shape);
  return s;
}

}  // namespace mxtrain::nn_detail

namespace mxtrain {

LinearParallel BlockContext::role(ParallelMode m) const {
  return {m, par.tp, shard.split(), par.sp_wire, stats};
}

void BlockContext::init(Parameter& p, float std, const ParamSplit& split) const {
  if (random_init) {
    nn_detail::init_normal(p, std, seed, split);
  } else if (split.sliced()) {
    p.split = split;
  }
}

float BlockContext::std_out() const { return float(cfg.init_std / std::sqrt(2.0 * cfg.n_layers)); }

}  // namespace mxtrain
