// Named tensors read from model files, still in their stored dtype and memory-mapped.
// Readers (safetensors, GGUF, llama2.c) fill a TensorSource; model/ binds names to weights.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace kvlm {

enum class DType { F32, F16, BF16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // outermost first, as stored
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // for error messages

  int64_t numel() const;
};

class TensorSource {
 public:
  void add_file(std::shared_ptr<MappedFile> f) { files_.push_back(std::move(f)); }
  void add(TensorInfo t);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& get(const std::string& name) const;  // throws naming the tensor
  const std::map<std::string, TensorInfo>& all() const { return tensors_; }

  // Copies the tensor to f32 after checking its shape equals `expect`.
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& expect) const;

 private:
  std::vector<std::shared_ptr<MappedFile>> files_;  // keeps mapped data alive
  std::map<std::string, TensorInfo> tensors_;
};

std::vector<float> to_f32(const TensorInfo& t);
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace kvlm
