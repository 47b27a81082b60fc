// tests/io/checkpoint_test.cc — checkpoints round-trip bit-exactly, `latest` and pruning
// behave, and every damaged checkpoint (truncated, bit-flipped, missing file, bad
// `latest`, edited state.json) is an error naming the file instead of a crash or a
// silent fresh start.
#include "mxtrain/io/checkpoint.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/safetensors.h"

namespace mxtrain::io {
namespace {

using testing::list_dir;
using testing::ScratchDir;

NamedTensor make(const std::string& name, std::vector<int64_t> shape, float seed) {
  NamedTensor t{name, std::move(shape), {}};
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  t.data.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) t.data[size_t(i)] = seed + 0.001f * float(i) - 3.0f;
  return t;
}

struct Fixture {
  std::vector<NamedTensor> model, optim;
  nlohmann::json state;
  CheckpointOptions opt;
  Fixture() {
    model = {make("embed.weight", {33, 31}, 1), make("layers.0.attn.qkv.weight", {96, 32}, 2),
             make("layers.0.norm.gain", {1}, 3), make("scalar", {}, 4), make("empty", {0, 5}, 5)};
    // Values whose bits must survive: -0, NaN payload, a denormal, the largest float.
    model[0].data[0] = -0.0f;
    model[0].data[1] = std::numeric_limits<float>::quiet_NaN();
    model[0].data[2] = std::numeric_limits<float>::denorm_min();
    model[0].data[3] = std::numeric_limits<float>::max();
    for (const auto& p : model) {
      NamedTensor m = make(exp_avg_name(p.name), p.shape, 10);
      NamedTensor v = make(exp_avg_sq_name(p.name), p.shape, 20);
      optim.push_back(m);
      optim.push_back(v);
    }
    state = {{"data_position", 123456},
             {"rng", {{"seed", 42}, {"counter", 7}}},
             {"loss_scale", 0.1},
             {"note", "ünïcode"}};
    opt.config_text = "model: tiny\nlr: 3e-4\n";
  }
};

void expect_same(const std::vector<NamedTensor>& want, const std::vector<NamedTensor>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (const auto& w : want) {
    const NamedTensor* g = nullptr;
    for (const auto& t : got)
      if (t.name == w.name) g = &t;
    ASSERT_NE(g, nullptr) << w.name;
    EXPECT_EQ(g->shape, w.shape) << w.name;
    ASSERT_EQ(g->data.size(), w.data.size()) << w.name;
    if (!w.data.empty()) {
      EXPECT_EQ(std::memcmp(g->data.data(), w.data.data(), w.data.size() * 4), 0) << w.name;
    }
  }
}

void flip_byte(const std::string& path, size_t offset) {
  std::vector<uint8_t> b = read_file(path);
  ASSERT_LT(offset, b.size());
  b[offset] ^= 0x10;
  write_file_atomic(path, b);
}

void truncate_to(const std::string& path, size_t size) {
  std::vector<uint8_t> b = read_file(path);
  b.resize(size);
  write_file_atomic(path, b);
}

TEST(Checkpoint, RoundTripIsBitExact) {
  ScratchDir d;
  Fixture f;
  const std::string dir = save_checkpoint(d / "ck", 100, f.model, f.optim, f.state, f.opt);
  EXPECT_EQ(dir, d / "ck/step_100");
  EXPECT_EQ(list_dir(d / "ck"), (std::vector<std::string>{"latest", "step_100"}));
  EXPECT_EQ(list_dir(dir),
            (std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"}));
  EXPECT_EQ(read_text_file(d / "ck/latest"), "step_100\n");
  for (const std::string& path : {d / "ck", dir}) {  // root follows latest; step dir direct
    LoadedCheckpoint ck = load_checkpoint(path);
    EXPECT_EQ(ck.dir, dir);
    EXPECT_EQ(ck.step, 100);
    EXPECT_EQ(ck.format_version, kCheckpointFormatVersion);
    expect_same(f.model, ck.model);
    expect_same(f.optim, ck.optimizer);
    EXPECT_EQ(ck.trainer_state, f.state);
    EXPECT_EQ(ck.config_text, f.opt.config_text);
    EXPECT_EQ(ck.config_hash, config_hash(f.opt.config_text));
    EXPECT_EQ(ck.model_tensor("scalar").data, std::vector<float>{f.model[3].data[0]});
    EXPECT_EQ(ck.optimizer_tensor("embed.weight.exp_avg_sq").shape, (std::vector<int64_t>{33, 31}));
    EXPECT_EQ(ck.find_model("nope"), nullptr);
    EXPECT_ERROR_CONTAINS(ck.model_tensor("nope"), "has no model tensor 'nope'");
    EXPECT_ERROR_CONTAINS(ck.optimizer_tensor("nope"), "has no optimizer tensor 'nope'");
  }
  // The weights file is a plain safetensors file other tools can read.
  Safetensors st = read_safetensors(dir + "/model.safetensors");
  ASSERT_NE(st.find("embed.weight"), nullptr);
  EXPECT_EQ(st.find("embed.weight")->dtype, "F32");
  EXPECT_EQ(st.metadata.at("step"), "100");
}

TEST(Checkpoint, ConfigHashIsCrc32OfText) {
  EXPECT_EQ(config_hash("123456789"), "crc32:cbf43926");
  EXPECT_EQ(config_hash(""), "crc32:00000000");
}

TEST(Checkpoint, KeepLastPrunesOldestButNeverTheNewOne) {
  ScratchDir d;
  Fixture f;
  f.opt.keep_last = 2;
  for (int64_t s = 1; s <= 5; ++s)
    save_checkpoint(d / "ck", s * 10, f.model, f.optim, f.state, f.opt);
  EXPECT_EQ(list_checkpoint_steps(d / "ck"), (std::vector<int64_t>{40, 50}));
  EXPECT_EQ(load_checkpoint(d / "ck").step, 50);
  // Saving an older step (training resumed from an earlier checkpoint) keeps that one.
  save_checkpoint(d / "ck", 20, f.model, f.optim, f.state, f.opt);
  EXPECT_EQ(list_checkpoint_steps(d / "ck"), (std::vector<int64_t>{20, 50}));
  EXPECT_EQ(load_checkpoint(d / "ck").step, 20);
  f.opt.keep_last = 0;  // keep everything
  save_checkpoint(d / "ck", 60, f.model, f.optim, f.state, f.opt);
  save_checkpoint(d / "ck", 70, f.model, f.optim, f.state, f.opt);
  EXPECT_EQ(list_checkpoint_steps(d / "ck"), (std::vector<int64_t>{20, 50, 60, 70}));
  EXPECT_TRUE(has_checkpoint(d / "ck"));
  EXPECT_FALSE(has_checkpoint(d / "other"));
  EXPECT_TRUE(list_checkpoint_steps(d / "other").empty());
}

TEST(Checkpoint, ResavingAStepReplacesIt) {
  ScratchDir d;
  Fixture f;
  save_checkpoint(d / "ck", 5, f.model, f.optim, f.state, f.opt);
  f.model[0].data[10] = 99.0f;
  f.state["data_position"] = 7;
  save_checkpoint(d / "ck", 5, f.model, f.optim, f.state, f.opt);
  LoadedCheckpoint ck = load_checkpoint(d / "ck");
  EXPECT_EQ(ck.model_tensor("embed.weight").data[10], 99.0f);
  EXPECT_EQ(ck.trainer_state["data_position"], 7);
  EXPECT_EQ(list_dir(d / "ck"), (std::vector<std::string>{"latest", "step_5"}));
}

TEST(Checkpoint, TruncatedDataFileIsNamed) {
  ScratchDir d;
  Fixture f;
  const std::string dir = save_checkpoint(d / "ck", 1, f.model, f.optim, f.state, f.opt);
  const std::string file = dir + "/model.safetensors";
  const size_t size = read_file(file).size();
  for (size_t cut : {size_t(0), size_t(5), size_t(100), size / 2, size - 1}) {
    ScratchDir d2;
    std::filesystem::copy(d / "ck", d2 / "ck", std::filesystem::copy_options::recursive);
    truncate_to(d2 / "ck/step_1/model.safetensors", cut);
    EXPECT_ERROR_CONTAINS(load_checkpoint(d2 / "ck"),
                          d2 / "ck/step_1/model.safetensors: " + std::to_string(cut) +
                              " bytes, but state.json records " + std::to_string(size) +
                              " (truncated or incomplete checkpoint)");
  }
}

TEST(Checkpoint, FlippedBytesAreChecksumErrors) {
  ScratchDir d;
  Fixture f;
  const std::string dir = save_checkpoint(d / "ck", 1, f.model, f.optim, f.state, f.opt);
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    const size_t size = read_file(dir + "/" + name).size();
    for (size_t at : {size_t(3), size_t(20), size - 1}) {  // length field, header, data
      ScratchDir d2;
      std::filesystem::copy(d / "ck", d2 / "ck", std::filesystem::copy_options::recursive);
      flip_byte(d2 / "ck/step_1/" + name, at);
      EXPECT_ERROR_CONTAINS(load_checkpoint(d2 / "ck"),
                            d2 / "ck/step_1/" + name + ": checksum mismatch");
    }
  }
}

TEST(Checkpoint, EditedOrDamagedStateJson) {
  ScratchDir d;
  Fixture f;
  save_checkpoint(d / "ck", 12, f.model, f.optim, f.state, f.opt);
  const std::string state = d / "ck/step_12/state.json";
  const std::string text = read_text_file(state);
  // A changed value that still parses: the state's own checksum catches it.
  std::string edited = text;
  const size_t pos = edited.find("123456");
  ASSERT_NE(pos, std::string::npos);
  edited[pos] = '9';
  write_file_atomic(state, edited);
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "ck"), state + ": checksum mismatch");
  // Truncated: not JSON any more.
  write_file_atomic(state, text.substr(0, text.size() / 2));
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "ck"), state + ": not valid JSON");
  // Some other JSON file.
  write_file_atomic(state, std::string("{\"step\": 12}"));
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "ck"), "not an mxtrain checkpoint state file");
  // Missing.
  std::filesystem::remove(state);
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "ck"),
                        state + ": file not found (incomplete checkpoint)");
  // The original text still loads: whitespace is not part of the checksum.
  write_file_atomic(state, text);
  EXPECT_EQ(load_checkpoint(d / "ck").step, 12);
}

TEST(Checkpoint, MissingDataFileIsIncomplete) {
  ScratchDir d;
  Fixture f;
  save_checkpoint(d / "ck", 3, f.model, f.optim, f.state, f.opt);
  std::filesystem::remove(d / "ck/step_3/optimizer.safetensors");
  EXPECT_ERROR_CONTAINS(
      load_checkpoint(d / "ck"),
      d / "ck/step_3/optimizer.safetensors: file not found (incomplete checkpoint)");
}

TEST(Checkpoint, StepDirectoryMustMatchRecordedStep) {
  ScratchDir d;
  Fixture f;
  save_checkpoint(d / "ck", 3, f.model, f.optim, f.state, f.opt);
  std::filesystem::rename(d / "ck/step_3", d / "ck/step_4");
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "ck/step_4"),
                        "records step 3 but the directory is step_4");
}

TEST(Checkpoint, BadLatestPointer) {
  ScratchDir d;
  Fixture f;
  save_checkpoint(d / "ck", 8, f.model, f.optim, f.state, f.opt);
  const std::string latest = d / "ck/latest";
  write_file_atomic(latest, std::string("garbage\n"));
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "ck"),
                        latest + " is corrupted: expected 'step_<N>', found 'garbage'");
  write_file_atomic(latest, std::string("../../etc"));
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "ck"), "is corrupted");
  write_file_atomic(latest, std::string("step_9\n"));
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "ck"),
                        latest + " points to step_9, which does not exist");
  write_file_atomic(latest, std::string(""));
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "ck"), "is corrupted");
  // No latest at all, but step directories: refuse rather than guess or start fresh.
  std::filesystem::remove(latest);
  EXPECT_ERROR_CONTAINS(
      load_checkpoint(d / "ck"),
      "no 'latest' file in " + (d / "ck") + " (found 1 step directories, newest step_8)");
  EXPECT_EQ(load_checkpoint(d / "ck/step_8").step, 8);
}

TEST(Checkpoint, NothingToLoad) {
  ScratchDir d;
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "missing"), "checkpoint not found: " + (d / "missing"));
  EXPECT_ERROR_CONTAINS(load_checkpoint(d.path()), "no checkpoint in " + d.path());
  write_file_atomic(d / "file", std::string("x"));
  EXPECT_ERROR_CONTAINS(load_checkpoint(d / "file"), "is not a directory");
}

TEST(Checkpoint, StaleTemporaryDirectoriesAreIgnored) {
  // What a crash in the middle of a save leaves: a hidden temporary step directory.
  ScratchDir d;
  Fixture f;
  save_checkpoint(d / "ck", 1, f.model, f.optim, f.state, f.opt);
  std::filesystem::create_directories(d / "ck/.step_2.tmp-999-0");
  write_file_atomic(d / "ck/.step_2.tmp-999-0/model.safetensors", std::string("partial"));
  EXPECT_EQ(list_checkpoint_steps(d / "ck"), std::vector<int64_t>{1});
  EXPECT_EQ(load_checkpoint(d / "ck").step, 1);
}

TEST(Checkpoint, BadSaveArgumentsLeaveNothingBehind) {
  ScratchDir d;
  Fixture f;
  save_checkpoint(d / "ck", 1, f.model, f.optim, f.state, f.opt);
  const auto before = list_dir(d / "ck");
  std::vector<NamedTensor> dup = {f.model[0], f.model[0]};
  EXPECT_ERROR_CONTAINS(save_checkpoint(d / "ck", 2, dup, f.optim, f.state, f.opt),
                        "duplicate model tensor name 'embed.weight'");
  std::vector<NamedTensor> wrong = {f.model[0]};
  wrong[0].data.pop_back();
  EXPECT_ERROR_CONTAINS(save_checkpoint(d / "ck", 2, wrong, f.optim, f.state, f.opt),
                        "has 1022 values but shape (33, 31)");
  std::vector<TensorRef> null_data = {{"w", {2, 2}, nullptr}};
  EXPECT_ERROR_CONTAINS(save_checkpoint(d / "ck", 2, null_data, {}, f.state, f.opt),
                        "tensor 'w' has no data");
  EXPECT_ERROR_CONTAINS(save_checkpoint(d / "ck", -1, f.model, f.optim, f.state, f.opt),
                        "step must be >= 0");
  EXPECT_EQ(list_dir(d / "ck"), before);
  EXPECT_EQ(load_checkpoint(d / "ck").step, 1);
  write_file_atomic(d / "afile", std::string("x"));
  EXPECT_ERROR_CONTAINS(save_checkpoint(d / "afile", 1, f.model, f.optim, f.state, f.opt),
                        "cannot create checkpoint directory");
}

}  // namespace
}  // namespace mxtrain::io
