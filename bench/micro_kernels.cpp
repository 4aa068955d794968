// Google Benchmark micro-benchmarks of the kernels, dispatched (AVX2) against scalar twins.
//   ./build/bench/kvlm_micro --benchmark_counters_tabular=true
// Bytes/s counters count the weight bytes streamed, the figure decode speed depends on.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/attention.h"
#include "kernels/dot.h"
#include "kernels/linear.h"
#include "kernels/qgemm.h"

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

// A Linear layer at TinyLlama's FFN shape, one token (decode) and 64 tokens (prefill).
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

}  // namespace

BENCHMARK_MAIN();
