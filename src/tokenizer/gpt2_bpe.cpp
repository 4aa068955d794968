#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/gpt2_bpe.h"

#include <pcre2.h>

#include "core/error.h"
#include "core/utf8.h"

namespace kvlm {

namespace {

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Inverse of the byte table: decodes a token string back to raw bytes.
std::string unicode_to_bytes(const std::string& s, const std::unordered_map<std::string, int>& inv) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    auto it = inv.find(s.substr(i, len));
    if (it == inv.end()) fail("GPT-2 vocabulary entry '", s, "' is not in byte-level form");
    out += static_cast<char>(it->second);
    i += len;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& gpt2_byte_to_unicode() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = utf8(printable ? static_cast<uint32_t>(b) : 256 + extra++);
    }
    return t;
  }();
  return table;
}

Gpt2Bpe::Gpt2Bpe(const std::unordered_map<std::string, int>& vocab,
                 const std::vector<std::pair<std::string, std::string>>& merges,
                 std::map<std::string, int> special_tokens) {
  std::unordered_map<std::string, int> inv;
  const auto& table = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) inv[table[b]] = b;
  int max_id = -1;
  for (auto& [s, id] : vocab) {
    if (id < 0 || id > (1 << 22)) fail("GPT-2 vocabulary id ", id, " out of range");
    max_id = std::max(max_id, id);
  }
  for (auto& [s, id] : special_tokens) max_id = std::max(max_id, id);
  pieces_.assign(max_id + 1, "");
  for (auto& [s, id] : vocab) pieces_[id] = special_tokens.count(s) ? s : unicode_to_bytes(s, inv);
  for (auto& [s, id] : special_tokens) pieces_[id] = s;
  // Some vocabularies leave out control bytes (SmolLM2's lacks 0x00-0x08 and others): such a
  // byte is dropped when encoding, as Hugging Face's byte-level BPE drops a symbol it has no token
  // for when there is no unknown token.
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(table[b]);
    byte_ids_[b] = it == vocab.end() ? -1 : it->second;
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    auto a = vocab.find(merges[rank].first), b = vocab.find(merges[rank].second);
    auto m = vocab.find(merges[rank].first + merges[rank].second);
    if (a == vocab.end() || b == vocab.end() || m == vocab.end())
      fail("GPT-2 merge ", rank, " ('", merges[rank].first, "' '", merges[rank].second,
           "') uses tokens missing from the vocabulary");
    merges_.emplace(pair_key(a->second, b->second), MergeRule{-static_cast<float>(rank), m->second});
  }
  int err;
  PCRE2_SIZE erroff;
  regex_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                         &err, &erroff, nullptr);
  KVLM_CHECK(regex_, "GPT-2 regex does not compile");
  pcre2_jit_compile(static_cast<pcre2_code*>(regex_), PCRE2_JIT_COMPLETE);
}

Gpt2Bpe::~Gpt2Bpe() { pcre2_code_free(static_cast<pcre2_code*>(regex_)); }

void Gpt2Bpe::encode_chunk(const std::string& text, std::vector<int>& out) const {
  auto* re = static_cast<pcre2_code*>(regex_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  PCRE2_SIZE start = 0;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (start < text.size()) {
    // Invalid UTF-8 is split bytewise rather than rejected: every byte has a token.
    int rc = pcre2_match(re, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    PCRE2_SIZE b, e;
    if (rc < 0) {
      b = start;
      e = text.size();
    } else {
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      b = ov[0];
      e = ov[1];
      if (e == b) e = b + 1;
    }
    std::string word = text.substr(b, e - b);
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(word);
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        start = e;
        continue;
      }
    }
    std::vector<int> ids;
    for (unsigned char c : word)
      if (byte_ids_[c] >= 0) ids.push_back(byte_ids_[c]);
    bpe_merge(ids, merges_);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() < 100000) cache_.emplace(std::move(word), std::move(ids));
    start = e;
  }
  pcre2_match_data_free(md);
}

std::vector<int> Gpt2Bpe::encode_ordinary(const std::string& text) const {
  std::vector<int> out;
  // Invalid UTF-8 (by the strict definition in core/utf8.h: overlong forms, surrogates and code
  // points past U+10FFFF included) never reaches PCRE2: each invalid byte becomes its own
  // byte-level token, and the valid runs between go through the regex.
  size_t pos = 0;
  while (pos < text.size()) {
    size_t i = pos, len;
    while (i < text.size() && (len = utf8_sequence_length(text, i)) > 0) i += len;
    if (i > pos) encode_chunk(text.substr(pos, i - pos), out);
    if (i < text.size()) {
      const int id = byte_ids_[static_cast<unsigned char>(text[i++])];
      if (id >= 0) out.push_back(id);
    }
    pos = i;
  }
  return out;
}

std::string Gpt2Bpe::decode(int, int token) const {
  if (token < 0 || token >= vocab_size()) fail("token id ", token, " is outside the vocabulary");
  return pieces_[token];
}

}  // namespace kvlm
