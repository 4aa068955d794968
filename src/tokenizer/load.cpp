// load_tokenizer: recognizes the file format and builds the matching algorithm.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "core/read_file.h"
#include "io/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/gpt2_bpe.h"
#include "tokenizer/sentencepiece_bpe.h"

namespace kvlm {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Tokenizer::decode_all(const std::vector<int>& ids, int prev) const {
  std::string s;
  for (int id : ids) {
    s += decode(prev, id);
    prev = id;
  }
  return s;
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  return parse_specials ? encode_with_specials(text) : encode_ordinary(text);
}

std::vector<int> Tokenizer::encode_with_specials(const std::string& text) const {
  // Split on the earliest (then longest) special string; encode the text between normally.
  // Each special's next occurrence is cached and searched again only once the cursor has passed
  // it, so the text is scanned O(specials) times in all, not once per match.
  std::vector<int> out;
  std::vector<const std::pair<const std::string, int>*> sps;
  for (auto& sp : specials)
    if (!sp.first.empty()) sps.push_back(&sp);
  std::vector<size_t> next(sps.size(), 0);
  std::vector<bool> searched(sps.size(), false);
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t best = std::string::npos;
    const std::pair<const std::string, int>* hit = nullptr;
    for (size_t i = 0; i < sps.size(); ++i) {
      if (!searched[i] || (next[i] != std::string::npos && next[i] < pos)) {
        next[i] = text.find(sps[i]->first, pos);
        searched[i] = true;
      }
      size_t f = next[i];
      if (f != std::string::npos && (f < best || (f == best && sps[i]->first.size() > hit->first.size()))) {
        best = f;
        hit = sps[i];
      }
    }
    size_t end = hit ? best : text.size();
    if (end > pos) {
      std::vector<int> part = encode_ordinary(text.substr(pos, end - pos));
      out.insert(out.end(), part.begin(), part.end());
    }
    if (!hit) break;
    out.push_back(hit->second);
    pos = best + hit->first.size();
  }
  return out;
}

std::vector<int> Tokenizer::encode_prompt(const std::string& text) const {
  std::vector<int> ids;
  if (add_bos && bos_id >= 0) ids.push_back(bos_id);
  std::vector<int> rest = encode(text);
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

size_t Tokenizer::max_token_bytes() const {
  std::call_once(max_token_bytes_once_, [this] {
    size_t m = 1;
    for (int id = 0; id < vocab_size(); ++id) {
      try {
        m = std::max(m, decode(-1, id).size() + 1);
      } catch (const std::exception&) {
        // an id the decoder refuses never comes out of encode either
      }
    }
    for (const auto& sp : specials) m = std::max(m, sp.first.size());
    max_token_bytes_ = m;
  });
  return max_token_bytes_;
}

namespace {

json parse_json(const std::string& path) { return parse_json_strict(read_file(path), path); }

std::unordered_map<std::string, int> vocab_map(const json& v, const std::string& label) {
  if (!v.is_object()) fail(label, ": vocabulary must be a JSON object of token -> id");
  std::unordered_map<std::string, int> out;
  for (auto& [k, id] : v.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 22))
      fail(label, ": vocabulary id for '", k, "' must be an integer in [0, 4M]");
    out[k] = id.get<int>();
  }
  return out;
}

std::pair<std::string, std::string> split_merge(const std::string& line, const std::string& label) {
  auto sp = line.find(' ');
  if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size())
    fail(label, ": merge '", line, "' is not two tokens separated by a space");
  return {line.substr(0, sp), line.substr(sp + 1)};
}

std::vector<std::pair<std::string, std::string>> merges_from_text(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#version", 0) == 0 || line.empty()) continue;
    merges.push_back(split_merge(line, path));
  }
  return merges;
}

std::unique_ptr<Tokenizer> gpt2_from_files(const std::string& vocab_path, const std::string& merges_path) {
  auto vocab = vocab_map(parse_json(vocab_path), vocab_path);
  std::map<std::string, int> special;
  if (vocab.count("<|endoftext|>")) special["<|endoftext|>"] = vocab["<|endoftext|>"];
  auto t = std::make_unique<Gpt2Bpe>(vocab, merges_from_text(merges_path), special);
  t->specials = special;
  t->add_bos = false;
  if (!special.empty()) t->bos_id = t->eos_id = special.begin()->second;
  return t;
}

// True when the tokenizer.json asks for a leading U+2581 (Prepend normalizer or Metaspace).
bool wants_dummy_prefix(const json& j, bool& split) {
  const std::string meta = "\xE2\x96\x81";
  bool prefix = false;
  std::function<void(const json&)> visit = [&](const json& n) {
    if (!n.is_object()) return;
    std::string type = n.value("type", "");
    if (type == "Prepend" && n.value("prepend", "") == meta) prefix = true;
    if (type == "Metaspace") {
      if (n.value("add_prefix_space", false) || n.value("prepend_scheme", "never") != "never") prefix = true;
      split = n.value("split", false);
    }
    if (type == "Sequence") {
      for (const char* key : {"normalizers", "pretokenizers"})
        if (n.contains(key) && n[key].is_array())
          for (const json& c : n[key]) visit(c);
    }
  };
  if (j.contains("normalizer")) visit(j["normalizer"]);
  if (j.contains("pre_tokenizer")) visit(j["pre_tokenizer"]);
  return prefix;
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_json(const std::string& text, const std::string& path) {
  json j = parse_json_strict(text, path);  // bounded nesting: the walkers below recurse
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    fail(path, ": missing 'model' object");
  const json& model = j["model"];
  if (model.value("type", "") != "BPE") fail(path, ": unsupported tokenizer model type '", model.value("type", ""), "'");
  if (!model.contains("vocab")) fail(path, ": missing model.vocab");
  auto vocab = vocab_map(model["vocab"], path);
  std::vector<std::pair<std::string, std::string>> merges;
  if (model.contains("merges") && !model["merges"].is_array() && !model["merges"].is_null())
    fail(path, ": model.merges must be a list of merges");
  if (model.contains("merges") && model["merges"].is_array())
    for (const json& m : model["merges"]) {
      if (m.is_string())
        merges.push_back(split_merge(m.get<std::string>(), path));
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        merges.push_back({m[0].get<std::string>(), m[1].get<std::string>()});
      else
        fail(path, ": merges must be strings 'a b' or pairs [a, b]");
    }
  std::map<std::string, int> added;
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const json& a : j["added_tokens"])
      if (a.is_object() && a.contains("content") && a["content"].is_string() && a.contains("id") &&
          a["id"].is_number_integer() && a["id"].get<int64_t>() >= 0 && a["id"].get<int64_t>() < (1 << 22))
        added[a["content"].get<std::string>()] = a["id"].get<int>();

  auto special_id = [&](const char* name) {
    auto it = added.find(name);
    if (it != added.end()) return it->second;
    auto v = vocab.find(name);
    return v != vocab.end() ? v->second : -1;
  };

  bool byte_level = j.contains("pre_tokenizer") && j["pre_tokenizer"].is_object() &&
                    j["pre_tokenizer"].value("type", "") == "ByteLevel";
  if (byte_level) {
    auto t = std::make_unique<Gpt2Bpe>(vocab, merges, added);
    t->specials = added;
    t->parse_specials = true;  // HF splits added tokens out of the text before the model runs
    t->add_bos = false;
    t->bos_id = t->eos_id = special_id("<|endoftext|>");
    return t;
  }
  // SentencePiece-style: pieces use U+2581 for spaces; we keep spaces.
  int max_id = -1;
  for (auto& [s, id] : vocab) max_id = std::max(max_id, id);
  for (auto& [s, id] : added) max_id = std::max(max_id, id);
  std::vector<std::string> pieces(max_id + 1);
  const auto& unmeta = metaspace_to_space;
  for (auto& [s, id] : vocab) pieces[id] = unmeta(s);
  for (auto& [s, id] : added) pieces[id] = s;
  for (auto& m : merges) {
    m.first = unmeta(m.first);
    m.second = unmeta(m.second);
  }
  auto t = SentencePieceBpe::from_merges(std::move(pieces), merges);
  t->specials = added;
  t->parse_specials = true;
  bool split = false;
  t->dummy_prefix = wants_dummy_prefix(j, split);
  t->split_on_space = split;
  t->byte_fallback = model.value("byte_fallback", false);
  std::string unk = model.contains("unk_token") && model["unk_token"].is_string() ? model["unk_token"].get<std::string>() : "<unk>";
  t->unk_id = std::max(0, special_id(unk.c_str()));
  t->bos_id = special_id("<s>");
  t->eos_id = special_id("</s>");
  bool bos_in_post = j.contains("post_processor") && j["post_processor"].dump().find("<s>") != std::string::npos;
  t->add_bos = t->bos_id >= 0 && bos_in_post;
  return t;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  fs::path p(path);
  if (fs::is_directory(p)) {
    for (const char* name : {"tokenizer.json", "encoder.json", "vocab.json", "tokenizer.model", "tokenizer.bin"})
      if (fs::exists(p / name)) return load_tokenizer((p / name).string());
    fail(path, ": folder holds no tokenizer.json, encoder.json, vocab.json or tokenizer.bin");
  }
  if (!fs::exists(p)) fail(path, ": no such tokenizer file");
  std::string name = p.filename().string();
  if (name == "encoder.json") return gpt2_from_files(path, (p.parent_path() / "vocab.bpe").string());
  if (name == "vocab.json") return gpt2_from_files(path, (p.parent_path() / "merges.txt").string());
  if (p.extension() == ".json") return tokenizer_from_json(read_file(path), path);
  if (looks_like_gguf(path)) return tokenizer_from_gguf(*read_gguf(path));
  if (p.extension() == ".model") return read_sentencepiece_model(path);
  return read_llama2c_tokenizer(path);
}

}  // namespace kvlm
