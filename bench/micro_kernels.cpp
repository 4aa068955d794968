// Google Benchmark micro-benchmarks of the kernels, dispatched (AVX2) against scalar twins.
//   ./build/bench/kvlm_micro --benchmark_counters_tabular=true
// Bytes/s counters count the weight bytes streamed, the figure decode speed depends on.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/buffer.h"
#include "core/half.h"
#include "kernels/attention.h"
#include "kernels/attention_batch.h"
#include "kernels/attention_int.h"
#include "kernels/half_dot.h"
#include "kernels/kv_quant.h"
#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/linear.h"
#include "kernels/qgemm.h"
#include "kv/kv_cache.h"
#include "model/synthetic.h"

namespace {

using namespace kvlm;

std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <bool kScalar>
void BM_dot_f32(benchmark::State& s) {
  const size_t n = s.range(0);
  auto a = randn(n, 1), b = randn(n, 2);
  for (auto _ : s) benchmark::DoNotOptimize(kScalar ? scalar::dot_f32(a.data(), b.data(), n) : dot_f32(a.data(), b.data(), n));
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * n * 4));
}
BENCHMARK(BM_dot_f32<false>)->Arg(768)->Arg(2048)->Arg(5632);
BENCHMARK(BM_dot_f32<true>)->Arg(768)->Arg(2048)->Arg(5632);

template <bool kScalar>
void BM_dot_bf16(benchmark::State& s) {
  const int n = static_cast<int>(s.range(0));
  auto w = randn(n, 3), x = randn(n, 4);
  std::vector<uint16_t> w16(n);
  for (int i = 0; i < n; ++i) w16[i] = f32_to_bf16(w[i]);
  for (auto _ : s) benchmark::DoNotOptimize(kScalar ? scalar::dot_bf16(w16.data(), x.data(), n) : dot_bf16(w16.data(), x.data(), n));
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * n * 2));
}
BENCHMARK(BM_dot_bf16<false>)->Arg(2048)->Arg(5632);
BENCHMARK(BM_dot_bf16<true>)->Arg(2048)->Arg(5632);

// Prefill over f16 rows: the row-and-token tiles against one row dot per (row, token), which
// streamed every token's activations once per row. 512 rows of in values, range(1) tokens.
template <bool kPerPair>
void BM_f16_rows_times_tokens(benchmark::State& s) {
  const int in = static_cast<int>(s.range(0)), n = static_cast<int>(s.range(1)), rows = 512;
  auto w = randn(static_cast<size_t>(rows) * in, 3), x = randn(static_cast<size_t>(n) * in, 4);
  std::vector<uint16_t> w16(w.size());
  for (size_t i = 0; i < w.size(); ++i) w16[i] = f32_to_f16(w[i]);
  std::vector<float> y(static_cast<size_t>(n) * rows);
  for (auto _ : s) {
    if (kPerPair) {
      for (int r = 0; r < rows; ++r)
        for (int t = 0; t < n; ++t)
          y[static_cast<size_t>(t) * rows + r] = dot_f16(w16.data() + static_cast<size_t>(r) * in, x.data() + static_cast<size_t>(t) * in, in);
    } else {
      half_rows_times_tokens(DType::F16, w16.data(), nullptr, in, 0, rows, x.data(), n, y.data(), rows);
    }
    benchmark::DoNotOptimize(y.data());
  }
  s.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * in * n, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_f16_rows_times_tokens<false>)->Args({2048, 1})->Args({2048, 64})->Args({5632, 64})->Args({2048, 512});
BENCHMARK(BM_f16_rows_times_tokens<true>)->Args({2048, 1})->Args({2048, 64})->Args({5632, 64})->Args({2048, 512});

// One packed 8-row group against nt tokens: nt = 1 is the decode matvec, 4 the prefill tile.
template <bool kScalar, bool kQ4>
void BM_qgemm_group(benchmark::State& s) {
  const int in = static_cast<int>(s.range(0)), nt = static_cast<int>(s.range(1));
  const DType f = kQ4 ? DType::Q4_0 : DType::Q8_0;
  auto w = randn(static_cast<size_t>(kGroupRows) * in, 5), x = randn(static_cast<size_t>(nt) * in, 6);
  auto packed = pack_quantized(f, w.data(), kGroupRows, in);
  QuantizedActs acts;
  acts.quantize(x.data(), nt, in);
  float out[4][kGroupRows];
  for (auto _ : s) {
    if (kScalar)
      scalar::qgemm_group(f, packed.data(), acts, 0, nt, out);
    else
      qgemm_group(f, packed.data(), acts, 0, nt, out);
    benchmark::DoNotOptimize(out);
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * packed.size()));
  s.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(s.iterations()) * kGroupRows * in * nt / 1e9,
                                            benchmark::Counter::kIsRate);
}
BENCHMARK(BM_qgemm_group<false, false>)->Name("BM_qgemm_q8_0")->Args({2048, 1})->Args({5632, 1})->Args({2048, 4});
BENCHMARK(BM_qgemm_group<true, false>)->Name("BM_qgemm_q8_0_scalar")->Args({2048, 1})->Args({2048, 4});
BENCHMARK(BM_qgemm_group<false, true>)->Name("BM_qgemm_q4_0")->Args({2048, 1})->Args({5632, 1})->Args({2048, 4});
BENCHMARK(BM_qgemm_group<true, true>)->Name("BM_qgemm_q4_0_scalar")->Args({2048, 1})->Args({2048, 4});

// A Linear layer at TinyLlama's FFN shape, one token (decode), 64 and 512 tokens (prefill: on AMX
// tiles where the CPU has them; KVLM_ISA=avx512 gives the vector kernels beside them).
void BM_linear(benchmark::State& s) {
  const DType f = static_cast<DType>(s.range(0));
  const int n = static_cast<int>(s.range(1));
  Linear l;
  l.out = 5632;
  l.in = 2048;
  l.w = randn(static_cast<size_t>(l.out) * l.in, 7);
  l.convert(f);
  auto x = randn(static_cast<size_t>(n) * l.in, 8);
  std::vector<float> y(static_cast<size_t>(n) * l.out);
  for (auto _ : s) l.forward(x.data(), n, y.data());
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * l.bytes()));
  s.counters["GFLOP/s"] = benchmark::Counter(2.0 * l.out * l.in * n, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::OneK::kIs1000);
  s.SetLabel(dtype_name(f));
}
BENCHMARK(BM_linear)->ArgsProduct({{0, 1, 2, 3}, {1, 64}})->UseRealTime();
BENCHMARK(BM_linear)->ArgsProduct({{3, 4}, {512}})->UseRealTime()->Unit(benchmark::kMillisecond);

// A row-quant Linear (kernels/row_dot.h, row_tiles.h) at TinyLlama's FFN shapes: random blocks
// (the values do not change the time), 1 token and 512 (prefill: tiles where the CPU has them).
void BM_row_linear(benchmark::State& s) {
  const DType f = static_cast<DType>(s.range(0));
  const int n = static_cast<int>(s.range(1));
  Linear l;
  l.out = s.range(2) ? 2048 : 5632;
  l.in = s.range(2) ? 5632 : 2048;
  l.fmt = f;
  l.packed.resize(dtype_row_bytes(f, l.in, "bench row") * l.out);
  std::mt19937_64 rng(5);
  for (auto& b : l.packed) b = static_cast<uint8_t>(rng());
  auto x = randn(static_cast<size_t>(n) * l.in, 8);
  std::vector<float> y(static_cast<size_t>(n) * l.out);
  for (auto _ : s) l.forward(x.data(), n, y.data());
  s.counters["GMAC/s"] = benchmark::Counter(1.0 * l.out * l.in * n, benchmark::Counter::kIsIterationInvariantRate,
                                            benchmark::Counter::OneK::kIs1000);
  s.SetLabel(dtype_name(f));
}
BENCHMARK(BM_row_linear)
    ->ArgsProduct({{static_cast<int>(DType::Q4_K), static_cast<int>(DType::Q6_K), static_cast<int>(DType::Q3_K),
                    static_cast<int>(DType::IQ4_XS)},
                   {512},
                   {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Every matrix of TinyLlama-1.1B's 22 layers (154, about 1 GB in Q8_0) against 1 to 8 tokens, as
// one decode step's matmuls read them: from memory, each weight once. The weights' bytes are
// constant (the speed of a pass does not depend on their values); the counter is the rate they
// stream at, to set against the machine's read bandwidth.
void BM_decode_matrices(benchmark::State& s) {
  const DType f = static_cast<DType>(s.range(0));
  const int n = static_cast<int>(s.range(1));
  const struct { int out, in; } shapes[] = {{2048, 2048}, {256, 2048}, {256, 2048}, {2048, 2048},
                                            {5632, 2048}, {5632, 2048}, {2048, 5632}};
  std::vector<Linear> layers;
  size_t bytes = 0;
  for (int l = 0; l < 22; ++l)
    for (auto sh : shapes) {
      Linear x;
      x.out = sh.out, x.in = sh.in, x.fmt = f;
      x.packed = Buffer<uint8_t>(q_group_bytes(f, sh.in / 32) * ((sh.out + kGroupRows - 1) / kGroupRows), uint8_t{1});
      bytes += x.packed.size();
      layers.push_back(std::move(x));
    }
  auto x = randn(static_cast<size_t>(n) * 5632, 9);
  std::vector<float> y(static_cast<size_t>(n) * 5632);
  for (auto _ : s)
    for (const Linear& l : layers) l.forward(x.data(), n, y.data());
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * bytes));
  s.SetLabel(dtype_name(f));
}
BENCHMARK(BM_decode_matrices)->ArgsProduct({{static_cast<int>(DType::Q8_0), static_cast<int>(DType::Q4_0)}, {1, 2, 4, 8}})
    ->UseRealTime()->Unit(benchmark::kMillisecond);

// Attention over one span of 128 cached keys for a GQA group of 8 heads of 64.
template <bool kScalar>
void BM_attention_span(benchmark::State& s) {
  const int g = 8, hd = 64, n = 128, stride = 256;
  auto q = randn(g * hd, 9), k = randn(static_cast<size_t>(n) * stride, 10), v = randn(static_cast<size_t>(n) * stride, 11);
  std::vector<float> m(g), l(g), acc(g * hd), sc(g * n);
  AttnState st{g, hd, m.data(), l.data(), acc.data()};
  for (auto _ : s) {
    st.reset();
    if (kScalar)
      scalar::attn_scores(q.data(), g, hd, 0.125f, k.data(), stride, n, sc.data(), n);
    else
      attn_scores(q.data(), g, hd, 0.125f, k.data(), stride, n, sc.data(), n);
    attn_update(st, sc.data(), n, n);
    if (kScalar)
      scalar::attn_accumulate(st, sc.data(), n, v.data(), stride, n);
    else
      attn_accumulate(st, sc.data(), n, v.data(), stride, n);
    benchmark::DoNotOptimize(acc.data());
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * 2 * n * hd * 4));
}
BENCHMARK(BM_attention_span<false>);
BENCHMARK(BM_attention_span<true>);

// The integer kernels over one span of 128 cached keys (rows of 4 KV heads of 64, in the L1/L2
// caches) for a GQA group of 8 heads: range(0) 0 = int8 scores, 1 = int8 value sums, 2 = int4
// scores, 3 = int4 value sums. Their own cost per key, without memory's.
void BM_integer_span(benchmark::State& s) {
  const int g = 8, hd = 64, n = 128, kv_dim = 256, kind = static_cast<int>(s.range(0));
  const DType t = kind < 2 ? DType::Int8 : DType::Int4;
  KvRowCodec codec{t, kv_dim, hd};
  std::vector<uint8_t> data(codec.data_bytes() * n);
  std::vector<float> prm(static_cast<size_t>(codec.n_params()) * n + 1);
  for (int p = 0; p < n; ++p) {
    auto r = randn(kv_dim, 100 + p);
    codec.encode(r.data(), data.data() + p * codec.data_bytes(), prm.data() + static_cast<size_t>(p) * codec.n_params());
  }
  auto q = randn(g * hd, 9);
  QuantQuery qq;
  qq.prepare(t, q.data(), g, hd, 0.125f);
  std::vector<float> sc(static_cast<size_t>(g) * n, 1.0f / n), m(g), l(g), acc(g * hd);
  std::vector<const uint8_t*> rows(n);
  std::vector<const float*> rp(n);
  for (int p = 0; p < n; ++p) {
    rows[p] = data.data() + p * codec.data_bytes() + codec.head_data_offset(1);
    rp[p] = prm.data() + static_cast<size_t>(p) * codec.n_params() + codec.head_param_offset(1);
  }
  AttnState st{g, hd, m.data(), l.data(), acc.data()};
  st.reset();
  const EncodedRows er{&codec, data.data(), prm.data(), 1};
  for (auto _ : s) {
    if (kind % 2 == 0)
      attn_scores_quantized(qq, er, n, sc.data(), n);
    else
      attn_accumulate_quantized(t, st, sc.data(), n, rows.data(), rp.data(), n);
    benchmark::DoNotOptimize(sc.data());
    benchmark::DoNotOptimize(acc.data());
  }
  s.counters["ns/key"] = benchmark::Counter(static_cast<double>(s.iterations()) * n, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  const char* names[] = {"int8 scores", "int8 values", "int4 scores", "int4 values"};
  s.SetLabel(names[kind]);
}
BENCHMARK(BM_integer_span)->DenseRange(0, 3);

// One decode step of one layer: TinyLlama's shape (32 query heads over 4 KV heads of 64) or, with
// range(2) = 1, GPT-2's (12 heads of 64), over a contiguous cache of range(1) positions in the KV
// type range(0) (0 f32, 1 bf16, 2 int8, 3 int4), 2 threads. Bytes/s counts the K and V bytes read.
void BM_attention_decode(benchmark::State& s) {
  const DType types[] = {DType::F32, DType::BF16, DType::Int8, DType::Int4};
  const DType t = types[s.range(0)];
  const bool gpt2 = s.range(2) == 1;
  const int n_heads = gpt2 ? 12 : 32, n_kv = gpt2 ? 12 : 4, hd = 64, kv_dim = n_kv * hd, ctx = static_cast<int>(s.range(1));
  KvRowCodec codec{t, kv_dim, hd};
  // kvlm::Buffer, as the caches hold their rows: huge pages where the kernel gives them.
  Buffer<float> kf, vf, kp, vp;
  Buffer<uint8_t> kq, vq;
  if (t == DType::F32) {
    kf = randn(static_cast<size_t>(ctx) * kv_dim, 13);
    vf = randn(static_cast<size_t>(ctx) * kv_dim, 14);
  } else {
    kq.resize(codec.data_bytes() * ctx), vq.resize(codec.data_bytes() * ctx);
    kp.resize(static_cast<size_t>(codec.n_params()) * ctx + 1), vp.resize(static_cast<size_t>(codec.n_params()) * ctx + 1);
    for (int p = 0; p < ctx; ++p) {
      auto r = randn(kv_dim, 100 + p % 64);
      codec.encode(r.data(), kq.data() + p * codec.data_bytes(), kp.data() + static_cast<size_t>(p) * codec.n_params());
      codec.encode(r.data(), vq.data() + p * codec.data_bytes(), vp.data() + static_cast<size_t>(p) * codec.n_params());
    }
  }
  auto q = randn(n_heads * hd, 15), kn = randn(kv_dim, 16), vn = randn(kv_dim, 17);
  std::vector<float> out(n_heads * hd);
  AttentionBatch b;
  b.n_heads = n_heads, b.n_kv_heads = n_kv, b.head_dim = hd, b.scale = 0.125f;
  b.q = q.data(), b.k = kn.data(), b.v = vn.data(), b.out = out.data();
  b.add_seq(ctx, 1);
  KvLayerView& kv = b.seqs[0].kv;
  kv.ring_rows = ctx;
  if (t == DType::F32) {
    kv.k = kf.data(), kv.v = vf.data();
  } else {
    kv.codec = &codec, kv.kq = kq.data(), kv.vq = vq.data(), kv.kp = kp.data(), kv.vp = vp.data();
  }
  ThreadPool pool(2);
  // A decode step streams the weights between two visits of a layer's KV: 64 MB (twice the L3
  // here) are written before each timed step, so the KV comes from memory as it does there.
  // KVLM_MICRO_NO_EVICT=1 leaves the KV in the caches: the kernels' own cost, without memory's.
  std::vector<uint8_t> evict(std::getenv("KVLM_MICRO_NO_EVICT") ? 64 : (384u << 20));
  for (auto _ : s) {
    s.PauseTiming();
    for (size_t o = 0; o < evict.size(); o += 64) evict[o] += 1;  // plain stores (memset streams past the cache)
    benchmark::ClobberMemory();
    s.ResumeTiming();
    attention_batch(b, pool);
    benchmark::DoNotOptimize(out.data());
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * 2 * static_cast<size_t>(ctx) * codec.bytes()));
  s.SetLabel(std::string(gpt2 ? "gpt2 " : "tinyllama ") + dtype_name(t));
}
BENCHMARK(BM_attention_decode)->ArgsProduct({{0, 1, 2, 3}, {1024, 4096, 16384}, {0}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_attention_decode)->ArgsProduct({{0, 1, 2, 3}, {896}, {1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same step through ContiguousKvCache, as `kvlm bench --decode-at` runs it, every layer's
// attention in turn at range(1) positions in KV type range(0): TinyLlama's 22 layers (32 heads
// over 4 KV heads of 64), with range(2) = 1 GPT-2's 12 layers of 12 heads of 64, with 3 four
// layers of Llama-3-8B's 32 heads over 8 KV heads of 128. At 2,048 positions one TinyLlama layer's
// int8 KV stays in the threads' L2: its time per position against 16K's tells compute from latency.
void BM_attention_decode_cache(benchmark::State& s) {
  const DType types[] = {DType::F32, DType::BF16, DType::Int8, DType::Int4};
  const DType t = types[s.range(0)];
  const int ctx = static_cast<int>(s.range(1));
  const bool gpt2 = s.range(2) == 1;
  const bool one_layer = s.range(2) == 2;  // TinyLlama's heads, one layer: its KV stays in L3 at 16K (compute alone)
  const bool llama3 = s.range(2) == 3;     // Llama-3-8B's heads (groups of four, head size 128), four of its layers
  const ModelConfig cfg = gpt2     ? llama_shape(12, 768, 3072, 12, 12, 64, 50257, ctx + 8)
                          : llama3 ? llama_shape(4, 4096, 14336, 32, 8, 128, 128256, ctx + 8)
                                   : llama_shape(one_layer ? 1 : 22, 2048, 5632, 32, 4, 64, 32000, ctx + 8);
  ContiguousKvCache cache(cfg, ctx + 1, t, 128);
  auto r = randn(static_cast<size_t>(cfg.kv_dim()), 3);
  for (int p = 0; p < ctx; ++p) {
    cache.prepare(p, 1);
    for (int l = 0; l < cfg.n_layers; ++l) cache.store(l, p, 1, r.data(), r.data());
  }
  cache.set_length(ctx);
  const int q_dim = cfg.n_heads * cfg.head_dim;
  auto q = randn(q_dim, 15), kn = randn(cfg.kv_dim(), 16), vn = randn(cfg.kv_dim(), 17);
  std::vector<float> out(q_dim);
  ThreadPool pool(2);
  for (auto _ : s) {
    for (int l = 0; l < cfg.n_layers; ++l) {
      AttentionBatch b;
      b.n_heads = cfg.n_heads, b.n_kv_heads = cfg.n_kv_heads, b.head_dim = cfg.head_dim, b.scale = 0.125f;
      b.q = q.data(), b.k = kn.data(), b.v = vn.data(), b.out = out.data();
      b.add_seq(ctx, 1);
      b.seqs[0].kv = cache.view(l);
      attention_batch(b, pool);
    }
    benchmark::DoNotOptimize(out.data());
  }
  s.SetLabel(std::string(gpt2 ? "gpt2, 12 layers " : one_layer ? "tinyllama, 1 layer (in L3) " : llama3 ? "llama-3-8b, 4 layers " : "tinyllama, 22 layers ") + dtype_name(t));
}
BENCHMARK(BM_attention_decode_cache)->ArgsProduct({{0, 1, 2, 3}, {2048, 16384}, {0, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_decode_cache)->ArgsProduct({{0, 1}, {960}, {1}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_decode_cache)->ArgsProduct({{0, 1, 2, 3}, {16384}, {3}})->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
