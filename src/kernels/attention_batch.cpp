#include "kernels/attention_batch.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/attention_int.h"

namespace kvlm {

namespace {

// Calls fn(offset, rows, stride, count) for the memory runs of cached positions [from, to) of
// KV head g. Encoded rows go to enc(offset, rows, count) first, which reads them as stored; where
// it cannot (it returns false) they are decoded into `deq` a run at a time for fn.
template <class Fn, class Enc>
void cached_runs(const KvLayerView& kv, int kv_dim, int hd, int g, int from, int to, bool values, float* deq,
                 Fn&& fn, Enc&& enc) {
  for (int j = from; j < to;) {
    int n;
    if (j >= kv.hot_from) {  // the f32 ring of the newest positions
      const int s = j % kv.hot_rows;
      n = std::min(to - j, kv.hot_rows - s);
      fn(j - from, (values ? kv.hot_v : kv.hot_k) + static_cast<size_t>(s) * kv_dim + g * hd, static_cast<size_t>(kv_dim), n);
      j += n;
      continue;
    }
    const int end = std::min(to, kv.hot_from);
    size_t r;
    if (kv.block_table) {
      const int b = kv.block_table[j / kv.block_size], s = j % kv.block_size;
      KVLM_CHECK(b >= 0, "attention read a block freed by the sliding window (position ", j, ")");
      n = std::min(end - j, kv.block_size - s);
      r = static_cast<size_t>(b) * kv.block_size + s;
    } else {
      const int s = j % kv.ring_rows;
      n = std::min(end - j, kv.ring_rows - s);
      r = static_cast<size_t>(s);
    }
    if (kv.codec) {
      const KvRowCodec& c = *kv.codec;
      const uint8_t* data = (values ? kv.vq : kv.kq) + r * c.data_bytes();
      const float* params = (values ? kv.vp : kv.kp) + r * c.n_params();
      if (!enc(j - from, EncodedRows{&c, data, params, g}, n)) {
        c.decode_rows(data, params, g, n, deq);
        fn(j - from, deq, static_cast<size_t>(hd), n);
      }
    } else {
      fn(j - from, (values ? kv.v : kv.k) + r * kv_dim + g * hd, static_cast<size_t>(kv_dim), n);
    }
    j += n;
  }
}

}  // namespace

void AttentionBatch::add_seq(int context_len, int n_rows) {
  seqs.push_back({context_len, static_cast<int>(rows.size()), n_rows, KvLayerView{}});
  for (int t = 0; t < n_rows; ++t) rows.push_back({static_cast<int>(seqs.size()) - 1, context_len + t});
}

void attention_batch(const AttentionBatch& b, ThreadPool& pool) {
  const int hd = b.head_dim, group = b.n_heads / b.n_kv_heads;
  const int kv_dim = b.n_kv_heads * hd, q_dim = b.n_heads * hd;
  constexpr int kSpan = 128;  // keys per online-softmax update, at fixed logical positions
  KVLM_CHECK(b.n_kv_heads > 0 && group * b.n_kv_heads == b.n_heads, "query heads must tile the KV heads");
  const std::vector<AttentionRow>& rows = b.rows;
  size_t seq_rows = 0;
  for (const AttentionSeq& s : b.seqs) seq_rows += s.n_rows;
  KVLM_CHECK(seq_rows == rows.size(), "the rows must be the sequences' rows (AttentionBatch::add_seq)");
  const int n_rows = static_cast<int>(rows.size());
  auto body = [&](size_t begin, size_t end) {
    std::vector<float> m(group), l(group), acc(static_cast<size_t>(group) * hd), s(static_cast<size_t>(group) * kSpan);
    std::vector<float> deq(static_cast<size_t>(kSpan) * hd);  // one span of an encoded head, decoded
    AttnState st{group, hd, m.data(), l.data(), acc.data()};
    QuantQuery qq;  // the query quantized for integer scores against int8 / int4 keys
    for (size_t idx = begin; idx < end; ++idx) {
      // Causal rows grow in cost with position: pair the shortest with the longest so that the
      // pool's contiguous slices carry equal work (in order, one thread got 3/4 of a prefill).
      const int slot = static_cast<int>(idx / b.n_kv_heads), g = static_cast<int>(idx % b.n_kv_heads);
      const int t = slot % 2 == 0 ? slot / 2 : n_rows - 1 - slot / 2;
      const AttentionRow& r = rows[t];
      const AttentionSeq& seq = b.seqs[r.seq];
      const int pos0 = seq.context_len, row0 = seq.first_row;  // the sequence's first new row is at pos0
      const int p = r.pos, lo = b.window > 0 ? std::max(0, p - b.window + 1) : 0;
      const float* qg = b.q + static_cast<size_t>(t) * q_dim + static_cast<size_t>(g) * group * hd;
      // Positions [from, to): cached ones from the view, then the sequence's own new rows.
      auto for_runs = [&](int from, int to, bool values, auto&& fn, auto&& enc) {
        if (from < pos0) cached_runs(seq.kv, kv_dim, hd, g, from, std::min(pos0, to), values, deq.data(), fn, enc);
        if (to > pos0) {
          const int j = std::max(from, pos0);
          const float* base = (values ? b.v : b.k) + static_cast<size_t>(row0 + j - pos0) * kv_dim;
          fn(j - from, base + g * hd, static_cast<size_t>(kv_dim), to - j);
        }
      };
      const KvRowCodec* codec = lo < pos0 ? seq.kv.codec : nullptr;
      const bool int_scores = codec && integer_scores(*codec, group);
      if (int_scores) qq.prepare(codec->dtype, qg, group, hd, b.scale);
      st.reset();
      for (int j0 = lo; j0 <= p; j0 += kSpan) {
        const int j1 = std::min(p + 1, j0 + kSpan), n = j1 - j0;
        for_runs(
            j0, j1, false,
            [&](int off, const float* kr, size_t stride, int cnt) {
              attn_scores(qg, group, hd, b.scale, kr, stride, cnt, s.data() + off, kSpan);
            },
            [&](int off, const EncodedRows& kr, int cnt) {
              if (!int_scores) return attn_scores_encoded(qg, group, hd, b.scale, kr, cnt, s.data() + off, kSpan);
              attn_scores_quantized(qq, kr, cnt, s.data() + off, kSpan);
              return true;
            });
        attn_update(st, s.data(), kSpan, n);
        for_runs(
            j0, j1, true,
            [&](int off, const float* vr, size_t stride, int cnt) {
              attn_accumulate(st, s.data() + off, kSpan, vr, stride, cnt);
            },
            [&](int off, const EncodedRows& vr, int cnt) {
              // A group of many heads reads each value row once per head: decoding the run once
              // is cheaper than widening it per head.
              return group < 4 && attn_accumulate_encoded(st, s.data() + off, kSpan, vr, cnt);
            });
      }
      attn_finish(st, b.out + static_cast<size_t>(t) * q_dim + static_cast<size_t>(g) * group * hd, hd);
    }
  };
  const size_t items = static_cast<size_t>(n_rows) * b.n_kv_heads;
  size_t work = 0;  // multiply-adds, roughly
  for (const AttentionRow& r : rows) work += static_cast<size_t>(r.pos + 1) * hd * b.n_heads;
  if (work < (1u << 15))
    body(0, items);
  else
    pool.parallel_for(items, body);
}

}  // namespace kvlm
