// Tokenizers against independent oracles: tiktoken/GPT-3-Encoder/jtokkit vectors for GPT-2 BPE,
// and the Python SentencePiece ids recorded in llama2.c's test.c for Llama 2.
#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tokenizer/gpt2_bpe.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

using nlohmann::json;

TEST(Gpt2Tokenizer, AllGoldenCasesEncodeAndRoundTrip) {
  KVLM_NEED_SHARED("golden/gpt2-tokenizer.json", "GPT-2 BPE against tiktoken vectors");
  KVLM_NEED_SHARED("tokenizers/gpt2/encoder.json", "GPT-2 BPE files");
  auto tok = load_tokenizer(test::shared_path("tokenizers/gpt2/encoder.json"));
  auto* gpt2 = dynamic_cast<Gpt2Bpe*>(tok.get());
  ASSERT_NE(gpt2, nullptr);
  json g = json::parse(test::read_file(test::shared_path("golden/gpt2-tokenizer.json")));
  int checked = 0;
  for (const char* key : {"cases", "computed_cases"})
    for (const json& c : g[key]) {
      std::string text = c["text"].get<std::string>();
      std::vector<int> want = c["ids"].get<std::vector<int>>();
      std::vector<int> got = c.contains("allowed_special") ? gpt2->encode_with_specials(text) : gpt2->encode(text);
      EXPECT_EQ(got, want) << key << ": " << c.dump();
      EXPECT_EQ(tok->decode_all(want), text) << key << ": " << c.dump();
      ++checked;
    }
  EXPECT_EQ(checked, 493);
}

TEST(Gpt2Tokenizer, EndOfTextIsPlainTextUnlessAllowed) {
  KVLM_NEED_SHARED("tokenizers/gpt2/encoder.json", "GPT-2 special-token handling");
  auto tok = load_tokenizer(test::shared_path("tokenizers/gpt2/encoder.json"));
  auto* gpt2 = dynamic_cast<Gpt2Bpe*>(tok.get());
  EXPECT_GT(gpt2->encode("<|endoftext|>").size(), 1u);
  EXPECT_EQ(gpt2->encode_with_specials("<|endoftext|>"), std::vector<int>{50256});
  // Invalid UTF-8 still encodes (byte by byte) and round-trips.
  std::string bad = "a\xff\xfe b";
  EXPECT_EQ(tok->decode_all(tok->encode(bad)), bad);
}

TEST(Llama2Tokenizer, MatchesSentencePieceIds) {
  KVLM_NEED_SHARED("golden/llama2-tokenizer.json", "Llama 2 tokenizer against SentencePiece ids");
  KVLM_NEED_SHARED("tokenizers/llama2/tokenizer.bin", "Llama 2 tokenizer.bin");
  auto tok = load_tokenizer(test::shared_path("tokenizers/llama2/tokenizer.bin"));
  json g = json::parse(test::read_file(test::shared_path("golden/llama2-tokenizer.json")));
  ASSERT_EQ(g["cases"].size(), 5u);
  for (const json& c : g["cases"]) {
    std::string text = c["text"].get<std::string>();
    EXPECT_EQ(tok->encode_prompt(text), c["ids"].get<std::vector<int>>()) << text;
    EXPECT_EQ(tok->decode_all(tok->encode(text)), text);
  }
}

TEST(Stories260KTokenizer, BinAndTokenizerJsonAgree) {
  KVLM_NEED_SHARED("models/stories260K-hf/tokenizer.json", "tok512.bin vs tokenizer.json");
  auto a = load_tokenizer(test::shared_path("models/stories260K/tok512.bin"));
  auto b = load_tokenizer(test::shared_path("models/stories260K-hf/tokenizer.json"));
  for (std::string s : {"", "Hello world", "  two  spaces", "caf\xc3\xa9 \xf0\x9f\x98\x80 emoji", "line\nbreak\ttab"}) {
    EXPECT_EQ(a->encode_prompt(s), b->encode_prompt(s)) << s;
    EXPECT_EQ(b->decode_all(b->encode(s)), s) << s;
  }
}

TEST(TokenizerFiles, BadFilesGetClearErrors) {
  std::string dir = test::temp_path("badtok");
  test::write_file(dir + "/t.json", "{\"model\": {\"type\": \"Unigram\"}}");
  EXPECT_THROW(load_tokenizer(dir + "/t.json"), std::exception);
  test::write_file(dir + "/u.json", "{bad json");
  EXPECT_THROW(load_tokenizer(dir + "/u.json"), std::exception);
  test::write_file(dir + "/tok.bin", std::string("\x07\x00\x00\x00\x00\x00\x00\x00\xff\xff\x00\x00", 12));
  EXPECT_THROW(load_tokenizer(dir + "/tok.bin"), std::exception);
  EXPECT_THROW(load_tokenizer(dir + "/missing.json"), std::exception);
}

}  // namespace
}  // namespace kvlm
