// mxtrain/aligned.h — a std::vector allocator whose storage starts on a 64-byte boundary.
//
// MX codes are written by the AVX-512 kernels 64 bytes at a time; with the buffer on a cache
// line, every row whose length is a multiple of 64 starts on a line too, and big outputs can
// be streamed to memory with aligned non-temporal stores (no realigning shuffle, no partial
// lines at the row ends).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
  // malloc + manual alignment, not the aligned operator new: glibc serves repeated large
  // malloc/free pairs from its heap once the first is freed (dynamic mmap threshold), while
  // its aligned allocations of the same sizes keep going back to mmap (page faults on
  // every tensor). The malloc'd pointer is kept just before the aligned block.
  T* allocate(size_t n) {
    if (n > (SIZE_MAX - kAlign - sizeof(void*)) / sizeof(T)) throw std::bad_array_new_length();
    void* raw = std::malloc(n * sizeof(T) + kAlign + sizeof(void*));
    if (!raw) throw std::bad_alloc();
    const uintptr_t a =
        (reinterpret_cast<uintptr_t>(raw) + sizeof(void*) + kAlign - 1) & ~uintptr_t(kAlign - 1);
    reinterpret_cast<void**>(a)[-1] = raw;
    return reinterpret_cast<T*>(a);
  }
  void deallocate(T* p, size_t) noexcept {
    if (p) std::free(reinterpret_cast<void**>(p)[-1]);
  }
  template <class U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const noexcept { return true; }
};

// Bytes on a 64-byte boundary (MXTensor codes and scales).
using ByteBuffer = std::vector<uint8_t, AlignedAllocator<uint8_t>>;

}  // namespace mxtrain
