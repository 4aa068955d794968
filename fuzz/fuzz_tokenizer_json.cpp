// libFuzzer target: tokenizer.json loading, then encode/decode on what loaded.
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto tok = kvlm::tokenizer_from_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz/tokenizer.json");
    std::vector<int> ids = tok->encode("Hello  world\n\xc3\xa9\xf0\x9f\x98\x80 <s> <|endoftext|>");
    (void)tok->decode_all(ids);
  } catch (const kvlm::KvlmError&) {
  }
  return 0;
}
