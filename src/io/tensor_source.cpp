#include "io/tensor_source.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace kvlm {

size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void TensorSource::add(TensorInfo t) {
  if (tensors_.count(t.name)) fail(t.file, ": tensor ", t.name, " appears twice");
  std::string name = t.name;
  tensors_.emplace(std::move(name), std::move(t));
}

const TensorInfo& TensorSource::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("model is missing tensor ", name);
  return it->second;
}

std::vector<float> TensorSource::read_f32(const std::string& name,
                                          const std::vector<int64_t>& expect) const {
  const TensorInfo& t = get(name);
  if (t.shape != expect)
    fail(t.file, ": tensor ", name, " has shape ", shape_str(t.shape), ", expected ", shape_str(expect));
  return to_f32(t);
}

std::vector<float> to_f32(const TensorInfo& t) {
  size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  switch (t.dtype) {
    case DType::F32:
      std::memcpy(out.data(), t.data, n * 4);
      break;
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
  }
  return out;
}

}  // namespace kvlm
