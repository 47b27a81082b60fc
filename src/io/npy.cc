// io/npy.cc — NumPy .npy encode/decode (see mxtrain/io/npy.h).
//
// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// parsed here by a small recursive reader (strings, True/False, tuples/lists of ints,
// nested brackets skipped) rather than by pattern matching, so key order, quoting style,
// spacing and trailing commas written by any NumPy version are all accepted.
#include "mxtrain/io/npy.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"

namespace mxtrain::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;             // numpy's ARRAY_ALIGN
constexpr size_t kGrowthAxisDigits = 21;  // numpy's GROWTH_AXIS_MAX_DIGITS

struct DtypeInfo {
  const char* code;  // kind + size, e.g. "f4"
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"b1", "bool", 1},   {"i1", "int8", 1},    {"u1", "uint8", 1},   {"i2", "int16", 2},
    {"u2", "uint16", 2}, {"i4", "int32", 4},   {"u4", "uint32", 4},  {"i8", "int64", 8},
    {"u8", "uint64", 8}, {"f2", "float16", 2}, {"f4", "float32", 4}, {"f8", "float64", 8},
};
constexpr const char* kAcceptedList =
    "|b1 |i1 |u1 <i2 <u2 <i4 <u4 <i8 <u8 <f2 <f4 <f8 (little-endian, C order)";

const DtypeInfo* find_dtype(const std::string& code) {
  for (const auto& d : kDtypes)
    if (code == d.code) return &d;
  return nullptr;
}

// Canonical spelling ('|' for one-byte kinds, '<' otherwise), or throws.
std::string normalize_dtype(const std::string& descr, const std::string& what) {
  if (descr.size() == 3) {
    const DtypeInfo* d = find_dtype(descr.substr(1));
    char order = descr[0];
    if (d && (order == '>' && d->size > 1))
      MXT_FAIL(what, ": big-endian dtype '", descr,
               "' is not supported; save it little-endian (x.astype('<", d->code, "'))");
    if (d && (order == '<' || order == '|' || (order == '>' && d->size == 1)))
      return std::string(d->size == 1 ? "|" : "<") + d->code;
  }
  MXT_FAIL(what, ": unsupported dtype '", descr, "'; supported: ", kAcceptedList);
}

// ---- a tiny reader for the Python literal header -------------------------------------------
struct PyValue {
  enum Kind { str, boolean, int_tuple, other } kind = other;
  std::string s;
  bool b = false;
  std::vector<int64_t> ints;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& what) : t_(text), what_(what) {}

  std::map<std::string, PyValue> parse_dict() {
    std::map<std::string, PyValue> out;
    ws();
    expect('{');
    for (;;) {
      ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      if (peek() != '\'' && peek() != '"') fail("expected a quoted key");
      std::string key = parse_string();
      ws();
      expect(':');
      ws();
      out[key] = parse_value();
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') {
        ++i_;
        break;
      }
      fail("expected ',' or '}'");
    }
    return out;
  }

 private:
  char peek() const { return i_ < t_.size() ? t_[i_] : '\0'; }
  void ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r'))
      ++i_;
  }
  [[noreturn]] void fail(const char* msg) const {
    MXT_FAIL(what_, ": malformed .npy header (", msg, " at offset ", i_, "): ", t_);
  }
  void expect(char c) {
    if (peek() != c) fail("unexpected character");
    ++i_;
  }
  std::string parse_string() {
    char q = t_[i_++];
    std::string s;
    while (i_ < t_.size() && t_[i_] != q) {
      if (t_[i_] == '\\' && i_ + 1 < t_.size()) ++i_;
      s += t_[i_++];
    }
    if (i_ >= t_.size()) fail("unterminated string");
    ++i_;
    return s;
  }
  bool word(const char* w) {
    size_t n = std::strlen(w);
    if (t_.compare(i_, n, w) == 0) {
      i_ += n;
      return true;
    }
    return false;
  }
  PyValue parse_value() {
    PyValue v;
    char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = PyValue::str;
      v.s = parse_string();
    } else if (word("True")) {
      v.kind = PyValue::boolean;
      v.b = true;
    } else if (word("False")) {
      v.kind = PyValue::boolean;
      v.b = false;
    } else if (c == '(' || c == '[') {
      size_t start = i_;
      if (!parse_int_tuple(v.ints)) {  // not a flat tuple of ints: skip it as 'other'
        i_ = start;
        skip_nested();
        v.kind = PyValue::other;
        v.s = t_.substr(start, i_ - start);
      } else {
        v.kind = PyValue::int_tuple;
      }
    } else {
      fail("unexpected value");
    }
    return v;
  }
  bool parse_int_tuple(std::vector<int64_t>& out) {
    char close = peek() == '(' ? ')' : ']';
    ++i_;
    for (;;) {
      ws();
      if (peek() == close) {
        ++i_;
        return true;
      }
      bool neg = false;
      if (peek() == '-') {
        neg = true;
        ++i_;
      }
      if (!(peek() >= '0' && peek() <= '9')) return false;
      int64_t x = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (x > (INT64_MAX - 9) / 10) fail("dimension too large");
        x = x * 10 + (t_[i_++] - '0');
      }
      if (peek() == 'L') ++i_;  // Python 2 long suffix
      out.push_back(neg ? -x : x);
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == close) {
        ++i_;
        return true;
      }
      return false;
    }
  }
  void skip_nested() {
    int depth = 0;
    do {
      char c = peek();
      if (c == '\0') fail("unbalanced brackets");
      if (c == '\'' || c == '"') {
        parse_string();
        continue;
      }
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      ++i_;
    } while (depth > 0);
  }

  const std::string& t_;
  const std::string& what_;
  size_t i_ = 0;
};

uint32_t load_le(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

// ---- NpyArray -------------------------------------------------------------------------------

// 0 when any dimension is 0, whatever the others (numpy allows (2**40, 2**40, 0)); the
// decoder refuses shapes whose other dimensions multiply past int64.
int64_t NpyArray::numel() const {
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t NpyArray::itemsize() const { return npy_itemsize(dtype); }

size_t npy_itemsize(const std::string& dtype) {
  return find_dtype(normalize_dtype(dtype, "dtype").substr(1))->size;
}

std::string npy_dtype_name(const std::string& dtype) {
  if (dtype.size() == 3)
    if (const DtypeInfo* d = find_dtype(dtype.substr(1))) return d->name;
  return dtype;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// ---- decode -------------------------------------------------------------------------------

NpyArray npy_decode(const uint8_t* bytes, size_t size, const std::string& what) {
  if (size < kMagicLen || std::memcmp(bytes, kMagic, kMagicLen) != 0)
    MXT_FAIL(what, ": not a .npy file (it does not start with the \\x93NUMPY magic)");
  MXT_CHECK(size >= 10, what, ": truncated .npy file (", size, " bytes, header incomplete)");
  const int major = bytes[6], minor = bytes[7];
  size_t len_bytes = 0;
  if (major == 1)
    len_bytes = 2;
  else if (major == 2 || major == 3)
    len_bytes = 4;
  else
    MXT_FAIL(what, ": unsupported .npy format version ", major, ".", minor,
             " (supported: 1.0, 2.0, 3.0)");
  MXT_CHECK(size >= kMagicLen + 2 + len_bytes, what, ": truncated .npy file (header incomplete)");
  const size_t hlen = load_le(bytes + 8, int(len_bytes));
  const size_t hstart = kMagicLen + 2 + len_bytes;
  MXT_CHECK(hlen <= size - hstart, what, ": truncated .npy file (header says ", hlen,
            " bytes, only ", size - hstart, " present)");
  const std::string header(reinterpret_cast<const char*>(bytes + hstart), hlen);

  auto dict = HeaderParser(header, what).parse_dict();
  for (const char* key : {"descr", "fortran_order", "shape"})
    MXT_CHECK(dict.count(key), what, ": .npy header has no '", key, "' entry: ", header);
  const PyValue& descr = dict["descr"];
  MXT_CHECK(descr.kind == PyValue::str, what, ": unsupported dtype ", descr.s,
            " (structured dtypes are not supported; supported: ", kAcceptedList, ")");
  const PyValue& fortran = dict["fortran_order"];
  MXT_CHECK(fortran.kind == PyValue::boolean, what,
            ": .npy header 'fortran_order' is not True/False: ", header);
  const PyValue& shape = dict["shape"];
  MXT_CHECK(shape.kind == PyValue::int_tuple, what,
            ": .npy header 'shape' is not a tuple of integers: ", header);

  NpyArray a;
  a.dtype = normalize_dtype(descr.s, what);
  a.shape = shape.ints;
  MXT_CHECK(!(fortran.b && a.shape.size() > 1), what,
            ": Fortran-order arrays are not supported; save a C-order array "
            "(np.ascontiguousarray(x))");
  const size_t item = npy_itemsize(a.dtype);
  // numel * itemsize without overflow.
  unsigned __int128 nbytes = item, nonzero = 1;
  for (int64_t d : a.shape) {
    MXT_CHECK(d >= 0, what, ": negative dimension in shape ", shape_str(a.shape));
    if (d == 0) nbytes = 0;
    if (d > 0) nonzero = std::min<unsigned __int128>(nonzero * uint64_t(d), uint64_t(1) << 63);
  }
  // An empty array still must not name more elements than int64 holds in its other dimensions
  // (a non-empty one is bounded by the file size below).
  MXT_CHECK(nbytes != 0 || nonzero < (uint64_t(1) << 63), what, ": shape ", shape_str(a.shape),
            " has more than 2^63 elements besides its zero dimension");
  for (int64_t d : a.shape) {
    nbytes *= uint64_t(d);
    MXT_CHECK(nbytes <= (unsigned __int128)size, what, ": truncated .npy file: shape ",
              shape_str(a.shape), " of ", npy_dtype_name(a.dtype), " needs more data than the ",
              size, "-byte file holds");
  }
  const size_t data_start = hstart + hlen;
  const size_t have = size - data_start;
  MXT_CHECK(have >= size_t(nbytes), what, ": truncated .npy file: shape ", shape_str(a.shape),
            " of ", npy_dtype_name(a.dtype), " needs ", size_t(nbytes), " data bytes, only ", have,
            " present");
  MXT_CHECK(have == size_t(nbytes), what, ": .npy file has ", have - size_t(nbytes),
            " unexpected bytes after the data (shape ", shape_str(a.shape), ")");
  a.data.assign(bytes + data_start, bytes + data_start + size_t(nbytes));
  return a;
}

NpyArray read_npy(const std::string& path) {
  std::vector<uint8_t> b = read_file(path);
  return npy_decode(b.data(), b.size(), path);
}

// ---- encode ---------------------------------------------------------------------------------

std::vector<uint8_t> npy_encode(const NpyArray& a) {
  const std::string dtype = normalize_dtype(a.dtype, "npy_encode");
  for (int64_t d : a.shape)
    MXT_CHECK(d >= 0, "npy_encode: negative dimension in shape ", shape_str(a.shape));
  MXT_CHECK(a.data.size() == size_t(a.numel()) * npy_itemsize(dtype), "npy_encode: ", a.data.size(),
            " data bytes do not match shape ", shape_str(a.shape), " of ", npy_dtype_name(dtype));
  // Same text and padding as numpy.lib.format (sorted keys, repr of the shape, spare
  // spaces for growing axis 0, total header length a multiple of 64, ending in '\n').
  std::string header =
      "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': " + shape_str(a.shape) + ", }";
  if (!a.shape.empty()) {
    size_t digits = std::to_string(a.shape[0]).size();
    if (digits < kGrowthAxisDigits) header.append(kGrowthAxisDigits - digits, ' ');
  }
  size_t len_bytes = 2;
  size_t hlen = header.size() + 1;
  size_t pad = kAlign - (kMagicLen + 2 + len_bytes + hlen) % kAlign;
  if (hlen + pad > 0xFFFF) {  // version 2.0: 4-byte header length
    len_bytes = 4;
    pad = kAlign - (kMagicLen + 2 + len_bytes + hlen) % kAlign;
  }
  header.append(pad, ' ');
  header += '\n';

  const size_t prefix = kMagicLen + 2 + len_bytes;
  std::vector<uint8_t> out(prefix + header.size() + a.data.size());
  std::memcpy(out.data(), kMagic, kMagicLen);
  out[kMagicLen] = len_bytes == 2 ? 1 : 2;  // major version
  out[kMagicLen + 1] = 0;                   // minor version
  for (size_t i = 0; i < len_bytes; ++i) out[kMagicLen + 2 + i] = uint8_t(header.size() >> (8 * i));
  std::memcpy(out.data() + prefix, header.data(), header.size());
  if (!a.data.empty())
    std::memcpy(out.data() + prefix + header.size(), a.data.data(), a.data.size());
  return out;
}

void write_npy(const std::string& path, const NpyArray& a) {
  write_file_atomic(path, npy_encode(a));
}

// ---- helpers ------------------------------------------------------------------------------

NpyArray npy_make(const std::string& dtype, const std::vector<int64_t>& shape, const void* data) {
  NpyArray a;
  a.dtype = normalize_dtype(dtype, "npy_make");
  a.shape = shape;
  for (int64_t d : shape)
    MXT_CHECK(d >= 0, "npy_make: negative dimension in shape ", shape_str(shape));
  const size_t n = size_t(a.numel()) * npy_itemsize(a.dtype);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  MXT_CHECK(n == 0 || p != nullptr, "npy_make: null data for shape ", shape_str(shape));
  if (n) a.data.assign(p, p + n);
  return a;
}

void npy_require(const NpyArray& a, const std::string& dtype, int ndim, const std::string& what) {
  const std::string want = normalize_dtype(dtype, what);
  MXT_CHECK(a.dtype == want, what, ": expected dtype ", npy_dtype_name(want), " ('", want,
            "'), got ", npy_dtype_name(a.dtype), " ('", a.dtype, "')");
  MXT_CHECK(ndim < 0 || int(a.shape.size()) == ndim, what, ": expected a ", ndim,
            "-D array, got shape ", shape_str(a.shape));
}

std::vector<float> npy_to_f32(const NpyArray& a, const std::string& what) {
  npy_require(a, "<f4", -1, what);
  std::vector<float> v(size_t(a.numel()));
  if (!v.empty()) std::memcpy(v.data(), a.data.data(), v.size() * 4);
  return v;
}

std::vector<uint8_t> npy_to_u8(const NpyArray& a, const std::string& what) {
  npy_require(a, "|u1", -1, what);
  return a.data;
}

}  // namespace mxtrain::io
