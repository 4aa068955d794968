#include "core/read_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace kvlm {

void require_regular_file(const std::string& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, ": cannot open ", what, " (", std::strerror(errno), ")");
  if (S_ISDIR(st.st_mode)) fail(path, ": is a folder, expected a ", what);
  if (!S_ISREG(st.st_mode)) fail(path, ": is not a regular file (a device, pipe or socket), expected a ", what);
}

std::string read_file(const std::string& path, size_t max_bytes) {
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) fail(path, ": cannot determine its size");
  if (static_cast<size_t>(size) > max_bytes)
    fail(path, ": is ", size, " bytes, over the limit of ", max_bytes, " for this kind of file");
  in.seekg(0, std::ios::beg);
  std::string data(static_cast<size_t>(size), '\0');
  if (size > 0 && !in.read(data.data(), size)) fail(path, ": read failed");
  return data;
}

}  // namespace kvlm
