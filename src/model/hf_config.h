// Hugging Face config.json -> ModelConfig, for the architectures kvlm supports.
#pragma once
#include <string>

#include "model/config.h"

namespace kvlm {

ModelConfig parse_hf_config(const std::string& json_text, const std::string& label);
ModelConfig read_hf_config(const std::string& path);

}  // namespace kvlm
