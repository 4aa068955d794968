// Builds the tokenizer a GGUF file describes in its metadata.
#pragma once
#include <memory>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& g);

}  // namespace kvlm
