// mxtrain/qtensor.h — one logical matrix in the forms a recipe's products read.
//
// A QTensor describes a matrix [rows, cols] (an activation, a gradient or a weight) and holds
// whichever copies the recipe's products need:
//   bf16     — the matrix in BF16 (round to nearest even): the bf16 recipe;
//   rowwise  — MX copy with 1x32 blocks along cols (the reduction axis of x·W^T, dy·W);
//   colwise  — MX copy with 32x1 blocks along rows (the token axis wgrad reduces over, and the
//              output axis dgrad reduces over for a weight);
//   tile     — MX copy with 32x32 tiles, which serves both axes (mxfp8-32x32 weights).
// Each MX copy carries its E8M0 scales and element format (quantize.h). How a kernel decodes
// or packs them is the product's business (gemm.h); layers, FSDP's gathered weights and the
// CLI only fill and read these members.
#pragma once

#include <cstdint>
#include <vector>

#include "mxtrain/quantize.h"
#include "mxtrain/recipe.h"

namespace mxtrain {

struct QTensor {
  int64_t rows = 0, cols = 0;
  Bf16Buffer bf16;             // [rows, cols] BF16 bits, or empty
  MXTensor rowwise, colwise, tile;
  bool has_rowwise = false, has_colwise = false, has_tile = false;

  bool has_bf16() const { return !bf16.empty(); }
  bool empty() const { return !has_bf16() && !has_rowwise && !has_colwise && !has_tile; }
  // Bytes of the copies present.
  size_t bytes() const;
  // Marks every copy absent but keeps the storage for the next fill (no page faults).
  void invalidate();
  // Marks every copy absent and frees the storage.
  void release();
};

// The copies recipe `r` makes of a matrix x [M, K] it quantizes with `cfg`: 1x32 recipes
// quantize both axes from one read (quantize_dual: rowwise + colwise), 32x32 recipes make the
// tile copy, and bf16 converts to BF16.
QTensor quantize_qtensor(const float* x, int64_t M, int64_t K, const Recipe& r,
                         const QuantConfig& cfg);

}  // namespace mxtrain
