// libFuzzer target: Hugging Face config.json parsing and validation.
#include <string>

#include "core/error.h"
#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)kvlm::parse_hf_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  } catch (const kvlm::KvlmError&) {
  }
  return 0;
}
