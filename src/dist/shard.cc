// dist/shard.cc — shard layout, FP32 slicing, and the pre/post all-gather packing of
// dist/shard.h. Pure functions on buffers: no MPI here, so every world size can be checked
// in one process (tests/dist/shard_test.cc) and the MPI tests only add the transport.
#include "mxtrain/dist/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "mxtrain/common.h"

namespace mxtrain::dist {

// ---- layout -------------------------------------------------------------------------------

ShardLayout ShardLayout::make(const std::vector<int64_t>& shape, int world,
                              const TensorFormat& weight) {
  MXT_CHECK(shape.size() == 2 || shape.size() == 3,
            "FSDP shards weights of shape [out, in] or [experts, out, in]; got a ",
            shape.size(), "-D shape (replicate such parameters instead)");
  for (int64_t d : shape)
    MXT_CHECK(d > 0, "FSDP cannot shard a weight with an empty dimension (shape has ", d, ")");
  MXT_CHECK(world >= 1, "world size must be >= 1, got ", world);
  ShardLayout L;
  L.tensor_scale = weight.quantized() && weight.block == BlockShape::tensor;
  L.block = weight.quantized() && !L.tensor_scale ? block_edge(weight.block) : kMXBlock;
  L.scale_bytes = weight.quantized() ? scale_type_bytes(weight.scale) : 1;
  L.groups = shape.size() == 3 ? shape[0] : 1;
  L.rows = shape[shape.size() - 2];
  L.cols = shape[shape.size() - 1];
  L.row_bytes = weight.quantized() ? elem_row_bytes(weight.elem, L.cols) : L.cols;
  L.second_scale = weight.is_4bit() && weight.tensor_scale;
  L.group_rows_padded = ceil_div(L.rows, L.block) * L.block;
  L.world = world;
  const int64_t blocks = L.virtual_rows() / L.block;
  L.rows_per_rank = ceil_div(blocks, world) * L.block;
  return L;
}

std::vector<ShardPiece> ShardLayout::pieces(int rank) const {
  std::vector<ShardPiece> out;
  const int64_t lo = int64_t(rank) * rows_per_rank, hi = lo + rows_per_rank;
  const int64_t g0 = lo / group_rows_padded;
  for (int64_t g = g0; g < groups; ++g) {
    const int64_t vs = g * group_rows_padded;
    if (vs >= hi) break;
    const int64_t a = std::max(lo, vs), b = std::min(hi, vs + rows);
    if (a < b) out.push_back({g, a - vs, b - a, a - lo});
  }
  return out;
}

int64_t ShardLayout::valid_rows(int rank) const {
  int64_t n = 0;
  for (const auto& p : pieces(rank)) n += p.rows;
  return n;
}

std::string ShardLayout::describe() const {
  std::ostringstream os;
  if (groups > 1) os << groups << "x";
  os << rows << "x" << cols << " over " << world << " ranks: " << rows_per_rank
     << " rows per rank (" << padded_rows() - groups * rows << " padding rows, blocks of "
     << block << ")";
  return os.str();
}

// ---- FP32 shards ----------------------------------------------------------------------------

void slice_shard(const ShardLayout& L, int rank, const float* full, float* shard) {
  std::memset(shard, 0, sizeof(float) * size_t(L.shard_numel()));
  for (const auto& p : L.pieces(rank))
    std::memcpy(shard + p.local_row * L.cols,
                full + (p.group * L.rows + p.group_row) * L.cols,
                sizeof(float) * size_t(p.rows * L.cols));
}

void place_shard(const ShardLayout& L, int rank, const float* shard, float* full) {
  for (const auto& p : L.pieces(rank))
    std::memcpy(full + (p.group * L.rows + p.group_row) * L.cols,
                shard + p.local_row * L.cols, sizeof(float) * size_t(p.rows * L.cols));
}

void pad_full(const ShardLayout& L, const float* full, float* padded) {
  for (int r = 0; r < L.world; ++r) slice_shard(L, r, full, padded + r * L.shard_numel());
}

// ---- packing --------------------------------------------------------------------------------

namespace {

// Offsets inside one rank's pack of one scaled copy: data first, then the scale grid, then
// (4-bit with a per-tensor scale) one FP32 tensor scale per group.
struct MxPart {
  size_t data = 0, scales = 0, tensor_scales = 0, end = 0;
};

MxPart mx_part(const ShardLayout& L, MXLayout layout, size_t base) {
  const int64_t R = L.rows_per_rank, K = L.cols, B = L.block, Kb = ceil_div(K, B);
  MxPart p;
  p.data = base;
  p.scales = base + size_t(R * L.row_bytes);
  int64_t s = 0;
  switch (layout) {
    case MXLayout::rowwise: s = R * Kb; break;
    case MXLayout::colwise: s = (R / B) * K; break;
    case MXLayout::tile: s = L.tensor_scale ? L.groups : (R / B) * Kb; break;
  }
  p.tensor_scales = p.scales + size_t(s) * size_t(L.scale_bytes);
  p.end = p.tensor_scales + (L.second_scale ? sizeof(float) * size_t(L.groups) : 0);
  return p;
}

// Scale rows of a piece of `rows` data rows starting at data row `row0` (a multiple of the
// block edge B).
int64_t scale_row0(MXLayout l, int64_t row0, int64_t B) {
  return l == MXLayout::rowwise ? row0 : row0 / B;
}
int64_t scale_rows_of(MXLayout l, int64_t rows, int64_t B) {
  return l == MXLayout::rowwise ? rows : ceil_div(rows, B);
}

// Bytes of one row of q's scale grid.
size_t scale_row_bytes(const ScaledTensor& q) {
  return size_t(q.scale_cols()) * size_t(scale_type_bytes(q.scale_type));
}

// Copies a quantized piece (q: [rows, K]) into a pack part at shard row local_row.
void put_piece(const ScaledTensor& q, const MxPart& part, int64_t local_row, uint8_t* out) {
  std::memcpy(out + part.data + size_t(local_row * q.row_bytes()), q.data.data(), q.data.size());
  std::memcpy(out + part.scales + size_t(scale_row0(q.layout, local_row, q.block)) *
                                      scale_row_bytes(q),
              q.scales.data(), q.scales.size());
}

// Copies one piece of a gathered pack part into the full group tensor `dst`.
void get_piece(const uint8_t* pack, const MxPart& part, int64_t local_row, int64_t group_row,
               int64_t rows, ScaledTensor& dst) {
  const int64_t Kb = dst.row_bytes(), B = dst.block;
  const size_t sr = scale_row_bytes(dst);
  std::memcpy(dst.data.data() + size_t(group_row * Kb),
              pack + part.data + size_t(local_row * Kb), size_t(rows * Kb));
  std::memcpy(dst.scales.data() + size_t(scale_row0(dst.layout, group_row, B)) * sr,
              pack + part.scales + size_t(scale_row0(dst.layout, local_row, B)) * sr,
              size_t(scale_rows_of(dst.layout, rows, B)) * sr);
}

MXLayout layout_of(Copy c) {
  return c == Copy::rowwise ? MXLayout::rowwise : c == Copy::colwise ? MXLayout::colwise
                                                                     : MXLayout::tile;
}

constexpr Copy kScaled[] = {Copy::rowwise, Copy::colwise, Copy::tile};

// Where each copy of `copies` lies in a pack: bf16 first, then the scaled ones in Copy order.
struct PackPlan {
  size_t bf16_end = 0;          // bf16 part [0, bf16_end) (0: none)
  MxPart part[kNumCopies];      // by Copy, for the scaled copies present
  size_t end = 0;
};

PackPlan plan(const ShardLayout& L, CopySet copies) {
  PackPlan p;
  if (copies.has(Copy::bf16)) p.bf16_end = sizeof(uint16_t) * size_t(L.shard_numel());
  size_t at = p.bf16_end;
  for (Copy c : kScaled)
    if (copies.has(c)) {
      p.part[int(c)] = mx_part(L, layout_of(c), at);
      at = p.part[int(c)].end;
    }
  p.end = at;
  return p;
}

}  // namespace

size_t packed_bytes(const ShardLayout& L, CopySet copies) { return plan(L, copies).end; }

void shard_group_amax(const ShardLayout& L, int rank, const float* shard, float* out,
                      bool four_bit) {
  std::fill_n(out, L.groups, 0.f);
  for (const auto& p : L.pieces(rank)) {
    const float* x = shard + p.local_row * L.cols;
    const float a = four_bit ? fp4_amax(x, p.rows * L.cols) : tensor_amax(x, p.rows * L.cols);
    // NaN (four_bit) wins, as in fp4_amax.
    out[p.group] = std::isnan(a) || std::isnan(out[p.group]) ? NAN : std::max(out[p.group], a);
  }
}

void pack_shard(const ShardLayout& L, int rank, const float* shard, CopySet copies,
                const TensorFormat& f, uint8_t* out, const float* group_scales,
                float* group_amax) {
  MXT_CHECK(rank >= 0 && rank < L.world, "pack_shard: rank ", rank, " outside a world of ",
            L.world);
  MXT_CHECK(!L.tensor_scale || group_scales != nullptr, "pack_shard: a weight with one scale "
            "per tensor (", f.describe(), ") needs the agreed scale of each group");
  MXT_CHECK(!L.second_scale || group_scales != nullptr, "pack_shard: a 4-bit weight with a "
            "per-tensor scale (", f.describe(), ") needs the agreed amax of each group");
  const PackPlan pp = plan(L, copies);
  std::memset(out, 0, pp.end);
  if (group_amax) std::fill_n(group_amax, L.groups, 0.f);
  const int64_t K = L.cols;
  for (const auto& p : L.pieces(rank)) {
    const float* x = shard + p.local_row * K;
    if (copies.has(Copy::bf16))
      f32_to_bf16_array(x, reinterpret_cast<uint16_t*>(out) + p.local_row * K, p.rows * K);
    const CopySet scaled = copies - CopySet{Copy::bf16};
    if (scaled.empty()) continue;
    thread_local QTensor q;  // the piece's copies, storage reused
    if (L.tensor_scale) {  // the one copy (tile) with the group's agreed scale
      const float amax =
          quantize_tensor_given_scale(x, p.rows, K, f.elem, group_scales[p.group], q.tile);
      if (group_amax) group_amax[p.group] = std::max(group_amax[p.group], amax);
      const MxPart& part = pp.part[int(Copy::tile)];
      std::memcpy(out + part.data + size_t(p.local_row * L.row_bytes), q.tile.data.data(),
                  q.tile.data.size());
      std::memcpy(out + part.scales + sizeof(float) * size_t(p.group), q.tile.scales.data(),
                  sizeof(float));
      continue;
    }
    if (L.second_scale) {  // each copy with the group's agreed amax, and its tensor scale
      for (Copy c : kScaled) {
        if (!scaled.has(c)) continue;
        const MXLayout l = layout_of(c);
        ScaledTensor& t = q.scaled(c);
        quantize_fp4(x, p.rows, K, l, f.fp4_config(l), t, group_scales[p.group]);
        put_piece(t, pp.part[int(c)], p.local_row, out);
        std::memcpy(out + pp.part[int(c)].tensor_scales + sizeof(float) * size_t(p.group),
                    &t.tensor_scale, sizeof(float));
      }
      continue;
    }
    make_copies(x, p.rows, K, f, q, scaled);
    for (Copy c : kScaled)
      if (scaled.has(c)) put_piece(q.scaled(c), pp.part[int(c)], p.local_row, out);
  }
}

void unpack_group(const ShardLayout& L, CopySet copies, const TensorFormat& f,
                  const uint8_t* gathered, int64_t group, QuantizedWeight& out) {
  MXT_CHECK(group >= 0 && group < L.groups, "unpack_group: group ", group, " outside [0, ",
            L.groups, ")");
  const int64_t K = L.cols, R = L.rows_per_rank;
  const PackPlan pp = plan(L, copies);
  const size_t P = pp.end;
  if (copies.has(Copy::bf16)) out.bf16.resize(size_t(L.rows * K));
  for (Copy c : kScaled) {  // reuses the copy's storage when it has some
    if (!copies.has(c)) continue;
    ScaledTensor& t = out.scaled(c);
    t.rows = L.rows;
    t.cols = K;
    t.layout = layout_of(c);
    const bool tensor = f.quantized() && f.block == BlockShape::tensor;
    MXT_CHECK(f.quantized() && tensor == L.tensor_scale &&
                  (tensor || block_edge(f.block) == L.block) &&
                  scale_type_bytes(f.scale) == L.scale_bytes,
              "unpack_group: the weight's format (", f.describe(), ") is not the one its shard "
              "layout was made for (blocks of ", L.block, ")");
    t.elem = f.elem;
    t.scale_type = f.scale;
    t.block = tensor ? 0 : L.block;
    t.has_tensor_scale = L.second_scale;
    t.tensor_scale = 1.f;
    t.rht = false;
    t.data.resize(t.data_bytes());
    t.scales.resize(t.scale_bytes());
  }

  const int64_t vs = group * L.group_rows_padded, ve = vs + L.rows;
  for (int64_t r = vs / R; r * R < ve; ++r) {
    const int64_t a = std::max(vs, r * R), b = std::min(ve, (r + 1) * R);
    const uint8_t* pack = gathered + size_t(r) * P;
    const int64_t local_row = a - r * R, group_row = a - vs, rows = b - a;
    if (copies.has(Copy::bf16)) {
      std::memcpy(out.bf16.data() + group_row * K,
                  reinterpret_cast<const uint16_t*>(pack) + local_row * K,
                  sizeof(uint16_t) * size_t(rows * K));
    }
    for (Copy c : kScaled) {
      if (!copies.has(c)) continue;
      if (L.tensor_scale) {  // codes in place; the group's one scale_inv (every rank's alike)
        ScaledTensor& t = out.scaled(c);
        const MxPart& part = pp.part[int(c)];
        std::memcpy(t.data.data() + size_t(group_row * L.row_bytes),
                    pack + part.data + size_t(local_row * L.row_bytes),
                    size_t(rows * L.row_bytes));
        std::memcpy(t.scales.data(), pack + part.scales + sizeof(float) * size_t(group),
                    sizeof(float));
        continue;
      }
      get_piece(pack, pp.part[int(c)], local_row, group_row, rows, out.scaled(c));
      if (L.second_scale)  // every rank holding rows of the group wrote the same scale
        std::memcpy(&out.scaled(c).tensor_scale,
                    pack + pp.part[int(c)].tensor_scales + sizeof(float) * size_t(group),
                    sizeof(float));
    }
  }
  out.rows = L.rows;
  out.cols = K;
  out.present |= copies;
}

void quantize_group_reference(const ShardLayout& L, CopySet copies, const TensorFormat& f,
                              const float* full, int64_t group, QuantizedWeight& out,
                              ScaleHistory* history) {
  make_copies(full + group * L.rows * L.cols, L.rows, L.cols, f, out, copies, history);
}

}  // namespace mxtrain::dist
