// tests/dist/gather_format.h — the weight format whose copies a gather carries, for the shard
// and FSDP gather tests (tests/dist/shard_test.cc, tests/mpi/fsdp_gather_mpi_test.cc).
#pragma once

#include "mxtrain/qtensor.h"
#include "mxtrain/recipe.h"

namespace mxtrain::testutil {

// BF16 for the bf16 copy; else MX (E8M0) with 32x32 tiles for the tile copy, 1x32 blocks for
// rowwise/colwise, and cfg's element format and scale rule.
inline TensorFormat gather_format(CopySet kind, const QuantConfig& cfg) {
  TensorFormat f;
  if (kind.has(Copy::bf16)) return f;
  f.scale = ScaleType::e8m0;
  f.block = kind.has(Copy::tile) ? BlockShape::b32x32 : BlockShape::b1x32;
  f.elem = cfg.elem;
  f.rule = cfg.rounding;
  return f;
}

// The blockwise recipe's weight copies: FP32 scales (power-of-two by default) per 1x128 /
// 128x1 block, or per 128x128 tile for the tile copy.
inline TensorFormat blockwise_gather_format(CopySet kind, Elem elem,
                                            ScaleType scale = ScaleType::fp32_pow2) {
  TensorFormat f;
  if (kind.has(Copy::bf16)) return f;
  f.scale = scale;
  f.block = kind.has(Copy::tile) ? BlockShape::b128x128 : BlockShape::b1x128;
  f.elem = elem;
  return f;
}

}  // namespace mxtrain::testutil
