// libFuzzer target: the llama2.c checkpoint header and tensor layout.
#include "core/error.h"
#include "io/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvlm::TensorSource src;
  try {
    (void)kvlm::parse_llama2c(data, size, "fuzz.bin", src);
  } catch (const kvlm::KvlmError&) {
  }
  return 0;
}
