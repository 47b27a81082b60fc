// core/qtensor.cc — QTensor bookkeeping (mxtrain/qtensor.h).
#include "mxtrain/qtensor.h"

namespace mxtrain {

size_t QTensor::bytes() const {
  size_t n = bf16.size() * sizeof(uint16_t);
  if (has_rowwise) n += rowwise.bytes();
  if (has_colwise) n += colwise.bytes();
  if (has_tile) n += tile.bytes();
  return n;
}

void QTensor::invalidate() {
  bf16.clear();
  has_rowwise = has_colwise = has_tile = false;
}

void QTensor::release() {
  Bf16Buffer().swap(bf16);
  rowwise = MXTensor{};
  colwise = MXTensor{};
  tile = MXTensor{};
  has_rowwise = has_colwise = has_tile = false;
}

QTensor quantize_qtensor(const float* x, int64_t M, int64_t K, const Recipe& r,
                         const QuantConfig& cfg) {
  QTensor t;
  t.rows = M;
  t.cols = K;
  if (!r.quantized()) {
    t.bf16.resize(size_t(M * K));
    f32_to_bf16_array(x, t.bf16.data(), M * K);
  } else if (r.weight_tiled()) {
    t.tile = quantize(x, M, K, MXLayout::tile32, cfg);
    t.has_tile = true;
  } else {
    quantize_dual(x, M, K, cfg, t.rowwise, t.colwise);
    t.has_rowwise = t.has_colwise = true;
  }
  return t;
}

}  // namespace mxtrain
