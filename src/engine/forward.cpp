#include "engine/forward.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/context.h"
#include "model/family.h"
#include "model/forward_step.h"

namespace kvlm {

namespace {

// The engine's side of a forward step: the batch's sequences, their caches and attention's
// metadata (per sequence its cached length and its rows; the cache views are set per layer).
class BatchStep final : public ForwardStep {
 public:
  BatchStep(Context& ctx, const std::vector<SeqChunk>& chunks, AttentionBatch attn, std::vector<int> tokens,
            std::vector<int> positions, std::vector<float>& logits)
      : ForwardStep(ctx.backend(), std::move(tokens), std::move(positions)),
        ctx_(ctx),
        chunks_(chunks),
        attn_(std::move(attn)),
        logits_(logits) {}

  float* act(int slot, size_t width) override { return ctx_.scratch(slot, static_cast<size_t>(rows()) * width); }

  // Each query attends to its sequence's cached positions (described by the cache's view of
  // this layer) and to its chunk's own new rows, causally and within the layer's window; the
  // new rows are stored after.
  void attention(const AttentionParams& p, const float* q, const float* k, const float* v, float* out) override {
    attn_.n_heads = p.n_heads;
    attn_.n_kv_heads = p.n_kv_heads;
    attn_.head_dim = p.head_dim;
    attn_.scale = p.scale;
    attn_.softcap = p.softcap;
    attn_.window = p.window;
    attn_.sinks = p.sinks;
    attn_.q = q;
    attn_.k = k;
    attn_.v = v;
    attn_.out = out;
    for (size_t i = 0; i < chunks_.size(); ++i) attn_.seqs[i].kv = chunks_[i].kv->view(p.layer);
    ops.attention(attn_);
    const size_t kv_width = static_cast<size_t>(p.n_kv_heads) * p.head_dim;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      const size_t off = static_cast<size_t>(attn_.seqs[i].first_row) * kv_width;
      chunks_[i].kv->store(p.layer, chunks_[i].kv->length(), chunks_[i].n, k + off, v + off);
    }
  }

  int output_rows(const float* x, int width, float* out) override {
    int r = 0;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      const int first = chunks_[i].which == LogitsFor::All ? 0 : chunks_[i].n - 1;
      for (int t = first; t < chunks_[i].n; ++t, ++r)
        std::copy_n(x + static_cast<size_t>(attn_.seqs[i].first_row + t) * width, width,
                    out + static_cast<size_t>(r) * width);
    }
    return r;
  }

  float* logits(int count, int vocab) override {
    logits_.resize(static_cast<size_t>(count) * vocab);
    return logits_.data();
  }

 private:
  Context& ctx_;
  const std::vector<SeqChunk>& chunks_;
  AttentionBatch attn_;
  std::vector<float>& logits_;
};

}  // namespace

void forward_batch(Context& ctx, const Model& m, const std::vector<SeqChunk>& chunks, std::vector<float>& logits) {
  const ModelConfig& c = m.cfg;
  const Family& family = family_named(c.arch, "model");
  IsaScope isa(ctx.isa_cap());  // the pool carries it to its workers with each job
  AttentionBatch attn;
  std::vector<int> tokens;
  for (const SeqChunk& ch : chunks) {
    if (ch.n <= 0) fail("forward needs at least one token per sequence");
    for (int t = 0; t < ch.n; ++t)
      if (ch.tokens[t] < 0 || ch.tokens[t] >= c.vocab_size)
        fail("token id ", ch.tokens[t], " is outside the vocabulary [0, ", c.vocab_size, ")");
    if (ch.kv->length() + ch.n > ch.kv->capacity())
      fail("sequence of ", ch.kv->length() + ch.n, " tokens exceeds the context length ", ch.kv->capacity());
    // Blocks are allocated (shared ones copied, sink windows evicted) before any layer writes.
    ch.kv->prepare(ch.kv->length(), ch.n);
    const int pos0 = ch.kv->length();
    if (c.learned_positions && pos0 + ch.n > c.max_seq_len)
      fail("sequence of ", pos0 + ch.n, " tokens exceeds the model's ", c.max_seq_len, " learned positions");
    attn.add_seq(pos0, ch.n);
    tokens.insert(tokens.end(), ch.tokens, ch.tokens + ch.n);
  }
  std::vector<int> positions;
  for (const AttentionRow& r : attn.rows) positions.push_back(r.pos);
  BatchStep step(ctx, chunks, std::move(attn), std::move(tokens), std::move(positions), logits);
  family.forward(step, m);
  for (const SeqChunk& ch : chunks) ch.kv->set_length(ch.kv->length() + ch.n);
}

void forward_batch(const Model& m, const std::vector<SeqChunk>& chunks, std::vector<float>& logits) {
  forward_batch(Context::this_thread(), m, chunks, logits);
}

void forward(Context& ctx, const Model& m, KvCache& kv, const int* tokens, int n, LogitsFor which,
             std::vector<float>& logits) {
  forward_batch(ctx, m, {SeqChunk{&kv, tokens, n, which}}, logits);
}

void forward(const Model& m, KvCache& kv, const int* tokens, int n, LogitsFor which, std::vector<float>& logits) {
  forward(Context::this_thread(), m, kv, tokens, n, which, logits);
}

}  // namespace kvlm
