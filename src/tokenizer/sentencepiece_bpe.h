// SentencePiece-style BPE (Llama): dummy-prefix space, pieces merged by priority, and
// bytes of characters missing from the vocabulary falling back to <0xHH> tokens.
// Pieces are kept with ' ' in place of U+2581 ('▁').
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

class SentencePieceBpe : public Tokenizer {
 public:
  // Longest piece accepted in score mode (real SentencePiece models stop at 16 characters):
  // building the merges tries every cut of every piece, so piece length bounds the work.
  static constexpr size_t kMaxPieceBytes = 512;
  // scores: SentencePiece mode, a pair merges when its concatenation is a piece, highest score first.
  // mergeable[id] false (control/unknown tokens) keeps a piece from being produced by merges.
  static std::unique_ptr<SentencePieceBpe> from_scores(std::vector<std::string> pieces, std::vector<float> scores,
                                                       const std::vector<bool>& mergeable = {});
  // merges: tokenizer.json mode, pairs of piece strings in rank order.
  static std::unique_ptr<SentencePieceBpe> from_merges(std::vector<std::string> pieces,
                                                       const std::vector<std::pair<std::string, std::string>>& merges);

  std::vector<int> encode_ordinary(const std::string& text) const override;
  std::string decode(int prev, int token) const override;
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }

  bool dummy_prefix = true;   // prepend ' ' to non-empty text
  bool byte_fallback = true;  // unknown characters become <0xHH> tokens (else unk_id)
  bool split_on_space = false;  // Metaspace split: merges never cross a space
  int unk_id = 0;

 private:
  void index_pieces();
  void encode_word(const std::string& text, std::vector<int>& out) const;

  std::vector<std::string> pieces_;
  std::unordered_map<std::string, int> ids_;
  int byte_ids_[256];  // id of <0xHH>, or -1
  MergeTable merges_;
};

// U+2581 ('▁', SentencePiece's space) -> ' ', the form pieces are kept in.
std::string metaspace_to_space(const std::string& s);

// Reads a SentencePiece tokenizer.model (protobuf); BPE models only.
std::unique_ptr<SentencePieceBpe> read_sentencepiece_model(const std::string& path);

// Reads a llama2.c tokenizer export (tok512.bin, tokenizer.bin).
std::unique_ptr<SentencePieceBpe> read_llama2c_tokenizer(const std::string& path, int vocab_size_hint = -1);

}  // namespace kvlm
