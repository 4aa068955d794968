#include "io/tensor_source.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace kvlm {

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

std::shared_ptr<MappedFile> TensorSource::file_holding(const TensorInfo& t) const {
  for (const auto& f : files_)
    if (f->contains(t.data) && t.nbytes <= f->size() - static_cast<size_t>(t.data - f->data())) return f;
  return nullptr;
}

std::shared_ptr<const void> TensorSource::owner_of(const TensorInfo& t) const { return file_holding(t); }

void TensorSource::drop_pages(const TensorInfo& t) const {
  if (auto f = file_holding(t)) f->drop_pages(t.data, t.nbytes);
}

void TensorSource::populate(const TensorInfo& t) const {
  if (auto f = file_holding(t)) f->populate(t.data, t.nbytes);
}

const TensorInfo& TensorSource::get(const std::string& name, const std::vector<int64_t>& expect) const {
  const TensorInfo& t = get(name);
  if (t.shape != expect)
    fail(t.file, ": tensor ", name, " has shape ", shape_str(t.shape), ", expected ", shape_str(expect));
  return t;
}

Buffer<float> TensorSource::read_f32(const std::string& name, const std::vector<int64_t>& expect) const {
  return to_f32(get(name, expect));
}

Buffer<float> to_f32(const TensorInfo& t) {
  Buffer<float> out(static_cast<size_t>(t.numel()));
  dequantize(t.dtype, t.data, out.data(), out.size());
  return out;
}

}  // namespace kvlm
