// mxtrain/qtensor.h — one logical matrix in the copies a recipe's products read, and the one
// rule saying which copies those are.
//
// A QTensor describes a matrix [rows, cols] (an activation, a gradient or a weight) and holds
// copies of it, each a Copy:
//   bf16     — the matrix in BF16 (round to nearest even): roles kept unscaled;
//   rowwise  — scaled, blocks along cols (1xB: the reduction axis of x·W^T and dy·W);
//   colwise  — scaled, blocks along rows (Bx1: the token axis wgrad reduces over, and the
//              output axis dgrad reduces over for a weight);
//   tile     — scaled, 2-D blocks (or one scale for the tensor), serving both axes.
// `present` says which copies hold the matrix now — the one presence signal for every copy.
// A scaled copy is a ScaledTensor (quantize.h): codes plus a scale grid whose element format,
// scale type and block size travel with it, so other block sizes and scale types need no new
// member. How a kernel decodes or packs them is the product's business (gemm.h); layers,
// FSDP's gathered weights and the CLI fill and read these members and ask copies_needed()
// which ones a product reads.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "mxtrain/quantize.h"
#include "mxtrain/recipe.h"
#include "mxtrain/scale_history.h"

namespace mxtrain {

enum class Copy : uint8_t { bf16, rowwise, colwise, tile };
constexpr int kNumCopies = 4;
const char* copy_name(Copy c);  // "bf16" | "rowwise" | "colwise" | "tile"

// A set of copies (bits by Copy).
class CopySet {
 public:
  constexpr CopySet() = default;
  constexpr CopySet(std::initializer_list<Copy> cs) {
    for (Copy c : cs) bits_ |= bit(c);
  }
  constexpr bool has(Copy c) const { return bits_ & bit(c); }
  constexpr bool contains(CopySet o) const { return (bits_ & o.bits_) == o.bits_; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr int size() const { return __builtin_popcount(bits_); }
  constexpr CopySet operator|(CopySet o) const { return from_bits(bits_ | o.bits_); }
  constexpr CopySet operator-(CopySet o) const { return from_bits(bits_ & ~o.bits_); }
  CopySet& operator|=(CopySet o) { bits_ |= o.bits_; return *this; }
  constexpr bool operator==(const CopySet&) const = default;
  constexpr uint8_t bits() const { return bits_; }
  static constexpr CopySet from_bits(uint8_t b) {
    CopySet s;
    s.bits_ = b & 0xF;
    return s;
  }
  // The one copy of a set of size 1 (throws otherwise).
  Copy only() const;
  // e.g. "rowwise+colwise"; "none" when empty.
  std::string name() const;

 private:
  static constexpr uint8_t bit(Copy c) { return uint8_t(1u << unsigned(c)); }
  uint8_t bits_ = 0;
};

// What a product does with a layer's matrices:
//   forward  y  = x · W^T   reads x and W, each reduced along its columns;
//   dgrad    dx = dy · W    reads dy (along its columns) and W (along its rows);
//   wgrad    dW = dy^T · x  reads dy and x, both reduced along their rows (the tokens).
enum class Use : uint8_t { forward, dgrad, wgrad };
const char* use_name(Use u);

// The copies of role `role`'s matrix that the product of `use` reads under recipe r: one copy
// (bf16 for an unscaled role; tile for a 2-D block or a tensor scale; else rowwise or colwise,
// whichever has its blocks along the reduction axis), or none when the use does not read the
// role. The layers, FSDP's gathers and cache, quantize_qtensor and the products all ask this.
CopySet copies_needed(const Recipe& r, Role role, Use use);
// The union over every use.
CopySet copies_needed(const Recipe& r, Role role);

struct QTensor {
  int64_t rows = 0, cols = 0;
  Bf16Buffer bf16;                  // Copy::bf16: [rows, cols] BF16 bits
  ScaledTensor rowwise, colwise, tile;  // the scaled copies
  CopySet present;                  // the copies that hold this matrix now

  bool has(Copy c) const { return present.has(c); }
  bool has_all(CopySet s) const { return present.contains(s); }
  bool empty() const { return present.empty(); }
  // The scaled copy of that kind (not bf16).
  ScaledTensor& scaled(Copy c);
  const ScaledTensor& scaled(Copy c) const;
  // Bytes of the copies present.
  size_t bytes() const;
  // Marks every copy absent but keeps the storage for the next fill (no page faults).
  void invalidate() { present = {}; }
  // Marks every copy absent and frees the storage.
  void release();
};

// Agrees per-tensor amaxes among the ranks that each hold a piece of one logical matrix:
// amax [n] replaced in place by the maximum over them, NaN winning (nn/parallel.h,
// allreduce_amax). Every rank calls it at the same point with the same n.
using AmaxAgree = std::function<void(float* amax, int n)>;

// Makes the copies `a_copies` of x [M, K] in `a` and `b_copies` in `b` (disjoint sets; b may
// be the same QTensor as a), reusing their storage, with format f (the bf16 copy whatever f).
// A rowwise and a colwise copy are made from one read of x (quantize_dual), whichever
// QTensors they go to. Sets rows/cols of every QTensor it writes to and marks the copies
// present. Only the copies asked for are touched. A format whose scale comes from an amax
// history (fp8-delayed) needs `history`: x is quantized with its scale and its amax is
// recorded there (scale_history.h); other formats ignore it. A 4-bit format with stochastic
// rounding draws its random bits from `sr` (SrKey{} when null): the same key and x give the
// same bytes. A format with a per-tensor scale from the amax (NVFP4) takes, with `agree`,
// the amax agreed over the ranks holding x's pieces (one call for every copy made, the
// plain and the transformed matrix's amax as needed), so each rank's copies of its piece are
// the whole matrix's copies of those elements; without it, x's own amax.
void make_copies(const float* x, int64_t M, int64_t K, const TensorFormat& f, QTensor& a,
                 CopySet a_copies, QTensor& b, CopySet b_copies,
                 ScaleHistory* history = nullptr, const SrKey* sr = nullptr,
                 const AmaxAgree* agree = nullptr);
inline void make_copies(const float* x, int64_t M, int64_t K, const TensorFormat& f,
                        QTensor& t, CopySet copies, ScaleHistory* history = nullptr,
                        const SrKey* sr = nullptr, const AmaxAgree* agree = nullptr) {
  make_copies(x, M, K, f, t, copies, t, {}, history, sr, agree);
}

// Every copy recipe r keeps of a matrix x [M, K] in role `role` (copies_needed(r, role)),
// made with `cfg` (the role's element format and scale rule unless the caller overrides
// them).
QTensor quantize_qtensor(const float* x, int64_t M, int64_t K, const Recipe& r, Role role,
                         const QuantConfig& cfg);

}  // namespace mxtrain
