// Chat templates: the Jinja a model ships (tokenizer_config.json's chat_template,
// chat_template.jinja, or GGUF tokenizer.chat_template), rendered as transformers'
// apply_chat_template does (trim_blocks, lstrip_blocks, raise_exception, strftime_now, tojson).
//
// Why our own interpreter (src/tokenizer/jinja/): Debian packages no C++ Jinja engine, and the
// templates use a bounded subset (expressions, filters, tests, for/if/set/macro/filter blocks,
// namespaces, loop controls). An interpreter of that subset is small, has no dependency, bounds
// its own work (output size, loop iterations, nesting as it parses and as it renders; int64
// arithmetic errs where Python's ints would grow; fuzz/fuzz_chat_template.cpp), and is checked
// against Python's jinja2 on twelve real templates (tests/fixtures/chat_templates). A template that uses anything
// outside the subset fails to parse at startup with the construct named, never renders wrong.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace kvlm {

namespace jinja {
struct Template;
}

class ChatTemplate {
 public:
  // Parses the template; throws KvlmError naming the line and the unsupported construct.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  // messages: [{"role", "content", ...}]; extra: further variables (tools, documents, ...).
  std::string render(const nlohmann::json& messages, bool add_generation_prompt, const std::string& bos_token,
                     const std::string& eos_token, const nlohmann::json& extra = nlohmann::json::object()) const;

 private:
  std::unique_ptr<jinja::Template> tpl_;
};

// The chat template that ships with a model: tokenizer_config.json (or chat_template.jinja) in an
// HF folder, tokenizer.chat_template in GGUF; "" when it has none. bos/eos get the special
// tokens' strings from tokenizer_config.json when it names them.
std::string find_chat_template(const std::string& model_path, std::string* bos = nullptr, std::string* eos = nullptr);

}  // namespace kvlm
