#include "core/buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/memory.h"

namespace kvlm {

namespace {
constexpr size_t kHuge = size_t{1} << 21;  // a transparent huge page
constexpr size_t kLine = 64;              // a cache line: what SIMD loads want

size_t huge_rounded(size_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }

// Anonymous pages (zero, and only touched pages cost memory), 2 MiB aligned by mapping one huge
// page more and trimming the ends; nullptr when the kernel refuses.
void* map_huge_aligned(size_t rounded) {
  void* raw = mmap(nullptr, rounded + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHuge - 1) / kHuge * kHuge;
  if (aligned > start) munmap(raw, aligned - start);
  if (const size_t tail = start + rounded + kHuge - (aligned + rounded); tail > 0)
    munmap(reinterpret_cast<void*>(aligned + rounded), tail);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(aligned), rounded, MADV_HUGEPAGE);
#endif
  return reinterpret_cast<void*>(aligned);
}

[[noreturn]] void out_of_memory(size_t bytes) {
  fail("could not allocate ", format_bytes(static_cast<double>(bytes)), " of host memory (",
       format_bytes(static_cast<double>(available_memory_bytes())), " available)");
}
}  // namespace

const char* device_name(Device d) {
  switch (d) {
    case Device::Host: return "host";
  }
  return "?";
}

void* device_alloc(Device d, size_t bytes) {
  KVLM_CHECK(d == Device::Host, "no allocator for device ", device_name(d));
  if (bytes == 0) bytes = 1;
  if (bytes < kHuge) {
    void* p = std::aligned_alloc(kLine, (bytes + kLine - 1) / kLine * kLine);
    if (!p) out_of_memory(bytes);
    std::memset(p, 0, bytes);
    return p;
  }
  void* p = map_huge_aligned(huge_rounded(bytes));
  if (!p) out_of_memory(bytes);
  return p;
}

void* device_grow(Device d, void* p, size_t old_bytes, size_t new_bytes) {
  if (d != Device::Host || !p || old_bytes < kHuge || new_bytes <= old_bytes) return nullptr;
  const size_t old_rounded = huge_rounded(old_bytes), new_rounded = huge_rounded(new_bytes);
  if (new_rounded == old_rounded) return p;  // the mapping already spans it; its tail is unwritten
#ifdef MREMAP_FIXED
  // The pages move onto a fresh aligned range (which mremap unmaps first): aligned as device_alloc's.
  void* target = map_huge_aligned(new_rounded);
  if (!target) return nullptr;
  void* q = mremap(p, old_rounded, new_rounded, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  // On failure the target is left alone: the kernel may have unmapped it already, and another
  // thread may have mapped that range since; an untouched reservation costs no memory.
  if (q == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
  madvise(q, new_rounded, MADV_HUGEPAGE);
#endif
  return q;
#else
  return nullptr;
#endif
}

void device_free(Device d, void* p, size_t bytes) {
  KVLM_CHECK(d == Device::Host, "no allocator for device ", device_name(d));
  if (!p) return;
  if (bytes < kHuge)
    std::free(p);
  else
    munmap(p, huge_rounded(bytes));
}

}  // namespace kvlm
