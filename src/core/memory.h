// What the machine can give: checked before any large allocation, so a request for more than
// exists fails with how much was asked and how much is there, not a bare std::bad_alloc.
#pragma once
#include <cstddef>
#include <string>

namespace kvlm {

// MemAvailable from /proc/meminfo, lowered to the cgroup's memory.max headroom when one is set;
// 0 when neither can be read.
size_t available_memory_bytes();
// Throws KvlmError when `bytes` exceeds what is available: "<what> needs X GB but only Y GB ...".
void check_memory_for(size_t bytes, const std::string& what);
// "1.234 GB" style, for messages.
std::string format_bytes(double bytes);

}  // namespace kvlm
