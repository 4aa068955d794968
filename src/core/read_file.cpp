#include "core/read_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace kvlm {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kvlm
