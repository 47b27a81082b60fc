// nn/parallel.cc — slicing a whole tensor into the part one rank holds and putting it back
// (nn/parameter.h, ParamSplit), and sequence parallelism's all-gathers (nn/parallel.h).
//
// A cut's dimension d of a tensor [pre..., L, post...] is viewed as [parts, count,
// L / (parts·count)]: its slice is [pre..., parts, L / (parts·count), post...] taking index
// `index` of the middle axis. Several cuts compose: each slices what the last one left.
//
// A gather packs each rank's copies of its rows — per copy its codes [Ns, K], then its scale
// grid — into one buffer of the same size on every rank, all-gathers it, and lays the ranks'
// rows end to end: codes by rows, scale grids by their rows (a rowwise grid has a row per
// token, a colwise one a row per block of B tokens, whole blocks when B divides Ns).
//
// An expert-parallel row payload is a rowwise copy cut into rows: a row's codes, then its
// row of the scale grid.
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

// ---- sequence-parallel gathers ----------------------------------------------------------

void derive_copies(QTensor& q, const TensorFormat& f, CopySet want, FloatBuffer& scratch) {
  want = want - q.present;
  if (want.empty()) return;
  MXT_CHECK(q.has(Copy::rowwise) || q.has(Copy::bf16), "derive_copies: the gathered copy has "
            "neither a rowwise nor a BF16 copy to make the others from");
  if (scratch.size() < size_t(q.rows * q.cols)) scratch.resize(size_t(q.rows * q.cols));
  if (q.has(Copy::rowwise))
    dequantize(q.rowwise, scratch.data());
  else
    bf16_to_f32_array(q.bf16.data(), scratch.data(), q.rows * q.cols);
  make_copies(scratch.data(), q.rows, q.cols, f, q, want);
}

uint64_t gather_rows(Collectives& group, const float* shard, int64_t Ns, int64_t K, float* out) {
  return group.allgather(shard, out, sizeof(float) * size_t(Ns * K));
}

namespace {

// Whether a shard of Ns rows quantizes to exactly its rows of the whole matrix's copy c.
bool travels_exact(Copy c, const TensorFormat& f, int64_t Ns) {
  if (c == Copy::bf16) return true;
  // A second, per-tensor scale (NVFP4) comes from every rank's rows.
  if (f.quantized() && f.tensor_scale) return false;
  if (c == Copy::rowwise) return true;
  if (c == Copy::colwise) return Ns % block_edge(f.block) == 0;
  return false;  // a 2-D tile or a tensor scale spans every rank's rows
}

}  // namespace

uint64_t gather_copies(Collectives& group, const float* shard, int64_t Ns, int64_t K,
                       const TensorFormat& f, CopySet copies, QTensor& out, bool* fp32_route) {
  const int W = group.size();
  const int64_t M = Ns * W;
  CopySet exact, rest;
  for (int i = 0; i < kNumCopies; ++i)
    if (copies.has(Copy(i))) (travels_exact(Copy(i), f, Ns) ? exact : rest) |= {Copy(i)};
  if (fp32_route) *fp32_route = !rest.empty();
  out.invalidate();
  out.rows = M;
  out.cols = K;
  uint64_t sent = 0;
  if (!exact.empty()) {
    thread_local QTensor local;  // this rank's copies of its rows, storage reused
    thread_local std::vector<uint8_t> send, recv;
    local.invalidate();
    make_copies(shard, Ns, K, f, local, exact);
    size_t P = 0;  // one rank's pack
    if (exact.has(Copy::bf16)) P += local.bf16.size() * sizeof(uint16_t);
    for (Copy c : {Copy::rowwise, Copy::colwise})
      if (exact.has(c)) P += local.scaled(c).bytes();
    send.resize(P);
    recv.resize(P * size_t(W));
    size_t at = 0;
    auto put = [&](const void* p, size_t n) {
      std::memcpy(send.data() + at, p, n);
      at += n;
    };
    if (exact.has(Copy::bf16)) put(local.bf16.data(), local.bf16.size() * sizeof(uint16_t));
    for (Copy c : {Copy::rowwise, Copy::colwise})
      if (exact.has(c)) {
        put(local.scaled(c).data.data(), local.scaled(c).data.size());
        put(local.scaled(c).scales.data(), local.scaled(c).scales.size());
      }
    sent += group.allgather(send.data(), recv.data(), P);
    // Lay the ranks' parts end to end.
    if (exact.has(Copy::bf16)) out.bf16.resize(size_t(M * K));
    for (Copy c : {Copy::rowwise, Copy::colwise})
      if (exact.has(c)) {
        const MXTensor& l = local.scaled(c);
        MXTensor& o = out.scaled(c);
        o.rows = M;
        o.cols = K;
        o.layout = l.layout;
        o.elem = l.elem;
        o.scale_type = l.scale_type;
        o.block = l.block;
        o.data.resize(o.data_bytes());
        o.scales.resize(o.scale_bytes());
      }
    for (int r = 0; r < W; ++r) {
      const uint8_t* pack = recv.data() + P * size_t(r);
      size_t off = 0;
      if (exact.has(Copy::bf16)) {
        const size_t n = size_t(Ns * K) * sizeof(uint16_t);
        std::memcpy(reinterpret_cast<uint8_t*>(out.bf16.data()) + n * size_t(r), pack, n);
        off += n;
      }
      for (Copy c : {Copy::rowwise, Copy::colwise})
        if (exact.has(c)) {
          const MXTensor& l = local.scaled(c);
          MXTensor& o = out.scaled(c);
          std::memcpy(o.data.data() + l.data.size() * size_t(r), pack + off, l.data.size());
          off += l.data.size();
          std::memcpy(o.scales.data() + l.scales.size() * size_t(r), pack + off, l.scales.size());
          off += l.scales.size();
        }
    }
    out.present |= exact;
  }
  if (!rest.empty()) {  // from the whole FP32 matrix
    thread_local std::vector<float> whole;
    whole.resize(size_t(M * K));
    sent += gather_rows(group, shard, Ns, K, whole.data());
    make_copies(whole.data(), M, K, f, out, rest);
  }
  return sent;
}

namespace {

// gather_copies, timed.
GatherCost timed_gather(Collectives& group, const float* shard, int64_t Ns, int64_t K,
                        const TensorFormat& f, CopySet copies, QTensor& out) {
  GatherCost c;
  const auto t0 = std::chrono::steady_clock::now();
  c.bytes = gather_copies(group, shard, Ns, K, f, copies, out, &c.fp32_route);
  c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

}  // namespace

GatherCost gather_grad_copies(Collectives& group, const float* dy_shard, int64_t Ns, int64_t O,
                              const TensorFormat& f, CopySet dgrad, CopySet wgrad,
                              SequenceWire wire, QTensor& q, FloatBuffer& scratch) {
  const bool rowwise = wire == SequenceWire::rowwise;
  const GatherCost c = timed_gather(group, dy_shard, Ns, O, f, rowwise ? dgrad : dgrad | wgrad, q);
  if (rowwise) derive_copies(q, f, wgrad, scratch);
  return c;
}

QTensor& input_wgrad_copies(Collectives& group, const float* shard, int64_t Ns, int64_t K,
                            const TensorFormat& f, CopySet wgrad, SequenceWire wire,
                            QTensor& kept, QTensor& regathered, FloatBuffer& scratch,
                            GatherCost& cost) {
  if (wire == SequenceWire::rowwise) {
    derive_copies(kept, f, wgrad, scratch);
    cost = {};
    return kept;
  }
  cost = timed_gather(group, shard, Ns, K, f, wgrad, regathered);
  return regathered;
}

// ---- expert-parallel row payloads -------------------------------------------------------

bool row_payload_quantizes(const TensorFormat& f) {
  if (!f.quantized()) return true;  // BF16 values
  if (f.tensor_scale) return false;  // a per-tensor scale spans every row
  return (f.scale == ScaleType::e8m0 && f.block == BlockShape::b1x32) ||
         ((f.scale == ScaleType::fp32 || f.scale == ScaleType::fp32_pow2) &&
          f.block == BlockShape::b1x128);
}

size_t row_payload_bytes(const TensorFormat& f, int64_t D) {
  if (!row_payload_quantizes(f)) return sizeof(float) * size_t(D);
  if (!f.quantized()) return sizeof(uint16_t) * size_t(D);
  return size_t(elem_row_bytes(f.elem, D)) +
         size_t(ceil_div(D, block_edge(f.block))) * size_t(scale_type_bytes(f.scale));
}

void pack_rows(const float* x, int64_t rows, int64_t D, const TensorFormat& f, uint8_t* out) {
  const size_t P = row_payload_bytes(f, D);
  if (!row_payload_quantizes(f)) {
    std::memcpy(out, x, P * size_t(rows));
    return;
  }
  if (!f.quantized()) {
    thread_local std::vector<uint16_t> b;
    b.resize(size_t(rows * D));
    f32_to_bf16_array(x, b.data(), rows * D);
    std::memcpy(out, b.data(), P * size_t(rows));
    return;
  }
  thread_local QTensor scratch;  // storage reused across calls
  QTensor& q = scratch;
  q.invalidate();
  make_copies(x, rows, D, f, q, {Copy::rowwise});
  const MXTensor& t = q.rowwise;
  const size_t sb = t.scales.size() / size_t(std::max<int64_t>(rows, 1));  // one row's scales
  const size_t rb = size_t(t.row_bytes());                                  // one row's codes
#pragma omp parallel for schedule(static) if (rows >= 256)
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out + P * size_t(r), t.data.data() + rb * size_t(r), rb);
    std::memcpy(out + P * size_t(r) + rb, t.scales.data() + sb * size_t(r), sb);
  }
}

void unpack_rows(const uint8_t* in, int64_t rows, int64_t D, const TensorFormat& f, float* x) {
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
  thread_local MXTensor scratch;  // storage reused across calls
  MXTensor& t = scratch;           // (the OpenMP threads below share this one, not their own)
  t.rows = rows;
  t.cols = D;
  t.layout = MXLayout::rowwise;
  t.elem = f.elem;
  t.scale_type = f.scale;
  t.block = block_edge(f.block);
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

void row_round_trip(float* x, int64_t rows, int64_t D, const TensorFormat& f) {
  if (!row_payload_quantizes(f) || rows == 0) return;
  thread_local std::vector<uint8_t> buf;
  buf.resize(row_payload_bytes(f, D) * size_t(rows));
  pack_rows(x, rows, D, f, buf.data());
  unpack_rows(buf.data(), rows, D, f, x);
}

}  // namespace mxtrain
