// Rewrites a GGUF file with edited metadata or tensors, for tests of what the loader must refuse
// or honour (the fixtures are made by the gguf package; these are variants of them).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace kvlm::test {

struct GgufTensorOut {
  std::string name;
  std::vector<int64_t> shape;  // outermost first, as TensorInfo holds it
  DType dtype = DType::F32;
  std::string bytes;
  int64_t force_offset = -1;   // >= 0: place the data here (overlap tests); else packed in order
};

GgufValue gguf_u32(uint32_t v);
GgufValue gguf_u8(uint8_t v);
GgufValue gguf_f32(double v);
GgufValue gguf_bool(bool v);
GgufValue gguf_str(const std::string& s);

// Reads `path`, lets `edit` change its metadata and tensors, and returns the new file's path.
std::string edit_gguf(const std::string& path, const std::string& out_name,
                      const std::function<void(std::map<std::string, GgufValue>&, std::vector<GgufTensorOut>&)>& edit);

}  // namespace kvlm::test
