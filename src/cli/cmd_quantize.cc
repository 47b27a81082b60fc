// cli/cmd_quantize.cc — `mxtrain quantize` and `mxtrain dequantize`: quantize a float32 .npy
// matrix into a directory of .npy files (uint8 FP8 codes + E8M0 scale bytes for MX recipes,
// float32 scale_inv grids for blockwise, one float32 scale_inv for fp8-current) and back.
//
// Thin layer over io/quantize_files.h (which holds the logic and is what the tests call):
// parses options, turns --elem / --scale-rounding / --role into core enums (their parsers
// list the valid choices), prints one summary line. Errors become "error: ..." and exit code 1 in
// main.cc; the output is written atomically, so a failed command leaves nothing behind.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "mxtrain/common.h"
#include "mxtrain/io/npy.h"
#include "mxtrain/io/quantize_files.h"

namespace {

using namespace mxtrain;

struct QuantizeArgs {
  std::string input, recipe, rounding, elem, out_dir, role, nvfp4_order;
  std::optional<float> amax_epsilon;
  bool fp32_scales = false;
};
struct DequantizeArgs {
  std::string in_dir, recipe, elem, output;
};

int run_quantize(const QuantizeArgs& a) {
  io::QuantizeFilesOptions opt;
  opt.recipe = a.recipe;
  if (!a.elem.empty()) opt.elem = parse_elem(a.elem.c_str());
  if (!a.rounding.empty()) opt.rounding = parse_rounding(a.rounding.c_str());
  if (!a.role.empty()) opt.role = io::parse_quantize_role(a.role);
  opt.amax_epsilon = a.amax_epsilon;
  opt.fp32_scales = a.fp32_scales;
  if (!a.nvfp4_order.empty()) {
    MXT_CHECK(a.recipe == "nvfp4", "--nvfp4-order applies to recipe nvfp4, not '", a.recipe,
              "'");
    opt.nvfp4_order = parse_nvfp4_order(a.nvfp4_order);
  }
  io::QuantizeFilesResult r = io::quantize_npy_to_dir(a.input, a.out_dir, opt);
  std::cout << "quantized " << a.input << " " << io::shape_str({r.rows, r.cols}) << " with "
            << a.recipe << " (" << elem_name(r.cfg.elem);
  if (elem_is_4bit(r.cfg.elem))
    std::cout << ", " << role_name(r.role) << ", " << scale_type_name(r.scale) << " scales"
              << (r.scale == ScaleType::e8m0
                      ? std::string(", scale rounding ") + rounding_name(r.cfg.rounding)
                      : std::string(", ") + nvfp4_order_name(opt.nvfp4_order) + " order");
  else if (r.scale == ScaleType::e8m0)
    std::cout << ", scale rounding " << rounding_name(r.cfg.rounding);
  else
    std::cout << ", " << role_name(r.role) << ", " << scale_type_name(r.scale)
              << " scales, amax epsilon " << r.amax_epsilon;
  std::cout << ") -> " << a.out_dir << ":";
  for (const std::string& f : r.files) std::cout << " " << f;
  std::cout << "\n";
  return 0;
}

int run_dequantize(const DequantizeArgs& a) {
  io::DequantizeFilesOptions opt;
  opt.recipe = a.recipe;
  if (!a.elem.empty()) opt.elem = parse_elem(a.elem.c_str());
  io::DequantizeFilesResult r = io::dequantize_dir_to_npy(a.in_dir, a.output, opt);
  std::cout << "dequantized " << a.in_dir << "/" << r.source << " "
            << io::shape_str({r.rows, r.cols}) << " (" << elem_name(r.elem) << ") -> " << a.output
            << " (float32)\n";
  return 0;
}

}  // namespace

MXT_REGISTER_COMMAND("quantize", [](CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* sub = app.add_subcommand(
      "quantize",
      "Quantize a 2-D float32 .npy [M,K] into a directory of .npy files. mxfp8: "
      "rowwise.npy, rowwise_scale.npy [M,ceil(K/32)], colwise.npy, colwise_scale.npy "
      "[ceil(M/32),K]; mxfp8-32x32: data.npy, scale.npy [ceil(M/32),ceil(K/32)]; blockwise "
      "--role input: rowwise.npy, rowwise_scale_inv.npy [M,ceil(K/128)] float32, colwise.npy, "
      "colwise_scale_inv.npy [ceil(M/128),K]; --role weight: data.npy, scale_inv.npy "
      "[ceil(M/128),ceil(K/128)]; fp8-current (either role): data.npy, scale_inv.npy [1] "
      "float32 (one scale for the tensor); nvfp4 / mxfp4 (--role weight (default), input or "
      "grad): the role's copies with uint8 codes [M,ceil(K/2)] (two E2M1 codes per byte), "
      "uint8 E4M3 / E8M0 scale grids and (nvfp4) *tensor_scale.npy [1] float32; plus "
      "meta.json. bf16 has nothing to quantize and fp8-delayed needs an amax history (a "
      "training state): both are refused.");
  sub->add_option("--input", a->input, "Input .npy: 2-D little-endian float32 [M,K]")->required();
  sub->add_option("--recipe", a->recipe, "Recipe name: mxfp8, mxfp8-32x32, ...")->required();
  sub->add_option("--scale-rounding", a->rounding,
                  "Scale exponent rule: rceil (default) or floor (OCP MX v1.0)");
  sub->add_option("--elem", a->elem,
                  "Element format: e4m3 (default) or e5m2; e2m1 for the 4-bit recipes");
  sub->add_option("--role", a->role,
                  "blockwise: input (default; 1x128 rowwise + colwise copies) or weight "
                  "(128x128 tiles); fp8-current: input (default) or weight (one copy); nvfp4, "
                  "mxfp4: weight (default), input or grad");
  sub->add_option("--nvfp4-order", a->nvfp4_order,
                  "nvfp4: torchao (default) or te, the order of the two scale levels' "
                  "operations (docs/numerics.md)");
  sub->add_option("--amax-epsilon", a->amax_epsilon,
                  "blockwise, fp8-current: a block's (tensor's) amax below this counts as it "
                  "(finite, >= 0; default 0)");
  sub->add_flag("--fp32-scales", a->fp32_scales,
                "blockwise: keep FP32 scales as computed instead of truncating them to powers "
                "of two");
  sub->add_option("--out-dir", a->out_dir,
                  "Output directory (created; replaced if it holds an earlier quantize output)")
      ->required();
  sub->callback([a] { mxtrain::cli::exit_code() = run_quantize(*a); });
});

MXT_REGISTER_COMMAND("dequantize", [](CLI::App& app) {
  auto a = std::make_shared<DequantizeArgs>();
  CLI::App* sub = app.add_subcommand(
      "dequantize",
      "Turn a directory written by `mxtrain quantize` back into a float32 .npy [M,K] (from "
      "the rowwise copy for mxfp8 and blockwise inputs, the tile copy for mxfp8-32x32, "
      "blockwise weights and fp8-current).");
  sub->add_option("--in-dir", a->in_dir, "Directory written by `mxtrain quantize`")->required();
  sub->add_option("--recipe", a->recipe, "Recipe it was quantized with")->required();
  sub->add_option("--elem", a->elem, "Element format (checked against meta.json)");
  sub->add_option("--output", a->output, "Output .npy (float32 [M,K])")->required();
  sub->callback([a] { mxtrain::cli::exit_code() = run_dequantize(*a); });
});
