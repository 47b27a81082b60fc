// tests/io/quantize_files_test.cc — the logic of `mxtrain quantize` / `dequantize`: the
// files hold exactly the bytes core's quantize() produces for the same input (on ragged
// shapes, with NaN and zero blocks), dequantizing gives exactly dequantize(), and every bad
// input is an error that leaves no output behind.
#include "mxtrain/io/quantize_files.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/npy.h"

namespace mxtrain::io {
namespace {

using testing::list_dir;
using testing::ScratchDir;

// Values spanning many binades, with an all-zero 32-block, a NaN and an Inf.
std::vector<float> make_input(int64_t M, int64_t K, uint32_t seed) {
  std::vector<float> x(size_t(M * K));
  uint32_t s = seed;
  for (auto& v : x) {
    s = s * 1664525u + 1013904223u;
    const float mant = float(s >> 8) / float(1 << 24) * 2.0f - 1.0f;
    v = std::ldexp(mant, int((s >> 4) % 24) - 12);
  }
  if (K >= 32 && M >= 2)
    for (int64_t k = 0; k < 32; ++k) x[size_t(1 * K + k)] = 0.0f;
  if (M * K > 40) {
    x[size_t(M * K - 1)] = std::nanf("");
    x[37] = INFINITY;
  }
  return x;
}

std::string write_input(const ScratchDir& d, const std::vector<float>& x, int64_t M, int64_t K) {
  const std::string path = d / "x.npy";
  write_npy(path, npy_from_f32(x.data(), {M, K}));
  return path;
}

std::vector<uint8_t> u8_npy(const ByteBuffer& v, int64_t r, int64_t c) {
  return npy_encode(npy_from_u8(v.data(), {r, c}));
}

const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 1}, {31, 33}, {33, 65}, {64, 32}, {2, 100}};

TEST(QuantizeFiles, Mxfp8FilesEqualCoreQuantize) {
  for (auto [M, K] : kShapes) {
    ScratchDir d;
    const std::vector<float> x = make_input(M, K, uint32_t(M * 1000 + K));
    const std::string in = write_input(d, x, M, K);
    QuantizeFilesResult r = quantize_npy_to_dir(in, d / "q", {"mxfp8", {}, {}});
    EXPECT_EQ(r.cfg.elem, Elem::e4m3);
    EXPECT_EQ(r.cfg.rounding, ScaleRounding::rceil);
    EXPECT_EQ(list_dir(d / "q"),
              (std::vector<std::string>{".mxtrain-manifest", "colwise.npy", "colwise_scale.npy", "meta.json",
                                        "rowwise.npy", "rowwise_scale.npy"}));
    const ScaledTensor row = quantize(x.data(), M, K, MXLayout::rowwise, r.cfg);
    const ScaledTensor col = quantize(x.data(), M, K, MXLayout::colwise, r.cfg);
    EXPECT_EQ(read_file(d / "q/rowwise.npy"), u8_npy(row.data, M, K)) << M << "x" << K;
    EXPECT_EQ(read_file(d / "q/rowwise_scale.npy"), u8_npy(row.scales, M, (K + 31) / 32));
    EXPECT_EQ(read_file(d / "q/colwise.npy"), u8_npy(col.data, M, K));
    EXPECT_EQ(read_file(d / "q/colwise_scale.npy"), u8_npy(col.scales, (M + 31) / 32, K));
    const auto meta = nlohmann::json::parse(read_text_file(d / "q/meta.json"));
    EXPECT_EQ(meta["recipe"], "mxfp8");
    EXPECT_EQ(meta["elem"], "e4m3");
    EXPECT_EQ(meta["scale_rounding"], "rceil");
    EXPECT_EQ(meta["layout"], "rowwise+colwise");
    EXPECT_EQ(meta["shape"], nlohmann::json({M, K}));

    // Dequantize gives exactly core's dequantize() of the rowwise copy.
    DequantizeFilesResult dr = dequantize_dir_to_npy(d / "q", d / "y.npy", {"mxfp8", {}});
    EXPECT_EQ(dr.source, "rowwise.npy");
    std::vector<float> want(size_t(M * K));
    dequantize(row, want.data());
    const NpyArray y = read_npy(d / "y.npy");
    npy_require(y, "<f4", 2, "y.npy");
    EXPECT_EQ(y.shape, (std::vector<int64_t>{M, K}));
    EXPECT_EQ(std::memcmp(y.data.data(), want.data(), want.size() * 4), 0) << M << "x" << K;
  }
}

TEST(QuantizeFiles, Tile32FilesEqualCoreQuantize) {
  for (auto [M, K] : kShapes) {
    ScratchDir d;
    const std::vector<float> x = make_input(M, K, uint32_t(M * 7 + K));
    const std::string in = write_input(d, x, M, K);
    QuantizeFilesResult r = quantize_npy_to_dir(in, d / "q", {"mxfp8-32x32", {}, {}});
    EXPECT_EQ(list_dir(d / "q"), (std::vector<std::string>{".mxtrain-manifest", "data.npy",
                                                           "meta.json", "scale.npy"}));
    const ScaledTensor t = quantize(x.data(), M, K, MXLayout::tile, r.cfg);
    EXPECT_EQ(read_file(d / "q/data.npy"), u8_npy(t.data, M, K));
    EXPECT_EQ(read_file(d / "q/scale.npy"), u8_npy(t.scales, (M + 31) / 32, (K + 31) / 32));
    dequantize_dir_to_npy(d / "q", d / "y.npy", {"mxfp8-32x32", Elem::e4m3});
    std::vector<float> want(size_t(M * K));
    dequantize(t, want.data());
    const NpyArray y = read_npy(d / "y.npy");
    EXPECT_EQ(std::memcmp(y.data.data(), want.data(), want.size() * 4), 0) << M << "x" << K;
  }
}

std::vector<uint8_t> f32_npy(const ScaledTensor& t) {
  return npy_encode(npy_from_f32(reinterpret_cast<const float*>(t.scales.data()),
                                 {t.scale_rows(), t.scale_cols()}));
}

// blockwise, both roles: the files hold core's quantize_blocks bytes (FP32 scale_inv grids),
// the options reach them, and dequantize gives core's dequantize of the first copy.
TEST(QuantizeFiles, BlockwiseFilesEqualCoreQuantize) {
  for (auto [M, K] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {129, 130}, {2, 300}}) {
    ScratchDir d;
    const std::vector<float> x = make_input(M, K, uint32_t(M * 3 + K));
    const std::string in = write_input(d, x, M, K);
    QuantizeFilesOptions o;
    o.recipe = "blockwise";
    const QuantizeFilesResult r = quantize_npy_to_dir(in, d / "i", o);
    EXPECT_EQ(r.role, Role::input);
    EXPECT_EQ(list_dir(d / "i"),
              (std::vector<std::string>{".mxtrain-manifest", "colwise.npy",
                                        "colwise_scale_inv.npy", "meta.json",
                                        "rowwise.npy", "rowwise_scale_inv.npy"}));
    ScaledTensor row, col;
    quantize_blocks_dual(x.data(), M, K, {}, row, col);
    EXPECT_EQ(read_file(d / "i/rowwise.npy"), u8_npy(row.data, M, K));
    EXPECT_EQ(read_file(d / "i/rowwise_scale_inv.npy"), f32_npy(row));
    EXPECT_EQ(read_file(d / "i/colwise.npy"), u8_npy(col.data, M, K));
    EXPECT_EQ(read_file(d / "i/colwise_scale_inv.npy"), f32_npy(col));
    const auto meta = nlohmann::json::parse(read_text_file(d / "i/meta.json"));
    EXPECT_EQ(meta["role"], "input");
    EXPECT_EQ(meta["scale_type"], "fp32_pow2");
    EXPECT_EQ(meta["block"], 128);
    EXPECT_FALSE(meta.contains("scale_rounding"));
    const DequantizeFilesResult dr = dequantize_dir_to_npy(d / "i", d / "y.npy", {"blockwise", {}});
    EXPECT_EQ(dr.source, "rowwise.npy");
    std::vector<float> want(size_t(M * K));
    dequantize(row, want.data());
    EXPECT_EQ(std::memcmp(read_npy(d / "y.npy").data.data(), want.data(), want.size() * 4), 0);

    o.role = Role::weight;
    o.elem = Elem::e5m2;
    o.fp32_scales = true;
    o.amax_epsilon = 0.25f;
    quantize_npy_to_dir(in, d / "w", o);
    EXPECT_EQ(list_dir(d / "w"),
              (std::vector<std::string>{".mxtrain-manifest", "data.npy", "meta.json",
                                        "scale_inv.npy"}));
    const ScaledTensor t =
        quantize_blocks(x.data(), M, K, MXLayout::tile, {Elem::e5m2, ScaleType::fp32, 0.25f});
    EXPECT_EQ(read_file(d / "w/data.npy"), u8_npy(t.data, M, K));
    EXPECT_EQ(read_file(d / "w/scale_inv.npy"), f32_npy(t));
    dequantize_dir_to_npy(d / "w", d / "yw.npy", {"blockwise", Elem::e5m2});
    dequantize(t, want.data());
    EXPECT_EQ(std::memcmp(read_npy(d / "yw.npy").data.data(), want.data(), want.size() * 4), 0);
  }
  // A scale grid of the wrong dtype is refused before anything is written.
  ScratchDir d;
  const std::vector<float> x = make_input(4, 4, 1);
  QuantizeFilesOptions o;
  o.recipe = "blockwise";
  o.role = Role::weight;
  quantize_npy_to_dir(write_input(d, x, 4, 4), d / "w", o);
  write_npy(d / "w/scale_inv.npy", npy_from_u8(std::vector<uint8_t>(1).data(), {1, 1}));
  EXPECT_THROW(dequantize_dir_to_npy(d / "w", d / "y.npy", {"blockwise", {}}), Error);
  EXPECT_FALSE(std::filesystem::exists(d / "y.npy"));
}

// fp8-current, both roles: data.npy [M, K] and scale_inv.npy float32 [1] hold core's
// quantize_tensor_scaled bytes; dequantize gives core's dequantize.
TEST(QuantizeFiles, PerTensorFilesEqualCoreQuantize) {
  for (auto [M, K] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {129, 130}, {2, 300}}) {
    ScratchDir d;
    const std::vector<float> x = make_input(M, K, uint32_t(M * 5 + K));
    const std::string in = write_input(d, x, M, K);
    for (auto [role, elem] : {std::pair{Role::input, Elem::e4m3}, std::pair{Role::weight, Elem::e5m2}}) {
      QuantizeFilesOptions o;
      o.recipe = "fp8-current";
      o.role = role;
      o.elem = elem;
      o.amax_epsilon = role == Role::weight ? 0.5f : 0.f;
      const std::string q = d / role_name(role);
      const QuantizeFilesResult r = quantize_npy_to_dir(in, q, o);
      EXPECT_EQ(r.scale, ScaleType::fp32);
      EXPECT_EQ(list_dir(q), (std::vector<std::string>{".mxtrain-manifest", "data.npy",
                                                       "meta.json", "scale_inv.npy"}));
      ScaledTensor t;
      quantize_tensor_scaled(x.data(), M, K, {elem, *o.amax_epsilon}, t);
      EXPECT_EQ(read_file(q + "/data.npy"), u8_npy(t.data, M, K));
      EXPECT_EQ(read_file(q + "/scale_inv.npy"),
                npy_encode(npy_from_f32(reinterpret_cast<const float*>(t.scales.data()), {1})));
      const auto meta = nlohmann::json::parse(read_text_file(q + "/meta.json"));
      EXPECT_EQ(meta["role"], role_name(role));
      EXPECT_EQ(meta["scale_type"], "fp32");
      EXPECT_EQ(meta["layout"], "tensor");
      EXPECT_EQ(meta["block"], 0);
      EXPECT_EQ(meta["elem"], elem_name(elem));
      const DequantizeFilesResult dr =
          dequantize_dir_to_npy(q, d / "y.npy", {"fp8-current", {}});
      EXPECT_EQ(dr.source, "data.npy");
      std::vector<float> want(size_t(M * K));
      dequantize(t, want.data());
      EXPECT_EQ(std::memcmp(read_npy(d / "y.npy").data.data(), want.data(), want.size() * 4), 0);
    }
  }
  // Hand-computed: amax 5 -> scale 448/5 = 89.6, scale_inv 0x3C36DB6E; codes 5 -> 0x7E,
  // 1 -> 0x6B, -2.5 -> 0xF6, 0 -> 0.
  ScratchDir d;
  const std::vector<float> x{5.f, 1.f, -2.5f, 0.f};
  quantize_npy_to_dir(write_input(d, x, 2, 2), d / "q", {"fp8-current", {}, {}});
  const NpyArray data = read_npy(d / "q/data.npy"), s = read_npy(d / "q/scale_inv.npy");
  EXPECT_EQ(data.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(std::vector<uint8_t>(data.data.begin(), data.data.end()),
            (std::vector<uint8_t>{0x7E, 0x6B, 0xF6, 0x00}));
  EXPECT_EQ(s.shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(s.dtype, "<f4");
  EXPECT_EQ(std::vector<uint8_t>(s.data.begin(), s.data.end()),
            (std::vector<uint8_t>{0x6E, 0xDB, 0x36, 0x3C}));
  // A [1, 1] scale_inv (a grid, not the one scale) is refused before anything is written.
  write_npy(d / "q/scale_inv.npy", npy_from_f32(std::vector<float>(1, 1.f).data(), {1, 1}));
  EXPECT_THROW(dequantize_dir_to_npy(d / "q", d / "y.npy", {"fp8-current", {}}), Error);
  EXPECT_FALSE(std::filesystem::exists(d / "y.npy"));
}

// The per-tensor recipes refuse what does not apply to them, with one line naming why.
TEST(QuantizeFiles, PerTensorRefusals) {
  ScratchDir d;
  const std::string in = write_input(d, make_input(4, 4, 2), 4, 4);
  auto error_of = [&](const QuantizeFilesOptions& o) {
    try {
      quantize_npy_to_dir(in, d / "q", o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  QuantizeFilesOptions o;
  o.recipe = "fp8-delayed";
  EXPECT_NE(error_of(o).find("delayed scaling needs an amax history (a training state)"),
            std::string::npos)
      << error_of(o);
  o.recipe = "fp8-current";
  o.fp32_scales = true;
  EXPECT_NE(error_of(o).find("has FP32 scales already"), std::string::npos) << error_of(o);
  o.fp32_scales = false;
  o.rounding = ScaleRounding::floor;
  EXPECT_NE(error_of(o).find("--scale-rounding applies to MX recipes"), std::string::npos);
  o.rounding = {};
  o.amax_epsilon = -1.f;
  EXPECT_NE(error_of(o).find("--amax-epsilon must be a finite number >= 0"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(d / "q"));
}

TEST(QuantizeFiles, ElemAndRoundingOptionsReachTheBytes) {
  const int64_t M = 33, K = 40;
  ScratchDir d;
  std::vector<float> x = make_input(M, K, 5);
  // Sanity vector (docs/numerics.md, "The scale exponent"): a block whose amax is 480 ->
  // scale 127 / data 0x7E under floor.
  for (int k = 0; k < 32; ++k) x[size_t(k)] = 1.0f;
  x[0] = 480.0f;
  const std::string in = write_input(d, x, M, K);
  quantize_npy_to_dir(in, d / "q", {"mxfp8", Elem::e5m2, ScaleRounding::floor});
  const QuantConfig cfg{Elem::e5m2, ScaleRounding::floor};
  const ScaledTensor row = quantize(x.data(), M, K, MXLayout::rowwise, cfg);
  EXPECT_EQ(read_file(d / "q/rowwise.npy"), u8_npy(row.data, M, K));
  EXPECT_EQ(read_file(d / "q/rowwise_scale.npy"), u8_npy(row.scales, M, 2));
  const auto meta = nlohmann::json::parse(read_text_file(d / "q/meta.json"));
  EXPECT_EQ(meta["elem"], "e5m2");
  EXPECT_EQ(meta["scale_rounding"], "floor");
  // E4M3 / floor on the sanity vector.
  quantize_npy_to_dir(in, d / "q4", {"mxfp8", Elem::e4m3, ScaleRounding::floor});
  EXPECT_EQ(read_npy(d / "q4/rowwise_scale.npy").data[0], 127);
  EXPECT_EQ(read_npy(d / "q4/rowwise.npy").data[0], 0x7E);
  // The element format is checked on the way back.
  EXPECT_ERROR_CONTAINS(dequantize_dir_to_npy(d / "q", d / "y.npy", {"mxfp8", Elem::e4m3}),
                        "holds e5m2 data, but --elem is e4m3");
  EXPECT_FALSE(path_exists(d / "y.npy"));
}

// Replacing an earlier output removes what that output wrote and nothing else: the user's
// notes and subdirectories beside it stay, with their contents (io/output_dir.h).
TEST(QuantizeFiles, ReplacesAPreviousOutputKeepingOtherFiles) {
  ScratchDir d;
  const std::vector<float> x = make_input(40, 40, 9);
  const std::string in = write_input(d, x, 40, 40);
  quantize_npy_to_dir(in, d / "q", {"mxfp8", {}, {}});
  write_file_atomic(d / "q/NOTES.md", std::string("how this was made"));
  std::filesystem::create_directory(d / "q/plots");
  write_file_atomic(d / "q/plots/a.svg", std::string("<svg/>"));
  quantize_npy_to_dir(in, d / "q", {"mxfp8-32x32", {}, {}});
  EXPECT_EQ(list_dir(d / "q"), (std::vector<std::string>{".mxtrain-manifest", "NOTES.md",
                                                         "data.npy", "meta.json", "plots",
                                                         "scale.npy"}));
  EXPECT_EQ(read_text_file(d / "q/NOTES.md"), "how this was made");
  EXPECT_EQ(read_text_file(d / "q/plots/a.svg"), "<svg/>");
  EXPECT_EQ(list_dir(d.path()), (std::vector<std::string>{"q", "x.npy"}));
  std::filesystem::create_directory(d / "empty");
  quantize_npy_to_dir(in, d / "empty", {"mxfp8-32x32", {}, {}});
  EXPECT_EQ(list_dir(d / "empty").size(), 4u);
}

// Runs `f`, expects an error containing `msg`, and that the scratch directory's listing
// (including hidden temporaries) is unchanged.
template <class F>
void expect_clean_failure(const ScratchDir& d, F f, const std::string& msg) {
  const auto before = list_dir(d.path());
  EXPECT_ERROR_CONTAINS(f(), msg);
  EXPECT_EQ(list_dir(d.path()), before) << msg;
}

TEST(QuantizeFiles, BadInputsLeaveNoOutput) {
  ScratchDir d;
  const std::vector<float> x = make_input(4, 8, 1);
  const std::string in = write_input(d, x, 4, 8);
  const QuantizeFilesOptions ok{"mxfp8", {}, {}};
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(d / "missing.npy", d / "q", ok); },
      "file not found: " + (d / "missing.npy"));
  write_file_atomic(d / "text.npy", std::string("not numpy"));
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(d / "text.npy", d / "q", ok); }, "not a .npy file");
  std::vector<float> cube(24, 1.0f);
  write_npy(d / "cube.npy", npy_from_f32(cube.data(), {2, 3, 4}));
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(d / "cube.npy", d / "q", ok); },
      "expected a 2-D array, got shape (2, 3, 4)");
  std::vector<double> f64(6, 1.0);
  write_npy(d / "f64.npy", npy_make("<f8", {2, 3}, f64.data()));
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(d / "f64.npy", d / "q", ok); },
      "expected dtype float32 ('<f4'), got float64 ('<f8')");
  write_npy(d / "empty.npy", npy_make("<f4", {0, 3}, nullptr));
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(d / "empty.npy", d / "q", ok); }, "the array is empty");
  expect_clean_failure(
      d,
      [&] {
        quantize_npy_to_dir(in, d / "q", {"mxfp9", {}, {}});
      },
      "unknown recipe 'mxfp9'; registered recipes: bf16, mxfp8, mxfp8-32x32");
  expect_clean_failure(
      d,
      [&] {
        quantize_npy_to_dir(in, d / "q", {"bf16", {}, {}});
      },
      "recipe 'bf16' does not quantize");
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(in, d / "nope/q", ok); }, "parent directory");
  // An unrelated non-empty directory is never replaced.
  std::filesystem::create_directory(d / "mine");
  write_file_atomic(d / "mine/keep.txt", std::string("precious"));
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(in, d / "mine", ok); },
      "the directory exists and holds files mxtrain did not write (keep.txt)");
  EXPECT_EQ(read_text_file(d / "mine/keep.txt"), "precious");
  write_file_atomic(d / "afile", std::string("a file"));
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(in, d / "afile", ok); }, "is not a directory");
  // An output never replaces an input, nor holds one.
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(in, d / "x.npy", ok); },
      "--out-dir " + (d / "x.npy") + ": is --input " + in + "; an output may not be written "
      "over an input");
  expect_clean_failure(
      d, [&] { quantize_npy_to_dir(in, d.path(), ok); },
      "--input " + in + " lies inside it, and the command replaces that directory");
}

TEST(QuantizeFiles, BadDequantizeInputsLeaveNoOutput) {
  ScratchDir d;
  const std::vector<float> x = make_input(40, 70, 3);
  const std::string in = write_input(d, x, 40, 70);
  quantize_npy_to_dir(in, d / "q", {"mxfp8", {}, {}});
  const DequantizeFilesOptions ok{"mxfp8", {}};
  const std::string y = d / "y.npy";
  expect_clean_failure(
      d, [&] { dequantize_dir_to_npy(d / "none", y, ok); }, "does not exist");
  expect_clean_failure(
      d, [&] { dequantize_dir_to_npy(in, y, ok); }, "is not a directory");
  expect_clean_failure(
      d,
      [&] {
        dequantize_dir_to_npy(d / "q", y, {"mxfp8-32x32", {}});
      },
      "was quantized with recipe 'mxfp8', but --recipe is 'mxfp8-32x32'");
  expect_clean_failure(
      d,
      [&] {
        dequantize_dir_to_npy(d / "q", y, {"bf16", {}});
      },
      "does not quantize");
  expect_clean_failure(
      d, [&] { dequantize_dir_to_npy(d / "q", d / "nope/y.npy", ok); },
      "the directory does not exist");

  // Damaged copies of the output directory.
  auto damaged = [&](const std::string& name, auto&& damage) {
    std::filesystem::copy(d / "q", d / name, std::filesystem::copy_options::recursive);
    damage(d / name);
    return d / name;
  };
  const std::string no_meta =
      damaged("no_meta", [](const std::string& p) { std::filesystem::remove(p + "/meta.json"); });
  expect_clean_failure(
      d, [&] { dequantize_dir_to_npy(no_meta, y, ok); }, "meta.json: file not found");
  const std::string no_scale = damaged(
      "no_scale", [](const std::string& p) { std::filesystem::remove(p + "/colwise_scale.npy"); });
  expect_clean_failure(
      d, [&] { dequantize_dir_to_npy(no_scale, y, ok); },
      "file not found: " + no_scale + "/colwise_scale.npy");
  const std::string wrong_shape = damaged("wrong_shape", [](const std::string& p) {
    std::vector<uint8_t> s(40 * 2, 127);
    write_npy(p + "/rowwise_scale.npy", npy_from_u8(s.data(), {2, 40}));
  });
  expect_clean_failure(
      d, [&] { dequantize_dir_to_npy(wrong_shape, y, ok); },
      "rowwise_scale.npy: shape (2, 40) does not match (40, 3)");
  const std::string wrong_dtype = damaged("wrong_dtype", [](const std::string& p) {
    std::vector<float> v(40 * 70, 0.0f);
    write_npy(p + "/rowwise.npy", npy_from_f32(v.data(), {40, 70}));
  });
  expect_clean_failure(
      d, [&] { dequantize_dir_to_npy(wrong_dtype, y, ok); }, "rowwise.npy: expected dtype uint8");
  const std::string bad_meta = damaged("bad_meta", [](const std::string& p) {
    write_file_atomic(p + "/meta.json", std::string("{\"format\": \"mxtrain-quantized\""));
  });
  expect_clean_failure(
      d, [&] { dequantize_dir_to_npy(bad_meta, y, ok); }, "not valid JSON");
  const std::string other_meta = damaged("other_meta", [](const std::string& p) {
    write_file_atomic(p + "/meta.json", std::string("{\"format\": \"something\"}"));
  });
  expect_clean_failure(
      d, [&] { dequantize_dir_to_npy(other_meta, y, ok); }, "not written by `mxtrain quantize`");
  EXPECT_FALSE(path_exists(y));
}

}  // namespace
}  // namespace mxtrain::io
