#include "io/tensor_source.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace kvlm {

size_t dtype_block(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0: return 32;
    case DType::Q4_K:
    case DType::Q6_K: return 256;
    default: return 1;
  }
}

size_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::Q8_0: return 34;   // f16 scale + 32 x int8
    case DType::Q4_0: return 18;   // f16 scale + 16 bytes of nibbles
    case DType::Q4_K: return 144;  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
    case DType::Q6_K: return 210;  // 128 low nibbles, 64 high 2-bit pairs, 16 int8 scales, f16 d
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_K: return "Q4_K";
    case DType::Q6_K: return "Q6_K";
  }
  return "?";
}

uint64_t dtype_row_bytes(DType t, uint64_t n, const std::string& what) {
  if (n % dtype_block(t) != 0)
    fail(what, ": row of ", n, " values is not a multiple of the ", dtype_name(t), " block (", dtype_block(t), ")");
  return checked_mul(n / dtype_block(t), dtype_block_bytes(t), what);
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
  used_.insert(name);
  return it->second;
}

std::vector<std::string> TensorSource::unused() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_)
    if (!used_.count(name)) out.push_back(name);
  return out;
}

Buffer<float> TensorSource::read_f32(const std::string& name,
                                          const std::vector<int64_t>& expect) const {
  const TensorInfo& t = get(name);
  if (t.shape != expect)
    fail(t.file, ": tensor ", name, " has shape ", shape_str(t.shape), ", expected ", shape_str(expect));
  return to_f32(t);
}

Buffer<float> to_f32(const TensorInfo& t) {
  Buffer<float> out(static_cast<size_t>(t.numel()));
  dequantize(t.dtype, t.data, out.data(), out.size());
  return out;
}

}  // namespace kvlm
