// io/checkpoint.cc — checkpoint save/load (see mxtrain/io/checkpoint.h).
//
// Saving: serialize both safetensors files (views, no tensor copies), CRC them while
// writing into an AtomicDir, write state.json with the sizes and CRCs plus its own CRC,
// commit, point `latest` at the new step, prune. Loading: resolve `latest`, verify
// state.json's own CRC, then each file's size and CRC before decoding it.
#include "mxtrain/io/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <set>

#include "mxtrain/common.h"
#include "mxtrain/io/json_input.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/checksum.h"
#include "mxtrain/io/npy.h"
#include "mxtrain/io/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mxtrain::io {
namespace {

constexpr const char* kFormat = "mxtrain-checkpoint";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr const char* kLatestFile = "latest";

std::string step_dir_name(int64_t step) { return "step_" + std::to_string(step); }

// "step_<digits>" -> N, else -1.
int64_t parse_step_name(const std::string& name) {
  if (name.size() <= 5 || name.size() > 5 + 18 || name.compare(0, 5, "step_") != 0) return -1;
  int64_t v = -1;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size();
  auto r = std::from_chars(b, e, v);
  if (r.ec != std::errc() || r.ptr != e || *b == '+' || *b == '-') return -1;
  return v;
}

// The JSON text CRCs are computed over: compact, sorted keys, invalid UTF-8 replaced.
std::string canonical(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<StTensorView> to_views(const std::vector<TensorRef>& tensors, const char* role) {
  std::set<std::string> names;
  std::vector<StTensorView> views;
  for (const auto& t : tensors) {
    MXT_CHECK(!t.name.empty(), "checkpoint: a ", role, " tensor has an empty name");
    MXT_CHECK(names.insert(t.name).second, "checkpoint: duplicate ", role, " tensor name '", t.name,
              "'");
    int64_t n = 1;
    for (int64_t d : t.shape) {
      MXT_CHECK(d >= 0, "checkpoint: ", role, " tensor '", t.name,
                "' has a negative dimension in shape ", shape_str(t.shape));
      n *= d;
    }
    MXT_CHECK(n == 0 || t.data != nullptr, "checkpoint: ", role, " tensor '", t.name,
              "' has no data");
    views.push_back({t.name, "F32", t.shape, f32_span(t.data, size_t(n))});
  }
  return views;
}

std::vector<TensorRef> refs_of(const std::vector<NamedTensor>& tensors) {
  std::vector<TensorRef> refs;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    MXT_CHECK(n >= 0 && size_t(n) == t.data.size(), "checkpoint: tensor '", t.name, "' has ",
              t.data.size(), " values but shape ", shape_str(t.shape));
    refs.push_back(t.ref());
  }
  return refs;
}

uint32_t crc_of(const StSerialized& s) {
  uint32_t c = 0;
  for (const auto& p : s.parts) c = crc32_update(c, p.data(), p.size());
  return c;
}

void prune(const std::string& root, int64_t current, int keep_last) {
  if (keep_last <= 0) return;
  std::vector<int64_t> others;
  for (int64_t s : list_checkpoint_steps(root))
    if (s != current) others.push_back(s);
  std::sort(others.rbegin(), others.rend());
  for (size_t i = size_t(keep_last - 1); i < others.size(); ++i)
    remove_tree_noexcept(root + "/" + step_dir_name(others[i]));
}

bool plain_file_name(const std::string& n) {
  return !n.empty() && n.size() <= 128 && n[0] != '.' && n.find('/') == std::string::npos &&
         n.find('\\') == std::string::npos;
}

// Reads one file of the step directory and checks its size and CRC against state.json.
std::vector<uint8_t> read_recorded_file(const std::string& dir, const std::string& name,
                                        const json& files) {
  const std::string path = dir + "/" + name;
  MXT_CHECK(files.contains(name) && files[name].is_object() && files[name].contains("bytes") &&
                files[name].contains("crc32"),
            dir, "/", kStateFile, ": no size/checksum recorded for ", name,
            " (corrupted or foreign checkpoint)");
  const uint64_t want_bytes = files[name]["bytes"].get<uint64_t>();
  const std::string want_crc = files[name]["crc32"].get<std::string>();
  MXT_CHECK(path_exists(path), path, ": file not found (incomplete checkpoint)");
  std::vector<uint8_t> bytes = read_file(path);
  MXT_CHECK(bytes.size() == want_bytes, path, ": ", bytes.size(), " bytes, but ", kStateFile,
            " records ", want_bytes, " (truncated or incomplete checkpoint)");
  const std::string crc = crc32_hex(crc32(bytes.data(), bytes.size()));
  MXT_CHECK(crc == want_crc, path, ": checksum mismatch (crc32 ", crc, ", ", kStateFile,
            " records ", want_crc, "); the file is corrupted");
  return bytes;
}

// Reads one data file, checks size and CRC against state.json, decodes it to FP32 tensors.
std::vector<NamedTensor> load_tensor_file(const std::string& dir, const std::string& name,
                                          const json& files) {
  const std::string path = dir + "/" + name;
  std::vector<uint8_t> bytes = read_recorded_file(dir, name, files);
  Safetensors st = safetensors_decode(bytes.data(), bytes.size(), path);
  std::vector<NamedTensor> out;
  out.reserve(st.tensors.size());
  for (auto& t : st.tensors) {
    MXT_CHECK(t.dtype == "F32", path, ": tensor '", t.name, "' has dtype ", t.dtype,
              ", expected F32");
    NamedTensor n;
    n.name = t.name;
    n.shape = t.shape;
    n.data.resize(t.data.size() / 4);
    if (!t.data.empty()) std::memcpy(n.data.data(), t.data.data(), t.data.size());
    out.push_back(std::move(n));
  }
  return out;
}

const NamedTensor* find_in(const std::vector<NamedTensor>& v, const std::string& name) {
  for (const auto& t : v)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace

std::string config_hash(const std::string& config_text) {
  return "crc32:" + crc32_hex(crc32(config_text.data(), config_text.size()));
}

// ---- save -------------------------------------------------------------------------------------

std::string save_checkpoint(const std::string& root, int64_t step,
                            const std::vector<TensorRef>& model,
                            const std::vector<TensorRef>& optimizer, const json& trainer_state,
                            const CheckpointOptions& opt) {
  MXT_CHECK(step >= 0, "checkpoint: step must be >= 0, got ", step);
  MXT_CHECK(!root.empty(), "checkpoint: the checkpoint directory path is empty");
  std::error_code ec;
  fs::create_directories(root, ec);
  MXT_CHECK(!ec && is_directory(root), "cannot create checkpoint directory ", root, ": ",
            ec ? ec.message() : "a file with that name exists");

  const std::map<std::string, std::string> meta = {{"producer", "mxtrain"},
                                                   {"step", std::to_string(step)}};
  StSerialized ms = safetensors_serialize(to_views(model, "model"), meta);
  StSerialized os = safetensors_serialize(to_views(optimizer, "optimizer"), meta);

  json state = json::object();
  state["format"] = kFormat;
  state["format_version"] = kCheckpointFormatVersion;
  state["step"] = step;
  state["trainer_state"] = trainer_state;
  state["config"] = opt.config_text;
  state["config_hash"] = config_hash(opt.config_text);
  state["files"][kModelFile] = {{"bytes", ms.total_size}, {"crc32", crc32_hex(crc_of(ms))}};
  state["files"][kOptimizerFile] = {{"bytes", os.total_size}, {"crc32", crc32_hex(crc_of(os))}};
  for (const auto& [name, text] : opt.extra_files) {
    MXT_CHECK(plain_file_name(name) && name != kModelFile && name != kOptimizerFile &&
                  name != kStateFile,
              "checkpoint: extra file name '", name, "' is not a plain, unused file name");
    state["files"][name] = {{"bytes", text.size()},
                            {"crc32", crc32_hex(crc32(text.data(), text.size()))}};
  }
  const std::string body = canonical(state);
  state["state_crc32"] = crc32_hex(crc32(body.data(), body.size()));
  const std::string text = state.dump(2, ' ', false, json::error_handler_t::replace) + "\n";

  const std::string name = step_dir_name(step);
  AtomicDir out(root + "/" + name);
  out.write(kModelFile, ms.parts);
  out.write(kOptimizerFile, os.parts);
  for (const auto& [name, bytes] : opt.extra_files) out.write(name, bytes);
  out.write(kStateFile, text);
  out.commit();
  write_file_atomic(root + "/" + kLatestFile, name + "\n");
  prune(root, step, opt.keep_last);
  return out.target();
}

std::string save_checkpoint(const std::string& root, int64_t step,
                            const std::vector<NamedTensor>& model,
                            const std::vector<NamedTensor>& optimizer, const json& trainer_state,
                            const CheckpointOptions& opt) {
  return save_checkpoint(root, step, refs_of(model), refs_of(optimizer), trainer_state, opt);
}

// ---- find / list ------------------------------------------------------------------------------

std::vector<int64_t> list_checkpoint_steps(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    int64_t s = parse_step_name(e.path().filename().string());
    if (s >= 0 && e.is_directory()) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

bool has_checkpoint(const std::string& root) { return path_exists(root + "/" + kLatestFile); }

int64_t latest_checkpoint_step(const std::string& root) {
  struct stat st {};
  const std::string latest_file = root + "/" + kLatestFile;
  if (::stat(latest_file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  std::string name;
  try {
    name = read_text_file(latest_file);
  } catch (const Error&) {
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' '))
    name.pop_back();
  const std::vector<int64_t> steps = list_checkpoint_steps(root);
  return std::max<int64_t>({parse_step_name(name), steps.empty() ? 0 : steps.back(), 0});
}

std::vector<std::string> remove_checkpoints(const std::string& root) {
  std::vector<std::string> gone;
  const std::string latest = root + "/" + kLatestFile;
  if (path_exists(latest)) {  // first: no moment where `latest` names a half-removed step
    MXT_CHECK(::unlink(latest.c_str()) == 0, "cannot remove ", latest, ": ",
              std::strerror(errno));
    fsync_dir(root);
    gone.push_back(kLatestFile);
  }
  for (int64_t s : list_checkpoint_steps(root)) {
    const std::string name = step_dir_name(s);
    MXT_CHECK(remove_tree_noexcept(root + "/" + name), "cannot remove ", root, "/", name);
    gone.push_back(name);
  }
  return gone;
}

std::string resolve_checkpoint_dir(const std::string& path) {
  MXT_CHECK(path_exists(path), "checkpoint not found: ", path);
  MXT_CHECK(is_directory(path), "checkpoint path ", path, " is not a directory");
  const std::string latest = path + "/" + kLatestFile;
  if (path_exists(latest)) {
    std::string name = read_text_file(latest);
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' '))
      name.pop_back();
    MXT_CHECK(parse_step_name(name) >= 0, latest, " is corrupted: expected 'step_<N>', found '",
              name.substr(0, 64), "'");
    const std::string dir = path + "/" + name;
    MXT_CHECK(is_directory(dir), latest, " points to ", name,
              ", which does not exist (incomplete or partly deleted checkpoint)");
    return dir;
  }
  if (path_exists(path + "/" + kStateFile)) return path;
  const std::string base = fs::path(path).lexically_normal().filename().string();
  if (parse_step_name(base) >= 0) return path;  // a step directory missing state.json
  std::vector<int64_t> steps = list_checkpoint_steps(path);
  MXT_CHECK(steps.empty(), "no '", kLatestFile, "' file in ", path, " (found ", steps.size(),
            " step directories, newest ", step_dir_name(steps.back()),
            "); pass a step directory such as ", path, "/", step_dir_name(steps.back()),
            " to load one explicitly");
  MXT_FAIL("no checkpoint in ", path, ": expected a '", kLatestFile,
           "' file or a step directory holding ", kStateFile);
}

// ---- load -------------------------------------------------------------------------------------

LoadedCheckpoint load_checkpoint(const std::string& path, bool read_optimizer) {
  LoadedCheckpoint ck;
  ck.dir = resolve_checkpoint_dir(path);
  const std::string state_path = ck.dir + "/" + kStateFile;
  MXT_CHECK(path_exists(state_path), state_path, ": file not found (incomplete checkpoint)");
  const std::string text = read_text_file(state_path);
  // Depth is bounded before parsing, so the canonical re-serialization for the checksum
  // below cannot recurse deeply.
  check_json_depth(text, state_path);
  json state;
  try {
    state = json::parse(text);
  } catch (const json::exception& e) {
    MXT_FAIL(state_path, ": not valid JSON (the file is corrupted or truncated): ", e.what());
  }
  try {
    MXT_CHECK(state.is_object() && state.value("format", "") == kFormat, state_path,
              ": not an mxtrain checkpoint state file");
    MXT_CHECK(state.contains("state_crc32") && state["state_crc32"].is_string(), state_path,
              ": has no state_crc32 (corrupted checkpoint)");
    const std::string want = state["state_crc32"].get<std::string>();
    state.erase("state_crc32");
    const std::string body = canonical(state);
    const std::string got = crc32_hex(crc32(body.data(), body.size()));
    MXT_CHECK(got == want, state_path, ": checksum mismatch (crc32 ", got, ", recorded ", want,
              "); the file is corrupted");
    ck.format_version = state.at("format_version").get<int>();
    MXT_CHECK(ck.format_version >= 1 && ck.format_version <= kCheckpointFormatVersion, state_path,
              ": checkpoint format version ", ck.format_version,
              " is not supported (this build reads versions 1..", kCheckpointFormatVersion, ")");
    ck.step = state.at("step").get<int64_t>();
    const int64_t dir_step =
        parse_step_name(fs::path(ck.dir).lexically_normal().filename().string());
    MXT_CHECK(dir_step < 0 || dir_step == ck.step, state_path, ": records step ", ck.step,
              " but the directory is ", step_dir_name(dir_step));
    ck.trainer_state = state.at("trainer_state");
    ck.config_text = state.at("config").get<std::string>();
    ck.config_hash = state.at("config_hash").get<std::string>();
    const json& files = state.at("files");
    ck.model = load_tensor_file(ck.dir, kModelFile, files);
    if (read_optimizer) ck.optimizer = load_tensor_file(ck.dir, kOptimizerFile, files);
    MXT_CHECK(files.is_object(), state_path, ": `files` is not an object");
    for (const auto& [name, v] : files.items()) {
      if (name == kModelFile || name == kOptimizerFile) continue;
      MXT_CHECK(plain_file_name(name) && name != kStateFile, state_path, ": file name '",
                name.substr(0, 64), "' is not a plain file name");
      const std::vector<uint8_t> b = read_recorded_file(ck.dir, name, files);
      ck.extra_files[name] = std::string(b.begin(), b.end());
    }
  } catch (const json::exception& e) {
    MXT_FAIL(state_path, ": malformed checkpoint state: ", e.what());
  }
  return ck;
}

const NamedTensor* LoadedCheckpoint::find_model(const std::string& name) const {
  return find_in(model, name);
}
const NamedTensor* LoadedCheckpoint::find_optimizer(const std::string& name) const {
  return find_in(optimizer, name);
}
const NamedTensor& LoadedCheckpoint::model_tensor(const std::string& name) const {
  const NamedTensor* t = find_model(name);
  MXT_CHECK(t, "checkpoint ", dir, " has no model tensor '", name, "'");
  return *t;
}
const NamedTensor& LoadedCheckpoint::optimizer_tensor(const std::string& name) const {
  const NamedTensor* t = find_optimizer(name);
  MXT_CHECK(t, "checkpoint ", dir, " has no optimizer tensor '", name, "'");
  return *t;
}

}  // namespace mxtrain::io
