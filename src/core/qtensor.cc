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
  std::vector<uint16_t>().swap(bf16);
  rowwise = MXTensor{};
  colwise = MXTensor{};
  tile = MXTensor{};
  has_rowwise = has_colwise = has_tile = false;
}

}  // namespace mxtrain
