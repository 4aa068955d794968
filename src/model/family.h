// Family: one model architecture as kvlm knows it. Each family lives in one file under
// model/families/ and holds its config keys (Hugging Face and GGUF), its tensor names, its quirks
// its validation and its forward: the layer built from the backend's ops (model/forward_step.h,
// with the pieces families share in model/blocks.h), as llama.cpp's src/models/*.cpp build
// theirs. families/registry.cpp lists them in one table.
//
// Adding a family: write families/<name>.cpp, add one row to the table, add a fixture and a test.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/forward_step.h"
#include "model/hf_reader.h"
#include "model/model.h"

namespace kvlm {

// Which naming and layout a checkpoint's tensors use when they reach Family::bind. GGUF names are
// first renamed to Hugging Face's (Family::gguf_names), but GGUF matrices are already [out][in]
// where some HF classes store [in][out] (GPT-2's Conv1D).
enum class TensorLayout { HuggingFace, Gguf };

// llama.cpp's tensor names -> Hugging Face's: "blk.N.<block name>" -> "<block_prefix>N.<hf name>",
// and whole-model tensors by `top`. Suffixes (.weight, .bias) are kept.
struct GgufNames {
  const char* block_prefix;
  std::vector<std::pair<const char*, const char*>> block, top;
};

struct Family {
  const char* name;           // ModelConfig::arch
  const char* hf_model_type;  // config.json "model_type"
  const char* hf_class;       // the transformers class it loads as (checked against "architectures")
  const char* gguf_arch;      // GGUF general.architecture, or nullptr when kvlm reads no GGUF of it
  // config.json -> ModelConfig: the family's keys and quirks. The caller refuses keys no family
  // implements, sets the default score scale and validates.
  ModelConfig (*from_hf)(const HfReader& r);
  // The family's part of GGUF metadata (norm, MLP, RoPE), after the keys every family shares are
  // in c. `prefix` is "<arch>.". Null when gguf_arch is.
  void (*from_gguf)(const GgufFile& g, const std::string& prefix, ModelConfig& c);
  const GgufNames* gguf_names;
  // Binds the named tensors to m's weights for m.cfg (shapes come from the config).
  void (*bind)(const TensorSource& s, Model& m, TensorLayout layout);
  // One forward step of m over the step's batch: embeddings, every layer, the logits of the
  // step's output rows.
  void (*forward)(ForwardStep& s, const Model& m);
};

// Every family, in the registry's order.
const std::vector<const Family*>& families();
// The family of an arch name (ModelConfig::arch); throws naming it and the known ones.
const Family& family_named(const std::string& arch, const std::string& source);
// Lookups by file format; throw naming the unknown architecture and the supported ones.
const Family& family_for_hf_type(const std::string& model_type, const std::string& source);
const Family& family_for_gguf_arch(const std::string& gguf_arch, const std::string& source);

}  // namespace kvlm
