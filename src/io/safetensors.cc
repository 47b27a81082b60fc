// io/safetensors.cc — safetensors serialize/validate (see mxtrain/io/safetensors.h).
//
// The header JSON goes through nlohmann::json; duplicate keys (which JSON parsers would
// silently merge) are caught with a parser callback. Validation follows the official
// reader: every tensor's byte range lies inside the data section, matches dtype x shape,
// ranges do not overlap and together cover the data section with no gap or trailing bytes.
#include "mxtrain/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "mxtrain/common.h"
#include "mxtrain/io/json_input.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/npy.h"

namespace mxtrain::io {
namespace {

using json = nlohmann::ordered_json;

struct StDtype {
  const char* name;
  size_t size;
};
constexpr StDtype kStDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
    {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},     {"I32", 4},
    {"F32", 4},  {"U64", 8}, {"I64", 8}, {"F64", 8},
};
constexpr const char* kStDtypeList =
    "BOOL U8 I8 F8_E4M3 F8_E5M2 F8_E8M0 U16 I16 F16 BF16 U32 I32 F32 U64 I64 F64";
constexpr uint64_t kMaxHeader = 100'000'000;  // the official reader's limit
constexpr const char* kMetadataKey = "__metadata__";

const StDtype* find_st_dtype(const std::string& name) {
  for (const auto& d : kStDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// numel * item, or UINT64_MAX when it does not fit.
uint64_t byte_size(const std::vector<int64_t>& shape, size_t item) {
  unsigned __int128 n = item;
  for (int64_t d : shape) {
    n *= uint64_t(d);
    if (n > UINT64_MAX) {
      for (int64_t z : shape)
        if (z == 0) return 0;
      return UINT64_MAX;
    }
  }
  return uint64_t(n);
}

}  // namespace

size_t st_dtype_size(const std::string& dtype) {
  const StDtype* d = find_st_dtype(dtype);
  MXT_CHECK(d, "unsupported safetensors dtype '", dtype, "'; supported: ", kStDtypeList);
  return d->size;
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const StTensor* Safetensors::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// ---- write ----------------------------------------------------------------------------------

StSerialized safetensors_serialize(const std::vector<StTensorView>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    MXT_CHECK(!t.name.empty(), "safetensors: tensor name is empty");
    MXT_CHECK(t.name != kMetadataKey, "safetensors: '", kMetadataKey,
              "' is reserved and cannot name a tensor");
    MXT_CHECK(names.insert(t.name).second, "safetensors: duplicate tensor name '", t.name, "'");
    for (int64_t d : t.shape)
      MXT_CHECK(d >= 0, "safetensors: tensor '", t.name, "' has a negative dimension in shape ",
                shape_str(t.shape));
    const uint64_t want = byte_size(t.shape, st_dtype_size(t.dtype));
    MXT_CHECK(t.data.size() == want, "safetensors: tensor '", t.name, "' has ", t.data.size(),
              " bytes but shape ", shape_str(t.shape), " of ", t.dtype, " needs ", want);
  }
  // Largest item size first, then by name: every tensor starts at a multiple of its item
  // size (the header length is a multiple of 8), as the official writer arranges it.
  std::vector<const StTensorView*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const StTensorView* a, const StTensorView* b) {
    size_t sa = st_dtype_size(a->dtype), sb = st_dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header[kMetadataKey] = m;
  }
  uint64_t offset = 0;
  for (const StTensorView* t : order) {
    json info = json::object();
    info["dtype"] = t->dtype;
    info["shape"] = t->shape;
    info["data_offsets"] = {offset, offset + t->data.size()};
    header[t->name] = info;
    offset += t->data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  StSerialized out;
  out.header.resize(8 + text.size());
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.header[i] = uint8_t(n >> (8 * i));
  std::memcpy(out.header.data() + 8, text.data(), text.size());
  out.parts.push_back(out.header);
  for (const StTensorView* t : order)
    if (!t->data.empty()) out.parts.push_back(t->data);
  out.total_size = out.header.size() + offset;
  return out;
}

std::vector<uint8_t> safetensors_encode(const std::vector<StTensorView>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  StSerialized s = safetensors_serialize(tensors, metadata);
  std::vector<uint8_t> out;
  out.reserve(s.total_size);
  for (const auto& p : s.parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<StTensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  StSerialized s = safetensors_serialize(tensors, metadata);
  write_file_atomic(path, s.parts);
}

// ---- read -------------------------------------------------------------------------------------

Safetensors safetensors_decode(const uint8_t* bytes, size_t size, const std::string& what) {
  MXT_CHECK(size >= 8, what, ": truncated safetensors file (", size,
            " bytes; the 8-byte header length is missing)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  MXT_CHECK(n <= size - 8, what, ": truncated or not a safetensors file: header length ", n,
            " goes beyond the end of the ", size, "-byte file");
  MXT_CHECK(n <= kMaxHeader, what, ": safetensors header of ", n, " bytes is too large");

  // Parse, rejecting duplicate keys at any level (a tensor named twice).
  const json header = parse_json_strict(
      std::string_view(reinterpret_cast<const char*>(bytes) + 8, size_t(n)),
      what + ": safetensors header");
  MXT_CHECK(header.is_object(), what, ": not a safetensors file (the header is not a JSON object)");

  const uint64_t data_size = size - 8 - n;
  const uint8_t* data = bytes + 8 + n;
  Safetensors out;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == kMetadataKey) {
      MXT_CHECK(v.is_object(), what, ": '__metadata__' must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        MXT_CHECK(m.value().is_string(), what, ": '__metadata__' entry '", m.key(),
                  "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = what + ": tensor '" + name + "'";
    MXT_CHECK(v.is_object(), where, " is not described by an object");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      MXT_CHECK(v.contains(key), where, " has no '", key, "'");
    MXT_CHECK(v["dtype"].is_string(), where, ": 'dtype' is not a string");
    StTensor t;
    t.name = name;
    t.dtype = v["dtype"].get<std::string>();
    const StDtype* dt = find_st_dtype(t.dtype);
    MXT_CHECK(dt, where, " has unsupported dtype '", t.dtype, "'; supported: ", kStDtypeList);
    MXT_CHECK(v["shape"].is_array(), where, ": 'shape' is not an array");
    for (const json& d : v["shape"]) {
      MXT_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX), where,
                ": 'shape' entries must be non-negative integers, got ", json_summary(v["shape"]));
      t.shape.push_back(d.get<int64_t>());
    }
    const json& off = v["data_offsets"];
    MXT_CHECK(off.is_array() && off.size() == 2, where,
              ": 'data_offsets' must be [begin, end], got ", json_summary(off));
    for (const json& o : off)
      MXT_CHECK(o.is_number_unsigned(), where, ": 'data_offsets' must be two byte offsets >= 0, "
                "got ", json_summary(o), o.is_number_integer() ? " (negative)" : "");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    MXT_CHECK(begin <= end, where, ": data_offsets [", begin, ", ", end, "] are reversed");
    MXT_CHECK(end <= data_size, where, ": data_offsets [", begin, ", ", end,
              "] are out of range (the data section has ", data_size,
              " bytes; the file may be truncated)");
    const uint64_t want = byte_size(t.shape, dt->size);
    MXT_CHECK(end - begin == want, where, ": dtype/shape size mismatch: shape ", shape_str(t.shape),
              " of ", t.dtype, " needs ", want, " bytes, data_offsets give ", end - begin);
    ranges.push_back({begin, end, out.tensors.size()});
    out.tensors.push_back(std::move(t));
  }
  // The ranges must tile [0, data_size) exactly.
  std::stable_sort(ranges.begin(), ranges.end(), [&](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const StTensor* prev = nullptr;
  for (const Range& r : ranges) {
    const StTensor& t = out.tensors[r.index];
    MXT_CHECK(r.begin >= pos, what, ": tensors '", prev ? prev->name : "", "' and '", t.name,
              "' overlap (data_offsets [", r.begin, ", ", r.end, "] start before ", pos, ")");
    MXT_CHECK(r.begin == pos, what, ": gap of ", r.begin - pos, " bytes before tensor '", t.name,
              "' (tensors must be stored back to back)");
    pos = r.end;
    prev = &t;
  }
  MXT_CHECK(pos == data_size, what, ": ", data_size - pos,
            " unexpected bytes after the last tensor");

  std::vector<StTensor> ordered;
  ordered.reserve(ranges.size());
  for (const Range& r : ranges) {
    StTensor& t = out.tensors[r.index];
    t.data.assign(data + r.begin, data + r.end);
    ordered.push_back(std::move(t));
  }
  out.tensors = std::move(ordered);
  return out;
}

Safetensors read_safetensors(const std::string& path) {
  std::vector<uint8_t> b = read_file(path);
  return safetensors_decode(b.data(), b.size(), path);
}

}  // namespace mxtrain::io
