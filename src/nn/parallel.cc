// nn/parallel.cc — slicing a whole tensor into the part one rank holds and putting it back
// (nn/parameter.h, ParamSplit), sequence parallelism's split of a micro-batch, and expert
// parallelism's row payloads (nn/parallel.h). A Linear's own gathers are in nn/tp_wire.cc.
//
// A cut's dimension d of a tensor [pre..., L, post...] is viewed as [parts, count,
// L / (parts·count)]: its slice is [pre..., parts, L / (parts·count), post...] taking index
// `index` of the middle axis. Several cuts compose: each slices what the last one left.
//
// An expert-parallel row payload is a rowwise copy cut into rows: a row's codes, then its
// row of the scale grid (NVFP4: the pack's one tensor scale travels beside the rows).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/parallel.h"
#include "mxtrain/nn/parameter.h"

namespace mxtrain {
namespace {

// One cut of a tensor of `shape`: its runs (whole offset of the cut tensor, local offset,
// length) and the shape of the slice.
std::vector<SliceRun> cut_runs(const ParamSplit::Cut& c, const std::vector<int64_t>& shape,
                               std::vector<int64_t>* sliced_shape) {
  MXT_CHECK(c.dim >= 0 && size_t(c.dim) < shape.size() && c.parts >= 1 && c.count >= 1 &&
                c.index >= 0 && c.index < c.count &&
                shape[size_t(c.dim)] % (int64_t(c.parts) * c.count) == 0,
            "internal: a parameter slice (dim ", c.dim, ", ", c.parts, " part(s) of ", c.count,
            " slices) that does not divide its tensor");
  int64_t pre = 1, post = 1;
  for (int i = 0; i < c.dim; ++i) pre *= shape[size_t(i)];
  for (size_t i = size_t(c.dim) + 1; i < shape.size(); ++i) post *= shape[i];
  const int64_t len = shape[size_t(c.dim)] / (int64_t(c.parts) * c.count);
  const int64_t run = len * post;  // one slice of one block, contiguous in both
  std::vector<SliceRun> out;
  int64_t local = 0;
  for (int64_t a = 0; a < pre; ++a)
    for (int p = 0; p < c.parts; ++p) {
      const int64_t block = (a * c.parts + p) * c.count + c.index;
      out.push_back({block * run, local, run});
      local += run;
    }
  if (sliced_shape) {
    *sliced_shape = shape;
    (*sliced_shape)[size_t(c.dim)] = len * c.parts;
  }
  return out;
}

}  // namespace

std::vector<SliceRun> slice_runs(const ParamSplit& s) {
  // Compose the cuts: `runs` maps the current slice's offsets to the whole tensor's.
  std::vector<int64_t> shape = s.full_shape;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<SliceRun> runs{{0, 0, n}};
  for (const ParamSplit::Cut& c : s.cuts) {
    std::vector<int64_t> next_shape;
    const std::vector<SliceRun> inner = cut_runs(c, shape, &next_shape);
    std::vector<SliceRun> composed;
    size_t j = 0;  // the outer run holding `at` (inner runs ascend in the cut tensor)
    for (const SliceRun& r : inner) {
      int64_t at = r.whole, left = r.length, local = r.local;
      while (left > 0) {
        while (runs[j].local + runs[j].length <= at) ++j;
        const SliceRun& o = runs[j];
        const int64_t take = std::min(left, o.local + o.length - at);
        composed.push_back({o.whole + (at - o.local), local, take});
        at += take;
        local += take;
        left -= take;
      }
    }
    runs = std::move(composed);
    shape = next_shape;
  }
  return runs;
}

std::vector<int64_t> slice_shape(const ParamSplit& s) {
  std::vector<int64_t> shape = s.full_shape;
  for (const ParamSplit::Cut& c : s.cuts) {
    std::vector<int64_t> next;
    cut_runs(c, shape, &next);
    shape = next;
  }
  return shape;
}

void slice_of(const ParamSplit& s, const float* full, float* local) {
  for (const SliceRun& r : slice_runs(s))
    std::memcpy(local + r.local, full + r.whole, sizeof(float) * size_t(r.length));
}

void place_slice(const ParamSplit& s, const float* local, float* full) {
  for (const SliceRun& r : slice_runs(s))
    std::memcpy(full + r.whole, local + r.local, sizeof(float) * size_t(r.length));
}

// ---- agreed amaxes ---------------------------------------------------------------------

uint64_t allreduce_amax(Collectives& group, float* amax, int n) {
  thread_local std::vector<int64_t> bits;
  bits.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &amax[i], sizeof b);
    bits[size_t(i)] = int64_t(b & 0x7FFFFFFFu);  // |amax|: NaN stays above Inf
  }
  const uint64_t sent = group.allreduce_max(bits.data(), size_t(n));
  for (int i = 0; i < n; ++i) {
    const uint32_t b = uint32_t(bits[size_t(i)]);
    std::memcpy(&amax[i], &b, sizeof b);
  }
  return sent;
}

AmaxAgree counted_amax_agree(Collectives& group, uint64_t* bytes, double* ms) {
  return [&group, bytes, ms](float* amax, int n) {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t sent = allreduce_amax(group, amax, n);
    if (bytes) *bytes += sent;
    if (ms)
      *ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                 .count();
  };
}

// ---- sequence parallelism's split ------------------------------------------------------

void SequenceShard::check(int64_t N) const {
  MXT_CHECK(!group || N % group->size() == 0, "sequence parallelism: the micro-batch's ", N,
            " tokens do not split evenly over ", group ? group->size() : 1, " ranks");
}

void SequenceShard::sum(double* sums, int n) const {
  if (!group) return;
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t sent = group->allreduce_sum(sums, size_t(n));
  if (stats) {
    stats->tp_comm_bytes += sent;
    stats->tp_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
}

void SequenceShard::mark_partial_grads(const std::vector<Parameter*>& params) const {
  if (!group) return;
  for (Parameter* p : params)
    if (!p->split.sliced()) p->split.partial_grad = true;
}

// ---- expert-parallel row payloads -------------------------------------------------------

bool row_payload_quantizes(const TensorFormat& f) {
  if (!f.quantized()) return true;  // BF16 values
  if (f.tensor_scale)  // NVFP4: the pack's scale travels beside the rows
    return f.is_4bit() && f.scale == ScaleType::e4m3 && f.block == BlockShape::b1x16;
  return (f.scale == ScaleType::e8m0 && f.block == BlockShape::b1x32) ||
         ((f.scale == ScaleType::fp32 || f.scale == ScaleType::fp32_pow2) &&
          f.block == BlockShape::b1x128);
}

bool row_payload_has_tensor_scale(const TensorFormat& f) {
  return f.quantized() && f.tensor_scale && row_payload_quantizes(f);
}

size_t row_payload_bytes(const TensorFormat& f, int64_t D) {
  if (!row_payload_quantizes(f)) return sizeof(float) * size_t(D);
  if (!f.quantized()) return sizeof(uint16_t) * size_t(D);
  return size_t(elem_row_bytes(f.elem, D)) +
         size_t(ceil_div(D, block_edge(f.block))) * size_t(scale_type_bytes(f.scale));
}

float pack_rows(const float* x, int64_t rows, int64_t D, const TensorFormat& f, uint8_t* out,
                const SrKey* sr) {
  const size_t P = row_payload_bytes(f, D);
  if (!row_payload_quantizes(f)) {
    std::memcpy(out, x, P * size_t(rows));
    return 0.f;
  }
  if (!f.quantized()) {
    thread_local std::vector<uint16_t> b;
    b.resize(size_t(rows * D));
    f32_to_bf16_array(x, b.data(), rows * D);
    std::memcpy(out, b.data(), P * size_t(rows));
    return 0.f;
  }
  thread_local QTensor scratch;  // storage reused across calls
  QTensor& q = scratch;
  q.invalidate();
  make_copies(x, rows, D, f, q, {Copy::rowwise}, nullptr, sr);
  const ScaledTensor& t = q.rowwise;
  const size_t sb = t.scales.size() / size_t(std::max<int64_t>(rows, 1));  // one row's scales
  const size_t rb = size_t(t.row_bytes());                                  // one row's codes
#pragma omp parallel for schedule(static) if (rows >= 256)
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out + P * size_t(r), t.data.data() + rb * size_t(r), rb);
    std::memcpy(out + P * size_t(r) + rb, t.scales.data() + sb * size_t(r), sb);
  }
  return row_payload_has_tensor_scale(f) ? t.tensor_scale : 0.f;
}

void unpack_rows(const uint8_t* in, int64_t rows, int64_t D, const TensorFormat& f, float* x,
                 float tensor_scale) {
  const size_t P = row_payload_bytes(f, D);
  if (!row_payload_quantizes(f)) {
    std::memcpy(x, in, P * size_t(rows));
    return;
  }
  if (!f.quantized()) {
    thread_local std::vector<uint16_t> b;
    b.resize(size_t(rows * D));
    std::memcpy(b.data(), in, P * size_t(rows));
    bf16_to_f32_array(b.data(), x, rows * D);
    return;
  }
  thread_local ScaledTensor scratch;  // storage reused across calls
  ScaledTensor& t = scratch;          // (the OpenMP threads below share this one, not their own)
  t.rows = rows;
  t.cols = D;
  t.layout = MXLayout::rowwise;
  t.elem = f.elem;
  t.scale_type = f.scale;
  t.block = block_edge(f.block);
  t.has_tensor_scale = row_payload_has_tensor_scale(f);
  t.tensor_scale = t.has_tensor_scale ? tensor_scale : 1.f;
  t.rht = false;
  t.data.resize(t.data_bytes());
  t.scales.resize(t.scale_bytes());
  const size_t sb = t.scales.size() / size_t(std::max<int64_t>(rows, 1));
  const size_t rb = size_t(t.row_bytes());
#pragma omp parallel for schedule(static) if (rows >= 256)
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(t.data.data() + rb * size_t(r), in + P * size_t(r), rb);
    std::memcpy(t.scales.data() + sb * size_t(r), in + P * size_t(r) + rb, sb);
  }
  if (rows > 0) dequantize(t, x);
}

void row_round_trip(float* x, int64_t rows, int64_t D, const TensorFormat& f,
                    const SrKey* sr) {
  if (!row_payload_quantizes(f) || rows == 0) return;
  thread_local std::vector<uint8_t> buf;
  buf.resize(row_payload_bytes(f, D) * size_t(rows));
  const float s = pack_rows(x, rows, D, f, buf.data(), sr);
  unpack_rows(buf.data(), rows, D, f, x, s);
}

}  // namespace mxtrain
