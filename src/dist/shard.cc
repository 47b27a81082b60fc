// dist/shard.cc — shard layout, FP32 slicing, and the pre/post all-gather packing of
// dist/shard.h. Pure functions on buffers: no MPI here, so every world size can be checked
// in one process (tests/dist/shard_test.cc) and the MPI tests only add the transport.
#include "mxtrain/dist/shard.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "mxtrain/common.h"

namespace mxtrain::dist {

const char* gather_kind_name(GatherKind k) {
  switch (k) {
    case GatherKind::bf16: return "bf16";
    case GatherKind::rowwise: return "rowwise";
    case GatherKind::colwise: return "colwise";
    case GatherKind::dual: return "rowwise+colwise";
    case GatherKind::tile32: return "tile32";
  }
  return "?";
}

// ---- layout -------------------------------------------------------------------------------

ShardLayout ShardLayout::make(const std::vector<int64_t>& shape, int world) {
  MXT_CHECK(shape.size() == 2 || shape.size() == 3,
            "FSDP shards weights of shape [out, in] or [experts, out, in]; got a ",
            shape.size(), "-D shape (replicate such parameters instead)");
  for (int64_t d : shape)
    MXT_CHECK(d > 0, "FSDP cannot shard a weight with an empty dimension (shape has ", d, ")");
  MXT_CHECK(world >= 1, "world size must be >= 1, got ", world);
  ShardLayout L;
  L.groups = shape.size() == 3 ? shape[0] : 1;
  L.rows = shape[shape.size() - 2];
  L.cols = shape[shape.size() - 1];
  L.group_rows_padded = ceil_div(L.rows, kMXBlock) * kMXBlock;
  L.world = world;
  const int64_t blocks = L.virtual_rows() / kMXBlock;
  L.rows_per_rank = ceil_div(blocks, world) * kMXBlock;
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
     << " rows per rank (" << padded_rows() - groups * rows << " padding rows)";
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

// Offsets inside one rank's pack for the MX kinds: data first, then the scale grid.
struct MxPart {
  size_t data = 0, scales = 0, end = 0;
};

MxPart mx_part(const ShardLayout& L, MXLayout layout, size_t base) {
  const int64_t R = L.rows_per_rank, K = L.cols, Kb = ceil_div(K, kMXBlock);
  MxPart p;
  p.data = base;
  p.scales = base + size_t(R * K);
  int64_t s = 0;
  switch (layout) {
    case MXLayout::rowwise: s = R * Kb; break;
    case MXLayout::colwise: s = (R / kMXBlock) * K; break;
    case MXLayout::tile32: s = (R / kMXBlock) * Kb; break;
  }
  p.end = p.scales + size_t(s);
  return p;
}

// Scale rows of a piece of `rows` data rows starting at data row `row0` (a multiple of 32).
int64_t scale_row0(MXLayout l, int64_t row0) { return l == MXLayout::rowwise ? row0 : row0 / kMXBlock; }
int64_t scale_rows_of(MXLayout l, int64_t rows) {
  return l == MXLayout::rowwise ? rows : ceil_div(rows, kMXBlock);
}

// Copies a quantized piece (q: [rows, K]) into a pack part at shard row local_row.
void put_piece(const MXTensor& q, const MxPart& part, int64_t local_row, uint8_t* out) {
  const int64_t K = q.cols;
  std::memcpy(out + part.data + size_t(local_row * K), q.data.data(), q.data.size());
  const int64_t sc = q.scale_cols();
  std::memcpy(out + part.scales + size_t(scale_row0(q.layout, local_row) * sc), q.scales.data(),
              q.scales.size());
}

// Copies one piece of a gathered pack part into the full group tensor `dst`.
void get_piece(const uint8_t* pack, const MxPart& part, int64_t local_row, int64_t group_row,
               int64_t rows, MXTensor& dst) {
  const int64_t K = dst.cols, sc = dst.scale_cols();
  std::memcpy(dst.data.data() + size_t(group_row * K), pack + part.data + size_t(local_row * K),
              size_t(rows * K));
  std::memcpy(dst.scales.data() + size_t(scale_row0(dst.layout, group_row) * sc),
              pack + part.scales + size_t(scale_row0(dst.layout, local_row) * sc),
              size_t(scale_rows_of(dst.layout, rows) * sc));
}

MXLayout single_layout(GatherKind k) {
  switch (k) {
    case GatherKind::rowwise: return MXLayout::rowwise;
    case GatherKind::colwise: return MXLayout::colwise;
    case GatherKind::tile32: return MXLayout::tile32;
    default: break;
  }
  MXT_FAIL("internal: gather kind ", gather_kind_name(k), " has no single MX layout");
}

MXTensor& member(QuantizedWeight& w, MXLayout l) {
  return l == MXLayout::rowwise ? w.rowwise : l == MXLayout::colwise ? w.colwise : w.tile;
}
bool& has_member(QuantizedWeight& w, MXLayout l) {
  return l == MXLayout::rowwise ? w.has_rowwise : l == MXLayout::colwise ? w.has_colwise
                                                                         : w.has_tile;
}

}  // namespace

size_t packed_bytes(const ShardLayout& L, GatherKind kind) {
  switch (kind) {
    case GatherKind::bf16: return sizeof(uint16_t) * size_t(L.shard_numel());
    case GatherKind::dual: {
      const MxPart r = mx_part(L, MXLayout::rowwise, 0);
      return mx_part(L, MXLayout::colwise, r.end).end;
    }
    default: return mx_part(L, single_layout(kind), 0).end;
  }
}

void pack_shard(const ShardLayout& L, int rank, const float* shard, GatherKind kind,
                const QuantConfig& cfg, uint8_t* out) {
  MXT_CHECK(rank >= 0 && rank < L.world, "pack_shard: rank ", rank, " outside a world of ",
            L.world);
  std::memset(out, 0, packed_bytes(L, kind));
  const int64_t K = L.cols;
  for (const auto& p : L.pieces(rank)) {
    const float* x = shard + p.local_row * K;
    switch (kind) {
      case GatherKind::bf16:
        f32_to_bf16_array(x, reinterpret_cast<uint16_t*>(out) + p.local_row * K, p.rows * K);
        break;
      case GatherKind::dual: {
        MXTensor rw = MXTensor::empty(p.rows, K, MXLayout::rowwise, cfg.elem);
        MXTensor cw = MXTensor::empty(p.rows, K, MXLayout::colwise, cfg.elem);
        quantize_dual(x, p.rows, K, cfg, rw, cw);
        const MxPart pr = mx_part(L, MXLayout::rowwise, 0);
        put_piece(rw, pr, p.local_row, out);
        put_piece(cw, mx_part(L, MXLayout::colwise, pr.end), p.local_row, out);
        break;
      }
      default: {
        const MXLayout l = single_layout(kind);
        put_piece(quantize(x, p.rows, K, l, cfg), mx_part(L, l, 0), p.local_row, out);
      }
    }
  }
}

void unpack_group(const ShardLayout& L, GatherKind kind, Elem elem, const uint8_t* gathered,
                  int64_t group, QuantizedWeight& out) {
  MXT_CHECK(group >= 0 && group < L.groups, "unpack_group: group ", group, " outside [0, ",
            L.groups, ")");
  const int64_t K = L.cols, R = L.rows_per_rank;
  const size_t P = packed_bytes(L, kind);
  // Parts to fill: (layout, offset of its part inside a pack).
  std::vector<std::pair<MXLayout, MxPart>> parts;
  if (kind == GatherKind::bf16) {
    out.bf16.resize(size_t(L.rows * K));
  } else if (kind == GatherKind::dual) {
    const MxPart pr = mx_part(L, MXLayout::rowwise, 0);
    parts = {{MXLayout::rowwise, pr}, {MXLayout::colwise, mx_part(L, MXLayout::colwise, pr.end)}};
  } else {
    const MXLayout l = single_layout(kind);
    parts = {{l, mx_part(L, l, 0)}};
  }
  for (auto& [l, part] : parts) {  // reuses the member's storage when it has some
    MXTensor& t = member(out, l);
    t.rows = L.rows;
    t.cols = K;
    t.layout = l;
    t.elem = elem;
    t.data.resize(size_t(L.rows * K));
    t.scales.resize(size_t(t.scale_rows() * t.scale_cols()));
  }

  const int64_t vs = group * L.group_rows_padded, ve = vs + L.rows;
  for (int64_t r = vs / R; r * R < ve; ++r) {
    const int64_t a = std::max(vs, r * R), b = std::min(ve, (r + 1) * R);
    const uint8_t* pack = gathered + size_t(r) * P;
    const int64_t local_row = a - r * R, group_row = a - vs, rows = b - a;
    if (kind == GatherKind::bf16) {
      std::memcpy(out.bf16.data() + group_row * K,
                  reinterpret_cast<const uint16_t*>(pack) + local_row * K,
                  sizeof(uint16_t) * size_t(rows * K));
    }
    for (auto& [l, part] : parts) get_piece(pack, part, local_row, group_row, rows, member(out, l));
  }
  for (auto& [l, part] : parts) has_member(out, l) = true;
}

void quantize_group_reference(const ShardLayout& L, GatherKind kind, const QuantConfig& cfg,
                              const float* full, int64_t group, QuantizedWeight& out) {
  const float* x = full + group * L.rows * L.cols;
  const int64_t M = L.rows, K = L.cols;
  switch (kind) {
    case GatherKind::bf16:
      out.bf16.resize(size_t(M * K));
      f32_to_bf16_array(x, out.bf16.data(), M * K);
      break;
    case GatherKind::dual:
      out.rowwise = quantize(x, M, K, MXLayout::rowwise, cfg);
      out.colwise = quantize(x, M, K, MXLayout::colwise, cfg);
      out.has_rowwise = out.has_colwise = true;
      break;
    default: {
      const MXLayout l = single_layout(kind);
      member(out, l) = quantize(x, M, K, l, cfg);
      has_member(out, l) = true;
    }
  }
}

}  // namespace mxtrain::dist
