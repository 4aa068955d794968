// libFuzzer target: the safetensors header and layout checks.
#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvlm::TensorSource src;
  try {
    kvlm::parse_safetensors(data, size, "fuzz.safetensors", src);
    for (const auto& [name, t] : src.all()) (void)kvlm::to_f32(t);  // every accepted range must be readable
  } catch (const kvlm::KvlmError&) {
  }
  return 0;
}
