// libFuzzer target: OpenAI request bodies into kvlm's request types (the server's parsing and
// validation layer), for both endpoints and for the small JSON bodies (tokenize and the like).
#include <string>

#include "server/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string body(reinterpret_cast<const char*>(data), size);
  kvlm::server::Limits limits;
  for (bool chat : {false, true}) {
    try {
      kvlm::server::GenerationRequest r = kvlm::server::parse_generation_request(body, chat, limits);
      (void)r;
    } catch (const kvlm::server::ApiError& e) {
      (void)e.to_json().dump();
    }
  }
  try {
    (void)kvlm::server::parse_body(body);
  } catch (const kvlm::server::ApiError&) {
  }
  return 0;
}
