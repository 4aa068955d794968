#include "engine/forward.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention_batch.h"
#include "kernels/context.h"
#include "kernels/dot.h"
#include "kernels/ops.h"

namespace kvlm {

namespace {

// Row-wise work (norms, RoPE, activations) is split across threads once a prefill makes it
// large: serial, SiLU or GELU over 512 x hidden values was several percent of a prefill.
template <class F>
void for_rows(ThreadPool& pool, int n, size_t values_per_row, F&& fn) {
  if (n > 1 && n * values_per_row >= (1u << 16))
    pool.parallel_for(n, [&](size_t b, size_t e) {
      for (size_t t = b; t < e; ++t) fn(static_cast<int>(t));
    });
  else
    for (int t = 0; t < n; ++t) fn(t);
}

void norm_rows(ThreadPool& pool, const ModelConfig& c, const float* x, const Buffer<float>& w,
               const Buffer<float>& b, float* out, int n) {
  for_rows(pool, n, c.dim, [&](int t) {
    const float* xr = x + static_cast<size_t>(t) * c.dim;
    float* o = out + static_cast<size_t>(t) * c.dim;
    if (c.norm == NormKind::RMSNorm)
      rmsnorm(xr, w.data(), o, c.dim, c.norm_eps);
    else
      layernorm(xr, w.data(), b.empty() ? nullptr : b.data(), o, c.dim, c.norm_eps);
  });
}

void apply_rope(ThreadPool& pool, const Model& m, float* x, const std::vector<AttentionRow>& rows, int n_heads) {
  if (m.cfg.rope == RopeKind::None) return;
  const size_t width = static_cast<size_t>(n_heads) * m.cfg.head_dim;
  for_rows(pool, static_cast<int>(rows.size()), width, [&](int t) { m.rope.rotate_heads(x + t * width, n_heads, rows[t].pos); });
}

void add_rows(ThreadPool& pool, float* x, const float* y, int n, size_t width) {
  for_rows(pool, n, width, [&](int t) {
    for (size_t i = t * width; i < (t + 1) * width; ++i) x[i] += y[i];
  });
}

}  // namespace

void forward_batch(Context& ctx, const Model& m, const std::vector<SeqChunk>& chunks, std::vector<float>& logits) {
  const ModelConfig& c = m.cfg;
  IsaScope isa(ctx.isa_cap());  // the pool carries it to its workers with each job
  ThreadPool& pool = ctx.pool();
  const size_t D = c.dim;
  // Attention metadata, built as the chunks are checked: per sequence its cached length and its
  // rows (the rows' positions serve RoPE and the embeddings too); the views are set per layer.
  AttentionBatch attn;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SeqChunk& ch = chunks[i];
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
  }
  const std::vector<AttentionRow>& rows = attn.rows;
  const int n = static_cast<int>(rows.size());

  // Activations, one row per token of the batch, in the context's scratch: allocated once for
  // the largest batch it has run, then reused. Every buffer is written before it is read.
  const size_t N = n;
  float* x = ctx.scratch(0, N * D);                        // [n][dim] residual stream
  float* xn = ctx.scratch(1, N * D);                       // [n][dim] normed
  float* q = ctx.scratch(2, N * c.q_dim());                // [n][q_dim]
  float* k = ctx.scratch(3, N * c.kv_dim());               // [n][kv_dim]
  float* v = ctx.scratch(4, N * c.kv_dim());               // [n][kv_dim]
  float* att = ctx.scratch(5, N * c.q_dim());              // [n][q_dim]
  float* h1 = ctx.scratch(6, N * c.hidden_dim);            // [n][hidden]
  float* h2 = c.mlp == MlpKind::SwiGLU ? ctx.scratch(7, N * c.hidden_dim) : nullptr;  // [n][hidden] (up)
  float* tmp = ctx.scratch(8, N * D);                      // [n][dim]

  attn.n_heads = c.n_heads;
  attn.n_kv_heads = c.n_kv_heads;
  attn.head_dim = c.head_dim;
  attn.q = q;
  attn.k = k;
  attn.v = v;
  attn.out = att;

  for (int t = 0; t < n; ++t) {
    const AttentionSeq& seq = attn.seqs[rows[t].seq];
    int tok = chunks[rows[t].seq].tokens[t - seq.first_row];
    m.embed(tok, x + t * D);
    if (c.learned_positions) add_rows(pool, x + t * D, m.pos_emb.data() + static_cast<size_t>(rows[t].pos) * D, 1, D);
  }

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    norm_rows(pool, c, x, L.attn_norm, L.attn_norm_bias, xn, n);
    L.wq.forward(xn, n, q, ctx);
    L.wk.forward(xn, n, k, ctx);
    L.wv.forward(xn, n, v, ctx);
    apply_rope(pool, m, q, rows, c.n_heads);
    apply_rope(pool, m, k, rows, c.n_kv_heads);
    // Each query attends to its sequence's cached positions (described by the cache's view of
    // this layer) and to its chunk's own new rows, causally and within the layer's window.
    attn.window = c.layer_window[l];
    attn.scale = c.layer_attn_scale(l);
    for (size_t i = 0; i < chunks.size(); ++i) attn.seqs[i].kv = chunks[i].kv->view(l);
    attention_batch(attn, pool);
    for (size_t i = 0; i < chunks.size(); ++i) {
      size_t off = static_cast<size_t>(attn.seqs[i].first_row) * c.kv_dim();
      chunks[i].kv->store(l, chunks[i].kv->length(), chunks[i].n, k + off, v + off);
    }
    L.wo.forward(att, n, tmp, ctx);
    add_rows(pool, x, tmp, n, D);

    norm_rows(pool, c, x, L.mlp_norm, L.mlp_norm_bias, xn, n);
    if (c.mlp == MlpKind::SwiGLU) {
      L.w_gate.forward(xn, n, h1, ctx);
      L.w_up.forward(xn, n, h2, ctx);
      for_rows(pool, n, c.hidden_dim, [&](int t) {
        const size_t H = c.hidden_dim;
        silu_mul(h1 + t * H, h2 + t * H, H);
      });
    } else {
      L.w_up.forward(xn, n, h1, ctx);
      for_rows(pool, n, c.hidden_dim, [&](int t) {
        const size_t H = c.hidden_dim;
        gelu_tanh_inplace(h1 + t * H, H);
      });
    }
    L.w_down.forward(h1, n, tmp, ctx);
    add_rows(pool, x, tmp, n, D);
  }
  for (const SeqChunk& ch : chunks) ch.kv->set_length(ch.kv->length() + ch.n);

  // Final norm and LM head only on the rows whose logits are wanted.
  std::vector<int> out_rows;
  for (size_t i = 0; i < chunks.size(); ++i) {
    int first = chunks[i].which == LogitsFor::All ? 0 : chunks[i].n - 1;
    for (int t = first; t < chunks[i].n; ++t) out_rows.push_back(attn.seqs[i].first_row + t);
  }
  const int R = static_cast<int>(out_rows.size());
  for (int r = 0; r < R; ++r) std::copy_n(x + out_rows[r] * D, D, tmp + r * D);
  norm_rows(pool, c, tmp, m.final_norm, m.final_norm_bias, xn, R);
  logits.resize(static_cast<size_t>(R) * c.vocab_size);
  if (m.lm_head.out == 0)  // tied, f32: read the embedding table itself
    matmul(m.tok_emb.data(), nullptr, c.vocab_size, c.dim, xn, R, logits.data(), &pool);
  else
    m.lm_head.forward(xn, R, logits.data(), ctx);
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
