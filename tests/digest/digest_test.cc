// tests/digest/digest_test.cc — exact-bit digests of quantization and of short training runs,
// held against the values committed in tests/digest/expected.txt.
//
// The digests pin the numerics of the existing recipes: a change meant to leave them alone
// (a refactoring, a new recipe beside the old ones) must leave every line of expected.txt as
// it is. Each line is a CRC-32 (io/checksum.h) of exact bytes:
//   quantize <layout> <elem> <rounding> <input>   the codes and scales of quantize()
//     (rowwise, colwise, tile32) or quantize_dual() (dual), and the dequantize() and
//     dequantize_bf16() outputs of each copy, over awkward shapes (1, 31, 33, 2^n+-1, ragged
//     blocks) of awkward values (zeros, FP32 subnormals, FLT_MAX, E4M3/E5M2 grid points and
//     midpoints, the rceil/floor boundaries 1.75 * 2^k, NaN and +-Inf). Quantization is
//     defined bit for bit whatever the kernel path, so every path this CPU supports must give
//     the one committed value.
//   quantize4 <layout> <setting> <input>   the same for the 4-bit quantizers (quantize_fp4):
//     packed codes, scales, tensor scale and dequantize() output, per NVFP4 / MXFP4 setting,
//     with stochastic rounding (a fixed key) and the random Hadamard transform.
//   loss <path> <run>   the 20 training losses and the two validation losses of a small
//     dense or MoE GPT (ragged sizes: d_model 48, d_ff 80, 72 tokens per micro-batch, 4
//     experts of d_ff 40), per recipe and defer_backward_quant state.
//
// Which training bits are portable. The products sum in an order that depends on the kernel
// (docs/numerics.md, "MX products"), so a loss digest holds for one kernel path. Everything
// else that could vary between machines is pinned in main(): oneDNN's ISA is capped at
// SSE4.1 (with AMX or AVX512-BF16 it would pick other BF16 kernels, with other sums), and
// one OpenMP thread runs (oneDNN's own split of a product may depend on the thread count).
// The scalar path (`--isa scalar`) is then the same code on every x86-64 CPU, and its digest
// (path `scalar`) must hold everywhere. The other paths' digests are keyed by the path, the
// CPU vendor and the compiler (whether the compiler fuses a multiply and an add in the
// AVX-512 kernels depends on its version and optimisation level): they are checked where the
// key matches a committed line, and otherwise reported and skipped. MXTRAIN_ISA selects the
// path checked besides scalar, so running the test once per supported path checks them all.
// The test data are made with integer arithmetic and exact conversions only (no libm).
//
// MXTRAIN_DIGEST_PRINT=1 prints every line computed, in expected.txt's format.
#include <gtest/gtest.h>
#include <omp.h>

#include <cpuid.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "mxtrain/formats.h"
#include "mxtrain/io/checksum.h"
#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"
#include "mxtrain/train/config.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/trainer.h"

namespace mxtrain {
namespace {
namespace fs = std::filesystem;

// ---- expected values -------------------------------------------------------------------------

// Line key (everything but the last field) -> CRC as 8 hex digits.
using Digests = std::map<std::string, std::string>;

Digests load_expected() {
  const char* src = std::getenv("MXTRAIN_SOURCE_DIR");
  const fs::path p = fs::path(src ? src : ".") / "tests/digest/expected.txt";
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << "cannot read " << p << " (set MXTRAIN_SOURCE_DIR)";
  Digests d;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.find_last_of(' ');
    if (sp != std::string::npos) d[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return d;
}

bool print_all() { return std::getenv("MXTRAIN_DIGEST_PRINT") != nullptr; }

// ---- test data: integer arithmetic and exact conversions only --------------------------------

struct Rng {
  uint64_t s;
  uint64_t next() { return splitmix64(s += 0x9E3779B97F4A7C15ull); }
  uint32_t below(uint32_t n) { return uint32_t(next() % n); }
};

float from_bits(uint32_t b) { return __builtin_bit_cast(float, b); }

// X[M, K] with one value regime per 8x16 patch, so that 1x32, 32x1 and 32x32 blocks see pure
// and mixed cases, and about one entry in 3000 NaN or +-Inf (poisoning its blocks).
std::vector<float> awkward(int64_t M, int64_t K, uint64_t seed) {
  Rng rng{seed};
  const int64_t pr = (M + 7) / 8, pc = (K + 15) / 16;
  std::vector<uint32_t> regime(size_t(pr * pc));
  for (auto& r : regime) r = rng.below(10);
  std::vector<float> x(size_t(M * K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < K; ++j) {
      const uint32_t sign = rng.below(2) << 31, mant = uint32_t(rng.next()) & 0x7FFFFFu;
      float v = 0.f;
      switch (regime[size_t((i / 8) * pc + j / 16)]) {
        case 0: v = from_bits(sign | (124 + rng.below(7)) << 23 | mant); break;  // ordinary
        case 1: v = 0.f; break;                                                 // zeros
        case 2:  // huge, FLT_MAX among them
          v = rng.below(8) == 0 ? from_bits(sign | 0x7F7FFFFFu)
                                : from_bits(sign | (240 + rng.below(15)) << 23 | mant);
          break;
        case 3: v = from_bits(sign | mant >> rng.below(23)); break;  // FP32 subnormals
        case 4: v = from_bits(sign | rng.below(255) << 23 | mant); break;  // any exponent
        case 5: case 6: {  // E4M3 (5) or E5M2 (6) grid points and the midpoints between them
          const Elem e = regime[size_t((i / 8) * pc + j / 16)] == 5 ? Elem::e4m3 : Elem::e5m2;
          const uint8_t c = uint8_t(rng.below(e == Elem::e4m3 ? 0x7E : 0x7B));
          const float g = fp8_to_f32(c, e), h = fp8_to_f32(uint8_t(c + 1), e);
          v = rng.below(2) ? g : 0.5f * (g + h);  // exact: both have few mantissa bits
          if (sign) v = -v;
          break;
        }
        case 7: v = from_bits(sign | (107 + rng.below(40)) << 23); break;  // powers of two
        case 8: {  // on and beside the scale-rule boundaries 1.75 * 2^k and 2^k
          uint32_t b = (97 + rng.below(60)) << 23 | (rng.below(2) ? 0x600000u : 0u);
          b += rng.below(3) - 1;  // one ulp below, on, one ulp above
          v = from_bits(sign | b);
          break;
        }
        default: v = rng.below(3) == 0 ? -0.f : from_bits(sign | (127 + rng.below(9)) << 23 | mant);
      }
      const uint32_t r = rng.below(3000);
      if (r == 0) v = from_bits(0x7FC00000u);
      if (r == 1) v = from_bits(0x7F800000u);
      if (r == 2) v = from_bits(0xFF800000u);
      x[size_t(i * K + j)] = v;
    }
  return x;
}

// 1, 31, 33, 2^n +- 1 and ragged blocks on both axes.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 1}, {1, 33}, {33, 1}, {31, 33}, {32, 32}, {33, 65}, {64, 31}, {65, 127}, {129, 97}};

void feed(uint32_t& crc, const void* p, size_t n) { crc = io::crc32_update(crc, p, n); }

void feed_copy(uint32_t& crc, const ScaledTensor& q) {
  feed(crc, q.data.data(), q.data.size());
  feed(crc, q.scales.data(), q.scales.size());
  std::vector<float> f(q.data.size());
  std::vector<uint16_t> b(q.data.size());
  dequantize(q, f.data());
  dequantize_bf16(q, b.data());
  feed(crc, f.data(), f.size() * sizeof(float));
  feed(crc, b.data(), b.size() * sizeof(uint16_t));
}

// layout: rowwise | colwise | tile32 | dual
uint32_t quantize_digest(const std::string& layout, const QuantConfig& cfg, bool bf16_input) {
  uint32_t crc = 0;
  uint64_t seed = 1;
  for (const auto& shape : kShapes) {
    // Plain names, not a structured binding: C++20 lambdas cannot capture those (clang
    // refuses; GCC allows it).
    const int64_t M = shape.first, K = shape.second;
    const std::vector<float> x = awkward(M, K, seed++);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
    auto run = [&](auto* in) {
      if (layout == "dual") {
        ScaledTensor r, c;
        quantize_dual(in, M, K, cfg, r, c);
        feed_copy(crc, r);
        feed_copy(crc, c);
      } else {
        const MXLayout l = layout == "rowwise"   ? MXLayout::rowwise
                           : layout == "colwise" ? MXLayout::colwise
                                                 : MXLayout::tile;
        feed_copy(crc, quantize(in, M, K, l, cfg));
      }
    };
    if (bf16_input) run(xb.data());
    else run(x.data());
  }
  return crc;
}

std::string hex(uint32_t crc) { return io::crc32_hex(crc); }

// A 4-bit copy: its packed codes, scales, tensor scale and its dequantize() output.
void feed_fp4_copy(uint32_t& crc, const ScaledTensor& q) {
  feed(crc, q.data.data(), q.data.size());
  feed(crc, q.scales.data(), q.scales.size());
  const uint32_t ts = f32_bits(q.has_tensor_scale ? q.tensor_scale : 0.f);
  feed(crc, &ts, sizeof ts);
  std::vector<float> f(size_t(q.rows * q.cols));
  dequantize(q, f.data());
  feed(crc, f.data(), f.size() * sizeof(float));
}

// setting: nvfp4 (one level) | nvfp4-torchao | nvfp4-te | mxfp4-rceil | mxfp4-floor, plus
// "-sr" (stochastic rounding, a fixed key) and, colwise only, "-rht".
uint32_t fp4_digest(const std::string& layout, const Fp4Config& cfg, bool bf16_input) {
  uint32_t crc = 0;
  uint64_t seed = 1;
  const MXLayout l = layout == "rowwise"   ? MXLayout::rowwise
                     : layout == "colwise" ? MXLayout::colwise
                                           : MXLayout::tile;
  for (auto [M, K] : kShapes) {
    const std::vector<float> x = awkward(M, K, seed++);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
    ScaledTensor q;
    if (bf16_input)
      quantize_fp4(xb.data(), M, K, l, cfg, q);
    else
      quantize_fp4(x.data(), M, K, l, cfg, q);
    feed_fp4_copy(crc, q);
  }
  return crc;
}

// ---- quantization ----------------------------------------------------------------------------

TEST(Digest, QuantizeOutputsAreTheCommittedBitsOnEveryPath) {
  const Digests want = load_expected();
  std::ostringstream printed;
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    for (const char* layout : {"rowwise", "colwise", "tile32", "dual"})
      for (Elem e : {Elem::e4m3, Elem::e5m2})
        for (ScaleRounding r : {ScaleRounding::rceil, ScaleRounding::floor})
          for (bool bf16 : {false, true}) {
            const std::string key = std::string("quantize ") + layout + " " + elem_name(e) +
                                    " " + rounding_name(r) + (bf16 ? " bf16" : " f32");
            const std::string got = hex(quantize_digest(layout, {e, r}, bf16));
            if (isa == Isa::scalar) printed << key << " " << got << "\n";
            auto it = want.find(key);
            if (it == want.end())
              ADD_FAILURE() << "no committed line for '" << key << "'";
            else
              EXPECT_EQ(got, it->second) << key << " on path " << isa_name(isa);
          }
  }
  clear_isa_override();
  if (print_all() || HasFailure()) std::printf("%s", printed.str().c_str());
}

TEST(Digest, Fp4QuantizeOutputsAreTheCommittedBitsOnEveryPath) {
  const Digests want = load_expected();
  std::ostringstream printed;
  struct Setting {
    std::string name;
    Fp4Config cfg;
  };
  std::vector<Setting> settings;
  for (const char* base : {"nvfp4", "nvfp4-torchao", "nvfp4-te", "mxfp4-rceil", "mxfp4-floor"})
    for (bool sr : {false, true}) {
      Fp4Config c;
      const std::string b = base;
      c.kind = b.rfind("nvfp4", 0) == 0 ? Fp4Kind::nvfp4 : Fp4Kind::mxfp4;
      c.tensor_scale = b != "nvfp4";
      c.order = b == "nvfp4-te" ? Nvfp4Order::te : Nvfp4Order::torchao;
      c.rounding = b == "mxfp4-floor" ? ScaleRounding::floor : ScaleRounding::rceil;
      c.stochastic = sr;
      c.sr = {0x5EEDull, 3, 17};
      settings.push_back({b + (sr ? "-sr" : ""), c});
    }
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    for (const char* layout : {"rowwise", "colwise", "tile"})
      for (const Setting& s : settings)
        for (bool rht : {false, true}) {
          if (rht && std::string(layout) != "colwise") continue;
          Fp4Config c = s.cfg;
          c.rht = rht;
          for (bool bf16 : {false, true}) {
            const std::string key = std::string("quantize4 ") + layout + " " + s.name +
                                    (rht ? "-rht" : "") + (bf16 ? " bf16" : " f32");
            const std::string got = hex(fp4_digest(layout, c, bf16));
            if (isa == Isa::scalar) printed << key << " " << got << "\n";
            auto it = want.find(key);
            if (it == want.end())
              ADD_FAILURE() << "no committed line for '" << key << "'";
            else
              EXPECT_EQ(got, it->second) << key << " on path " << isa_name(isa);
          }
        }
  }
  clear_isa_override();
  if (print_all() || HasFailure()) std::printf("%s", printed.str().c_str());
}

// ---- training --------------------------------------------------------------------------------

// English-like text made of a fixed word list, deterministic, about 30 kB.
std::string corpus_text() {
  static const char* words[] = {
      "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be",
      "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but",
      "have", "an", "they", "you", "were", "her", "she", "there", "been", "one", "all",
      "we", "their", "has", "would", "when", "if", "so", "no", "will", "what", "up", "more",
      "out", "who", "can", "said", "them", "some", "could", "into", "two", "time", "than",
      "first", "only", "may", "then", "do", "any", "like", "my", "now", "over", "such",
      "man", "even", "most", "made", "after", "also", "did", "many", "before", "must",
      "through", "back", "years", "where", "much", "your", "way", "well", "down", "should"};
  const uint32_t n = sizeof(words) / sizeof(words[0]);
  Rng rng{42};
  std::string s;
  while (s.size() < 30000) {
    std::string w = words[rng.below(n)];
    if (rng.below(12) == 0) w[0] = char(w[0] - 'a' + 'A');
    s += w;
    s += rng.below(14) == 0 ? ".\n" : " ";
  }
  return s;
}

struct TrainRun {
  std::string name;  // the <run> field of expected.txt
  bool moe;
  std::string recipe, rounding;
  bool defer;
};

std::vector<TrainRun> runs() {
  std::vector<TrainRun> out;
  for (bool moe : {false, true}) {
    out.push_back({"", moe, "bf16", "rceil", false});
    for (const char* r : {"mxfp8", "mxfp8-32x32"})
      for (bool defer : {false, true}) out.push_back({"", moe, r, "rceil", defer});
  }
  out.push_back({"", false, "mxfp8-e5m2grad", "rceil", false});
  out.push_back({"", false, "mxfp8", "floor", false});
  // 4-bit: nvfp4 with every switch on (stochastic rounding keyed by the trainer's clock) and
  // mxfp4, dense, and nvfp4 on the MoE model with defer on.
  out.push_back({"", false, "nvfp4", "rceil", false});
  out.push_back({"", true, "nvfp4", "rceil", true});
  out.push_back({"", false, "mxfp4", "rceil", false});
  for (TrainRun& r : out)
    r.name = std::string(r.moe ? "moe" : "dense") + "/" + r.recipe + "/" + r.rounding +
             (r.defer ? "/defer-on" : "/defer-off");
  return out;
}

TrainConfig run_config(const TrainRun& r, const std::string& data_path) {
  std::string y = "model: {vocab_size: 256, d_model: 48, n_layers: 2, n_heads: 3, d_ff: 80, "
                  "max_seq_len: 24";
  if (r.moe) y += ", moe: {num_experts: 4, top_k: 2, d_ff: 40}";
  y += "}\ntraining: {steps: 20, seq_len: 24, micro_batch_size: 3, grad_accum: 2, lr: 0.01, "
       "warmup_steps: 4, seed: 7, eval_every: 10, eval_batches: 2}\n"
       "data: {path: '" + data_path + "'}\n"
       "precision: {recipe: " + r.recipe + ", scale_rounding: " + r.rounding +
       ", defer_backward_quant: " + (r.defer ? "true" : "false") + "}\n";
  return parse_config(y, "digest " + r.name);
}

// CRC of the losses' and validation losses' bits; `shown` gets them as hex floats.
uint32_t loss_digest(const TrainSummary& s, std::string& shown) {
  uint32_t crc = 0;
  std::ostringstream os;
  for (double l : s.losses) {
    feed(crc, &l, sizeof l);
    os << " " << std::hexfloat << l;
  }
  os << " | val";
  for (const auto& [step, l] : s.val_losses) {
    feed(crc, &step, sizeof step);
    feed(crc, &l, sizeof l);
    os << " " << step << ":" << std::hexfloat << l;
  }
  shown = os.str();
  return crc;
}

// The key of the active kernel path: the ISA path, whether the CPU has AVX512-BF16 (the MX
// product and attention kernels need it), the CPU vendor and the compiler.
std::string path_key() {
  const Isa isa = active_isa();
  if (isa == Isa::scalar) return "scalar";
  unsigned a = 0, b = 0, c = 0, d = 0;
  char vendor[13] = {};
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
  }
  std::string k = std::string(isa_name(isa)) + (cpu_features().avx512_bf16 ? "+bf16" : "") +
                  "/" + vendor;
#if defined(__clang__)
  k += "/clang-" + std::to_string(__clang_major__);
#elif defined(__GNUC__)
  k += "/gcc-" + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__);
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
  k += "-sanitized";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  k += "-sanitized";
#endif
#endif
  return k;
}

TEST(Digest, TrainingLossesAreTheCommittedBitsOfTheirPath) {
  const Digests want = load_expected();
  const fs::path dir = fs::temp_directory_path() / ("mxtrain_digest_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string data = (dir / "text.txt").string();
  {
    std::ofstream(data) << corpus_text();
  }
  TrainOptions quiet;
  quiet.progress = false;
  quiet.print_decisions = false;

  // Scalar always; the active path (MXTRAIN_ISA or the best one) besides, when it is another.
  std::vector<bool> scalar_first = {true};
  if (active_isa() != Isa::scalar) scalar_first.push_back(false);
  std::ostringstream printed;
  for (bool scalar : scalar_first) {
    if (scalar) set_isa(Isa::scalar);
    else clear_isa_override();
    const std::string key = path_key();
    int missing = 0;
    for (const TrainRun& r : runs()) {
      const TrainSummary s = run_training(run_config(r, data), quiet);
      ASSERT_EQ(s.losses.size(), 20u) << r.name;
      std::string shown;
      const std::string got = hex(loss_digest(s, shown));
      const std::string line = "loss " + key + " " + r.name;
      printed << line << " " << got << "\n";
      auto it = want.find(line);
      if (it == want.end()) {
        EXPECT_FALSE(scalar) << "no committed line for '" << line << "'";
        ++missing;
        continue;
      }
      EXPECT_EQ(got, it->second) << line << "; losses:" << shown;
    }
    if (missing)
      std::printf("no committed loss digests for path %s (%d runs): not checked\n", key.c_str(),
                  missing);
  }
  clear_isa_override();
  fs::remove_all(dir);
  if (print_all() || HasFailure()) std::printf("%s", printed.str().c_str());
}

}  // namespace
}  // namespace mxtrain

// Pins what would otherwise make the training bits depend on the machine (see the top).
int main(int argc, char** argv) {
  dnnl::set_max_cpu_isa(dnnl::cpu_isa::sse41);
  omp_set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
