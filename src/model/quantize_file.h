// `kvlm quantize`: a GGUF file of F32/F16/BF16 tensors into a llama.cpp file type, the same bytes
// llama-quantize writes without an importance matrix: its metadata with general.file_type and
// general.quantization_version set, each tensor's type from model/quant_mix.h, blocks from
// kernels/ggml_quantize.h. Tensors go one at a time, in slabs of rows, so memory stays at a slab
// (the input is mapped); the file appears whole or not at all.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/quant_mix.h"

namespace kvlm {

struct QuantizeProgress {
  size_t tensor = 0, tensors = 0;           // the tensor being written, of how many
  uint64_t bytes_done = 0, bytes_total = 0;  // input bytes read so far, of how many
  const std::string* name = nullptr;
};

struct QuantizeReport {
  std::vector<TensorPlan> plan;
  uint64_t in_bytes = 0, out_bytes = 0;  // the files' sizes
  int fell_back = 0;                     // tensors whose rows did not fit the mix's type
};

QuantizeReport quantize_gguf_file(const std::string& in, const std::string& out, const QuantFileType& ft,
                                  const std::function<void(const QuantizeProgress&)>& progress = {});

}  // namespace kvlm
