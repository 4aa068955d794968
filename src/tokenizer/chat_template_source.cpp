// Where a model keeps its chat template and special-token strings.
#include <filesystem>

#include "core/error.h"
#include "core/json.h"
#include "core/read_file.h"
#include "io/gguf.h"
#include "tokenizer/chat_template.h"

namespace kvlm {

namespace fs = std::filesystem;

namespace {
// tokenizer_config.json writes special tokens as strings or as {"content": "..."} objects.
std::string token_string(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}
}  // namespace

std::string find_chat_template(const std::string& model_path, std::string* bos, std::string* eos) {
  fs::path p(model_path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    std::string tpl;
    if (fs::exists(p / "tokenizer_config.json")) {
      auto j = parse_json_strict(read_file((p / "tokenizer_config.json").string()), (p / "tokenizer_config.json").string());
      if (j.is_object()) {
        if (bos && j.contains("bos_token")) *bos = token_string(j["bos_token"]);
        if (eos && j.contains("eos_token")) *eos = token_string(j["eos_token"]);
        if (j.contains("chat_template")) {
          const auto& t = j["chat_template"];
          if (t.is_string()) {
            tpl = t.get<std::string>();
          } else if (t.is_array()) {  // named templates: the one called "default"
            for (const auto& e : t)
              if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
                tpl = e["template"].get<std::string>();
          }
        }
      }
    }
    if (tpl.empty() && fs::exists(p / "chat_template.jinja")) tpl = read_file((p / "chat_template.jinja").string());
    return tpl;
  }
  if (looks_like_gguf(model_path)) {
    auto g = read_gguf(model_path);
    if (g->has("tokenizer.chat_template")) return g->get("tokenizer.chat_template").as_string("tokenizer.chat_template");
  }
  return "";
}

}  // namespace kvlm
