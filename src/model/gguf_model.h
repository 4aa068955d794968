// GGUF metadata -> ModelConfig, and GGUF tensor names -> the names the binders expect.
#pragma once
#include <memory>

#include "io/gguf.h"
#include "model/model.h"

namespace kvlm {

ModelConfig gguf_config(const GgufFile& g);
std::unique_ptr<Model> load_gguf_model(const GgufFile& g);

}  // namespace kvlm
