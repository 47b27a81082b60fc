// dist/fsdp_internal.h — the per-module state behind dist/fsdp.h, shared by fsdp.cc (setup,
// gathers, providers), fsdp_grad.cc (gradients, optimizer views, checkpoints) and
// fsdp_bench.cc. Internal to src/dist.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/dist/fsdp.h"

namespace mxtrain::dist {

constexpr uint64_t kNoVersion = QuantizedWeight::kNoVersion;
constexpr int kNumGatherSlots = 1 << kNumCopies;  // one per set of copies a gather may carry

// One all-gather of one set of copies for one module: the packed local shard (kept while the
// parameter version and the weight's format stay the same, so micro-batches of one step
// quantize the shard once) and the gathered buffer (kept until the full weight is rebuilt).
struct GatherSlot {
  std::vector<uint8_t> send;  // [packed_bytes]
  uint64_t send_version = kNoVersion;
  TensorFormat send_format{};
  std::vector<uint8_t> recv;  // [world * packed_bytes], rank order
  uint64_t version = kNoVersion;  // parameter version of recv
  Request req;
  bool pending = false;  // started, not yet waited
  bool ready = false;    // recv holds the gathered packs of `version`
  std::vector<uint8_t> rebuilt;  // per expert: already unpacked from recv
  int64_t rebuilt_count = 0;
};

struct Fsdp::Module {
  std::string name;
  Linear* linear = nullptr;
  GroupedLinear* grouped = nullptr;
  Parameter* weight = nullptr;
  ShardLayout layout;
  FloatBuffer value, grad, m, v;  // this rank's shard [rows_per_rank * in]
  std::array<GatherSlot, kNumGatherSlots> slots;  // by CopySet::bits() of what they carry
  bool input_grad_needed = true;
  // The gathered copies serve the backward too and are kept from forward until a version
  // bump (post_forward decides: not resharded).
  bool keep_caches = false;
  int home = -1;  // the pool buffer lent to this module last time (dist/fsdp_grad.cc)
  // Gradient path (dist/fsdp.h, "Gradients"): the pool buffer lent to the layer between
  // pre_backward and post_backward (-1: none), and whether `grad` holds a contribution since
  // the last reduce_gradients() (false: the next reduce-scatter result is written into it,
  // not added).
  int lent = -1;
  bool shard_grad_live = false;
  // One scale per tensor (fp8-current, fp8-delayed): each group's agreed scale and this
  // rank's amax of it, for pack_shard (sized once).
  std::vector<float> group_scales, group_amax;

  const Recipe& recipe() const {
    return linear ? linear->precision().recipe : grouped->precision().recipe;
  }
  int64_t num_caches() const { return linear ? 1 : grouped->num_experts(); }
  // The weight's delayed-scaling history of group e (fp8-delayed), else nullptr.
  ScaleHistory* weight_history(int64_t e) {
    return (linear ? linear->scale_histories() : grouped->scale_histories()).get(Role::weight, e);
  }
  // The layer's agreement of its tensors' amaxes over the group that holds slices of them (a
  // tensor- or expert-tensor-parallel group; empty when this rank holds whole tensors).
  const AmaxAgree& layer_agree() {
    return (linear ? linear->scale_histories() : grouped->scale_histories()).agree;
  }
  QuantizedWeight& cache(int64_t e) {
    return linear ? linear->weight_cache() : grouped->weight_caches()[size_t(e)];
  }
  FloatBuffer& field(ShardField f) {
    switch (f) {
      case ShardField::value: return value;
      case ShardField::grad: return grad;
      case ShardField::m: return m;
      case ShardField::v: return v;
    }
    return value;
  }
};

// One reduce-scatter of a module's full gradient: the padded send buffer, and where the
// shard arrives (straight into the module's grad when it is the step's first contribution,
// else into `recv`, added on completion). Declared before the request, so the request (whose
// destructor completes it) goes first and the buffers outlive it.
struct GradSlot {
  FloatBuffer send;  // [padded_numel], when the layout pads (else the pool buffer is sent)
  FloatBuffer recv;  // [shard_numel] when adding
  int module = -1;          // -1: free
  int pool_index = -1;      // the pool buffer being sent from (busy until completion), or -1
  bool add = false;
  Request req;
};

struct Fsdp::GradState {
  std::vector<FloatBuffer> pool;  // full-size gradient buffers lent to layers (capacity kept)
  std::vector<char> pool_busy;    // lent, or being sent from
  // Declared after the pool, so it is destroyed first: its request (whose destructor
  // completes it) may be sending from a pool buffer.
  GradSlot rs;  // the one reduce-scatter in flight at a time
};

struct Fsdp::Replicated {
  Parameter* p = nullptr;
  FloatBuffer m, v;
  FloatBuffer& field(ShardField f) {
    switch (f) {
      case ShardField::value: return p->value;
      case ShardField::grad: return p->grad;
      case ShardField::m: return m;
      case ShardField::v: return v;
    }
    return p->value;
  }
};

std::string shape_str(const std::vector<int64_t>& s);

}  // namespace mxtrain::dist
