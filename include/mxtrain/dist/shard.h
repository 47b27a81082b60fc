// mxtrain/dist/shard.h — how FSDP cuts a weight into block-aligned shards, and the packed
// all-gather buffers (docs/design.md, "FSDP"): quantize a shard ("pre all-gather"), rebuild
// the full quantized weight from every rank's packed shard ("post all-gather").
//
// Row space. A weight [out, in] is one group of `out` rows; an expert weight [E, out, in] is
// E groups. B is the edge of the weight format's blocks (32 for MX and BF16 weights, 128 for
// blockwise FP32-scaled ones). Each group's rows are padded to a multiple of B
// (group_rows_padded) and the groups are laid end to end: the "virtual rows"
// V = E * group_rows_padded. The virtual rows are padded again to world * rows_per_rank,
// rows_per_rank = B * ceil(V / B / world), and rank r owns virtual rows
// [r * rows_per_rank, (r+1) * rows_per_rank). So every shard boundary and every group start is
// a multiple of B rows: Bx1 colwise blocks and BxB tiles never straddle two ranks or two
// experts, rowwise blocks run within a row, and quantizing each rank's pieces gives exactly
// the bytes of quantizing each whole group (the partial block at a group's ragged end is the
// same partial block on one process). Padding rows hold zeros, are never quantized as data,
// and travel as zero bytes. A rank may own only padding (a small weight on many ranks): that
// is allowed, never an error.
//
// A weight with one FP32 scale per tensor (fp8-current, fp8-delayed; one per expert of an
// expert weight) is quantized shard by shard with a scale every rank agrees on first, given
// to pack_shard per group: from the all-reduced amax of the whole group (current scaling) or
// the layer's amax history, which every rank holds alike (delayed scaling). Each piece is
// then the bytes of quantizing the whole group with that scale (the cast is elementwise), and
// its rows are aligned to 32 like BF16's.
//
// Packed shard (one buffer per gather, equal size on every rank): a gather carries a set of
// the weight's copies (qtensor.h; FSDP asks copies_needed which), each copy's part in Copy
// order, for R = rows_per_rank, K = in, Kb = ceil(K/B), s = bytes per scale (1 for E8M0, 4
// for FP32):
//   bf16    : BF16 data [R, K]                                        2·R·K bytes
//   rowwise : fp8 data [R, K], then rowwise scales [R, Kb]           R·K + s·R·Kb
//   colwise : fp8 data [R, K], then colwise scales [R/B, K]          R·K + s·R·K/B
//   tile    : fp8 data [R, K], then tile scales [R/B, Kb]            R·K + s·R/B·Kb
//             (one scale per tensor: scale_inv per group [E] FP32      R·K + 4·E)
// so rowwise+colwise is the sum of both. The gathered buffer is the world's packs in rank
// order. With N = world·R·K (the padded element count) and K a multiple of 32 the MX figures
// are those of docs/design.md, "Bytes per step" exactly: 2N, N + N/32, N + N/32,
// 2N + 2N/32, N + N/1024 bytes; blockwise 128x128 tiles with K a multiple of 128 move
// N + 4N/16384 = N + N/4096.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/nn/linear.h"
#include "mxtrain/qtensor.h"
#include "mxtrain/quantize.h"

namespace mxtrain::dist {

// A run of rows of one group inside one rank's shard.
struct ShardPiece {
  int64_t group = 0;       // expert index (0 for a 2-D weight)
  int64_t group_row = 0;   // first row inside the group (a multiple of the block edge)
  int64_t rows = 0;        // number of valid rows
  int64_t local_row = 0;   // first row inside the shard (a multiple of the block edge)
};

struct ShardLayout {
  int64_t groups = 1;             // E
  int64_t rows = 0;               // valid rows per group (out)
  int64_t cols = 0;               // in
  int64_t group_rows_padded = 0;  // block * ceil(rows / block)
  int world = 1;
  int64_t rows_per_rank = 0;      // multiple of block
  int64_t block = kMXBlock;       // B: the edge of the weight format's blocks (32 or 128)
  int scale_bytes = 1;            // bytes per scale of the weight format (1 or 4)
  int64_t row_bytes = 0;          // bytes of one row of codes: cols, or ceil(cols/2) for 4-bit
  // 4-bit copies with a second, per-tensor FP32 scale (NVFP4): each copy's pack part ends with
  // one FP32 tensor scale per group (every rank's alike: from the group's agreed amax).
  bool second_scale = false;
  bool tensor_scale = false;      // one FP32 scale per group (block edge 32: row alignment)

  // shape: [out, in] or [E, out, in]; world >= 1; weight: the format the weight is gathered
  // in (BF16 by default). Throws on other ranks or empty dims.
  static ShardLayout make(const std::vector<int64_t>& shape, int world,
                          const TensorFormat& weight = {});

  int64_t virtual_rows() const { return groups * group_rows_padded; }
  int64_t padded_rows() const { return int64_t(world) * rows_per_rank; }
  int64_t shard_numel() const { return rows_per_rank * cols; }          // per rank, padded
  int64_t padded_numel() const { return padded_rows() * cols; }         // "N" of FSDP bytes
  int64_t numel() const { return groups * rows * cols; }                // unpadded
  int64_t valid_rows(int rank) const;                                   // rows that are data
  std::vector<ShardPiece> pieces(int rank) const;
  std::string describe() const;
};

// ---- FP32 shards ----------------------------------------------------------------------------
// full: [E, out, in] (unpadded) -> shard: [rows_per_rank, in] of `rank` (padding rows zero).
void slice_shard(const ShardLayout& L, int rank, const float* full, float* shard);
// shard of `rank` -> its rows of full (padding ignored).
void place_shard(const ShardLayout& L, int rank, const float* shard, float* full);
// full: [E, out, in] -> padded: [padded_rows, in] in virtual-row order (the reduce-scatter
// input: rank r's chunk is rows [r*R, (r+1)*R)).
void pad_full(const ShardLayout& L, const float* full, float* padded);

// ---- packed quantized shards --------------------------------------------------------------
// Bytes of one rank's pack of the copies `copies`.
size_t packed_bytes(const ShardLayout& L, CopySet copies);
// Pre all-gather. shard: [rows_per_rank, in] FP32 of `rank`, quantized in the weight's format
// f (qtensor.h make_copies); out: [packed_bytes]. A per-tensor format needs group_scales
// [E] (the agreed scale of each group) and writes each group's amax over this rank's rows
// into group_amax [E] when given (0 for a group it holds no rows of). A 4-bit format with a
// per-tensor scale (NVFP4; L.second_scale) needs group_scales [E] holding each group's agreed
// amax (the maximum over all ranks of shard_group_amax(..., four_bit = true)): every rank then
// quantizes its rows exactly as one process quantizes the whole group.
void pack_shard(const ShardLayout& L, int rank, const float* shard, CopySet copies,
                const TensorFormat& f, uint8_t* out, const float* group_scales = nullptr,
                float* group_amax = nullptr);
// max |x| (NaN ignored; four_bit: NaN winning, as fp4_amax) of each group over this rank's
// rows: out [E] (0 where none): what current scaling all-reduces (max) before pack_shard.
void shard_group_amax(const ShardLayout& L, int rank, const float* shard, float* out,
                      bool four_bit = false);
// Post all-gather. gathered: [world * packed_bytes], rank order, packed in format f (the one
// L was made for). Fills group `group` of the weight into `out`: its copies `copies`, marked
// present, and its shape [out, in]. Other copies are left as they are; out.version is not
// touched (the caller tags it).
void unpack_group(const ShardLayout& L, CopySet copies, const TensorFormat& f,
                  const uint8_t* gathered, int64_t group, QuantizedWeight& out);

// The one-process reference: the same copies quantized from the whole group (a delayed
// per-tensor format with `history`'s scale). full: [E, out, in] FP32.
void quantize_group_reference(const ShardLayout& L, CopySet copies, const TensorFormat& f,
                              const float* full, int64_t group, QuantizedWeight& out,
                              ScaleHistory* history = nullptr);

}  // namespace mxtrain::dist
