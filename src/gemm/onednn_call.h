// gemm/onednn_call.h — what gemm/gemm_onednn.cc tells tests about its oneDNN calls.
//
// in_onednn_call(): whether the calling thread is inside a oneDNN primitive's execute.
// oneDNN's execute keeps a small per-call argument map on the heap, which its API gives no way
// to avoid. The steady-state allocation test (tests/alloc) asks this to tell those few small
// allocations apart from the engine's own, which must be none.
// onednn_primitives_created(): how many matmul primitives have been created in this process,
// so tests can count what a run of products builds (tests/gemm).
#pragma once

namespace mxtrain::gemm_detail {

bool in_onednn_call();
long onednn_primitives_created();

}  // namespace mxtrain::gemm_detail
