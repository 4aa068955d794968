// GPT-2 byte-level BPE: the GPT-2 pre-tokenizer regex (PCRE2, Unicode classes), bytes mapped
// to printable code points, then merges by rank. Special tokens only when asked for.
#pragma once
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

class Gpt2Bpe : public Tokenizer {
 public:
  // vocab: token string (byte-to-unicode form) -> id; merges in rank order.
  Gpt2Bpe(const std::unordered_map<std::string, int>& vocab,
          const std::vector<std::pair<std::string, std::string>>& merges,
          std::map<std::string, int> special_tokens);
  ~Gpt2Bpe() override;

  std::vector<int> encode_ordinary(const std::string& text) const override;
  std::string decode(int prev, int token) const override;
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }

 private:
  void encode_chunk(const std::string& word, std::vector<int>& out) const;

  std::vector<std::string> pieces_;  // id -> raw bytes
  int byte_ids_[256];                // id of each single byte's token, or -1 where the vocabulary has none
  MergeTable merges_;
  void* regex_ = nullptr;  // pcre2_code_8*
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;  // pre-token -> ids
};

// GPT-2's byte <-> printable code point table, as UTF-8 strings.
const std::vector<std::string>& gpt2_byte_to_unicode();

}  // namespace kvlm
