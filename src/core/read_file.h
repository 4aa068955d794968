// The whole of a small file (configs, tokenizers, JSON) as bytes; throws KvlmError naming it.
#pragma once
#include <string>

namespace kvlm {

std::string read_file(const std::string& path);

}  // namespace kvlm
