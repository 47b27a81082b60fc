// examples/quantize_matrix/main.cc — a program built against the installed mxtrain package
// (find_package(mxtrain), target mxtrain::mxtrain): MX-quantizes a small float32 matrix to
// MXFP8 (E4M3 elements, one E8M0 scale per 1x32 block), dequantizes it and prints the
// scales, the first row's FP8 codes and the round-trip error.
//
// Every 1x32 block holds 896 as its largest magnitude, so each block's scale is 2^1 (E8M0
// byte 128) and every value / 2 is an exact E4M3 value: the round trip is exact.
#include <cmath>
#include <cstdio>
#include <vector>

#include "mxtrain/quantize.h"

int main() {
  const int64_t rows = 4, cols = 64;
  const float cycle[] = {1.0f, -2.5f, 0.15625f, 448.0f, 896.0f};
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = cycle[i % 5];

  mxtrain::QuantConfig cfg;  // E4M3 elements, rceil scale rounding
  mxtrain::ScaledTensor q =
      mxtrain::quantize(x.data(), rows, cols, mxtrain::MXLayout::rowwise, cfg);
  std::vector<float> back(x.size());
  mxtrain::dequantize(q, back.data());

  std::printf("quantized %lldx%lld float32 -> %s elements, %s blocks\n", (long long)rows,
              (long long)cols, mxtrain::elem_name(q.elem), mxtrain::layout_name(q.layout));
  std::printf("scales (%lldx%lld E8M0):", (long long)q.scale_rows(), (long long)q.scale_cols());
  for (size_t i = 0; i < q.scales.size(); ++i) std::printf(" %u", unsigned(q.scales.data()[i]));
  std::printf("\nrow 0 codes:");
  for (int64_t c = 0; c < 10; ++c) std::printf(" %02x", unsigned(q.data.data()[c]));
  double err = 0;
  for (size_t i = 0; i < x.size(); ++i) err = std::fmax(err, std::fabs(double(back[i]) - x[i]));
  std::printf("\nbytes: %zu data + %zu scales\nround trip: max abs error %g over %zu values\n",
              q.data.size(), q.scales.size(), err, x.size());
  return err == 0 ? 0 : 1;
}
