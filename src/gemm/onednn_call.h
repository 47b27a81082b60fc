// gemm/onednn_call.h — whether the calling thread is inside a oneDNN primitive's execute.
//
// oneDNN's execute keeps a small per-call argument map on the heap, which its API gives no way
// to avoid. The steady-state allocation test (tests/alloc) asks this to tell those few small
// allocations apart from the engine's own, which must be none.
#pragma once

namespace mxtrain::detail {

bool in_onednn_call();

}  // namespace mxtrain::detail
