// GGUF v3 written in llama.cpp's byte layout (ggml's gguf_write_out), so that a file kvlm writes
// can equal one llama.cpp writes: the header, the key-value pairs in the order given, the tensor
// infos (dimensions innermost first, trailing 1s dropped as ggml_n_dims drops them, offsets packed
// in order with each tensor's data padded to the alignment), zeros to the alignment. The caller
// then writes each tensor's data followed by gguf_padding(its bytes) zeros.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"

namespace kvlm {

struct GgufTensorSpec {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;  // outermost first, as TensorInfo holds it
};

using GgufMeta = std::vector<std::pair<std::string, GgufValue>>;

// Bytes of the tensor's data (whole rows of its type; throws when a row is not whole blocks).
uint64_t gguf_data_bytes(const GgufTensorSpec& t);
// Zeros that follow `bytes` of data to reach the alignment.
uint64_t gguf_padding(uint64_t bytes, uint64_t alignment);
// Everything before the first tensor's data.
std::string gguf_header(const GgufMeta& meta, const std::vector<GgufTensorSpec>& tensors, uint64_t alignment);
// A value's bytes after its type tag (an array's: element type, count, elements).
void append_gguf_value(std::string& out, const GgufValue& v);

}  // namespace kvlm
