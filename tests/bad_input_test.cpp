// Inputs from outside that once crashed, hung or ran out of memory: each now gets a clear error
// or bounded work. CLI cases run the real binary and check the message and the exit code.
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "core/thread_pool.h"
#include "core/utf8.h"
#include "gguf_edit.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

using nlohmann::json;

std::string nested(const std::string& open, const std::string& close, int depth, const std::string& inner = "1") {
  std::string s;
  s.reserve(depth * (open.size() + close.size()) + inner.size());
  for (int i = 0; i < depth; ++i) s += open;
  s += inner;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

std::string stories() { return test::shared_path("models/stories260K/stories260K.bin"); }

// Item 7: deep nesting is refused at parse time for every JSON input (no stack overflow later).
TEST(JsonLimits, DeepNestingIsAnErrorNotACrash) {
  const std::string tok_base = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]},)";
  std::string post = tok_base + R"("post_processor":)" + nested(R"({"a":)", "}", 100000) + "}";
  EXPECT_THROW(tokenizer_from_json(post, "deep_post.json"), KvlmError);
  std::string norm = tok_base + R"("normalizer":)" +
                     nested(R"({"type":"Sequence","normalizers":[)", "]}", 50000, "{}") + "}";
  try {
    tokenizer_from_json(norm, "deep_norm.json");
    ADD_FAILURE() << "a 50,000-deep normalizer was accepted";
  } catch (const KvlmError& e) {
    EXPECT_NE(std::string(e.what()).find("nests deeper"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_hf_config(R"({"model_type":"llama","x":)" + nested("[", "]", 200000) + "}", "deep.json"), KvlmError);
  std::string header = nested(R"({"a":)", "}", 5000);
  std::string file(8, '\0');
  uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header;
  TensorSource src;
  EXPECT_THROW(parse_safetensors(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "deep.safetensors", src),
               KvlmError);
  // Within the bound, nesting is fine.
  EXPECT_NO_THROW(parse_json_strict(nested("[", "]", 100), "ok.json"));
}

// Item 16: a tensor named twice (the last silently won) and duplicate keys in general.
TEST(JsonLimits, DuplicateKeysAreAnError) {
  std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  std::string file(8, '\0');
  uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header + std::string(8, '\0');
  TensorSource src;
  try {
    parse_safetensors(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "dup.safetensors", src);
    ADD_FAILURE() << "duplicate tensor accepted";
  } catch (const KvlmError& e) {
    EXPECT_NE(std::string(e.what()).find("names key 'a' twice"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_json_strict(R"({"k":1,"k":2})", "dup.json"), KvlmError);
}

// Item 16: merges given as one string are refused, not ignored.
TEST(TokenizerJson, MergesAsAStringAreRefused) {
  std::string t = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":"a b"}})";
  EXPECT_THROW(tokenizer_from_json(t, "merges_string.json"), KvlmError);
}

// Item 8: strict UTF-8, checked against Python's bytes.decode("utf-8", errors="replace").
TEST(Utf8, StrictValidationMatchesPython) {
  const std::string fffd = "\xEF\xBF\xBD";
  struct Case {
    std::string in, python;
  } cases[] = {
      {"\xED\xA0\x80", fffd + fffd + fffd},            // surrogate U+D800
      {"\xE0\x80\x80", fffd + fffd + fffd},            // overlong 3-byte form
      {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},  // above U+10FFFF
      {"a\xE2\x82", "a" + fffd},                       // truncated
      {"a\xF0\x9F\x98" "b", "a" + fffd + "b"},
      {"\xC0\xAF", fffd + fffd},
      {"caf\xC3\xA9 \xF0\x9F\x98\x80", "caf\xC3\xA9 \xF0\x9F\x98\x80"},  // valid stays as is
  };
  for (const Case& c : cases) {
    EXPECT_EQ(utf8_sanitize(c.in), c.python);
    EXPECT_EQ(utf8_is_valid(c.in), c.in == c.python);
  }
}

// Item 8: invalid bytes never reach PCRE2; byte-level BPE encodes each as its own byte token,
// so the text still round-trips exactly.
TEST(Utf8, ByteLevelBpeEncodesInvalidBytesOneByOne) {
  auto tok = load_tokenizer(test::fixtures_dir() + "/tokenizers/bytelevel_tiny");
  for (std::string s : {std::string("ab\xED\xA0\x80 cd"), std::string("\xE0\x80\x80"), std::string("x\xF4\x90\x80\x80y"),
                        std::string("\xFF\xFE"), std::string("ok \xC3")}) {
    std::vector<int> ids = tok->encode(s);
    EXPECT_EQ(tok->decode_all(ids), s);
  }
  EXPECT_EQ(tok->encode("\xED\xA0\x80").size(), 3u);  // three invalid bytes -> three byte tokens
}

// Item 10: special-token splitting is linear (3 MB of "<s>" would take hours when quadratic;
// the suite's timeout would catch it).
TEST(TokenizerWork, ManySpecialTokensAreLinear) {
  KVLM_NEED_SHARED("models/stories260K-hf/tokenizer.json", "special-token splitting at scale");
  auto tok = load_tokenizer(test::shared_path("models/stories260K-hf/tokenizer.json"));
  ASSERT_FALSE(tok->specials.empty());
  const auto& [text, id] = *tok->specials.begin();
  std::string big;
  for (int i = 0; i < 300000; ++i) big += text;
  std::vector<int> ids = tok->encode(big);
  ASSERT_EQ(ids.size(), 300000u);
  EXPECT_EQ(ids.front(), id);
}

// Item 10: a vocabulary entry far past any real piece is refused, not cut 1M ways.
TEST(TokenizerWork, HugeVocabularyEntryIsRefused) {
  KVLM_NEED_SHARED("models/stories260K/stories260K-f32.gguf", "GGUF vocabulary entry length bound");
  std::string g = test::edit_gguf(test::shared_path("models/stories260K/stories260K-f32.gguf"), "huge_piece.gguf",
                                  [](std::map<std::string, GgufValue>& m, std::vector<test::GgufTensorOut>&) {
                                    auto& toks = m["tokenizer.ggml.tokens"].array;
                                    toks[300].scalar = std::string(1 << 20, 'a');
                                  });
  auto r = test::run_kvlm({"generate", "--model", g, "--prompt", "hi", "--max-new-tokens", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bytes long"), std::string::npos) << r.err;
}

// A NaN merge score ranks neither above nor below any other: the tokens would depend on the
// heap's order. Refused at load.
TEST(TokenizerWork, NanScoreIsRefused) {
  KVLM_NEED_SHARED("models/stories260K/stories260K-f32.gguf", "GGUF vocabulary scores");
  std::string g = test::edit_gguf(test::shared_path("models/stories260K/stories260K-f32.gguf"), "nan_score.gguf",
                                  [](std::map<std::string, GgufValue>& m, std::vector<test::GgufTensorOut>&) {
                                    m["tokenizer.ggml.scores"].array[300].scalar = std::nan("");
                                  });
  try {  // the library itself (an engine-only build has no CLI to run)
    (void)load_tokenizer(g);
    ADD_FAILURE() << "a NaN score loaded";
  } catch (const KvlmError& e) {
    EXPECT_NE(std::string(e.what()).find("piece 300 has a score that is not a number"), std::string::npos) << e.what();
  }
}

// Item 9: a pool whose threads cannot all start fails cleanly (it used to deadlock).
TEST(ThreadPoolStart, TooManyThreadsAreAnError) {
  EXPECT_THROW(ThreadPool(ThreadPool::kMaxThreads + 1), KvlmError);
#if KVLM_TEST_ASAN
  GTEST_SKIP() << "SKIPPED under AddressSanitizer: its shadow memory cannot run under ulimit -v";
#else
  // 1000 thread stacks cannot fit in 300 MB of address space: creation fails part-way.
  std::string cmd = "sh -c 'ulimit -v 300000; exec timeout 60 \"" + std::string(KVLM_BIN) +
                    "\" --threads 1000 kv-plan --preset distilgpt2' >/dev/null 2>" + test::temp_path("threads.err");
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1) << "124 would mean it hung";
  EXPECT_NE(test::read_file(test::temp_path("threads.err")).find("cannot start"), std::string::npos);
#endif
}

// Item 11: KV memory follows need; requests beyond the machine fail saying how much.
TEST(KvMemory, SizedByNeedAndCheckedAgainstTheMachine) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "KV sizing on stories260K");
  std::string prompts = test::temp_path("prompts64.txt");
  std::string lines;
  for (int i = 0; i < 64; ++i) lines += "Once upon a time\n";
  test::write_file(prompts, lines);
  auto r = test::run_kvlm({"batch", "--model", stories(), "--prompts", prompts, "--max-new-tokens", "100000",
                           "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  const double per_token = 2.0 * 5 * 32 * 4;  // stories260K: 5 layers, kv_dim 32, f32
  EXPECT_LE(j["kv_pool_bytes"].get<double>(), 64 * 512 * per_token);  // capped by the 512-token context
  for (auto& s : j["results"]) EXPECT_EQ(s["generated_ids"].size() + 5, 512u);  // BOS + 4 prompt tokens
  for (const std::vector<std::string>& flag : {std::vector<std::string>{"--kv-blocks", "16777216"},
                                               std::vector<std::string>{"--kv-capacity", "300GB"}}) {
    std::vector<std::string> args = {"generate", "--model", stories(), "--prompt", "hi", "--max-new-tokens", "2"};
    args.insert(args.end(), flag.begin(), flag.end());
    r = test::run_kvlm(args);
    EXPECT_EQ(r.exit_code, 1) << flag[0];
    EXPECT_NE(r.err.find("needs"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("available"), std::string::npos) << r.err;
  }
  r = test::run_kvlm({"generate", "--model", stories(), "--prompt", "hi", "--kv-layout", "contiguous", "--ctx", "1000000",
                      "--max-new-tokens", "10", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(json::parse(r.out)["kv_cache_bytes"].get<size_t>(), 1u << 20);  // not a million positions
}

// Item 12: devices, FIFOs and folders are refused at once, never read forever.
TEST(SpecialFiles, DevicesFifosAndFoldersAreRefused) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "special files as inputs");
  std::string fifo = test::temp_path("fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& f : {std::string("/dev/zero"), std::string("/dev/urandom"), fifo}) {
    auto r = test::run_kvlm({"ppl", "--model", stories(), "--text", f});
    EXPECT_EQ(r.exit_code, 1) << f;
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
    r = test::run_kvlm({"batch", "--model", stories(), "--prompts", f});
    EXPECT_EQ(r.exit_code, 1) << f << r.err;
    r = test::run_kvlm({"generate", "--model", stories(), "--tokenizer", f, "--prompt", "hi"});
    EXPECT_EQ(r.exit_code, 1) << f << r.err;
    r = test::run_kvlm({"logits", "--model", f, "--ids", "1", "--out", test::temp_path("o.f32")});
    EXPECT_EQ(r.exit_code, 1) << f << r.err;
  }
  auto r = test::run_kvlm({"ppl", "--model", stories(), "--text", test::fixtures_dir()});  // a folder
  EXPECT_NE(r.err.find("is a folder"), std::string::npos) << r.err;
}

// Item 13: kv-plan never wraps around.
TEST(KvPlan, HugeRequestsDoNotWrap) {
  auto r = test::run_kvlm({"kv-plan", "--preset", "tinyllama-1.1b", "--ctx", "67108864", "--batch", "32", "--memory-gb",
                           "100", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_FALSE(j["fits"].get<bool>());
  EXPECT_GT(j["kv_bytes"].get<double>(), 9e13);  // 32 x 64M tokens x 45 KB
  r = test::run_kvlm({"kv-plan", "--preset", "tinyllama-1.1b", "--memory-gb", "1e30"});
  EXPECT_NE(r.exit_code, 0);
}

// Item 16: results that do not lie.
TEST(HonestResults, ParallelBatchAndBench) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "CLI result reporting");
  auto r = test::run_kvlm({"generate", "--model", stories(), "--prompt", "Once", "--parallel", "4", "--max-new-tokens",
                           "1", "--temperature", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["samples"].size(), 4u);
  for (auto& s : j["samples"]) {
    EXPECT_EQ(s["generated_ids"].size(), 1u);
    EXPECT_EQ(s["finish_reason"], "length");
  }
  // One prompt longer than the context fails alone; the mean TTFT covers the others.
  std::string prompts = test::temp_path("prompts_fail.txt"), long_line;
  for (int i = 0; i < 300; ++i) long_line += "Once upon a time ";
  test::write_file(prompts, "Once upon a time\n" + long_line + "\n");
  r = test::run_kvlm({"batch", "--model", stories(), "--prompts", prompts, "--max-new-tokens", "8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_GE(j["mean_ttft_ms"].get<double>(), 0.0);
  r = test::run_kvlm({"batch", "--model", stories(), "--prompts", prompts, "--max-new-tokens", "8"});
  EXPECT_NE(r.out.find("FAILED: prompt of"), std::string::npos) << r.out;
  // bench: impossible cells and unwritable outputs are errors before any run.
  r = test::run_kvlm({"bench", "--model", stories(), "--prompt-tokens", "600", "--runs", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("exceed the context"), std::string::npos) << r.err;
  r = test::run_kvlm({"bench", "--model", stories(), "--sweep", "--sweep-out", "/nonexistent/dir/plot.svg", "--runs", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("cache on"), std::string::npos) << "ran before failing: " << r.err;
  r = test::run_kvlm({"bench", "--model", stories(), "--decode-at", "64", "--kv-dtypes", "f32,int3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("KV f32 at"), std::string::npos) << "ran before failing: " << r.err;
  r = test::run_kvlm({"bench-serving", "--preset", "distilgpt2", "--prompt-tokens", "1000", "--new-tokens", "100"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("exceed the model's context"), std::string::npos) << r.err;
}

// Item 17: messages a user can act on.
TEST(ClearMessages, NoLibraryJargonOrHugeNumbers) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "CLI messages");
  auto r = test::run_kvlm({"generate", "--model", stories(), "--prompt", "hi", "--kv-layout", "contiguous",
                           "--sink-tokens", "2147483647", "--window", "10"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.find("max_size"), std::string::npos) << r.err;
  EXPECT_LT(r.err.size(), 200u) << r.err;
  r = test::run_kvlm({"generate", "--model", stories(), "--prompt", "hi", "--temperature", "-1"});
  EXPECT_LT(r.err.size(), 200u) << "no 309-digit bound: " << r.err;
  std::string text = test::temp_path("notes.txt");
  test::write_file(text, "this is a plain text file, not a model\n");
  r = test::run_kvlm({"logits", "--model", text, "--ids", "1", "--out", test::temp_path("o.f32")});
  EXPECT_NE(r.err.find("not a llama2.c checkpoint, GGUF file or Hugging Face folder"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvlm
