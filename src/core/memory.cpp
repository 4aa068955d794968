#include "core/memory.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "core/error.h"

namespace kvlm {

namespace {
size_t read_number(const char* path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v) || v == "max") return 0;
  try {
    return static_cast<size_t>(std::stoull(v));
  } catch (...) {
    return 0;
  }
}
}  // namespace

size_t available_memory_bytes() {
  size_t avail = 0;
  {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    size_t kb = 0;
    while (in >> key >> kb >> unit)
      if (key == "MemAvailable:") {
        avail = kb * 1024;
        break;
      }
  }
  size_t limit = read_number("/sys/fs/cgroup/memory.max");
  size_t used = read_number("/sys/fs/cgroup/memory.current");
  if (limit > 0) {
    size_t headroom = limit > used ? limit - used : 0;
    if (avail == 0 || headroom < avail) avail = headroom;
  }
  return avail;
}

std::string format_bytes(double bytes) {
  char buf[64];
  if (bytes >= 1e9) std::snprintf(buf, sizeof buf, "%.3g GB", bytes / 1e9);
  else if (bytes >= 1e6) std::snprintf(buf, sizeof buf, "%.3g MB", bytes / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  return buf;
}

void check_memory_for(size_t bytes, const std::string& what) {
  size_t avail = available_memory_bytes();
  if (avail > 0 && bytes > avail)
    fail(what, " needs ", format_bytes(static_cast<double>(bytes)), " but only ", format_bytes(static_cast<double>(avail)),
         " of memory is available");
}

}  // namespace kvlm
