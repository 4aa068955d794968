// libFuzzer target: GGUF metadata, tensor infos and data layout, then the model config and
// tokenizer built from the metadata.
#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/gguf_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto g = kvlm::parse_gguf(data, size, "fuzz.gguf");
    for (const auto& [name, t] : g->tensors.all())
      if (t.numel() < (1 << 20)) (void)kvlm::to_f32(t);
    try {
      auto tok = kvlm::tokenizer_from_gguf(*g);
      (void)tok->encode("Hello world, <s> 123");
    } catch (const kvlm::KvlmError&) {
    }
  } catch (const kvlm::KvlmError&) {
  }
  return 0;
}
