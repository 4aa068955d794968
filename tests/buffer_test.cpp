// Buffer growth: large buffers move their pages (device_grow) instead of copying them; what a
// copy would give (old values kept, new ones zero) must hold either way.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/buffer.h"

namespace kvlm {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(Buffer, DeviceGrowMovesALargeMappingsPagesAndZeroesTheNewOnes) {
  const size_t old_bytes = 5 * kMiB, new_bytes = 13 * kMiB;
  auto* p = static_cast<uint32_t*>(device_alloc(Device::Host, old_bytes));
  for (size_t i = 0; i < old_bytes / 4; ++i) p[i] = static_cast<uint32_t>(i * 2654435761u);
  auto* q = static_cast<uint32_t*>(device_grow(Device::Host, p, old_bytes, new_bytes));
  ASSERT_NE(q, nullptr) << "Linux remaps anonymous mappings (mremap)";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % (2 * kMiB), 0u) << "aligned as device_alloc's large buffers";
  size_t bad = 0;
  for (size_t i = 0; i < old_bytes / 4; ++i) bad += q[i] != static_cast<uint32_t>(i * 2654435761u);
  for (size_t i = old_bytes / 4; i < new_bytes / 4; ++i) bad += q[i] != 0;
  EXPECT_EQ(bad, 0u);
  device_free(Device::Host, q, new_bytes);
  // Small buffers come from the heap: not remapped, the caller copies.
  void* s = device_alloc(Device::Host, 4096);
  EXPECT_EQ(device_grow(Device::Host, s, 4096, 8192), nullptr);
  device_free(Device::Host, s, 4096);
}

TEST(Buffer, GrowingKeepsValuesAndZeroesWhatWasShrunkAway) {
  // Floats: 4 KB (the heap, copied), 2.1 MB (its first growth stays within its 4 MB mapping), 3 MB
  // and 6 MB (remapped).
  // Sizes read through a volatile: with them constant, GCC warned of a memset on a path where
  // big + 1 wraps (it cannot).
  auto opaque = [](size_t v) {
    volatile size_t o = v;
    return static_cast<size_t>(o);
  };
  for (size_t big : {size_t{1000}, size_t{550502}, 3 * kMiB / 4, 6 * kMiB / 4 + 3}) {
    Buffer<float> b(big);
    for (size_t i = 0; i < big; ++i) b[i] = static_cast<float>(i) + 0.5f;
    b.resize(big / 3);  // keeps its capacity; the values past it are stale
    b.resize(big);      // must read as zero again
    for (size_t i = 0; i < big / 3; ++i) ASSERT_EQ(b[i], static_cast<float>(i) + 0.5f) << i;
    for (size_t i = big / 3; i < big; ++i) ASSERT_EQ(b[i], 0.0f) << i;
    b.resize(big + 1);  // past the capacity by one: half as much again
    ASSERT_EQ(b[big], 0.0f);
    ASSERT_EQ(b[big / 3 - 1], static_cast<float>(big / 3 - 1) + 0.5f);
    for (size_t i = 0; i < big; ++i) b[i] = static_cast<float>(i) + 0.25f;
    b.resize(opaque(big - 7));
    b.resize(5 * big + 11);  // past the capacity: moved (large) or copied
    ASSERT_EQ(b.size(), 5 * big + 11);
    EXPECT_GE(b.capacity(), b.size());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    size_t bad = 0;
    for (size_t i = 0; i < big - 7; ++i) bad += b[i] != static_cast<float>(i) + 0.25f;
    for (size_t i = big - 7; i < b.size(); ++i) bad += b[i] != 0.0f;
    EXPECT_EQ(bad, 0u);
    Buffer<float> copy = b;  // a copy has memory of its own
    copy[0] = -1;
    EXPECT_EQ(b[0], 0.25f);
  }
}

}  // namespace
}  // namespace kvlm
