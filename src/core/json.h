// Strict JSON for every input kvlm reads (configs, tokenizers, safetensors headers, requests):
// nesting is bounded (recursive walkers below never run out of stack) and an object that names
// a key twice is an error (nlohmann keeps the last silently, which hides a doctored file).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace kvlm {

constexpr int kMaxJsonDepth = 128;

// Parses text; throws KvlmError naming `label` on bad syntax, nesting deeper than max_depth, or a
// duplicated key.
nlohmann::json parse_json_strict(const char* begin, const char* end, const std::string& label,
                                 int max_depth = kMaxJsonDepth);
inline nlohmann::json parse_json_strict(const std::string& text, const std::string& label,
                                        int max_depth = kMaxJsonDepth) {
  return parse_json_strict(text.data(), text.data() + text.size(), label, max_depth);
}

}  // namespace kvlm
