// nn/tp_wire.cc — a Linear's tensor- and sequence-parallel collectives (nn/tp_wire.h).
#include "nn/tp_wire.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/quantize.h"

namespace mxtrain::nn_detail {

void derive_copies(QTensor& q, const TensorFormat& f, CopySet want, FloatBuffer& scratch,
                   const SrKey* sr) {
  want = want - q.present;
  if (want.empty()) return;
  MXT_CHECK(q.has(Copy::rowwise) || q.has(Copy::bf16), "derive_copies: the gathered copy has "
            "neither a rowwise nor a BF16 copy to make the others from");
  if (scratch.size() < size_t(q.rows * q.cols)) scratch.resize(size_t(q.rows * q.cols));
  if (q.has(Copy::rowwise))
    dequantize(q.rowwise, scratch.data());
  else
    bf16_to_f32_array(q.bf16.data(), scratch.data(), q.rows * q.cols);
  make_copies(scratch.data(), q.rows, q.cols, f, q, want, nullptr, sr);  // whole on every rank
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// An all-gather's cost in the stats: all of it is also TP traffic.
void count_gather(const LinearParallel& p, uint64_t bytes, double ms, bool fp32_route) {
  if (!p.stats) return;
  p.stats->tp_comm_bytes += bytes;
  p.stats->tp_allgather_bytes += bytes;
  p.stats->tp_ms += ms;
  p.stats->sp_fp32_route |= fp32_route;
}

// Another TP collective's cost.
void count(const LinearParallel& p, uint64_t bytes, std::chrono::steady_clock::time_point t0) {
  if (!p.stats) return;
  p.stats->tp_comm_bytes += bytes;
  p.stats->tp_ms += ms_since(t0);
}

}  // namespace

WireScratch& wire_scratch() {
  thread_local WireScratch s;
  return s;
}

void gather_rows(const LinearParallel& p, const float* shard, int64_t Ns, int64_t K, float* out) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t sent = p.group->allgather(shard, out, sizeof(float) * size_t(Ns * K));
  count_gather(p, sent, ms_since(t0), false);
}

namespace {

// Whether a shard of Ns rows quantizes to exactly its rows of the whole matrix's copy c. A
// second, per-tensor scale (NVFP4) is the whole matrix's: its amax is agreed over the group
// first. An RHT copy transforms groups of 16 rows, NVFP4's colwise block edge.
bool travels_exact(Copy c, const TensorFormat& f, int64_t Ns) {
  if (c == Copy::bf16) return true;
  if (c == Copy::rowwise) return true;
  if (c == Copy::colwise) return Ns % block_edge(f.block) == 0;
  return false;  // a 2-D tile or one scale for the tensor (fp8-current) spans every rank's rows
}

// The rank's own stochastic-rounding key for its shard: the layer's, with the rank mixed into
// the tensor id.
SrKey shard_key(const SrKey* sr, int rank) {
  SrKey k = sr ? *sr : SrKey{};
  k.tensor ^= 0x9E3779B9u * uint32_t(rank);
  return k;
}

}  // namespace

namespace {

// gather_copies without the counting: the bytes this rank sent; *fp32_route set when some copy
// travelled as FP32 rows.
uint64_t gather_copies_uncounted(Collectives& group, const float* shard, int64_t Ns, int64_t K,
                                 const TensorFormat& f, CopySet copies, QTensor& out,
                                 bool* fp32_route, const SrKey* sr, const AmaxAgree* agree) {
  const int W = group.size();
  const int64_t M = Ns * W;
  CopySet exact, rest;
  for (int i = 0; i < kNumCopies; ++i)
    if (copies.has(Copy(i))) (travels_exact(Copy(i), f, Ns) ? exact : rest) |= {Copy(i)};
  if (fp32_route) *fp32_route = !rest.empty();
  out.invalidate();
  out.rows = M;
  out.cols = K;
  uint64_t sent = 0;
  if (!exact.empty()) {
    thread_local QTensor local;  // this rank's copies of its rows, storage reused
    thread_local std::vector<uint8_t> send, recv;
    local.invalidate();
    const SrKey key = shard_key(sr, group.rank());
    make_copies(shard, Ns, K, f, local, exact, nullptr, &key, agree);
    size_t P = 0;  // one rank's pack
    if (exact.has(Copy::bf16)) P += local.bf16.size() * sizeof(uint16_t);
    for (Copy c : {Copy::rowwise, Copy::colwise})
      if (exact.has(c)) P += local.scaled(c).bytes();
    send.resize(P);
    recv.resize(P * size_t(W));
    size_t at = 0;
    auto put = [&](const void* p, size_t n) {
      std::memcpy(send.data() + at, p, n);
      at += n;
    };
    if (exact.has(Copy::bf16)) put(local.bf16.data(), local.bf16.size() * sizeof(uint16_t));
    for (Copy c : {Copy::rowwise, Copy::colwise})
      if (exact.has(c)) {
        const ScaledTensor& l = local.scaled(c);
        put(l.data.data(), l.data.size());
        put(l.scales.data(), l.scales.size());
        if (l.has_tensor_scale) put(&l.tensor_scale, sizeof(float));  // the agreed one
      }
    MXT_CHECK(at == P, "internal: a sequence-parallel pack of ", at, " bytes, expected ", P);
    sent += group.allgather(send.data(), recv.data(), P);
    // Lay the ranks' parts end to end.
    if (exact.has(Copy::bf16)) out.bf16.resize(size_t(M * K));
    for (Copy c : {Copy::rowwise, Copy::colwise})
      if (exact.has(c)) {
        const ScaledTensor& l = local.scaled(c);
        ScaledTensor& o = out.scaled(c);
        o.rows = M;
        o.cols = K;
        o.layout = l.layout;
        o.elem = l.elem;
        o.scale_type = l.scale_type;
        o.block = l.block;
        // Everything else a copy says of its codes, too: `o` may hold another recipe's copy
        // from an earlier gather (the scratch is shared by every layer).
        o.has_tensor_scale = l.has_tensor_scale;
        o.tensor_scale = l.tensor_scale;
        o.rht = l.rht;
        o.data.resize(o.data_bytes());
        o.scales.resize(o.scale_bytes());
      }
    for (int r = 0; r < W; ++r) {
      const uint8_t* pack = recv.data() + P * size_t(r);
      size_t off = 0;
      if (exact.has(Copy::bf16)) {
        const size_t n = size_t(Ns * K) * sizeof(uint16_t);
        std::memcpy(reinterpret_cast<uint8_t*>(out.bf16.data()) + n * size_t(r), pack, n);
        off += n;
      }
      for (Copy c : {Copy::rowwise, Copy::colwise})
        if (exact.has(c)) {
          const ScaledTensor& l = local.scaled(c);
          ScaledTensor& o = out.scaled(c);
          std::memcpy(o.data.data() + l.data.size() * size_t(r), pack + off, l.data.size());
          off += l.data.size();
          std::memcpy(o.scales.data() + l.scales.size() * size_t(r), pack + off, l.scales.size());
          off += l.scales.size();
          if (l.has_tensor_scale) {  // every rank quantized with the same agreed scale
            float t;
            std::memcpy(&t, pack + off, sizeof t);
            off += sizeof t;
            MXT_CHECK(std::memcmp(&t, &l.tensor_scale, sizeof t) == 0, "sequence parallelism: "
                      "rank ", r, "'s tensor scale ", t, " differs from this rank's ",
                      l.tensor_scale, " (the amax agreement failed)");
          }
        }
    }
    out.present |= exact;
  }
  if (!rest.empty()) {  // from the whole FP32 matrix
    thread_local std::vector<float> whole;
    whole.resize(size_t(M * K));
    sent += group.allgather(shard, whole.data(), sizeof(float) * size_t(Ns * K));
    make_copies(whole.data(), M, K, f, out, rest, nullptr, sr);
  }
  return sent;
}

}  // namespace

AmaxAgree tp_amax_agree(const LinearParallel& p) {
  if (!p.active()) return {};
  return counted_amax_agree(*p.group, p.stats ? &p.stats->tp_comm_bytes : nullptr,
                            p.stats ? &p.stats->tp_ms : nullptr);
}

void gather_copies(const LinearParallel& p, const float* shard, int64_t Ns, int64_t K,
                   const TensorFormat& f, CopySet copies, QTensor& out, const SrKey* sr) {
  const auto t0 = std::chrono::steady_clock::now();
  bool fp32 = false;
  // The agreement's bytes are TP traffic but not the gather's; its time is in the gather's.
  AmaxAgree agree;
  if (f.quantized() && f.tensor_scale)
    agree = counted_amax_agree(*p.group, p.stats ? &p.stats->tp_comm_bytes : nullptr, nullptr);
  const uint64_t sent =
      gather_copies_uncounted(*p.group, shard, Ns, K, f, copies, out, &fp32, sr, &agree);
  count_gather(p, sent, ms_since(t0), fp32);
}

void gather_grad_copies(const LinearParallel& p, const float* dy_shard, int64_t Ns, int64_t O,
                        const TensorFormat& f, CopySet dgrad, CopySet wgrad, QTensor& q,
                        FloatBuffer& scratch, const SrKey* sr) {
  const bool rowwise = p.wire == SequenceWire::rowwise;
  gather_copies(p, dy_shard, Ns, O, f, rowwise ? dgrad : dgrad | wgrad, q, sr);
  if (rowwise) derive_copies(q, f, wgrad, scratch, sr);
}

QTensor& input_wgrad_copies(const LinearParallel& p, const float* shard, int64_t Ns, int64_t K,
                            const TensorFormat& f, CopySet wgrad, QTensor& kept,
                            QTensor& regathered, FloatBuffer& scratch, const SrKey* sr) {
  if (p.wire == SequenceWire::rowwise) {
    derive_copies(kept, f, wgrad, scratch, sr);
    return kept;
  }
  gather_copies(p, shard, Ns, K, f, wgrad, regathered, sr);
  return regathered;
}

void all_reduce(const LinearParallel& p, float* x, int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  count(p, p.group->allreduce_sum(x, size_t(n)), t0);
}

void reduce_scatter(const LinearParallel& p, const float* full, float* shard, int64_t shard_n) {
  const auto t0 = std::chrono::steady_clock::now();
  count(p, p.group->reduce_scatter_sum(full, shard, size_t(shard_n)), t0);
}

}  // namespace mxtrain::nn_detail
