// mxtrain/dist/mesh.h — the process mesh of Megatron's parallel layouts (docs/distributed.md,
// "Parallel layouts"): which ranks share a tensor-parallel layer, which hold replicas of the
// same shard (data parallel), and how the experts of an MoE layer are spread.
//
// With W ranks, tensor parallelism tp, expert parallelism ep and expert-tensor parallelism etp
// (Megatron's order, tensor ranks innermost):
//   dense layers   tp_rank = r % tp,        dp_rank = r / tp,            dp  = W / tp
//   expert layers  etp_rank = r % etp,      ep_rank = (r / etp) % ep,   edp = W / (ep·etp)
//                  edp_rank = r / (ep·etp)
// Each group is an MPI sub-communicator (Comm::split): tp() holds the ranks of one dp_rank,
// dp() those of one tp_rank, ep() the ranks of one (edp_rank, etp_rank), etp() those of one
// (edp_rank, ep_rank), edp() those of one (ep_rank, etp_rank), emp() ("expert model parallel")
// those of one edp_rank, ranked ep_rank·etp + etp_rank. Building a mesh is collective over the
// world; a layout the world size does not divide is refused on every rank.
#pragma once

#include <memory>
#include <string>

#include "mxtrain/dist/comm.h"
#include "mxtrain/nn/parallel.h"

namespace mxtrain::dist {

struct MeshShape {
  int tp = 1, ep = 1, etp = 1;
  bool sequence_parallel = false;
  SequenceWire sp_wire = SequenceWire::exact;
  bool operator==(const MeshShape&) const = default;
};

class Mesh {
 public:
  // Collective over `world`. Throws CollectiveError (every rank alike) when world.size() is
  // not a multiple of tp or of ep·etp, or a size is below 1.
  Mesh(Comm& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  int world_size() const { return world_.size(); }
  int rank() const { return world_.rank(); }
  int dp_size() const { return world_.size() / shape_.tp; }
  int edp_size() const { return world_.size() / (shape_.ep * shape_.etp); }
  int tp_rank() const { return tp_->rank(); }
  int dp_rank() const { return dp_->rank(); }
  int ep_rank() const { return ep_->rank(); }
  int etp_rank() const { return etp_->rank(); }
  int edp_rank() const { return edp_->rank(); }

  Comm& world() { return world_; }
  Comm& tp() { return *tp_; }
  Comm& dp() { return *dp_; }
  Comm& ep() { return *ep_; }
  Comm& etp() { return *etp_; }
  Comm& edp() { return *edp_; }
  Comm& emp() { return *emp_; }

  // e.g. "4 ranks: dp 2 x tp 2, sequence parallel; experts: edp 2 x ep 2 x etp 1"
  std::string describe() const;
  // The model's view of its groups (nn/parallel.h): tp, ep and etp over these communicators,
  // null where the size is 1. Valid while the mesh lives.
  ModelParallel model_parallel();

 private:
  Comm& world_;
  MeshShape shape_;
  std::unique_ptr<Comm> tp_, dp_, ep_, etp_, edp_, emp_;
  std::unique_ptr<Collectives> tp_coll_, ep_coll_, etp_coll_;
};

// Collectives (nn/parallel.h) over a communicator; each call returns the bytes the
// communicator counted for it.
std::unique_ptr<Collectives> comm_collectives(Comm& comm);

}  // namespace mxtrain::dist
