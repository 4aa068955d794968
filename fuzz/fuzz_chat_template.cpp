// libFuzzer target: chat templates (the Jinja a model file ships), parsed and then rendered for a
// few conversations, tool calls and tools included. A template comes from whoever made the model
// file, so parsing and rendering must end in a rendering or a KvlmError: no crash, no other
// exception, no unbounded work (ChatTemplates.* in tests/ hold the limits).
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace {
const nlohmann::json& conversations() {
  static const nlohmann::json c = nlohmann::json::parse(R"([
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}]}],
    [{"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "{\"c\": 21}"}]
  ])");
  return c;
}
const nlohmann::json& extra() {
  static const nlohmann::json e = nlohmann::json::parse(R"({"tools": [{"type": "function", "function": {"name": "get_weather",
    "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}}]})");
  return e;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  try {
    kvlm::ChatTemplate t(source);
    for (const auto& messages : conversations())
      for (bool prompt : {false, true}) {
        try {
          (void)t.render(messages, prompt, "<s>", "</s>", prompt ? extra() : nlohmann::json::object());
        } catch (const kvlm::KvlmError&) {
        }
      }
  } catch (const kvlm::KvlmError&) {
  }
  return 0;
}
