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

// The smallest headroom (limit - usage) over the process's memory cgroup and its ancestors, for
// cgroup v2 and v1 alike; 0 when no limit is set. A container's or a systemd unit's MemoryMax is
// what decides an OOM kill, not MemAvailable.
size_t cgroup_headroom() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, v2_path, v1_path;
  for (int n = 0; n < 64 && std::getline(in, line); ++n) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) v2_path = path;
    else if ((',' + controllers + ',').find(",memory,") != std::string::npos) v1_path = path;
  }
  constexpr size_t kUnlimited = size_t{1} << 60;  // v1 writes "no limit" as a page-rounded LLONG_MAX
  size_t best = 0;
  auto consider = [&](const std::string& dir, const char* limit_file, const char* usage_file) {
    size_t limit = read_number((dir + limit_file).c_str());
    if (limit == 0 || limit >= kUnlimited) return;
    size_t used = read_number((dir + usage_file).c_str());
    size_t headroom = limit > used ? limit - used : 1;  // 1, not 0: 0 means "no limit" to callers
    if (best == 0 || headroom < best) best = headroom;
  };
  // From the process's own cgroup up to the root (paths are at most a few dozen levels deep).
  auto walk = [&](const std::string& root, std::string path, const char* limit_file, const char* usage_file) {
    for (int depth = 0; depth < 64; ++depth) {
      consider(root + (path == "/" ? "" : path) + "/", limit_file, usage_file);
      if (path.empty() || path == "/") break;
      size_t cut = path.rfind('/');
      path = cut == 0 || cut == std::string::npos ? "/" : path.substr(0, cut);
    }
  };
  if (!v2_path.empty()) walk("/sys/fs/cgroup", v2_path, "memory.max", "memory.current");
  if (!v1_path.empty()) walk("/sys/fs/cgroup/memory", v1_path, "memory.limit_in_bytes", "memory.usage_in_bytes");
  return best;
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
  size_t headroom = cgroup_headroom();
  if (headroom > 0 && (avail == 0 || headroom < avail)) avail = headroom;
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
