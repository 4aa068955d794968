#include "kernels/attention_batch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/attention_bf16.h"
#include "kernels/attention_int.h"

namespace kvlm {

namespace {

constexpr int kDecodePiece = 32;  // rows decoded at a time (8 KiB of f32 at a head size of 64)

// Calls fn(offset, rows, stride, count) for the memory runs of cached positions [from, to) of
// KV head g. Encoded rows go to enc(offset, rows, count) first, which reads them as stored; where
// it cannot (it returns false) they are decoded into `deq` a run at a time for fn.
template <class Fn, class Enc>
void cached_runs(const KvLayerView& kv, int kv_dim, int hd, int g, int from, int to, bool values, float* deq, Fn&& fn,
                 Enc&& enc) {
  for (int j = from; j < to;) {
    int n;
    if (j >= kv.hot_from) {  // the f32 ring of the newest positions
      const int s = j % kv.hot_rows;
      n = std::min(to - j, kv.hot_rows - s);
      fn(j - from, (values ? kv.hot_v : kv.hot_k) + static_cast<size_t>(s) * kv_dim + g * hd,
         static_cast<size_t>(kv_dim), n);
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
        // A piece at a time, so the decoded rows stay in L1 while every head of the group reads them.
        for (int o = 0; o < n; o += kDecodePiece) {
          const int m = std::min(kDecodePiece, n - o);
          c.decode_rows(data + o * c.data_bytes(), params + o * c.n_params(), g, m, deq);
          fn(j - from + o, deq, static_cast<size_t>(hd), m);
        }
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

namespace {

// Grows b to at least n elements, keeping what it has (scratch kept from call to call).
template <class B>
void grow(B& b, size_t n) {
  if (b.size() < n) b.resize(n);
}

// Keys per online-softmax update: each update pays a max, a rescale and a scalar exponential per
// head. 256 rather than 128: TinyLlama-shaped decode attention at 16K up to 8% faster (int8 and
// bf16 the most, the others within noise), prefill at 2,000 tokens 3% (Xeon with AMX). One span
// per chunk: two (512 positions) left GPT-2-shaped f32 decode at 960 positions 6-13% slower, the
// threads' shares of so few chunks less even.
constexpr int kSpan = 256;
constexpr int kChunk = kSpan;  // positions whose spans fold into one state before merging
constexpr int kPiece = 32;     // positions read for every head in turn (a value block)

// Merges state c (the next chunk of the same heads) into a: the softmax over both.
void merge_state(AttnState& a, const AttnState& c) {
  for (int i = 0; i < a.g; ++i) {
    const float mx = std::max(a.m[i], c.m[i]);
    const float fa = std::exp(a.m[i] - mx), fc = std::exp(c.m[i] - mx);
    a.l[i] = a.l[i] * fa + c.l[i] * fc;
    float* acc = a.acc + static_cast<size_t>(i) * a.hd;
    const float* cacc = c.acc + static_cast<size_t>(i) * c.hd;
    for (int d = 0; d < a.hd; ++d) acc[d] = acc[d] * fa + cacc[d] * fc;
    a.m[i] = mx;
  }
}

// States of `heads` KV heads' groups laid out in one buffer: m, l, then acc for each head.
struct StateArray {
  int group, hd;
  float* base;
  size_t per() const { return static_cast<size_t>(group) * (hd + 2); }
  AttnState at(int h) const {
    float* p = base + h * per();
    return {group, hd, p, p + group, p + 2 * group};
  }
};

class Attender {
 public:
  explicit Attender(const AttentionBatch& b)
      : b_(b), hd_(b.head_dim), group_(b.n_heads / b.n_kv_heads), kv_dim_(b.n_kv_heads * b.head_dim), id_(next_id()) {}

  int group() const { return group_; }
  // Positions row t attends to: [lo, p].
  std::pair<int, int> range(int t) const {
    const int p = b_.rows[t].pos;
    return {b_.window > 0 ? std::max(0, p - b_.window + 1) : 0, p};
  }
  int chunks(int t) const {
    auto [lo, p] = range(t);
    return (p - lo) / kChunk + 1;
  }
  // Positions in chunk c of row t.
  int chunk_positions(int t, int c) const {
    auto [lo, p] = range(t);
    return std::min(p + 1 - lo - c * kChunk, kChunk);
  }

  struct Scratch {
    Buffer<float> s, deq;               // 64-byte aligned: rows read 16 bytes off 32 cost the f32 value sums a quarter
    std::vector<QuantQuery> qq;         // per KV head
    std::vector<int> qq_row;            // per KV head, the row its qq was prepared for (-1: none)
    Buffer<uint16_t> qb;                // per KV head, its heads' query rounded to bf16 (bf16_products)
    std::vector<int> qb_row;            // per KV head, the row qb was rounded for (-1: none)
    std::vector<const uint8_t*> vrows;  // a piece's encoded value rows of one KV head (integer value sums)
    std::vector<const float*> vprm;     // and their parameters (int8: the scale; int4: the first group's)
    Buffer<float> states;               // the many-rows path's two StateArrays
    std::vector<AttnState> head_states;  // values_heads: its heads' states
    uint64_t batch = 0;                 // the Attender qq_row and qb_row were set for
  };
  // This thread's scratch, kept from call to call and grown to this batch's shapes (fresh buffers
  // are zeroed: see the chunks' states in attention_batch).
  Scratch& scratch() const {
    thread_local Scratch w;
    grow(w.s, static_cast<size_t>(b_.n_kv_heads) * group_ * kSpan);  // a span's scores, every KV head's group
    grow(w.deq, static_cast<size_t>(kDecodePiece) * hd_);            // cached_runs decodes this many rows at a time
    grow(w.qb, static_cast<size_t>(b_.n_kv_heads) * group_ * hd_);
    grow(w.qq, static_cast<size_t>(b_.n_kv_heads));
    grow(w.vrows, kPiece), grow(w.vprm, kPiece);
    if (w.batch != id_) {  // row indices are this batch's; a thread's later pieces of it keep them
      w.qq_row.assign(b_.n_kv_heads, -1);
      w.qb_row.assign(b_.n_kv_heads, -1);
      w.batch = id_;
    }
    return w;
  }

  // Folds chunk c of row t into the reset states st[0 .. g1 - g0) of KV heads [g0, g1), span by
  // span: every head's scores, their softmax updates, then every head's value sums.
  void fold_chunk(Scratch& w, int t, int c, int g0, int g1, const StateArray& st) const {
    const AttentionSeq& seq = b_.seqs[b_.rows[t].seq];
    auto [lo, p] = range(t);
    const int from = lo + c * kChunk, to = std::min(p + 1, from + kChunk);
    const int pos0 = seq.context_len;
    const KvRowCodec* codec = from < pos0 ? seq.kv.codec : nullptr;
    const bool int_scores = codec && integer_scores(*codec, group_),
               int_values = codec && integer_values(*codec, group_);
    const bool bf16_dp = codec && bf16_products(*codec, group_);
    const bool ask_ahead = asks_ahead(seq.kv.codec), whole_keys = asks_whole_rows(seq),
               whole_values = whole_keys || ask_ahead;
    // int8 on AMX tiles: a piece's scores and value sums of every head of [g0, g1) in one call.
    const bool tile_scores = int_scores && amx_scores(codec->dtype, hd_, group_),
               tile_values = int_values && amx_values(codec->dtype, hd_, group_);
    for (int g = g0; g < g1; ++g) {
      AttnState a = st.at(g - g0);
      a.reset();
      if (int_scores && w.qq_row[g] != t) {  // a row's chunks share its quantized query
        w.qq[g].prepare(codec->dtype, query(t, g), group_, hd_, b_.scale);
        w.qq_row[g] = t;
      }
      if (bf16_dp && w.qb_row[g] != t) {
        round_query_bf16(query(t, g), group_ * hd_, query_bf16(w, g));
        w.qb_row[g] = t;
      }
    }
    // Piece by piece, every head of [g0, g1) in turn: the rows are read in the order they are
    // stored (32 rows of all the heads are one contiguous run, which the hardware prefetcher
    // follows), not one head's slice a whole row apart, once per head (which needed explicit
    // prefetches, and still came from memory slower). Scores and value sums are the same whatever
    // the pieces.
    const size_t s_per = static_cast<size_t>(group_) * kSpan;
    for (int j0 = from; j0 < to; j0 += kSpan) {
      const int j1 = std::min(to, j0 + kSpan);
      for (int a = j0; a < j1; a += kPiece) {
        if (tile_scores) {
          scores_heads(w, t, g0, g1, j0, a, std::min(j1, a + kPiece), w.s.data(), s_per);
          continue;
        }
        for (int g = g0; g < g1; ++g) {
          // The integer scores ask for their keys and parameters themselves (32 keys ahead):
          // asking here as well ran int8 and int4 decode attention at 16K 3% slower.
          if (ask_ahead && !int_scores) prefetch_keys(t, g, a + kPiece, a + 2 * kPiece, g == g0);
          if (whole_keys) prefetch_whole_rows(t, a + kPiece, g - g0, g1 - g0, false);
          scores(w, t, g, j0, a, std::min(j1, a + kPiece), int_scores, bf16_dp, w.s.data() + (g - g0) * s_per);
        }
      }
      if (b_.softcap > 0) soft_cap(w.s.data(), g1 - g0, s_per, j1 - j0);
      for (int g = g0; g < g1; ++g) {
        AttnState a = st.at(g - g0);
        attn_update(a, w.s.data() + (g - g0) * s_per, kSpan, j1 - j0);
      }
      // Values: the encoded positions [j0, enc_to) summed in integers where they are int8 or int4
      // rows of a large group (in blocks of 32 from fixed positions, which the pieces keep), the
      // rest in f32.
      const int enc_to = int_values ? std::max(j0, std::min({j1, pos0, seq.kv.hot_from})) : j0;
      for (int a = j0; a < j1; a += kPiece) {
        if (tile_values) {
          for (int g = g0; g < g1; ++g)
            if (whole_values) prefetch_whole_rows(t, a + kPiece, g - g0, g1 - g0, true);
          values_heads(w, t, g0, g1, j0, a, std::min(j1, a + kPiece), enc_to, w.s.data(), s_per, st);
          continue;
        }
        for (int g = g0; g < g1; ++g) {
          if (whole_values) prefetch_whole_rows(t, a + kPiece, g - g0, g1 - g0, true);
          AttnState st_g = st.at(g - g0);
          values(w, t, g, j0, a, std::min(j1, a + kPiece), enc_to, bf16_dp, w.s.data() + (g - g0) * s_per, st_g);
        }
      }
    }
  }

  void finish(int t, int g, const AttnState& st) const {
    attn_finish(st, b_.out + static_cast<size_t>(t) * b_.n_heads * hd_ + static_cast<size_t>(g) * group_ * hd_, hd_,
                b_.sinks ? b_.sinks + static_cast<size_t>(g) * group_ : nullptr);
  }

 private:
  const float* query(int t, int g) const {
    return b_.q + static_cast<size_t>(t) * b_.n_heads * hd_ + static_cast<size_t>(g) * group_ * hd_;
  }
  uint16_t* query_bf16(Scratch& w, int g) const { return w.qb.data() + static_cast<size_t>(g) * group_ * hd_; }

  // Whether prefetch_keys asks for a sequence's cached keys, and prefetch_whole_rows for its
  // values (whole rows into L2 measured 4-6% faster for int8 and int4 at 16K than each head's
  // part into L1): only where a head's part of a row is at most one cache line (int8, int4 at
  // head sizes up to 64s and 128s). One line a whole row apart is a pattern the hardware
  // prefetcher follows late (an int8 step at 16K spent a third longer with its KV in memory than
  // in the caches); the wider parts of f32 and bf16 rows it follows, and asking for each head's
  // part of them measured slower. And only for groups of 4+ heads: with one head per KV head a
  // line is 64 multiply-adds, and the requests cost GPT-2's int8 step at 896 positions 15%.
  bool asks_ahead(const KvRowCodec* codec) const { return codec && codec->head_data_bytes() <= 64 && group_ >= 4; }

  // Asks for KV head g's part of the encoded keys [a, b) of row t, and with `params` every head's
  // parameters of those rows, to be brought into the caches: a piece ahead of the one being
  // read, one head at a time, so the requests are spread over the work. For sequences where
  // asks_ahead holds and the scores are not in integers (those kernels ask for their keys).
  void prefetch_keys(int t, int g, int a, int b, bool params) const {
    const AttentionSeq& seq = b_.seqs[b_.rows[t].seq];
    const KvRowCodec& codec = *seq.kv.codec;
    b = std::min({b, seq.context_len, seq.kv.hot_from, range(t).second + 1});
    if (a >= b) return;
    cached_runs(
        seq.kv, kv_dim_, hd_, g, a, b, false, nullptr, [](int, const float*, size_t, int) {},
        [&](int, const EncodedRows& r, int cnt) {
          const size_t db = codec.data_bytes(), at = codec.head_data_offset(g);
          for (int x = 0; x < cnt; ++x) __builtin_prefetch(r.data + x * db + at);
          if (params) {
            const char* p = reinterpret_cast<const char*>(r.params);
            const size_t bytes = cnt * codec.n_params() * sizeof(float);
            for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o);
          }
          return true;
        });
  }

  // Whether a sequence's cached keys are asked for whole rows, into L2, a piece ahead
  // (prefetch_whole_rows; its values are whenever this or asks_ahead holds): for one row (a
  // decode step). Its scores and value sums computed while memory idled, then waited while it
  // read: the hardware prefetcher stays too close ahead. f32 rows of groups of 4+ heads:
  // TinyLlama-shaped decode attention at 4K and 16K ran 5-10% faster (Zen 3; bf16 rows there 7%
  // slower, int8 and int4 ask for their own). Groups under 4 heads, every KV type: GPT-2-shaped
  // at 960 positions on Zen 4 ran f32 25% faster, bf16 36%, int8 26%, int4 6% (f32 1% slower on Zen 3).
  // And bf16 rows read with bf16 products (attention_bf16.h, Zen 4): without, TinyLlama-shaped
  // decode attention took a third longer at 4K and 16K; f16 rows (Zen 4) 6-10% longer at 16K.
  // Not on Intel cores: each request holds an L1 fill buffer until its line arrives, and a piece's
  // burst of them stalled the loads behind it (Xeon with AMX: TinyLlama-shaped f32 decode attention
  // at 16K 15% slower with them, bf16 17%, GPT-2-shaped at 960 positions 5-20%).
  bool asks_whole_rows(const AttentionSeq& seq) const {
    return !cpu_features().intel && seq.n_rows == 1 && (!seq.kv.codec || group_ < 4 || bf16_products(*seq.kv.codec, group_) || seq.kv.codec->dtype == DType::F16);
  }

  // Part x of n of the whole cached rows (keys or values) of the piece from a, every KV head's
  // part of them and of their parameters, into L2: each head of a thread's [g0, g1) asks for its
  // share while it reads the current piece.
  void prefetch_whole_rows(int t, int a, int x, int n, bool values) const {
    const AttentionSeq& seq = b_.seqs[b_.rows[t].seq];
    const int per = (kPiece + n - 1) / n;
    const int from = a + x * per, to = std::min({a + (x + 1) * per, a + kPiece, seq.context_len, range(t).second + 1});
    if (from >= to) return;
    auto ask = [](const void* p, size_t bytes) {
      for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(static_cast<const char*>(p) + o, 0, 2);
    };
    cached_runs(
        seq.kv, kv_dim_, hd_, 0, from, to, values, nullptr,
        [&](int, const float* rows, size_t stride, int cnt) {  // head 0's part: the row's start
          for (int y = 0; y < cnt; ++y) ask(rows + y * stride, static_cast<size_t>(kv_dim_) * sizeof(float));
        },
        [&](int, const EncodedRows& r, int cnt) {
          const size_t db = r.codec->data_bytes();
          for (int y = 0; y < cnt; ++y) ask(r.data + y * db, db);
          ask(r.params, cnt * r.codec->n_params() * sizeof(float));
          return true;
        });
  }

  // Calls fn(offset from a, rows, stride, count) for the f32 rows of positions [a, b) of row t's
  // KV head g, and enc(offset, rows, count) first for encoded ones (see cached_runs).
  template <class Fn, class Enc>
  void rows_of(Scratch& w, int t, int g, int a, int b, bool values, Fn&& fn, Enc&& enc) const {
    const AttentionSeq& seq = b_.seqs[b_.rows[t].seq];
    const int pos0 = seq.context_len, row0 = seq.first_row;  // the sequence's first new row is at pos0
    if (a < pos0) cached_runs(seq.kv, kv_dim_, hd_, g, a, std::min(pos0, b), values, w.deq.data(), fn, enc);
    if (b > pos0) {
      const int j = std::max(a, pos0);
      const float* base = (values ? b_.v : b_.k) + static_cast<size_t>(row0 + j - pos0) * kv_dim_;
      fn(j - a, base + g * hd_, static_cast<size_t>(kv_dim_), b - j);
    }
  }

  // Gemma 2's soft cap on the first n scores of each query head of `heads` KV heads.
  void soft_cap(float* s, int heads, size_t s_per, int n) const {
    const float cap = b_.softcap;
    for (int g = 0; g < heads; ++g)
      for (int h = 0; h < group_; ++h) {
        float* row = s + g * s_per + static_cast<size_t>(h) * kSpan;
        for (int i = 0; i < n; ++i) row[i] = cap * std::tanh(row[i] / cap);
      }
  }

  // Scores of positions [a, b) of the span from j0, KV head g's query heads, into s (the span's
  // scores of those heads, kSpan apart). Encoded keys in integers (int_scores) or with bf16
  // products (bf16_dp) where those apply, else widened to f32.
  void scores(Scratch& w, int t, int g, int j0, int a, int b, bool int_scores, bool bf16_dp, float* s) const {
    const float* qg = query(t, g);
    s += a - j0;
    rows_of(
        w, t, g, a, b, false,
        [&](int off, const float* kr, size_t stride, int cnt) {
          attn_scores(qg, group_, hd_, b_.scale, kr, stride, cnt, s + off, kSpan);
        },
        [&](int off, const EncodedRows& kr, int cnt) {
          if (bf16_dp) {
            attn_scores_bf16(query_bf16(w, g), group_, hd_, b_.scale, kr, cnt, s + off, kSpan);
            return true;
          }
          if (!int_scores) return attn_scores_encoded(qg, group_, hd_, b_.scale, kr, cnt, s + off, kSpan);
          attn_scores_quantized(w.qq[g], kr, cnt, s + off, kSpan);
          return true;
        });
  }

  // KV head g's encoded value rows of positions [a, e) (all below the f32 ring) and their
  // parameters into w.vrows and w.vprm, for the integer value sums.
  void encoded_value_rows(Scratch& w, const AttentionSeq& seq, int g, int a, int e) const {
    cached_runs(
        seq.kv, kv_dim_, hd_, g, a, e, true, nullptr,
        [](int, const float*, size_t, int) { KVLM_CHECK(false, "an f32 row below the encoded positions' end"); },
        [&](int off, const EncodedRows& vr, int cnt) {
          const KvRowCodec& c = *vr.codec;
          const size_t db = c.data_bytes(), pn = static_cast<size_t>(c.n_params());
          const size_t at = c.head_data_offset(g), pat = c.head_param_offset(g);
          for (int x = 0; x < cnt; ++x) {
            w.vrows[off + x] = vr.data + x * db + at;
            w.vprm[off + x] = vr.params + x * pn + pat;
          }
          return true;
        });
  }

  // Adds the values of positions [a, b) of the span from j0, weighted by s (as scores leaves it,
  // after attn_update), to st: those below enc_to summed in integers, bf16 rows with bf16
  // products where bf16_dp holds, the rest in f32.
  void values(Scratch& w, int t, int g, int j0, int a, int b, int enc_to, bool bf16_dp, const float* s,
              AttnState& st) const {
    const AttentionSeq& seq = b_.seqs[b_.rows[t].seq];
    s += a - j0;
    const int e = std::clamp(enc_to, a, b);
    if (e > a) {
      encoded_value_rows(w, seq, g, a, e);
      attn_accumulate_quantized(seq.kv.codec->dtype, st, s, kSpan, w.vrows.data(), w.vprm.data(), e - a);
    }
    const float* sr = s + (e - a);  // the weights of the rest
    rows_of(
        w, t, g, e, b, true,
        [&](int off, const float* vr, size_t stride, int cnt) {
          attn_accumulate(st, sr + off, kSpan, vr, stride, cnt);
        },
        [&](int off, const EncodedRows& vr, int cnt) {
          if (!bf16_dp) return attn_accumulate_encoded(st, sr + off, kSpan, vr, cnt);
          attn_accumulate_bf16(st, sr + off, kSpan, vr, cnt);
          return true;
        });
  }

  // scores() for KV heads [g0, g1) at once, their scores s_per apart from s: the encoded keys in
  // one call (attn_scores_quantized_heads), f32 rows a head at a time.
  void scores_heads(Scratch& w, int t, int g0, int g1, int j0, int a, int b, float* s, size_t s_per) const {
    s += a - j0;
    rows_of(
        w, t, g0, a, b, false,
        [&](int off, const float* kr, size_t stride, int cnt) {
          for (int g = g0; g < g1; ++g)
            attn_scores(query(t, g), group_, hd_, b_.scale, kr + (g - g0) * hd_, stride, cnt, s + (g - g0) * s_per + off, kSpan);
        },
        [&](int off, const EncodedRows& kr, int cnt) {
          attn_scores_quantized_heads(&w.qq[g0], g1 - g0, kr, cnt, s + off, kSpan, s_per);
          return true;
        });
  }

  // values() for KV heads [g0, g1) at once (states st.at(g - g0), weights s_per apart from s): the
  // positions below enc_to in one call (attn_accumulate_quantized_heads), the rest a head at a time.
  void values_heads(Scratch& w, int t, int g0, int g1, int j0, int a, int b, int enc_to, const float* s, size_t s_per,
                    const StateArray& st) const {
    const AttentionSeq& seq = b_.seqs[b_.rows[t].seq];
    const int e = std::clamp(enc_to, a, b);
    w.head_states.clear();
    for (int g = g0; g < g1; ++g) w.head_states.push_back(st.at(g - g0));
    if (e > a) {
      const KvRowCodec& c = *seq.kv.codec;
      encoded_value_rows(w, seq, g0, a, e);
      attn_accumulate_quantized_heads(c.dtype, w.head_states.data(), g1 - g0, s + (a - j0), kSpan, s_per, w.vrows.data(),
                                      c.head_data_bytes(), w.vprm.data(), c.head_param_offset(1), e - a);
    }
    if (e < b)
      for (int g = g0; g < g1; ++g) values(w, t, g, j0, e, b, e, false, s + (g - g0) * s_per, w.head_states[g - g0]);
  }

  static uint64_t next_id() {
    static std::atomic<uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  const AttentionBatch& b_;
  const int hd_, group_, kv_dim_;
  const uint64_t id_;  // this batch's, for Scratch::batch
};

}  // namespace

void attention_batch(const AttentionBatch& b, ThreadPool& pool) {
  KVLM_CHECK(b.n_kv_heads > 0 && b.n_heads % b.n_kv_heads == 0, "query heads must tile the KV heads");
  size_t seq_rows = 0;
  for (const AttentionSeq& s : b.seqs) seq_rows += s.n_rows;
  KVLM_CHECK(seq_rows == b.rows.size(), "the rows must be the sequences' rows (AttentionBatch::add_seq)");
  const Attender at(b);
  const int n_rows = static_cast<int>(b.rows.size()), n_kv = b.n_kv_heads, group = at.group(), hd = b.head_dim;
  const StateArray one{group, hd, nullptr};
  size_t work = 0;  // multiply-adds, roughly
  int total_chunks = 0;
  std::vector<int> chunk0(n_rows + 1, 0);  // row t's chunks are [chunk0[t], chunk0[t + 1])
  for (int t = 0; t < n_rows; ++t) {
    work += static_cast<size_t>(b.rows[t].pos + 1) * hd * b.n_heads;
    chunk0[t + 1] = chunk0[t] + at.chunks(t);
  }
  total_chunks = chunk0[n_rows];
  const int threads = work < (1u << 15) ? 1 : pool.size();
  auto run = [&](size_t items, const std::function<void(size_t, size_t)>& fn) {
    if (threads == 1)
      fn(0, items);
    else
      pool.parallel_for(items, fn);
  };

  // Every row's result is the same arithmetic however the work is cut: its chunks (fixed logical
  // positions) are folded span by span, then merged in order. Each item takes several KV heads,
  // span by span, so the rows it reads are contiguous runs of heads rather than one head's slice
  // a whole row apart. Many rows, or short contexts: items are rows (times groups of heads, so
  // every thread has one); a few long rows (decode): their chunks are spread over the threads,
  // and merged afterwards.
  if (n_rows >= 2 * threads || total_chunks == n_rows) {
    const int hgroups = std::clamp((threads + n_rows - 1) / n_rows, 1, n_kv), hg = (n_kv + hgroups - 1) / hgroups;
    run(static_cast<size_t>(n_rows) * hgroups, [&](size_t begin, size_t end) {
      Attender::Scratch& w = at.scratch();
      grow(w.states, 2 * hg * one.per());
      const StateArray total{group, hd, w.states.data()}, next{group, hd, w.states.data() + hg * one.per()};
      for (size_t idx = begin; idx < end; ++idx) {
        // Causal rows grow in cost with position: pair the shortest with the longest so that the
        // pool's contiguous slices carry equal work (in order, one thread got 3/4 of a prefill).
        const int slot = static_cast<int>(idx / hgroups), g0 = static_cast<int>(idx % hgroups) * hg;
        const int g1 = std::min(n_kv, g0 + hg);
        if (g0 >= g1) continue;
        const int t = slot % 2 == 0 ? slot / 2 : n_rows - 1 - slot / 2;
        at.fold_chunk(w, t, 0, g0, g1, total);
        for (int c = 1; c < at.chunks(t); ++c) {
          at.fold_chunk(w, t, c, g0, g1, next);
          for (int g = g0; g < g1; ++g) {
            AttnState tot = total.at(g - g0);
            merge_state(tot, next.at(g - g0));
          }
        }
        for (int g = g0; g < g1; ++g) at.finish(t, g, total.at(g - g0));
      }
    });
    return;
  }
  // Heads are split too where the chunks alone leave threads idle.
  const int hsplit = std::min(n_kv, std::max(1, (2 * threads + total_chunks - 1) / total_chunks));
  const int hper = (n_kv + hsplit - 1) / hsplit;
  // The chunks' states, every one reset before it is folded: kept by the calling thread from step
  // to step up to 16 MB. Allocated for each layer, they and the scratch were faulted in and zeroed
  // every time: about a tenth of TinyLlama-shaped decode attention's time at 16K, in perf.
  const size_t n_parts = static_cast<size_t>(total_chunks) * n_kv * one.per();
  thread_local Buffer<float> kept;
  Buffer<float> own;
  Buffer<float>& parts = n_parts <= (size_t{4} << 20) ? kept : own;
  grow(parts, n_parts);
  auto states_of = [&](int chunk, int g0) {
    return StateArray{group, hd, parts.data() + (static_cast<size_t>(chunk) * n_kv + g0) * one.per()};
  };
  // Each thread takes a contiguous run of items of about equal positions: the pool's even count
  // of items gave one thread three whole chunks and the other one and the single newest position
  // at 1,024 positions (chunks start at fixed positions), and 9 against 7 at 4,096.
  const size_t items = static_cast<size_t>(total_chunks) * hsplit;
  auto heads_of = [&](size_t idx) {  // item idx's KV heads [g0, g1) (empty past n_kv)
    const int g0 = static_cast<int>(idx % hsplit) * hper;
    return std::pair{g0, std::min(n_kv, g0 + hper)};
  };
  std::vector<size_t> cum(items + 1, 0);  // positions times heads of the items before
  for (int t = 0; t < n_rows; ++t)
    for (int chunk = chunk0[t]; chunk < chunk0[t + 1]; ++chunk)
      for (size_t idx = static_cast<size_t>(chunk) * hsplit; idx < static_cast<size_t>(chunk + 1) * hsplit; ++idx) {
        const auto [g0, g1] = heads_of(idx);
        cum[idx + 1] = cum[idx] + static_cast<size_t>(at.chunk_positions(t, chunk - chunk0[t])) *
                                      static_cast<size_t>(std::max(0, g1 - g0));
      }
  auto boundary = [&](size_t part) {  // the item boundary nearest part/threads of the work
    if (part == static_cast<size_t>(threads)) return items;
    const size_t target = cum[items] * part / threads;
    const size_t i = std::lower_bound(cum.begin(), cum.end(), target) - cum.begin();
    return i > 0 && target - cum[i - 1] < cum[i] - target ? i - 1 : i;
  };
  auto fold_items = [&](size_t begin, size_t end) {
    Attender::Scratch& w = at.scratch();
    for (size_t idx = begin; idx < end; ++idx) {
      const int chunk = static_cast<int>(idx / hsplit);
      const auto [g0, g1] = heads_of(idx);
      if (g0 >= g1) continue;
      const int t = static_cast<int>(std::upper_bound(chunk0.begin(), chunk0.end(), chunk) - chunk0.begin()) - 1;
      at.fold_chunk(w, t, chunk - chunk0[t], g0, g1, states_of(chunk, g0));
    }
  };
  if (threads == 1) {
    fold_items(0, items);
  } else {  // a thread done early takes the other's last items (the VM slows one thread at times)
    std::vector<size_t> cuts(threads + 1);
    for (int part = 0; part <= threads; ++part) cuts[part] = boundary(part);
    pool.parallel_for_stealing(items, 1, fold_items, cuts);
  }
  run(static_cast<size_t>(n_rows) * n_kv, [&](size_t begin, size_t end) {
    for (size_t idx = begin; idx < end; ++idx) {
      const int t = static_cast<int>(idx / n_kv), g = static_cast<int>(idx % n_kv);
      AttnState tot = states_of(chunk0[t], g).at(0);
      for (int c = chunk0[t] + 1; c < chunk0[t + 1]; ++c) merge_state(tot, states_of(c, g).at(0));
      at.finish(t, g, tot);
    }
  });
}

}  // namespace kvlm
