// Tests for io/json_input.h and the JSON readers that use it: deep nesting is refused with
// the file named instead of overflowing the stack, and values are described without
// serializing containers.
#include "mxtrain/io/json_input.h"

#include <sys/stat.h>

#include <fstream>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/checkpoint.h"
#include "mxtrain/io/quantize_files.h"
#include "mxtrain/io/safetensors.h"

namespace mxtrain::io {
namespace {

using testing::ScratchDir;

std::string nested(int depth, char open = '[', char close = ']') {
  return std::string(size_t(depth), open) + std::string(size_t(depth), close);
}

TEST(JsonInput, DepthLimitCountsBracketsOutsideStrings) {
  check_json_depth(nested(kMaxJsonDepth), "x.json");
  EXPECT_ERROR_CONTAINS(check_json_depth(nested(kMaxJsonDepth + 1), "x.json"),
                        "x.json: JSON nested deeper than 64 levels (at byte 64)");
  // Brackets inside strings (with escaped quotes) do not count.
  check_json_depth("{\"a\": \"[[[[[[\\\"[[[[\"}", "x.json", 2);
  EXPECT_ERROR_CONTAINS(check_json_depth("{\"a\": [{}]}", "x.json", 2), "deeper than 2 levels");
  // 100,000 levels: refused quickly, no recursion.
  EXPECT_ERROR_CONTAINS(check_json_depth(nested(100000, '{', '}'), "deep.json"), "deep.json");
}

TEST(JsonInput, SummaryNeverSerializesContainers) {
  using nlohmann::json;
  EXPECT_EQ(json_summary(json::parse("[1, [2, 3]]")), "array of 2 elements");
  EXPECT_EQ(json_summary(json::parse("{\"a\": {}}")), "object with 1 keys");
  EXPECT_EQ(json_summary(json(7)), "7");
  EXPECT_EQ(json_summary(json(std::string(50, 'z'))), "\"" + std::string(37, 'z') + "...\"");
}

TEST(JsonInput, DeepMetaJsonIsRefusedByDequantize) {
  ScratchDir d;
  ASSERT_EQ(::mkdir((d / "q").c_str(), 0755), 0);
  write_file_atomic(d / "q/meta.json", "{\"format\": " + nested(100000) + "}");
  DequantizeFilesOptions opt;
  opt.recipe = "mxfp8";
  EXPECT_ERROR_CONTAINS(dequantize_dir_to_npy(d / "q", d / "y.npy", opt),
                        (d / "q/meta.json") + ": JSON nested deeper than 64 levels");
  EXPECT_FALSE(path_exists(d / "y.npy"));
}

TEST(JsonInput, DeepSafetensorsHeaderIsRefused) {
  std::string header = "{\"__metadata__\": " + nested(5000, '{', '}') + "}";
  std::vector<uint8_t> bytes(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = uint8_t(n >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  EXPECT_ERROR_CONTAINS(safetensors_decode(bytes.data(), bytes.size(), "m.safetensors"),
                        "m.safetensors: safetensors header: JSON nested deeper than 64 levels");
}

TEST(JsonInput, DeepCheckpointStateIsRefused) {
  ScratchDir d;
  ASSERT_EQ(::mkdir((d / "step_1").c_str(), 0755), 0);
  write_file_atomic(d / "step_1/state.json", "{\"x\": " + nested(100000) + "}");
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "step_1"),
                        (d / "step_1/state.json") + ": JSON nested deeper than 64 levels");
}

}  // namespace
}  // namespace mxtrain::io
