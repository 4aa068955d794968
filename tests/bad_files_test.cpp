// Broken model files: each gets one clear error naming the file (and tensor), never a crash.
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/model.h"
#include "test_support.h"

namespace kvlm {
namespace {

// Builds a safetensors file from a JSON header and a data blob.
std::string safetensors(const std::string& header, const std::string& body) {
  std::string h = header;
  while (h.size() % 8) h += ' ';
  uint64_t n = h.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + h + body;
}

std::string error_of(const std::string& bytes) {
  TensorSource src;
  try {
    parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "bad.safetensors", src);
  } catch (const KvlmError& e) {
    return e.what();
  }
  return "";
}

const std::string kGoodHeader = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";

TEST(BadSafetensors, GoodFileParses) {
  TensorSource src;
  std::string f = safetensors(kGoodHeader, std::string(16, '\0'));
  parse_safetensors(reinterpret_cast<const uint8_t*>(f.data()), f.size(), "ok", src);
  EXPECT_EQ(src.get("a").shape, (std::vector<int64_t>{2, 2}));
}

TEST(BadSafetensors, EmptyFile) { EXPECT_NE(error_of("").find("too small"), std::string::npos); }

TEST(BadSafetensors, TruncatedData) {
  std::string e = error_of(safetensors(kGoodHeader, std::string(8, '\0')));
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor a"), std::string::npos) << e;
}

TEST(BadSafetensors, LyingHeaderLength) {
  std::string f = safetensors(kGoodHeader, std::string(16, '\0'));
  uint64_t lie = 1ull << 40;
  std::memcpy(f.data(), &lie, 8);
  EXPECT_NE(error_of(f).find("exceeds the 100 MB limit"), std::string::npos);
  lie = f.size();  // under the limit but past the end
  std::memcpy(f.data(), &lie, 8);
  EXPECT_NE(error_of(f).find("past the end"), std::string::npos);
}

TEST(BadSafetensors, OffsetsOutOfRange) {
  std::string e = error_of(safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[1000,1016]}})",
                                       std::string(16, '\0')));
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

TEST(BadSafetensors, OverlappingTensors) {
  std::string e = error_of(safetensors(
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
      std::string(16, '\0')));
  EXPECT_NE(e.find("overlap"), std::string::npos) << e;
}

TEST(BadSafetensors, UnknownDtype) {
  std::string e = error_of(safetensors(R"({"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", std::string(16, '\0')));
  EXPECT_NE(e.find("unsupported dtype 'Q7'"), std::string::npos) << e;
}

TEST(BadSafetensors, ShapeDoesNotMatchSize) {
  std::string e = error_of(safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", std::string(16, '\0')));
  EXPECT_NE(e.find("needs 12 bytes"), std::string::npos) << e;
}

TEST(BadSafetensors, ShapeProductOverflows) {
  std::string e = error_of(safetensors(
      R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})", std::string(16, '\0')));
  EXPECT_NE(e.find("overflow"), std::string::npos) << e;
}

TEST(BadSafetensors, MalformedJsonAndNegativeValues) {
  EXPECT_NE(error_of(safetensors("{not json", "")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(safetensors("[1,2]", "")).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(safetensors(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", std::string(16, '\0')))
                .find("non-negative"),
            std::string::npos);
}

TEST(BadConfig, MissingKeyIsNamed) {
  std::string e;
  try {
    parse_hf_config(R"({"model_type":"llama","hidden_size":64})", "config.json");
  } catch (const KvlmError& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("missing config key 'intermediate_size'"), std::string::npos) << e;
}

TEST(BadConfig, UnsupportedTypeAndAbsurdSizes) {
  EXPECT_THROW(parse_hf_config(R"({"model_type":"bert"})", "c"), KvlmError);
  EXPECT_THROW(parse_hf_config(R"({"model_type":"llama","hidden_size":64,"intermediate_size":1,"num_hidden_layers":1,
      "num_attention_heads":8,"vocab_size":1000000000,"max_position_embeddings":16})", "c"), KvlmError);
  EXPECT_THROW(parse_hf_config("{", "c"), KvlmError);
}

// llama2.c checkpoint: header of stories260K's shapes, then too few bytes.
TEST(BadLlama2c, TruncatedFileNamesTheTensor) {
  int32_t h[7] = {64, 172, 5, 8, 4, 512, 512};
  std::string f(reinterpret_cast<char*>(h), 28);
  f += std::string(1000, '\0');
  TensorSource src;
  std::string e;
  try {
    parse_llama2c(reinterpret_cast<const uint8_t*>(f.data()), f.size(), "x.bin", src);
  } catch (const KvlmError& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("token_embedding"), std::string::npos) << e;
}

TEST(BadLlama2c, AbsurdHeader) {
  int32_t h[7] = {64, 172, 5, 8, 16, 512, 512};  // more kv heads than heads
  std::string f(reinterpret_cast<char*>(h), 28);
  TensorSource src;
  EXPECT_THROW(parse_llama2c(reinterpret_cast<const uint8_t*>(f.data()), f.size(), "x.bin", src), KvlmError);
  EXPECT_THROW(parse_llama2c(reinterpret_cast<const uint8_t*>(f.data()), 3, "x.bin", src), KvlmError);
  // A vocab_size of INT32_MIN (negative: "no shared classifier") has no magnitude as an int32:
  // refused as out of range, not negated (undefined behaviour, caught by UBSan in the fuzzer).
  int32_t g[7] = {64, 172, 5, 8, 4, INT32_MIN, 512};
  std::string e;
  try {
    parse_llama2c(reinterpret_cast<const uint8_t*>(g), sizeof g, "x.bin", src);
  } catch (const KvlmError& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("vocab_size = 2147483647 is out of range"), std::string::npos) << e;
}

// Through the CLI: a clear one-line error and a non-zero exit, never a signal.
TEST(BadFilesCli, OneLineErrorNoCrash) {
  std::string dir = test::temp_path("badhf");
  test::write_file(dir + "/config.json", R"({"model_type":"llama","hidden_size":64})");
  test::write_file(dir + "/model.safetensors", "");
  std::string trunc = test::temp_path("trunc.bin");
  test::write_file(trunc, std::string(10, 'x'));
  std::string emptyf = test::temp_path("empty.bin");
  test::write_file(emptyf, "");
  std::string hf_trunc = test::temp_path("hftrunc");
  test::write_file(hf_trunc + "/config.json", R"({"model_type":"llama","hidden_size":8,"intermediate_size":8,
    "num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"max_position_embeddings":8})");
  test::write_file(hf_trunc + "/model.safetensors", safetensors(kGoodHeader, std::string(16, '\0')).substr(0, 30));
  for (const std::string& model : {dir, trunc, emptyf, hf_trunc, std::string("/nonexistent/model")}) {
    auto r = test::run_kvlm({"logits", "--model", model, "--ids", "1", "--out", test::temp_path("o.f32")});
    EXPECT_EQ(r.exit_code, 1) << model << ": " << r.err;
    EXPECT_EQ(r.err.rfind("kvlm: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(BadInputCli, PromptLongerThanContextAndBadIds) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "context-length errors on stories260K");
  std::string model = test::shared_path("models/stories260K/stories260K.bin");
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += "Once upon a time ";
  auto r = test::run_kvlm({"generate", "--model", model, "--prompt", long_prompt, "--max-new-tokens", "4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("longer than the context"), std::string::npos) << r.err;
  r = test::run_kvlm({"logits", "--model", model, "--ids", "1,99999", "--out", test::temp_path("o.f32")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
  r = test::run_kvlm({"logits", "--model", model, "--ids", "1,x", "--out", test::temp_path("o.f32")});
  EXPECT_EQ(r.exit_code, 1);
  r = test::run_kvlm({"generate", "--model", model, "--prompt", "hi", "--top-p", "7"});
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace kvlm
