// mxtrain/aligned.h — a std::vector allocator whose storage starts on a 64-byte boundary.
//
// MX codes are written by the AVX-512 kernels 64 bytes at a time; with the buffer on a cache
// line, every row whose length is a multiple of 64 starts on a line too, and big outputs can
// be streamed to memory with aligned non-temporal stores (no realigning shuffle, no partial
// lines at the row ends).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace mxtrain {

template <class T, size_t kAlign = 64>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() noexcept = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) noexcept {}
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlign)));
  }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t(kAlign)); }
  template <class U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const noexcept { return true; }
};

// Bytes on a 64-byte boundary (MXTensor codes and scales).
using ByteBuffer = std::vector<uint8_t, AlignedAllocator<uint8_t>>;

}  // namespace mxtrain
