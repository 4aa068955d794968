// The attention entry point over batch metadata (kernels/attention_batch.h), on its own: the
// same keys and values described as a contiguous array, a ring, and a paged block table in
// shuffled blocks give bit-identical outputs; encoded rows with an f32 ring of the newest
// positions read as their decoded values; a window limits what is read; a freed block is an
// internal error, never a wild read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>

#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention_batch.h"
#include "test_support.h"

using namespace kvlm;

namespace {

constexpr int kHeads = 4, kKvHeads = 2, kHd = 32, kKvDim = kKvHeads * kHd, kQDim = kHeads * kHd;

using test::randn;

// One sequence: `cached` positions in the view, `fresh` new rows after them, `heads` query heads
// over `kv_heads` KV heads of kHd.
std::vector<float> run_heads(const KvLayerView& view, int cached, int fresh, int window, int heads, int kv_heads,
                             const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             int threads = 0, int hd = kHd, const float* sinks = nullptr) {
  AttentionBatch b;
  b.sinks = sinks;
  b.n_heads = heads;
  b.n_kv_heads = kv_heads;
  b.head_dim = hd;
  b.scale = 0.17f;
  b.window = window;
  b.q = q.data();
  b.k = k.data();
  b.v = v.data();
  std::vector<float> out(static_cast<size_t>(fresh) * heads * hd, -1.0f);
  b.out = out.data();
  b.add_seq(cached, fresh);
  b.seqs[0].kv = view;
  ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());  // KVLM_THREADS applies
  attention_batch(b, pool);
  return out;
}

std::vector<float> run(const KvLayerView& view, int cached, int fresh, int window, const std::vector<float>& q,
                       const std::vector<float>& k, const std::vector<float>& v, int threads = 0) {
  return run_heads(view, cached, fresh, window, kHeads, kKvHeads, q, k, v, threads);
}

// A decode step (one new row after `cached` positions) read through `flat`, through `paged`, and
// through `paged` with the blocks wholly before the window freed, on one and two threads (one
// where KVLM_THREADS=1: the aarch64 tests under qemu-user, whose thread creation hangs): each
// gives the single-threaded flat result bit for bit. Returns that result.
std::vector<float> decode_step_agrees(const KvLayerView& flat, const KvLayerView& paged, const std::vector<int>& table, int bs,
                                      int cached, int window, int heads, int kv_heads, const std::vector<float>& q,
                                      const std::vector<float>& k, const std::vector<float>& v) {
  const auto want = run_heads(flat, cached, 1, window, heads, kv_heads, q, k, v, 1);
  std::vector<int> freed = table;
  for (int b = 0; window > 0 && b < (cached + 1 - window) / bs; ++b) freed[b] = -1;
  KvLayerView sparse = paged;
  sparse.block_table = freed.data();
  const KvLayerView* views[] = {&flat, &paged, &sparse};
  for (int threads = 1; threads <= std::min(2, ThreadPool::default_threads()); ++threads)
    for (const KvLayerView* view : views)
      EXPECT_EQ(run_heads(*view, cached, 1, window, heads, kv_heads, q, k, v, threads), want)
          << "window " << window << ", threads " << threads << (view == &flat ? ", flat" : view == &paged ? ", paged" : ", freed");
  return want;
}

// One row's attention in double (scale 0.17, as run_heads) over positions [lo, p]: key(j, x) and
// val(j, x) are element x of position j's KV row, q the row's heads of kHd.
template <class Key, class Val>
std::vector<double> softmax_reference(const float* q, int heads, int kv_heads, int lo, int p, Key key, Val val,
                                      const float* sinks = nullptr) {
  std::vector<double> out(static_cast<size_t>(heads) * kHd);
  for (int h = 0; h < heads; ++h) {
    const int g = h / (heads / kv_heads);
    std::vector<double> w(p + 1, 0.0);
    double mx = -1e300, sum = 0;
    for (int j = lo; j <= p; ++j) {
      double d = 0;
      for (int x = 0; x < kHd; ++x) d += double(q[h * kHd + x]) * key(j, g * kHd + x);
      mx = std::max(mx, w[j] = 0.17 * d);
    }
    if (sinks) mx = std::max(mx, double(sinks[h]));
    for (int j = lo; j <= p; ++j) sum += (w[j] = std::exp(w[j] - mx));
    if (sinks) sum += std::exp(sinks[h] - mx);  // a score whose value row is zero
    for (int x = 0; x < kHd; ++x)
      for (int j = lo; j <= p; ++j) out[h * kHd + x] += w[j] / sum * val(j, g * kHd + x);
  }
  return out;
}

}  // namespace

TEST(AttentionBatch, ContiguousRingAndShuffledBlocksAgreeBitForBit) {
  const int cached = 300, fresh = 5, bs = 16, blocks = (cached + bs - 1) / bs;
  const auto ck = randn(static_cast<size_t>(cached) * kKvDim, 1), cv = randn(ck.size(), 2);
  const auto q = randn(static_cast<size_t>(fresh) * kQDim, 3), k = randn(static_cast<size_t>(fresh) * kKvDim, 4),
             v = randn(static_cast<size_t>(fresh) * kKvDim, 5);
  for (int window : {0, 100}) {
    KvLayerView flat;
    flat.ring_rows = cached;
    flat.k = ck.data();
    flat.v = cv.data();
    const auto want = run(flat, cached, fresh, window, q, k, v);

    // A ring of 320 rows whose start is rotated: position p at row p % 320, as a windowed cache keeps it.
    const int ring = 320;
    std::vector<float> rk(static_cast<size_t>(ring) * kKvDim), rv(rk.size());
    for (int p = 0; p < cached; ++p) {
      std::copy_n(ck.begin() + static_cast<size_t>(p) * kKvDim, kKvDim, rk.begin() + static_cast<size_t>(p % ring) * kKvDim);
      std::copy_n(cv.begin() + static_cast<size_t>(p) * kKvDim, kKvDim, rv.begin() + static_cast<size_t>(p % ring) * kKvDim);
    }
    KvLayerView ringed;
    ringed.ring_rows = ring;
    ringed.k = rk.data();
    ringed.v = rv.data();
    EXPECT_EQ(run(ringed, cached, fresh, window, q, k, v), want) << "window " << window;

    // Blocks in shuffled pool slots.
    std::vector<int> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(7));
    std::vector<float> pk(static_cast<size_t>(blocks) * bs * kKvDim), pv(pk.size());
    for (int p = 0; p < cached; ++p) {
      size_t row = static_cast<size_t>(table[p / bs]) * bs + p % bs;
      std::copy_n(ck.begin() + static_cast<size_t>(p) * kKvDim, kKvDim, pk.begin() + row * kKvDim);
      std::copy_n(cv.begin() + static_cast<size_t>(p) * kKvDim, kKvDim, pv.begin() + row * kKvDim);
    }
    KvLayerView paged;
    paged.block_table = table.data();
    paged.block_size = bs;
    paged.k = pk.data();
    paged.v = pv.data();
    EXPECT_EQ(run(paged, cached, fresh, window, q, k, v), want) << "window " << window;

    // With a window, the blocks wholly before it may be freed: nothing reads them.
    if (window > 0) {
      std::vector<int> freed = table;
      for (int b = 0; b < (cached + fresh - window) / bs - 1; ++b) freed[b] = -1;
      paged.block_table = freed.data();
      EXPECT_EQ(run(paged, cached, fresh, window, q, k, v), want);
      freed[(cached - 1) / bs] = -1;  // a block the window needs: an internal error, on any thread
      EXPECT_THROW(run(paged, cached, fresh, window, q, k, v, 1), InternalError);
      if (ThreadPool::default_threads() > 1) {
        EXPECT_THROW(run(paged, cached, fresh, window, q, k, v, 2), InternalError);
      }
    }
  }
}

TEST(AttentionBatch, EncodedRowsWithAnF32RingReadAsTheirDecodedValues) {
  const int cached = 200, fresh = 3, hot = 40;
  KvRowCodec codec{DType::Int8, kKvDim, kHd};
  const auto ck = randn(static_cast<size_t>(cached) * kKvDim, 11), cv = randn(ck.size(), 12);
  const auto q = randn(static_cast<size_t>(fresh) * kQDim, 13), k = randn(static_cast<size_t>(fresh) * kKvDim, 14),
             v = randn(static_cast<size_t>(fresh) * kKvDim, 15);
  // Encoded rows for every position; the last `hot` positions also in an f32 ring of `hot` rows.
  std::vector<uint8_t> kq(cached * codec.data_bytes()), vq(kq.size());
  std::vector<float> kp(static_cast<size_t>(cached) * codec.n_params()), vp(kp.size());
  std::vector<float> dk(ck.size()), dv(cv.size());  // what the encoded rows decode to
  for (int p = 0; p < cached; ++p) {
    codec.encode(ck.data() + static_cast<size_t>(p) * kKvDim, kq.data() + p * codec.data_bytes(), kp.data() + p * codec.n_params());
    codec.encode(cv.data() + static_cast<size_t>(p) * kKvDim, vq.data() + p * codec.data_bytes(), vp.data() + p * codec.n_params());
    for (int h = 0; h < kKvHeads; ++h) {
      codec.decode_head(kq.data() + p * codec.data_bytes(), kp.data() + p * codec.n_params(), h,
                        dk.data() + static_cast<size_t>(p) * kKvDim + h * kHd);
      codec.decode_head(vq.data() + p * codec.data_bytes(), vp.data() + p * codec.n_params(), h,
                        dv.data() + static_cast<size_t>(p) * kKvDim + h * kHd);
    }
  }
  std::vector<float> hk(static_cast<size_t>(hot) * kKvDim), hv(hk.size());
  for (int p = cached - hot; p < cached; ++p) {  // the newest rows at full precision
    std::copy_n(ck.begin() + static_cast<size_t>(p) * kKvDim, kKvDim, hk.begin() + static_cast<size_t>(p % hot) * kKvDim);
    std::copy_n(cv.begin() + static_cast<size_t>(p) * kKvDim, kKvDim, hv.begin() + static_cast<size_t>(p % hot) * kKvDim);
    std::copy_n(ck.begin() + static_cast<size_t>(p) * kKvDim, kKvDim, dk.begin() + static_cast<size_t>(p) * kKvDim);
    std::copy_n(cv.begin() + static_cast<size_t>(p) * kKvDim, kKvDim, dv.begin() + static_cast<size_t>(p) * kKvDim);
  }
  KvLayerView mixed;
  mixed.ring_rows = cached;
  mixed.codec = &codec;
  mixed.kq = kq.data();
  mixed.vq = vq.data();
  mixed.kp = kp.data();
  mixed.vp = vp.data();
  mixed.hot_from = cached - hot;
  mixed.hot_rows = hot;
  mixed.hot_k = hk.data();
  mixed.hot_v = hv.data();
  KvLayerView plain;
  plain.ring_rows = cached;
  plain.k = dk.data();
  plain.v = dv.data();
  EXPECT_EQ(run(mixed, cached, fresh, 0, q, k, v), run(plain, cached, fresh, 0, q, k, v));
}

// gpt-oss's sink logits join each head's softmax denominator in the state's final normalization,
// which every kernel shares: for every KV encoding, prefill rows and decode steps (over several
// 256-position spans, merged), on one and two threads, equal a float64 softmax with the sink over
// the rows' decoded values. The sinks span below, near and far above the scores.
TEST(AttentionBatch, SinksJoinEverySoftmaxInEveryEncoding) {
  const int cached = 600;
  const float sinks[kHeads] = {-3.0f, 0.5f, 2.0f, 9.0f};
  const auto ck = randn(static_cast<size_t>(cached) * kKvDim, 21), cv = randn(ck.size(), 22);
  for (int fresh : {1, 3}) {
    const auto q = randn(static_cast<size_t>(fresh) * kQDim, 23), k = randn(static_cast<size_t>(fresh) * kKvDim, 24),
               v = randn(static_cast<size_t>(fresh) * kKvDim, 25);
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Int8, DType::Int4}) {
      std::vector<float> dk(ck), dv(cv);  // what the stored rows decode to
      KvRowCodec codec{t, kKvDim, kHd};
      std::vector<uint8_t> kq, vq;
      std::vector<float> kp, vp;
      KvLayerView view;
      view.ring_rows = cached;
      if (t == DType::F32) {
        view.k = dk.data();
        view.v = dv.data();
      } else {
        kq.resize(cached * codec.data_bytes()), vq.resize(kq.size());
        kp.resize(static_cast<size_t>(cached) * codec.n_params()), vp.resize(kp.size());
        for (int p = 0; p < cached; ++p)
          for (auto [src, data, prm, dec] : {std::tuple{&ck, &kq, &kp, &dk}, std::tuple{&cv, &vq, &vp, &dv}}) {
            codec.encode(src->data() + static_cast<size_t>(p) * kKvDim, data->data() + p * codec.data_bytes(),
                         prm->data() + p * codec.n_params());
            for (int h = 0; h < kKvHeads; ++h)
              codec.decode_head(data->data() + p * codec.data_bytes(), prm->data() + p * codec.n_params(), h,
                                dec->data() + static_cast<size_t>(p) * kKvDim + h * kHd);
          }
        view.codec = &codec;
        view.kq = kq.data(), view.vq = vq.data(), view.kp = kp.data(), view.vp = vp.data();
      }
      auto key = [&](int j, int x) { return j < cached ? dk[static_cast<size_t>(j) * kKvDim + x] : k[static_cast<size_t>(j - cached) * kKvDim + x]; };
      auto val = [&](int j, int x) { return j < cached ? dv[static_cast<size_t>(j) * kKvDim + x] : v[static_cast<size_t>(j - cached) * kKvDim + x]; };
      for (int threads = 1; threads <= std::min(2, ThreadPool::default_threads()); ++threads) {
        const auto got = run_heads(view, cached, fresh, 0, kHeads, kKvHeads, q, k, v, threads, kHd, sinks);
        double err = 0;
        for (int r = 0; r < fresh; ++r) {
          const auto want = softmax_reference(q.data() + static_cast<size_t>(r) * kQDim, kHeads, kKvHeads, 0, cached + r, key, val, sinks);
          for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(want[i] - got[r * kQDim + i]));
        }
        EXPECT_LE(err, 2e-5) << dtype_name(t) << ", " << fresh << " new rows, " << threads << " threads";
      }
    }
  }
}

// Long contexts are cut into chunks of fixed logical positions, folded span by span and merged in
// order: a decode row's chunks are spread over the threads, a prefill's rows are not. The result
// of a row must not depend on how the work was cut: thread counts, decode or inside a prefill.
TEST(AttentionBatch, LongContextRowsAreTheSameHoweverTheWorkIsCut) {
  const int ctx = 2600, fresh = 4;  // eleven chunks of 256 positions
  const auto kk = randn(static_cast<size_t>(ctx + fresh) * kKvDim, 21), vv = randn(kk.size(), 22);
  const auto q = randn(static_cast<size_t>(fresh) * kQDim, 23);
  for (int window : {0, 1500}) {
    KvLayerView flat;
    flat.ring_rows = ctx + fresh;
    flat.k = kk.data();
    flat.v = vv.data();
    // The prefill: positions ctx .. ctx + 3 as new rows over ctx cached ones.
    const std::vector<float> nk(kk.begin() + static_cast<size_t>(ctx) * kKvDim, kk.end()), nv(vv.begin() + static_cast<size_t>(ctx) * kKvDim, vv.end());
    const auto prefill = run(flat, ctx, fresh, window, q, nk, nv, 2);
    // The last row alone as a decode step: ctx + 3 cached positions, one new row.
    const std::vector<float> q1(q.end() - kQDim, q.end()), k1(nk.end() - kKvDim, nk.end()), v1(nv.end() - kKvDim, nv.end());
    const std::vector<float> last(prefill.end() - kQDim, prefill.end());
    for (int threads : {1, 2, 3}) {
      EXPECT_EQ(run(flat, ctx + fresh - 1, 1, window, q1, k1, v1, threads), last) << "threads " << threads << " window " << window;
    }
    EXPECT_EQ(run(flat, ctx, fresh, window, q, nk, nv, 3), prefill) << "window " << window;
    // And against a plain softmax in double.
    const int p = ctx + fresh - 1, lo = window ? p - window + 1 : 0;
    const auto ref = softmax_reference(
        q1.data(), kHeads, kKvHeads, lo, p, [&](int j, int x) { return kk[static_cast<size_t>(j) * kKvDim + x]; },
        [&](int j, int x) { return vv[static_cast<size_t>(j) * kKvDim + x]; });
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(last[i], ref[i], 1e-5) << "element " << i << " window " << window;
  }
}

// A decode step of groups of 4+ heads (where the cached f32 rows are also asked for whole, a piece
// ahead): every layout gives the contiguous array's result bit for bit, with a window too, and
// with the blocks before the window freed; and that result is a plain softmax in double.
TEST(AttentionBatch, DecodeStepsOfLargeGroupsAgreeAcrossLayouts) {
  const int heads = 8, kv_heads = 2, kv_dim = kv_heads * kHd, cached = 700, bs = 16, blocks = (cached + bs - 1) / bs;
  const auto ck = randn(static_cast<size_t>(cached) * kv_dim, 31), cv = randn(ck.size(), 32);
  const auto q = randn(static_cast<size_t>(heads) * kHd, 33), k = randn(kv_dim, 34), v = randn(kv_dim, 35);
  std::vector<int> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(8));
  std::vector<float> pk(static_cast<size_t>(blocks) * bs * kv_dim), pv(pk.size());
  for (int p = 0; p < cached; ++p) {
    const size_t row = static_cast<size_t>(table[p / bs]) * bs + p % bs;
    std::copy_n(ck.begin() + static_cast<size_t>(p) * kv_dim, kv_dim, pk.begin() + row * kv_dim);
    std::copy_n(cv.begin() + static_cast<size_t>(p) * kv_dim, kv_dim, pv.begin() + row * kv_dim);
  }
  for (int window : {0, 300}) {
    KvLayerView flat;
    flat.ring_rows = cached;
    flat.k = ck.data();
    flat.v = cv.data();
    KvLayerView paged;
    paged.block_table = table.data();
    paged.block_size = bs;
    paged.k = pk.data();
    paged.v = pv.data();
    const auto want = decode_step_agrees(flat, paged, table, bs, cached, window, heads, kv_heads, q, k, v);
    const int p = cached, lo = window ? p - window + 1 : 0;
    const auto ref = softmax_reference(
        q.data(), heads, kv_heads, lo, p, [&](int j, int x) { return j < cached ? ck[static_cast<size_t>(j) * kv_dim + x] : k[x]; },
        [&](int j, int x) { return j < cached ? cv[static_cast<size_t>(j) * kv_dim + x] : v[x]; });
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(want[i], ref[i], 1e-5) << "element " << i << " window " << window;
  }
}

// The same for int8 rows with an f32 ring of the newest positions (groups of 4+ heads: integer
// scores and value sums, and the value rows asked for whole): contiguous and shuffled blocks, with
// a window and the blocks before it freed, on one and two threads, give one result bit for bit.
TEST(AttentionBatch, EncodedDecodeStepsOfLargeGroupsAgreeAcrossLayouts) {
  const int heads = 8, kv_heads = 2, kv_dim = kv_heads * kHd, cached = 700, hot = 48, bs = 16;
  const int blocks = (cached + bs - 1) / bs;
  KvRowCodec codec{DType::Int8, kv_dim, kHd};
  const size_t db = codec.data_bytes(), pn = static_cast<size_t>(codec.n_params());
  const auto ck = randn(static_cast<size_t>(cached) * kv_dim, 41), cv = randn(ck.size(), 42);
  const auto q = randn(static_cast<size_t>(heads) * kHd, 43), k = randn(kv_dim, 44), v = randn(kv_dim, 45);
  std::vector<int> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(9));
  std::vector<uint8_t> kq(cached * db), vq(kq.size()), pkq(static_cast<size_t>(blocks) * bs * db), pvq(pkq.size());
  std::vector<float> kp(cached * pn), vp(kp.size()), pkp(static_cast<size_t>(blocks) * bs * pn), pvp(pkp.size());
  std::vector<float> hk(static_cast<size_t>(hot) * kv_dim), hv(hk.size());
  for (int p = 0; p < cached; ++p) {
    codec.encode(ck.data() + static_cast<size_t>(p) * kv_dim, kq.data() + p * db, kp.data() + p * pn);
    codec.encode(cv.data() + static_cast<size_t>(p) * kv_dim, vq.data() + p * db, vp.data() + p * pn);
    const size_t row = static_cast<size_t>(table[p / bs]) * bs + p % bs;
    std::copy_n(kq.begin() + p * db, db, pkq.begin() + row * db), std::copy_n(vq.begin() + p * db, db, pvq.begin() + row * db);
    std::copy_n(kp.begin() + p * pn, pn, pkp.begin() + row * pn), std::copy_n(vp.begin() + p * pn, pn, pvp.begin() + row * pn);
    if (p >= cached - hot) {
      std::copy_n(ck.begin() + static_cast<size_t>(p) * kv_dim, kv_dim, hk.begin() + static_cast<size_t>(p % hot) * kv_dim);
      std::copy_n(cv.begin() + static_cast<size_t>(p) * kv_dim, kv_dim, hv.begin() + static_cast<size_t>(p % hot) * kv_dim);
    }
  }
  auto with_ring = [&](KvLayerView view) {
    view.codec = &codec;
    view.hot_from = cached - hot;
    view.hot_rows = hot;
    view.hot_k = hk.data();
    view.hot_v = hv.data();
    return view;
  };
  KvLayerView flat;
  flat.ring_rows = cached;
  flat.kq = kq.data(), flat.vq = vq.data(), flat.kp = kp.data(), flat.vp = vp.data();
  flat = with_ring(flat);
  KvLayerView paged;
  paged.block_table = table.data();
  paged.block_size = bs;
  paged.kq = pkq.data(), paged.vq = pvq.data(), paged.kp = pkp.data(), paged.vp = pvp.data();
  paged = with_ring(paged);
  for (int window : {0, 300}) decode_step_agrees(flat, paged, table, bs, cached, window, heads, kv_heads, q, k, v);
}

// int8 rows of head size 64 in groups of 8 and of 4 query heads (on a CPU with AMX: scores, and
// for groups of 8 value sums, on tiles, several KV heads per call) with an f32 ring of the newest
// positions, in shuffled blocks of 16: a decode step and a 20-row prefill give the vector path's
// result bit for bit (where the CPU has AVX-512), on one and two threads, with and without a window.
TEST(AttentionBatch, EncodedRowsOnTilesEqualTheVectorPath) {
  const int hd = 64, kv_heads = 3, cached = 700, hot = 48, bs = 16, blocks = (cached + bs - 1) / bs;
  const int kv_dim = kv_heads * hd;
  if (!cpu_features().avx512f) GTEST_SKIP() << "SKIPPED: this CPU has no AVX-512 to compare the tiles with";
  std::printf("[  ISA     ] EncodedRowsOnTilesEqualTheVectorPath: the %s path against avx512\n", isa_name(active_isa()));
  KvRowCodec codec{DType::Int8, kv_dim, hd};
  const size_t db = codec.data_bytes(), pn = static_cast<size_t>(codec.n_params());
  const auto ck = randn(static_cast<size_t>(cached) * kv_dim, 51), cv = randn(ck.size(), 52);
  std::vector<int> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(10));
  std::vector<uint8_t> kq(static_cast<size_t>(blocks) * bs * db), vq(kq.size());
  std::vector<float> kp(static_cast<size_t>(blocks) * bs * pn), vp(kp.size()), hk(static_cast<size_t>(hot) * kv_dim), hv(hk.size());
  for (int p = 0; p < cached; ++p) {
    const size_t row = static_cast<size_t>(table[p / bs]) * bs + p % bs;
    codec.encode(ck.data() + static_cast<size_t>(p) * kv_dim, kq.data() + row * db, kp.data() + row * pn);
    codec.encode(cv.data() + static_cast<size_t>(p) * kv_dim, vq.data() + row * db, vp.data() + row * pn);
    if (p >= cached - hot) {
      std::copy_n(ck.begin() + static_cast<size_t>(p) * kv_dim, kv_dim, hk.begin() + static_cast<size_t>(p % hot) * kv_dim);
      std::copy_n(cv.begin() + static_cast<size_t>(p) * kv_dim, kv_dim, hv.begin() + static_cast<size_t>(p % hot) * kv_dim);
    }
  }
  KvLayerView view;
  view.block_table = table.data();
  view.block_size = bs;
  view.codec = &codec;
  view.kq = kq.data(), view.vq = vq.data(), view.kp = kp.data(), view.vp = vp.data();
  view.hot_from = cached - hot, view.hot_rows = hot, view.hot_k = hk.data(), view.hot_v = hv.data();
  for (int group : {8, 4})
    for (int fresh : {1, 20})
      for (int window : {0, 300}) {
        const int heads = group * kv_heads;
        const auto q = randn(static_cast<size_t>(fresh) * heads * hd, 53 + group), k = randn(static_cast<size_t>(fresh) * kv_dim, 54),
                   v = randn(k.size(), 55);
        std::vector<float> vector_path;
        {
          IsaScope cap(Isa::Avx512);
          vector_path = run_heads(view, cached, fresh, window, heads, kv_heads, q, k, v, 1, hd);
        }
        for (int threads = 1; threads <= std::min(2, ThreadPool::default_threads()); ++threads)
          EXPECT_EQ(run_heads(view, cached, fresh, window, heads, kv_heads, q, k, v, threads, hd), vector_path)
              << "group " << group << ", rows " << fresh << ", window " << window << ", threads " << threads;
      }
}

