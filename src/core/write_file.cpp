#include "core/write_file.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

namespace kvlm {

bool write_file_atomically(const std::string& path, std::initializer_list<std::pair<const void*, size_t>> parts) {
  const std::string tmp = path + "." + std::to_string(getpid()) + ".tmp";
  bool ok = false;
  if (FILE* f = std::fopen(tmp.c_str(), "wb")) {
    ok = true;
    for (const auto& [data, n] : parts) ok = ok && std::fwrite(data, 1, n, f) == n;
    ok = std::fclose(f) == 0 && ok;
  }
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (ok && !ec) return true;
  std::filesystem::remove(tmp, ec);
  return false;
}

}  // namespace kvlm
