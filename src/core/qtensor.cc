// core/qtensor.cc — which copies a product reads (copies_needed), QTensor bookkeeping, and
// making copies (mxtrain/qtensor.h).
#include "mxtrain/qtensor.h"

#include "mxtrain/common.h"

namespace mxtrain {

const char* copy_name(Copy c) {
  switch (c) {
    case Copy::bf16: return "bf16";
    case Copy::rowwise: return "rowwise";
    case Copy::colwise: return "colwise";
    case Copy::tile: return "tile";
  }
  return "?";
}

Copy CopySet::only() const {
  MXT_CHECK(size() == 1, "internal: expected one copy, got ", name());
  return Copy(__builtin_ctz(bits_));
}

std::string CopySet::name() const {
  std::string s;
  for (int i = 0; i < kNumCopies; ++i)
    if (has(Copy(i))) s += (s.empty() ? "" : "+") + std::string(copy_name(Copy(i)));
  return s.empty() ? "none" : s;
}

const char* use_name(Use u) {
  switch (u) {
    case Use::forward: return "forward";
    case Use::dgrad: return "dgrad";
    case Use::wgrad: return "wgrad";
  }
  return "?";
}

namespace {

// The axis of role's matrix that use's product reduces over, if it reads the role at all.
enum class Axis : uint8_t { none, cols, rows };

Axis reduction_axis(Role role, Use use) {
  switch (use) {
    case Use::forward: return role == Role::grad ? Axis::none : Axis::cols;
    case Use::dgrad:
      return role == Role::input ? Axis::none : role == Role::grad ? Axis::cols : Axis::rows;
    case Use::wgrad: return role == Role::weight ? Axis::none : Axis::rows;
  }
  return Axis::none;
}

}  // namespace

CopySet copies_needed(const Recipe& r, Role role, Use use) {
  const Axis axis = reduction_axis(role, use);
  if (axis == Axis::none) return {};
  const TensorFormat& f = r.role(role);
  if (!f.quantized()) return {Copy::bf16};
  if (block_is_2d(f.block)) return {Copy::tile};
  return {axis == Axis::cols ? Copy::rowwise : Copy::colwise};
}

CopySet copies_needed(const Recipe& r, Role role) {
  return copies_needed(r, role, Use::forward) | copies_needed(r, role, Use::dgrad) |
         copies_needed(r, role, Use::wgrad);
}

ScaledTensor& QTensor::scaled(Copy c) {
  MXT_CHECK(c != Copy::bf16, "internal: the bf16 copy is not a scaled copy");
  return c == Copy::rowwise ? rowwise : c == Copy::colwise ? colwise : tile;
}

const ScaledTensor& QTensor::scaled(Copy c) const { return const_cast<QTensor*>(this)->scaled(c); }

size_t QTensor::bytes() const {
  size_t n = has(Copy::bf16) ? bf16.size() * sizeof(uint16_t) : 0;
  for (Copy c : {Copy::rowwise, Copy::colwise, Copy::tile})
    if (has(c)) n += scaled(c).bytes();
  return n;
}

void QTensor::release() {
  Bf16Buffer().swap(bf16);
  rowwise = ScaledTensor{};
  colwise = ScaledTensor{};
  tile = ScaledTensor{};
  present = {};
}

namespace {

// out = quantize(x [M, K], layout, cfg), reusing out's storage.
void quantize_reuse(const float* x, int64_t M, int64_t K, MXLayout layout, const QuantConfig& cfg,
                    ScaledTensor& out) {
  out.rows = M;
  out.cols = K;
  out.layout = layout;
  out.elem = cfg.elem;
  out.scale_type = ScaleType::e8m0;
  out.block = kMXBlock;
  out.data.resize(size_t(M * K));
  out.scales.resize(out.scale_bytes());
  quantize_into(x, M, K, cfg, out);
}

// Which kernels make the format's scaled copies: MX (E8M0 scales per 1x32 or 32x32 block),
// FP32-scaled blocks (fp32 / fp32_pow2 scales per 1x128 or 128x128 block), one FP32 scale
// per tensor, or 4-bit (E2M1 codes: NVFP4 E4M3 scales per 1x16 / 16x16, MXFP4 E8M0 per 1x32 /
// 32x32).
enum class Kernels : uint8_t { mx, fp32_blocks, fp32_tensor, fp4 };

Kernels kernels_for(const TensorFormat& f) {
  const bool fp32 = f.scale == ScaleType::fp32 || f.scale == ScaleType::fp32_pow2;
  const bool b128 = f.block == BlockShape::b1x128 || f.block == BlockShape::b128x128;
  const bool b32 = f.block == BlockShape::b1x32 || f.block == BlockShape::b32x32;
  const bool b16 = f.block == BlockShape::b1x16 || f.block == BlockShape::b16x16;
  if (f.is_4bit()) {
    MXT_CHECK((f.scale == ScaleType::e4m3 && b16) || (f.scale == ScaleType::e8m0 && b32),
              "quantizing with ", f.describe(), " needs kernels this build does not have "
              "(4-bit: E4M3 scales per 1x16 or 16x16 block (NVFP4), E8M0 per 1x32 or 32x32 "
              "(MXFP4))");
    return Kernels::fp4;
  }
  if (f.scale == ScaleType::fp32 && f.block == BlockShape::tensor) return Kernels::fp32_tensor;
  MXT_CHECK((f.scale == ScaleType::e8m0 && b32) || (fp32 && b128),
            "quantizing with ", f.describe(), " needs kernels this build does not have (MX: "
            "E8M0 scales per 1x32 or 32x32 block; FP32 scales per 1x128 or 128x128 block or "
            "per tensor)");
  return fp32 ? Kernels::fp32_blocks : Kernels::mx;
}

void mark_present(QTensor* row, QTensor* col, QTensor* tile) {
  if (row) row->present |= {Copy::rowwise};
  if (col) col->present |= {Copy::colwise};
  if (tile) tile->present |= {Copy::tile};
}

// 4-bit copies with a per-tensor scale (NVFP4). Their amaxes: x's (rowwise, tile, plain
// colwise) and, for an RHT colwise copy, the transformed matrix's (nothing held) — both from
// one read of x when both are wanted (fp4_amaxes) — agreed in one call over the ranks holding
// x's pieces when `agree` is given; then each copy quantized with its amax, which is what
// quantize_fp4 does with amaxes of its own.
void make_fp4_scaled(const float* x, int64_t M, int64_t K, const TensorFormat& f,
                     const SrKey& key, QTensor* row, QTensor* col, QTensor* tile,
                     const AmaxAgree* agree) {
  const Fp4Config ccfg = f.fp4_config(MXLayout::colwise, key);
  const bool rht = col && ccfg.rht;
  const bool plain = row || tile || (col && !rht);
  float amax[2] = {0.f, 0.f};  // x's, the transformed matrix's
  int n = 0;
  if (plain && rht) {
    const Fp4Amaxes a = fp4_amaxes(x, M, K);
    amax[n++] = a.plain;
    amax[n++] = a.rht;
  } else {
    amax[n++] = plain ? fp4_amax(x, M * K) : fp4_rht_amax(x, M, K);
  }
  if (agree) (*agree)(amax, n);
  const float a_plain = amax[0], a_rht = amax[plain ? 1 : 0];
  if (row) quantize_fp4(x, M, K, MXLayout::rowwise, f.fp4_config(MXLayout::rowwise, key),
                        row->rowwise, a_plain);
  if (col) quantize_fp4(x, M, K, MXLayout::colwise, ccfg, col->colwise, rht ? a_rht : a_plain);
  if (tile) quantize_fp4(x, M, K, MXLayout::tile, f.fp4_config(MXLayout::tile, key),
                         tile->tile, a_plain);
}

}  // namespace

void make_copies(const float* x, int64_t M, int64_t K, const TensorFormat& f, QTensor& a,
                 CopySet a_copies, QTensor& b, CopySet b_copies, ScaleHistory* history,
                 const SrKey* sr, const AmaxAgree* agree) {
  MXT_CHECK((a_copies.bits() & b_copies.bits()) == 0, "internal: make_copies got one copy twice");
  for (QTensor* t : {&a, &b}) {
    t->rows = M;
    t->cols = K;
  }
  // Where each copy goes.
  QTensor* owner[kNumCopies] = {};
  for (int i = 0; i < kNumCopies; ++i) {
    if (a_copies.has(Copy(i))) owner[i] = &a;
    if (b_copies.has(Copy(i))) owner[i] = &b;
  }
  if (QTensor* t = owner[int(Copy::bf16)]) {
    t->bf16.resize(size_t(M * K));
    f32_to_bf16_array(x, t->bf16.data(), M * K);
    t->present |= {Copy::bf16};
  }
  QTensor* row = owner[int(Copy::rowwise)];
  QTensor* col = owner[int(Copy::colwise)];
  QTensor* tile = owner[int(Copy::tile)];
  if (!row && !col && !tile) return;
  // What only NVFP4 copies set: a reused copy (a scratch shared by layers of other recipes)
  // must not keep an earlier copy's tensor scale or transform.
  for (ScaledTensor* t : {row ? &row->rowwise : nullptr, col ? &col->colwise : nullptr,
                          tile ? &tile->tile : nullptr})
    if (t) {
      t->has_tensor_scale = false;
      t->tensor_scale = 1.f;
      t->rht = false;
    }
  const Kernels kernels = kernels_for(f);
  if (kernels == Kernels::fp4) {
    // Each copy from the original values; the colwise one of an RHT format from the
    // transformed matrix (with its own tensor amax).
    const SrKey key = sr ? *sr : SrKey{};
    if (f.tensor_scale) {
      make_fp4_scaled(x, M, K, f, key, row, col, tile, agree && *agree ? agree : nullptr);
      mark_present(row, col, tile);
      return;
    }
    if (row) quantize_fp4(x, M, K, MXLayout::rowwise, f.fp4_config(MXLayout::rowwise, key),
                          row->rowwise);
    if (col) quantize_fp4(x, M, K, MXLayout::colwise, f.fp4_config(MXLayout::colwise, key),
                          col->colwise);
    if (tile) quantize_fp4(x, M, K, MXLayout::tile, f.fp4_config(MXLayout::tile, key),
                           tile->tile);
    mark_present(row, col, tile);
    return;
  }
  if (kernels == Kernels::fp32_tensor) {
    // One scale serves both axes: copies_needed asks for the tile copy only.
    MXT_CHECK(!row && !col, "internal: a per-tensor format has only a tile copy");
    if (f.source == ScaleSource::amax_history) {
      MXT_CHECK(history != nullptr, "quantizing with ", f.describe(), " needs the scale from "
                "an amax history, a training state (the layers keep one per tensor)");
      history->record(quantize_tensor_given_scale(x, M, K, f.elem, history->scale(),
                                                  tile->tile));
    } else {
      quantize_tensor_scaled(x, M, K, {f.elem, f.amax_epsilon}, tile->tile);
    }
    mark_present(row, col, tile);
    return;
  }
  if (kernels == Kernels::fp32_blocks) {
    const BlockQuantConfig bc{f.elem, f.scale, f.amax_epsilon};
    if (row && col)
      quantize_blocks_dual(x, M, K, bc, row->rowwise, col->colwise);
    else if (row)
      quantize_blocks_into(x, M, K, MXLayout::rowwise, bc, row->rowwise);
    else if (col)
      quantize_blocks_into(x, M, K, MXLayout::colwise, bc, col->colwise);
    if (tile) quantize_blocks_into(x, M, K, MXLayout::tile, bc, tile->tile);
    mark_present(row, col, tile);
    return;
  }
  const QuantConfig cfg = f.quant_config();
  if (row && col) {
    quantize_dual(x, M, K, cfg, row->rowwise, col->colwise);
  } else if (row) {
    quantize_reuse(x, M, K, MXLayout::rowwise, cfg, row->rowwise);
  } else if (col) {
    quantize_reuse(x, M, K, MXLayout::colwise, cfg, col->colwise);
  }
  if (tile) quantize_reuse(x, M, K, MXLayout::tile, cfg, tile->tile);
  mark_present(row, col, tile);
}

QTensor quantize_qtensor(const float* x, int64_t M, int64_t K, const Recipe& r, Role role,
                         const QuantConfig& cfg) {
  TensorFormat f = r.role(role);
  f.elem = cfg.elem;
  f.rule = cfg.rounding;
  QTensor t;
  make_copies(x, M, K, f, t, copies_needed(r, role));
  return t;
}

}  // namespace mxtrain
