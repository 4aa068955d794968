// Tokenizer from GGUF metadata: tokenizer.ggml.model "llama" (SentencePiece BPE with scores)
// or "gpt2" (byte-level BPE with merges).
#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/gpt2_bpe.h"
#include "tokenizer/sentencepiece_bpe.h"

namespace kvlm {

namespace {

std::vector<std::string> strings(const GgufFile& g, const std::string& key) {
  const GgufValue& v = g.get(key);
  if (v.type != GgufType::ARRAY || v.elem_type != GgufType::STRING) fail(g.path, ": ", key, " must be an array of strings");
  std::vector<std::string> out;
  out.reserve(v.array.size());
  for (const GgufValue& e : v.array) out.push_back(e.as_string(key));
  return out;
}

std::vector<double> numbers(const GgufFile& g, const std::string& key, size_t expect) {
  const GgufValue& v = g.get(key);
  if (v.type != GgufType::ARRAY || v.array.size() != expect)
    fail(g.path, ": ", key, " must be an array of ", expect, " numbers");
  std::vector<double> out;
  for (const GgufValue& e : v.array) out.push_back(e.as_float(key));
  return out;
}

int optional_id(const GgufFile& g, const std::string& key, int vocab) {
  if (!g.has(key)) return -1;
  int64_t id = g.get(key).as_int(key);
  return id >= 0 && id < vocab ? static_cast<int>(id) : -1;  // 0xFFFFFFFF means "none"
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& g) {
  std::string model = g.get("tokenizer.ggml.model").as_string("tokenizer.ggml.model");
  std::vector<std::string> tokens = strings(g, "tokenizer.ggml.tokens");
  const int vocab = static_cast<int>(tokens.size());
  std::vector<double> types;
  if (g.has("tokenizer.ggml.token_type")) types = numbers(g, "tokenizer.ggml.token_type", tokens.size());
  std::unique_ptr<Tokenizer> tok;
  if (model == "llama") {
    std::vector<double> sc = numbers(g, "tokenizer.ggml.scores", tokens.size());
    std::vector<float> scores(sc.begin(), sc.end());
    std::vector<bool> mergeable(tokens.size(), true);
    for (size_t i = 0; i < types.size(); ++i) mergeable[i] = types[i] == 1;  // 1 = normal piece
    for (std::string& t : tokens) t = metaspace_to_space(t);
    auto sp = SentencePieceBpe::from_scores(std::move(tokens), std::move(scores), mergeable);
    sp->unk_id = std::max(0, optional_id(g, "tokenizer.ggml.unknown_token_id", vocab));
    if (g.has("tokenizer.ggml.add_space_prefix"))
      sp->dummy_prefix = g.get("tokenizer.ggml.add_space_prefix").as_bool("tokenizer.ggml.add_space_prefix");
    tok = std::move(sp);
    tok->add_bos = true;
  } else if (model == "gpt2") {
    std::unordered_map<std::string, int> map;
    std::map<std::string, int> special;
    for (int i = 0; i < vocab; ++i) {
      map[tokens[i]] = i;
      if (!types.empty() && types[i] == 3) special[tokens[i]] = i;  // 3 = control
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (const std::string& m : strings(g, "tokenizer.ggml.merges")) {
      size_t sp = m.find(' ');
      if (sp == std::string::npos) fail(g.path, ": merge '", m, "' is not two tokens");
      merges.push_back({m.substr(0, sp), m.substr(sp + 1)});
    }
    tok = std::make_unique<Gpt2Bpe>(map, merges, special);
    tok->specials = special;
    tok->add_bos = false;
  } else {
    fail(g.path, ": unsupported tokenizer.ggml.model '", model, "' (supported: llama, gpt2)");
  }
  tok->bos_id = optional_id(g, "tokenizer.ggml.bos_token_id", vocab);
  tok->eos_id = optional_id(g, "tokenizer.ggml.eos_token_id", vocab);
  if (g.has("tokenizer.ggml.add_bos_token"))
    tok->add_bos = g.get("tokenizer.ggml.add_bos_token").as_bool("tokenizer.ggml.add_bos_token");
  if (g.has("tokenizer.chat_template")) tok->chat_template = g.get("tokenizer.chat_template").as_string("chat_template");
  return tok;
}

}  // namespace kvlm
