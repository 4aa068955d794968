// Tokenizers against their oracles on a few hundred hard strings (tests/fixtures/tokenizers,
// recorded by tools/make_tokenizer_fixtures.py with sentencepiece and HF tokenizers).
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

using nlohmann::json;

std::vector<std::string> strings() {
  return json::parse(test::read_file(test::fixtures_dir() + "/tokenizers/strings.json")).get<std::vector<std::string>>();
}

void check(const Tokenizer& tok, const std::string& oracle_file, bool with_bos) {
  json o = json::parse(test::read_file(test::fixtures_dir() + "/tokenizers/" + oracle_file));
  auto ids = o["ids"].get<std::vector<std::vector<int>>>();
  auto texts = strings();
  ASSERT_EQ(ids.size(), texts.size());
  ASSERT_GE(texts.size(), 250u);
  int mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int> got = with_bos ? tok.encode_prompt(texts[i]) : tok.encode(texts[i]);
    if (got != ids[i] && ++mismatches <= 5)
      ADD_FAILURE() << oracle_file << " case " << i << " " << json(texts[i]).dump() << "\n  got  " << json(got).dump()
                    << "\n  want " << json(ids[i]).dump();
  }
  EXPECT_EQ(mismatches, 0) << o["oracle"];
}

TEST(TokenizerConformance, Llama2TokenizerModelMatchesSentencePiece) {
  KVLM_NEED_SHARED("tokenizers/llama2/tokenizer.model", "Llama 2 tokenizer.model against sentencepiece");
  check(*load_tokenizer(test::shared_path("tokenizers/llama2/tokenizer.model")), "llama2_sentencepiece.json", true);
}

TEST(TokenizerConformance, Llama2TokenizerBinMatchesSentencePiece) {
  KVLM_NEED_SHARED("tokenizers/llama2/tokenizer.bin", "Llama 2 tokenizer.bin against sentencepiece");
  check(*load_tokenizer(test::shared_path("tokenizers/llama2/tokenizer.bin")), "llama2_sentencepiece.json", true);
}

TEST(TokenizerConformance, Stories260KTokenizerJsonMatchesHfTokenizers) {
  KVLM_NEED_SHARED("models/stories260K-hf/tokenizer.json", "tokenizer.json against HF tokenizers");
  check(*load_tokenizer(test::shared_path("models/stories260K-hf/tokenizer.json")), "stories260k_hf_tokenizers.json", true);
}

TEST(TokenizerConformance, Gpt2MatchesHfTokenizers) {
  KVLM_NEED_SHARED("tokenizers/gpt2/encoder.json", "GPT-2 BPE against HF tokenizers");
  check(*load_tokenizer(test::shared_path("tokenizers/gpt2/encoder.json")), "gpt2_hf_tokenizers.json", false);
}

TEST(TokenizerConformance, ByteLevelTokenizerJsonMatchesHfTokenizers) {
  check(*load_tokenizer(test::fixtures_dir() + "/tokenizers/bytelevel_tiny/tokenizer.json"),
        "bytelevel_tiny_hf_tokenizers.json", false);
}

}  // namespace
}  // namespace kvlm
