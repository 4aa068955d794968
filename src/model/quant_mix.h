// Which type each tensor of a GGUF file gets when it is quantized to a llama.cpp file type
// ("Q4_K_M"): llama-quant.cpp's rules without an importance matrix, so that kvlm picks the same
// type for every tensor as llama-quantize does (tests/quantize_test.cpp compares whole files).
//
// Only 2-D and larger tensors whose names end in "weight" change type, norms and a few small
// tables excepted. A mix's default type is then raised for the tensors that hurt most when cut
// (attn_v, ffn_down in the first and last eighths and every third layer between, the output and
// tied embeddings), by layer counters kept in file order; a type whose block does not divide a
// row falls back to one whose block does (Q4_K -> Q5_0, Q6_K -> Q8_0, ... then F16).
#pragma once
#include <string>
#include <vector>

#include "io/gguf.h"
#include "kernels/dtype.h"

namespace kvlm {

struct QuantFileType {
  const char* name;  // as llama-quantize spells it: "Q4_K_M"
  int ftype;         // llama.h's llama_ftype, written as general.file_type
  DType base;        // the type most tensors get
  const char* about;
};

// Every file type kvlm writes, in llama-quantize's order.
const std::vector<QuantFileType>& quant_file_types();
// The type called `name` (case-insensitive); throws listing them.
const QuantFileType& parse_quant_file_type(const std::string& name);

struct TensorPlan {
  std::string name;
  DType from, to;
  bool fell_back = false;  // the mix's type did not fit the rows (llama-quantize warns the same)
};

// The tensors of g in the order llama-quantize writes them (by layer, then name), each with its
// new type. Throws naming what it cannot do: a quantized input, an architecture with rules of its
// own, a type that would need an importance matrix.
std::vector<TensorPlan> plan_quantization(const GgufFile& g, const QuantFileType& ft);

}  // namespace kvlm
