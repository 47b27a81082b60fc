// dist/mesh.cc — building the process mesh (dist/mesh.h) from MPI sub-communicators.
#include "mxtrain/dist/mesh.h"

#include <sstream>

namespace mxtrain::dist {

Mesh::Mesh(Comm& world, const MeshShape& shape) : world_(world), shape_(shape) {
  const int W = world.size(), r = world.rank();
  const auto refuse = [&](const std::string& why) {
    throw CollectiveError("parallel layout: " + why);
  };
  if (shape.tp < 1 || shape.ep < 1 || shape.etp < 1)
    refuse("tp, ep and etp must be >= 1, got tp " + std::to_string(shape.tp) + ", ep " +
           std::to_string(shape.ep) + ", etp " + std::to_string(shape.etp));
  if (W % shape.tp != 0)
    refuse(std::to_string(W) + " ranks cannot hold tp " + std::to_string(shape.tp) +
           ": the world size must be a multiple of tp (data parallel = world / tp)");
  if (W % (shape.ep * shape.etp) != 0)
    refuse(std::to_string(W) + " ranks cannot hold ep " + std::to_string(shape.ep) + " x etp " +
           std::to_string(shape.etp) + ": the world size must be a multiple of ep x etp "
           "(expert data parallel = world / (ep x etp))");
  const int tp = shape.tp, ep = shape.ep, etp = shape.etp;
  // Every split is collective over the world, in the same order on every rank.
  tp_ = world.split(r / tp, r % tp, "tp");
  dp_ = world.split(r % tp, r / tp, "dp");
  const int etp_rank = r % etp, ep_rank = (r / etp) % ep, edp_rank = r / (ep * etp);
  ep_ = world.split(edp_rank * etp + etp_rank, ep_rank, "ep");
  etp_ = world.split(edp_rank * ep + ep_rank, etp_rank, "etp");
  edp_ = world.split(ep_rank * etp + etp_rank, edp_rank, "edp");
  emp_ = world.split(edp_rank, ep_rank * etp + etp_rank, "emp");
}

namespace {

class CommCollectives : public Collectives {
 public:
  explicit CommCollectives(Comm& c) : c_(c) {}
  int size() const override { return c_.size(); }
  int rank() const override { return c_.rank(); }
  uint64_t allreduce_sum(float* x, size_t n) override {
    return counted(Coll::allreduce, [&] { c_.allreduce_sum(x, n); });
  }
  uint64_t allreduce_sum(double* x, size_t n) override {
    return counted(Coll::allreduce, [&] { c_.allreduce_sum(x, n); });
  }
  uint64_t allreduce_max(int64_t* x, size_t n) override {
    return counted(Coll::allreduce, [&] { c_.allreduce_max(x, n); });
  }
  uint64_t allgather(const void* send, void* recv, size_t bytes_per_rank) override {
    return counted(Coll::allgather, [&] { c_.allgather(send, recv, bytes_per_rank); });
  }
  uint64_t allgatherv(const void* send, size_t send_bytes, void* recv,
                      const size_t* recv_bytes) override {
    return counted(Coll::allgather, [&] { c_.allgatherv(send, send_bytes, recv, recv_bytes); });
  }
  uint64_t reduce_scatter_sum(const float* send, float* recv, size_t chunk) override {
    return counted(Coll::reduce_scatter, [&] { c_.reduce_scatter_sum(send, recv, chunk); });
  }
  uint64_t alltoall(const void* send, void* recv, size_t bytes_per_rank) override {
    return counted(Coll::alltoall, [&] { c_.alltoall(send, recv, bytes_per_rank); });
  }
  uint64_t alltoallv(const void* send, const size_t* send_bytes, void* recv,
                     const size_t* recv_bytes) override {
    return counted(Coll::alltoall, [&] { c_.alltoallv(send, send_bytes, recv, recv_bytes); });
  }

 private:
  template <class F>
  uint64_t counted(Coll kind, F&& call) {
    const uint64_t before = c_.stats()[kind].bytes;
    call();
    return c_.stats()[kind].bytes - before;
  }
  Comm& c_;
};

}  // namespace

std::unique_ptr<Collectives> comm_collectives(Comm& comm) {
  return std::make_unique<CommCollectives>(comm);
}

ModelParallel Mesh::model_parallel() {
  if (!tp_coll_) tp_coll_ = comm_collectives(*tp_);
  if (!ep_coll_) ep_coll_ = comm_collectives(*ep_);
  if (!etp_coll_) etp_coll_ = comm_collectives(*etp_);
  ModelParallel p;
  p.tp = shape_.tp > 1 ? tp_coll_.get() : nullptr;
  p.sequence_parallel = shape_.sequence_parallel && shape_.tp > 1;
  p.sp_wire = shape_.sp_wire;
  p.ep = shape_.ep > 1 ? ep_coll_.get() : nullptr;
  p.etp = shape_.etp > 1 ? etp_coll_.get() : nullptr;
  return p;
}

std::string Mesh::describe() const {
  std::ostringstream os;
  os << world_size() << " rank" << (world_size() == 1 ? "" : "s") << ": dp " << dp_size()
     << " x tp " << shape_.tp;
  if (shape_.sequence_parallel)
    os << ", sequence parallel (" << sequence_wire_name(shape_.sp_wire) << " wire)";
  os << "; experts: edp " << edp_size() << " x ep " << shape_.ep << " x etp " << shape_.etp;
  return os.str();
}

}  // namespace mxtrain::dist
