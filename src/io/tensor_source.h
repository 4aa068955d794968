// Named tensors read from model files, still in their stored dtype and memory-mapped.
// Readers (safetensors, GGUF, llama2.c) fill a TensorSource; model/ binds names to weights.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/mapped_file.h"
#include "kernels/dtype.h"

namespace kvlm {

// Stored element types are DType (kernels/dtype.h): the block-quantized ones (GGUF) pack
// `dtype_block(t)` values into `dtype_block_bytes(t)` bytes along the innermost dimension.

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
  // Keeps `other`'s files alive too (a source of renamed tensors over the same mapping).
  void share_files(const TensorSource& other) { files_.insert(files_.end(), other.files_.begin(), other.files_.end()); }
  void add(TensorInfo t);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& get(const std::string& name) const;  // throws naming the tensor; marks it used
  // The same, after checking its shape equals `expect` (throws naming both).
  const TensorInfo& get(const std::string& name, const std::vector<int64_t>& expect) const;
  // Names never fetched through get()/read_f32(): tensors no layer uses.
  std::vector<std::string> unused() const;
  const std::map<std::string, TensorInfo>& all() const { return tensors_; }

  // The mapped file holding t's bytes (to borrow them as they are), or null when t is not in one.
  std::shared_ptr<const void> owner_of(const TensorInfo& t) const;
  // t was copied into another layout: its file pages can go (see MappedFile::drop_pages).
  void drop_pages(const TensorInfo& t) const;
  // t will be used from the mapping: map its pages now, in one call (MappedFile::populate).
  void populate(const TensorInfo& t) const;

  // Copies the tensor to f32 after checking its shape equals `expect`.
  Buffer<float> read_f32(const std::string& name, const std::vector<int64_t>& expect) const;

 private:
  std::shared_ptr<MappedFile> file_holding(const TensorInfo& t) const;  // null when t is in none

  std::vector<std::shared_ptr<MappedFile>> files_;  // keeps mapped data alive
  std::map<std::string, TensorInfo> tensors_;
  mutable std::set<std::string> used_;
};

Buffer<float> to_f32(const TensorInfo& t);
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace kvlm
