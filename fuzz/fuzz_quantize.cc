// fuzz/fuzz_quantize.cc — differential fuzzing of the MX kernels: each input picks one
// operation, one non-scalar kernel path this CPU runs, an element format, a scale rounding
// and a shape (1..64 x 1..64), and fills the operands with the fuzzer's bytes as raw bit
// patterns (NaN, Inf, subnormals, any FP8 code and E8M0 scale). The path's result must equal
// the scalar reference byte for byte; a mismatch aborts naming the path, operation and
// shape. Operations: quantize rowwise / colwise / 32x32 tiles / dual-axis from FP32 and
// from BF16, dequantize to FP32 and to BF16 in each layout, FP32 <-> BF16 array conversion
// and the non-finite scan. One operation per input keeps each run short, so long runs reach
// many millions of inputs.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace {

using namespace mxtrain;

enum Op : int { kQuantF32, kQuantBf16, kDualF32, kDualBf16, kDeqF32, kDeqBf16, kToBf16,
                kToF32, kNonfinite, kNumOps };
const char* const kOpNames[] = {"quantize f32", "quantize bf16", "quantize_dual f32",
                                "quantize_dual bf16", "dequantize", "dequantize_bf16",
                                "f32_to_bf16_array", "bf16_to_f32_array", "has_nonfinite"};

struct Case {
  Op op;
  MXLayout layout;
  QuantConfig cfg;
  int64_t M, K;
  std::vector<float> x;
  std::vector<uint16_t> xb;
  ScaledTensor q;  // dequantize operand: arbitrary codes and scales
};

// Every byte the operation produces, in a fixed order.
std::vector<uint8_t> run(const Case& c) {
  std::vector<uint8_t> out;
  auto add = [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  auto add_tensor = [&](const ScaledTensor& t) {
    add(t.data.data(), t.data.size());
    add(t.scales.data(), t.scales.size());
  };
  const size_t n = size_t(c.M * c.K);
  switch (c.op) {
    case kQuantF32: add_tensor(quantize(c.x.data(), c.M, c.K, c.layout, c.cfg)); break;
    case kQuantBf16: add_tensor(quantize(c.xb.data(), c.M, c.K, c.layout, c.cfg)); break;
    case kDualF32:
    case kDualBf16: {
      ScaledTensor r, col;
      if (c.op == kDualF32) quantize_dual(c.x.data(), c.M, c.K, c.cfg, r, col);
      else quantize_dual(c.xb.data(), c.M, c.K, c.cfg, r, col);
      add_tensor(r);
      add_tensor(col);
      break;
    }
    case kDeqF32: {
      std::vector<float> y(n);
      dequantize(c.q, y.data());
      add(y.data(), n * 4);
      break;
    }
    case kDeqBf16: {
      std::vector<uint16_t> y(n);
      dequantize_bf16(c.q, y.data());
      add(y.data(), n * 2);
      break;
    }
    case kToBf16: {
      std::vector<uint16_t> y(n);
      f32_to_bf16_array(c.x.data(), y.data(), int64_t(n));
      add(y.data(), n * 2);
      break;
    }
    case kToF32: {
      std::vector<float> y(n);
      bf16_to_f32_array(c.xb.data(), y.data(), int64_t(n));
      add(y.data(), n * 4);
      break;
    }
    case kNonfinite: out.push_back(has_nonfinite(c.x.data(), int64_t(n))); break;
    default: break;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Isa> paths = [] {
    std::vector<Isa> p;
    for (Isa isa : supported_isas())
      if (isa != Isa::scalar) p.push_back(isa);
    return p;
  }();
  if (paths.empty()) return 0;
  FuzzedDataProvider in(data, size);
  Case c;
  c.op = Op(in.ConsumeIntegralInRange<int>(0, kNumOps - 1));
  const Isa isa = paths[in.ConsumeIntegralInRange<size_t>(0, paths.size() - 1)];
  c.layout = MXLayout(in.ConsumeIntegralInRange<int>(0, 2));
  c.cfg = {in.ConsumeBool() ? Elem::e4m3 : Elem::e5m2,
           in.ConsumeBool() ? ScaleRounding::rceil : ScaleRounding::floor};
  c.M = in.ConsumeIntegralInRange<int64_t>(1, 64);
  c.K = in.ConsumeIntegralInRange<int64_t>(1, 64);
  const std::vector<uint8_t> bytes = in.ConsumeRemainingBytes<uint8_t>();
  auto byte = [&](size_t i) { return bytes.empty() ? uint8_t(0) : bytes[i % bytes.size()]; };
  const size_t n = size_t(c.M * c.K);
  c.x.resize(n);
  c.xb.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t b = 0;
    for (size_t j = 0; j < 4; ++j) b |= uint32_t(byte(i * 4 + j)) << (8 * j);
    std::memcpy(&c.x[i], &b, 4);
    c.xb[i] = uint16_t(b >> 16);
  }
  if (c.op == kDeqF32 || c.op == kDeqBf16) {
    c.q = ScaledTensor::empty(c.M, c.K, c.layout, c.cfg.elem);
    for (size_t i = 0; i < c.q.data.size(); ++i) c.q.data[i] = byte(i);
    for (size_t i = 0; i < c.q.scales.size(); ++i) c.q.scales[i] = byte(n + i * 7);
  }
  set_isa(Isa::scalar);
  const std::vector<uint8_t> want = run(c);
  set_isa(isa);
  const std::vector<uint8_t> got = run(c);
  clear_isa_override();
  if (got != want) {
    size_t at = 0;
    while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
    std::fprintf(stderr, "MISMATCH: %s path, %s, layout %s, %s %s, %lldx%lld: byte %zu differs "
                 "from scalar\n", isa_name(isa), kOpNames[c.op], layout_name(c.layout),
                 elem_name(c.cfg.elem), rounding_name(c.cfg.rounding), (long long)c.M,
                 (long long)c.K, at);
    std::abort();
  }
  return 0;
}
