// mxtrain/aligned.h — a std::vector allocator whose storage starts on a 64-byte boundary,
// and large blocks on a 2 MiB one, advised as transparent huge pages.
//
// MX codes are written by the AVX-512 kernels 64 bytes at a time; with the buffer on a cache
// line, every row whose length is a multiple of 64 starts on a line too, and big outputs can
// be streamed to memory with aligned non-temporal stores (no realigning shuffle, no partial
// lines at the row ends).
// Blocks of kHugeMin bytes and more start on a 2 MiB boundary and are advised to Linux as
// huge-page candidates (madvise MADV_HUGEPAGE; without effect where transparent huge pages
// are off). The quantizers walk big tensors in 32-row strips, many rows at a time: with 4 KiB
// pages that is a TLB miss per page and row, which measured 20-35% of the single-thread time
// of dual-axis quantization on a virtual machine (docs/results/quantize.md).
// The model's FP32 and BF16 tensors (parameters, gradients, optimizer moments, activations,
// saved copies) live in FloatBuffer / Bf16Buffer too. In std::vector's storage (glibc puts
// large blocks 16 bytes into a page, so every 64-byte vector access straddles two cache
// lines) the MXFP8 step on the 2-vCPU virtual machine of docs/results/linear.md ("Training
// step") took 1.0x-2.3x of BF16's from one run to the next, the elementwise kernels several
// times slower in the slow runs; placed here, 1.0x-1.1x.
// MXTRAIN_HUGE_PAGES=0 in the environment turns the advice off (the 2 MiB placement stays).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mxtrain {

// Blocks from this size on get the huge-page placement and advice.
inline constexpr size_t kHugeMin = size_t(2) << 20;

// Whether large blocks are advised as huge pages: unless MXTRAIN_HUGE_PAGES=0 (read once).
inline bool huge_page_advice() {
  static const bool on = [] {
    const char* e = std::getenv("MXTRAIN_HUGE_PAGES");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

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
  // The plain operator new (malloc underneath) + manual alignment, not the aligned operator
  // new: glibc serves repeated large malloc/free pairs from its heap once the first is freed
  // (dynamic mmap threshold), while its aligned allocations of the same sizes keep going back
  // to mmap (page faults on every tensor). Going through operator new keeps these blocks
  // visible to whoever replaces it (the allocation tests). The raw pointer is kept just
  // before the aligned block.
  T* allocate(size_t n) {
    if (n > (SIZE_MAX - kHugeMin - sizeof(void*)) / sizeof(T)) throw std::bad_array_new_length();
    const size_t bytes = n * sizeof(T);
    const size_t align = bytes >= kHugeMin ? kHugeMin : kAlign;
    void* raw = ::operator new(bytes + align + sizeof(void*));
    const uintptr_t a =
        (reinterpret_cast<uintptr_t>(raw) + sizeof(void*) + align - 1) & ~uintptr_t(align - 1);
    reinterpret_cast<void**>(a)[-1] = raw;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Whole 2 MiB pages of the block only; advice, so a failure changes nothing.
    if (bytes >= kHugeMin && huge_page_advice())
      madvise(reinterpret_cast<void*>(a), bytes & ~(kHugeMin - 1), MADV_HUGEPAGE);
#endif
    return reinterpret_cast<T*>(a);
  }
  void deallocate(T* p, size_t) noexcept {
    if (p) ::operator delete(reinterpret_cast<void**>(p)[-1]);
  }
  template <class U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const noexcept { return true; }
};

// Bytes on a 64-byte boundary (ScaledTensor codes and scales).
using ByteBuffer = std::vector<uint8_t, AlignedAllocator<uint8_t>>;
// FP32 tensors a training step streams through (activations, gradients, saved inputs): on a
// cache line, and on huge pages from kHugeMin bytes on.
using FloatBuffer = std::vector<float, AlignedAllocator<float>>;
using Bf16Buffer = std::vector<uint16_t, AlignedAllocator<uint16_t>>;  // BF16 bits

}  // namespace mxtrain
