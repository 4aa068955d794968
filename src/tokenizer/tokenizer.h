// Tokenizer interface: text <-> token ids. One algorithm per file behind it:
// sentencepiece_bpe (llama2.c tok.bin, Llama tokenizer.json) and gpt2_bpe (byte-level BPE).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kvlm {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Ids for `text`, without BOS. Special-token strings become their ids only when
  // parse_specials is set (HF tokenizer.json does this; SentencePiece and tiktoken do not).
  std::vector<int> encode(const std::string& text) const;
  // Always turns special-token strings into their ids (tiktoken's allowed_special="all").
  std::vector<int> encode_with_specials(const std::string& text) const;
  // The algorithm itself, on text with no special tokens.
  virtual std::vector<int> encode_ordinary(const std::string& text) const = 0;
  // Bytes that `token` adds to the text when it follows `prev` (-1 at the start).
  virtual std::string decode(int prev, int token) const = 0;
  virtual int vocab_size() const = 0;

  std::string decode_all(const std::vector<int>& ids, int prev = -1) const;
  // encode with BOS in front when the model expects one.
  std::vector<int> encode_prompt(const std::string& text) const;
  // The most bytes of text one token stands for (every piece and special, plus one for a leading
  // space). A text of B bytes is at least B / max_token_bytes() tokens: a server can refuse an
  // oversized prompt before it spends time and memory tokenizing it.
  size_t max_token_bytes() const;

  int bos_id = -1;  // -1: none
  int eos_id = -1;
  bool add_bos = true;
  std::map<std::string, int> specials;  // special/added token strings
  bool parse_specials = false;
  std::string chat_template;  // from GGUF / tokenizer_config, kept for chat serving

 private:
  mutable std::once_flag max_token_bytes_once_;
  mutable size_t max_token_bytes_ = 0;
};

// Loads from a llama2.c tok*.bin, a tokenizer.json, a GPT-2 encoder.json (+vocab.bpe beside it),
// a vocab.json (+merges.txt), or a folder holding one of these.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
// A HF tokenizer.json given as text (`label` names it in errors).
std::unique_ptr<Tokenizer> tokenizer_from_json(const std::string& text, const std::string& label);

}  // namespace kvlm
