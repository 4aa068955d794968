// SentencePiece tokenizer.model: a protobuf ModelProto, read with a minimal bounds-checked
// wire-format parser (pieces with scores and types, the BPE model type, add_dummy_prefix).
#include <cstring>

#include "core/error.h"
#include "core/read_file.h"
#include "tokenizer/sentencepiece_bpe.h"

namespace kvlm {

namespace {

class Proto {
 public:
  Proto(const uint8_t* p, size_t n, const std::string& label) : p_(p), end_(p + n), label_(label) {}
  bool done() const { return p_ >= end_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail(label_, ": truncated protobuf varint");
      uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail(label_, ": protobuf varint too long");
  }
  // Next field: its number, wire type, and (for length-delimited) the bytes.
  bool next(uint32_t& field, uint32_t& wire, Proto* sub) {
    if (done()) return false;
    uint64_t key = varint();
    field = static_cast<uint32_t>(key >> 3);
    wire = key & 7;
    switch (wire) {
      case 0: last_ = varint(); break;
      case 1: skip(8); break;
      case 5:
        need(4);
        std::memcpy(&f32_, p_, 4);
        p_ += 4;
        break;
      case 2: {
        uint64_t len = varint();
        need(len);
        if (sub) *sub = Proto(p_, len, label_);
        p_ += len;
        break;
      }
      default: fail(label_, ": unsupported protobuf wire type ", wire);
    }
    return true;
  }
  uint64_t last_varint() const { return last_; }
  float last_float() const { return f32_; }
  std::string bytes() const { return std::string(reinterpret_cast<const char*>(p_), end_ - p_); }

 private:
  void need(uint64_t n) const {
    if (n > static_cast<uint64_t>(end_ - p_)) fail(label_, ": truncated protobuf field");
  }
  void skip(uint64_t n) {
    need(n);
    p_ += n;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  std::string label_;
  uint64_t last_ = 0;
  float f32_ = 0;
};

}  // namespace

std::unique_ptr<SentencePieceBpe> read_sentencepiece_model(const std::string& path) {
  const std::string data = read_file(path);
  Proto top(reinterpret_cast<const uint8_t*>(data.data()), data.size(), path);
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int> types;
  bool dummy_prefix = true;
  int model_type = 1;  // UNIGRAM unless the trainer spec says otherwise
  uint32_t field, wire;
  Proto sub(nullptr, 0, path);
  while (top.next(field, wire, &sub)) {
    if (field == 1 && wire == 2) {  // SentencePiece
      std::string piece;
      float score = 0;
      int type = 1;
      uint32_t f, w;
      Proto s(nullptr, 0, path);
      while (sub.next(f, w, &s)) {
        if (f == 1 && w == 2) piece = s.bytes();
        if (f == 2 && w == 5) score = sub.last_float();
        if (f == 3 && w == 0) type = static_cast<int>(sub.last_varint());
      }
      pieces.push_back(piece);
      scores.push_back(score);
      types.push_back(type);
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      uint32_t f, w;
      while (sub.next(f, w, nullptr))
        if (f == 3 && w == 0) model_type = static_cast<int>(sub.last_varint());
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      uint32_t f, w;
      while (sub.next(f, w, nullptr))
        if (f == 3 && w == 0) dummy_prefix = sub.last_varint() != 0;
    }
  }
  if (pieces.size() < 3) fail(path, ": not a SentencePiece model (", pieces.size(), " pieces)");
  if (model_type != 2) fail(path, ": SentencePiece model type ", model_type, " is not BPE (2); only BPE is supported");
  std::vector<bool> mergeable(pieces.size());
  int unk = 0, bos = -1, eos = -1;
  for (size_t i = 0; i < pieces.size(); ++i) {
    mergeable[i] = types[i] == 1;
    if (types[i] == 2) unk = static_cast<int>(i);
    if (types[i] == 3 && pieces[i] == "<s>") bos = static_cast<int>(i);
    if (types[i] == 3 && pieces[i] == "</s>") eos = static_cast<int>(i);
    pieces[i] = metaspace_to_space(pieces[i]);
  }
  auto t = SentencePieceBpe::from_scores(std::move(pieces), std::move(scores), mergeable);
  t->dummy_prefix = dummy_prefix;
  t->unk_id = unk;
  t->bos_id = bos;
  t->eos_id = eos;
  t->add_bos = bos >= 0;
  return t;
}

}  // namespace kvlm
