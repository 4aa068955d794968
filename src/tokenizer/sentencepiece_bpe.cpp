#include "tokenizer/sentencepiece_bpe.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/utf8.h"
#include "core/read_file.h"

namespace kvlm {

namespace {
bool parse_byte_piece(const std::string& p, int& byte) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return false;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  int hi = hex(p[3]), lo = hex(p[4]);
  if (hi < 0 || lo < 0) return false;
  byte = hi * 16 + lo;
  return true;
}
}  // namespace

std::string metaspace_to_space(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

void SentencePieceBpe::index_pieces() {
  ids_.clear();
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  for (int i = 0; i < static_cast<int>(pieces_.size()); ++i) {
    ids_.emplace(pieces_[i], i);  // first id wins on duplicates, as in llama2.c's sorted lookup
    int b;
    if (parse_byte_piece(pieces_[i], b) && byte_ids_[b] < 0) byte_ids_[b] = i;
  }
}

std::unique_ptr<SentencePieceBpe> SentencePieceBpe::from_scores(std::vector<std::string> pieces,
                                                                 std::vector<float> scores,
                                                                 const std::vector<bool>& mergeable) {
  if (scores.size() != pieces.size()) fail("tokenizer has ", pieces.size(), " pieces but ", scores.size(), " scores");
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].size() > kMaxPieceBytes)
      fail("tokenizer piece ", i, " is ", pieces[i].size(), " bytes long (the limit is ", kMaxPieceBytes, ")");
    // A NaN ranks neither above nor below any merge: the merge order, and so the tokens, would
    // be arbitrary. (Infinite scores order as any other.)
    if (std::isnan(scores[i])) fail("tokenizer piece ", i, " has a score that is not a number");
  }
  auto t = std::make_unique<SentencePieceBpe>();
  t->pieces_ = std::move(pieces);
  t->index_pieces();
  // Every split of a piece into two pieces is a merge, ranked by the whole piece's score. Pieces
  // are bounded above, so this is O(total bytes x kMaxPieceBytes) at worst, not quadratic in a piece.
  for (int id = 0; id < t->vocab_size(); ++id) {
    const std::string& p = t->pieces_[id];
    int dummy;
    if (parse_byte_piece(p, dummy) || (!mergeable.empty() && !mergeable[id])) continue;
    for (size_t cut = 1; cut < p.size(); ++cut) {
      auto a = t->ids_.find(p.substr(0, cut)), b = t->ids_.find(p.substr(cut));
      if (a == t->ids_.end() || b == t->ids_.end()) continue;
      t->merges_.emplace(pair_key(a->second, b->second), MergeRule{scores[id], id});
    }
  }
  return t;
}

std::unique_ptr<SentencePieceBpe> SentencePieceBpe::from_merges(
    std::vector<std::string> pieces, const std::vector<std::pair<std::string, std::string>>& merges) {
  auto t = std::make_unique<SentencePieceBpe>();
  t->pieces_ = std::move(pieces);
  t->index_pieces();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    auto a = t->ids_.find(merges[rank].first), b = t->ids_.find(merges[rank].second);
    auto m = t->ids_.find(merges[rank].first + merges[rank].second);
    if (a == t->ids_.end() || b == t->ids_.end() || m == t->ids_.end())
      fail("tokenizer merge ", rank, " ('", merges[rank].first, "' '", merges[rank].second,
           "') uses pieces missing from the vocabulary");
    t->merges_.emplace(pair_key(a->second, b->second), MergeRule{-static_cast<float>(rank), m->second});
  }
  return t;
}

void SentencePieceBpe::encode_word(const std::string& text, std::vector<int>& out) const {
  std::vector<int> ids;
  for (size_t i = 0; i < text.size();) {
    // One character, or one byte where the UTF-8 is invalid (it then falls back to a byte piece).
    size_t len = std::max<size_t>(1, utf8_sequence_length(text, i));
    auto it = ids_.find(text.substr(i, len));
    if (it != ids_.end()) {
      ids.push_back(it->second);
    } else if (byte_fallback) {
      for (size_t k = 0; k < len; ++k) {
        int id = byte_ids_[static_cast<unsigned char>(text[i + k])];
        ids.push_back(id >= 0 ? id : unk_id);
      }
    } else if (ids.empty() || ids.back() != unk_id) {
      ids.push_back(unk_id);
    }
    i += len;
  }
  bpe_merge(ids, merges_);
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int> SentencePieceBpe::encode_ordinary(const std::string& text) const {
  std::vector<int> out;
  if (text.empty()) return out;
  // SentencePiece writes spaces as U+2581, so a literal U+2581 in the text is a space too.
  std::string s = dummy_prefix ? " " : "";
  s += metaspace_to_space(text);
  if (!split_on_space) {
    encode_word(s, out);
    return out;
  }
  size_t start = 0;
  for (size_t i = 1; i <= s.size(); ++i)
    if (i == s.size() || s[i] == ' ') {
      encode_word(s.substr(start, i - start), out);
      start = i;
    }
  return out;
}

std::string SentencePieceBpe::decode(int prev, int token) const {
  if (token < 0 || token >= vocab_size()) fail("token id ", token, " is outside the vocabulary");
  const std::string& p = pieces_[token];
  int b;
  if (parse_byte_piece(p, b)) return std::string(1, static_cast<char>(b));
  // Drop the dummy-prefix space of the first word (after BOS or at the start).
  if ((prev == bos_id || prev < 0) && !p.empty() && p[0] == ' ') return p.substr(1);
  return p;
}

std::unique_ptr<SentencePieceBpe> read_llama2c_tokenizer(const std::string& path, int vocab_size_hint) {
  const std::string data = read_file(path);
  size_t off = 0;
  auto read = [&](void* dst, size_t n, const char* what) {
    if (n > data.size() - off) fail(path, ": truncated tokenizer while reading ", what, " at offset ", off);
    std::memcpy(dst, data.data() + off, n);
    off += n;
  };
  int32_t max_len;
  read(&max_len, 4, "max_token_length");
  if (max_len <= 0 || max_len > 1024) fail(path, ": max_token_length ", max_len, " out of range");
  std::vector<std::string> pieces;
  std::vector<float> scores;
  while (off < data.size() && (vocab_size_hint < 0 || static_cast<int>(pieces.size()) < vocab_size_hint)) {
    float score;
    int32_t len;
    read(&score, 4, "score");
    read(&len, 4, "piece length");
    if (len < 0 || len > max_len)
      fail(path, ": piece ", pieces.size(), " has length ", len, " (max_token_length ", max_len, ")");
    std::string piece(static_cast<size_t>(len), '\0');
    read(piece.data(), static_cast<size_t>(len), "piece bytes");
    pieces.push_back(std::move(piece));
    scores.push_back(score);
  }
  if (pieces.size() < 3) fail(path, ": tokenizer has only ", pieces.size(), " pieces");
  if (vocab_size_hint > 0 && static_cast<int>(pieces.size()) != vocab_size_hint)
    fail(path, ": tokenizer has ", pieces.size(), " pieces, model expects ", vocab_size_hint);
  auto t = SentencePieceBpe::from_scores(std::move(pieces), std::move(scores));
  t->bos_id = 1;
  t->eos_id = 2;
  t->unk_id = 0;
  return t;
}

}  // namespace kvlm
