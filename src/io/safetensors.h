// safetensors reader: u64 LE header length, JSON header, then raw little-endian data.
// Every entry is validated before use: dtype, shape product (overflow-checked) against its
// byte range, ranges inside the file, and no two tensors overlapping.
#pragma once
#include <string>

#include "io/tensor_source.h"

namespace kvlm {

constexpr uint64_t kMaxSafetensorsHeader = 100ull * 1000 * 1000;

// Adds every tensor of `path` to `out`; throws KvlmError naming the file and tensor.
void read_safetensors(const std::string& path, TensorSource& out);

// Same checks over bytes already in memory (used by the fuzz target and tests).
void parse_safetensors(const uint8_t* data, size_t size, const std::string& label, TensorSource& out);

}  // namespace kvlm
