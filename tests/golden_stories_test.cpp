// stories260K against llama2.c's golden outputs (../shared/golden/stories260K): tokenizer,
// 200 greedy tokens from the .bin and the HF folder with the cache on and off, logits, perplexity.
#include <nlohmann/json.hpp>

#include "engine/forward.h"
#include "engine/generator.h"
#include "engine/perplexity.h"
#include "kv/kv_cache.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

using nlohmann::json;
using test::shared_path;

const char* kBin = "models/stories260K/stories260K.bin";
const char* kTok = "models/stories260K/tok512.bin";
const char* kHf = "models/stories260K-hf";
const char* kGoldens[] = {"golden/stories260K/greedy_once_upon_a_time.json",
                          "golden/stories260K/greedy_empty_prompt.json",
                          "golden/stories260K/greedy_long_prompt_mia.json"};

json load_json(const std::string& path) { return json::parse(test::read_file(path)); }

struct GoldenCase {
  const char* golden;
  bool hf;
  bool cache;
};
std::string name_of(const ::testing::TestParamInfo<GoldenCase>& info) {
  std::string g = info.param.golden;
  g = g.substr(g.rfind('/') + 1);
  g = g.substr(0, g.find('.'));
  return g + (info.param.hf ? "_hf" : "_llama2c") + (info.param.cache ? "_cache" : "_nocache");
}

class GreedyGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GreedyGolden, PromptIdsAnd200GreedyTokens) {
  const GoldenCase& p = GetParam();
  KVLM_NEED_SHARED(p.golden, std::string("greedy golden ") + p.golden);
  KVLM_NEED_SHARED(kBin, "stories260K model");
  json g = load_json(shared_path(p.golden));
  auto model = load_model(shared_path(p.hf ? kHf : kBin));
  auto tok = load_tokenizer(p.hf ? shared_path(kHf) : shared_path(kTok));
  std::vector<int> prompt = tok->encode_prompt(g["prompt"].get<std::string>());
  EXPECT_EQ(prompt, g["prompt_ids"].get<std::vector<int>>()) << "tokenizer differs from run.c encode()";
  GenerateOptions opt;
  opt.max_new_tokens = 200;
  opt.use_kv_cache = p.cache;
  opt.stop_at_eos = false;  // the goldens run through BOS/EOS
  GenerateResult r = generate(*model, g["prompt_ids"].get<std::vector<int>>(), opt);
  EXPECT_EQ(r.generated, g["generated_ids"].get<std::vector<int>>());
  if (!p.hf) {  // run.c's decode rules are the llama2.c tokenizer's
    EXPECT_EQ(tok->decode_all(r.generated, prompt.back()), g["text"].get<std::string>());
  }
}

std::vector<GoldenCase> all_cases() {
  std::vector<GoldenCase> v;
  for (const char* g : kGoldens)
    for (bool hf : {false, true})
      for (bool cache : {true, false}) v.push_back({g, hf, cache});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Stories260K, GreedyGolden, ::testing::ValuesIn(all_cases()), name_of);

// `kvlm logits` (the CLI, prefill path) against run.c's float32 logits dump.
TEST(Stories260KLogits, CliMatchesRunCDump) {
  KVLM_NEED_SHARED("golden/stories260K/logits_long_prompt_mia.f32", "logits against llama2.c run.c");
  json side = load_json(shared_path("golden/stories260K/logits_long_prompt_mia.json"));
  std::string ids;
  for (int id : side["token_ids"].get<std::vector<int>>()) {
    if (!ids.empty()) ids += ",";
    ids += std::to_string(id);
  }
  std::vector<float> want = test::read_f32(shared_path("golden/stories260K/logits_long_prompt_mia.f32"));
  for (const char* model : {kBin, kHf}) {
    for (bool stepwise : {false, true}) {
      std::string out = test::temp_path(std::string("logits_") + (stepwise ? "step" : "prefill") + ".f32");
      std::vector<std::string> args = {"logits", "--model", shared_path(model), "--ids", ids, "--out", out};
      if (stepwise) args.push_back("--stepwise");
      auto r = test::run_kvlm(args);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      std::vector<float> got = test::read_f32(out);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LE(test::max_abs_diff(got, want), 1e-4f) << model << (stepwise ? " stepwise" : " prefill");
    }
  }
}

// The cache changes nothing: decode through the cache = full recompute, at every position.
TEST(Stories260KLogits, CacheEqualsNoCacheAtEveryPosition) {
  KVLM_NEED_SHARED(kBin, "KV cache vs recompute logits");
  json side = load_json(shared_path("golden/stories260K/logits_long_prompt_mia.json"));
  std::vector<int> ids = side["token_ids"].get<std::vector<int>>();
  for (const char* path : {kBin, kHf}) {
    auto m = load_model(shared_path(path));
    const int V = m->cfg.vocab_size;
    ContiguousKvCache cache(m->cfg, static_cast<int>(ids.size()));
    std::vector<float> cached, fresh;
    for (size_t t = 0; t < ids.size(); ++t) {
      forward(*m, cache, &ids[t], 1, LogitsFor::Last, cached);
      ContiguousKvCache scratch(m->cfg, static_cast<int>(t + 1));
      forward(*m, scratch, ids.data(), static_cast<int>(t + 1), LogitsFor::Last, fresh);
      ASSERT_EQ(cached.size(), static_cast<size_t>(V));
      EXPECT_LE(test::max_abs_diff(cached, fresh), 1e-5f) << path << " position " << t;
    }
  }
}

TEST(Stories260KPerplexity, CliReproducesGolden) {
  KVLM_NEED_SHARED("golden/stories260K/perplexity.json", "perplexity against llama2.c");
  json g = load_json(shared_path("golden/stories260K/perplexity.json"));
  auto r = test::run_kvlm({"ppl", "--model", shared_path(kBin), "--text",
                           shared_path("data/tinystories/tinystories_val_sample.txt"), "--ctx", "512",
                           "--max-tokens", "20480", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json got = json::parse(r.out);
  EXPECT_NEAR(got["perplexity"].get<double>(), g["perplexity"].get<double>(), 5e-5);
  EXPECT_EQ(got["scored_tokens"].get<long>(), 20440);
}

TEST(Stories260KPerplexity, TokenizationMatchesGoldenIds) {
  KVLM_NEED_SHARED("golden/stories260K/perplexity_tokens.json", "corpus tokenization against llama2.c");
  json g = load_json(shared_path("golden/stories260K/perplexity_tokens.json"));
  std::vector<int> want = g.is_array() ? g.get<std::vector<int>>() : g["token_ids"].get<std::vector<int>>();
  std::string text = test::read_file(shared_path("data/tinystories/tinystories_val_sample.txt"));
  for (std::string tok_path : {shared_path(kTok), shared_path(kHf)}) {
    auto tok = load_tokenizer(tok_path);
    std::vector<int> ids = tok->encode_prompt(text);
    EXPECT_EQ(ids.size(), 57153u) << tok_path;
    ids.resize(std::min(ids.size(), want.size()));
    EXPECT_EQ(ids, want) << tok_path;
    // decode round-trips the whole corpus
    EXPECT_EQ(tok->decode_all(std::vector<int>(tok->encode(text))), text) << tok_path;
  }
}

}  // namespace
}  // namespace kvlm
