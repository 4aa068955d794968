#include "core/buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "core/memory.h"

namespace kvlm {

namespace {
constexpr size_t kHuge = size_t{1} << 21;  // a transparent huge page
constexpr size_t kLine = 64;              // a cache line: what SIMD loads want

size_t huge_rounded(size_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }

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
  // Large: anonymous pages (zero, and only touched pages cost memory), 2 MiB aligned by mapping
  // one huge page more and trimming the ends.
  const size_t rounded = huge_rounded(bytes);
  void* raw = mmap(nullptr, rounded + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) out_of_memory(bytes);
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

void device_free(Device d, void* p, size_t bytes) {
  KVLM_CHECK(d == Device::Host, "no allocator for device ", device_name(d));
  if (!p) return;
  if (bytes < kHuge)
    std::free(p);
  else
    munmap(p, huge_rounded(bytes));
}

}  // namespace kvlm
