// kvlm's quantizers against llama.cpp's (tests/fixtures/quantize, made by
// tools/make_quantize_fixtures.py): the blocks ggml_quantize_chunk wrote for the same f32 rows,
// and the files llama-quantize wrote for two small GGUF inputs in every file type, byte for byte.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/sha256.h"
#include "gguf_edit.h"
#include "io/gguf.h"
#include "io/gguf_write.h"
#include "kernels/dtype.h"
#include "kernels/ggml_quantize.h"
#include "model/quantize_file.h"
#include "test_support.h"

namespace kvlm {
namespace {

constexpr int kPerRow = 512;

std::vector<float> fixture_values() {
  const std::string raw = test::read_file(test::fixtures_dir() + "/quantize/values.f32");
  std::vector<float> v(raw.size() / 4);
  std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

TEST(GgmlQuantize, EveryTypeEqualsLlamaCppByteForByte) {
  const std::vector<float> values = fixture_values();
  ASSERT_EQ(values.size() % kPerRow, 0u);
  const struct {
    const char* file;
    DType type;
  } kTypes[] = {{"Q4_0", DType::Q4_0}, {"Q4_1", DType::Q4_1}, {"Q5_0", DType::Q5_0}, {"Q5_1", DType::Q5_1},
                {"Q8_0", DType::Q8_0}, {"Q2_K", DType::Q2_K}, {"Q3_K", DType::Q3_K}, {"Q4_K", DType::Q4_K},
                {"Q5_K", DType::Q5_K}, {"Q6_K", DType::Q6_K}, {"IQ4_NL", DType::IQ4_NL}, {"IQ4_XS", DType::IQ4_XS},
                {"MXFP4", DType::MXFP4}};
  for (const auto& t : kTypes) {
    SCOPED_TRACE(t.file);
    const std::string want = test::read_file(test::fixtures_dir() + "/quantize/" + t.file + ".ggml");
    const size_t block_bytes = dtype_block_bytes(t.type), block = dtype_block(t.type);
    ASSERT_EQ(want.size(), values.size() / block * block_bytes);
    std::vector<uint8_t> got(want.size());
    quantize_blocks(t.type, values.data(), got.data(), values.size());
    for (size_t b = 0; b < values.size() / block; ++b)
      ASSERT_EQ(std::memcmp(got.data() + b * block_bytes, want.data() + b * block_bytes, block_bytes), 0)
          << "block " << b << " (row " << b * block / kPerRow << ", values " << b * block % kPerRow << "..)";
    // and every block decodes to finite values
    std::vector<float> back(values.size());
    dequantize(t.type, got.data(), back.data(), back.size());
    for (size_t i = 0; i < values.size(); ++i) ASSERT_TRUE(std::isfinite(back[i])) << i;
  }
}

TEST(GgmlQuantize, RefusesWhatItCannotWrite) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_THROW(quantize_blocks(DType::Int8, x.data(), out.data(), x.size()), KvlmError);
  EXPECT_THROW(quantize_blocks(DType::Q4_K, x.data(), out.data(), 100), KvlmError);
  EXPECT_THROW(quantize_blocks(DType::Q4_0, x.data(), out.data(), 48), KvlmError);
}

std::string sha256_hex(const void* p, size_t n) {
  const Sha256Digest d = Sha256::of(p, n);
  return hex(d.data(), d.size());
}

TEST(GgufQuantize, FilesEqualLlamaQuantizeByteForByte) {
  const std::string dir = test::fixtures_dir() + "/quantize/";
  const auto expected = nlohmann::json::parse(test::read_file(dir + "expected.json"));
  const std::string out = (std::filesystem::temp_directory_path() / ("kvlm-quantize-" + std::to_string(getpid()) + ".gguf")).string();
  int files = 0;
  for (const auto& [input, types] : expected.items())
    for (const auto& [type, want] : types.items()) {
      SCOPED_TRACE(input + " -> " + type);
      const QuantizeReport r = quantize_gguf_file(dir + input, out, parse_quant_file_type(type));
      const std::string got = test::read_file(out);
      if (got.size() == want["bytes"].get<size_t>() && sha256_hex(got.data(), got.size()) == want["sha256"]) {
        ++files;
        continue;
      }
      // name the first tensor whose type or bytes differ (else the metadata does)
      auto g = read_gguf(out);
      ASSERT_EQ(g->tensor_order.size(), want["tensors"].size());
      for (const std::string& name : g->tensor_order) {
        const TensorInfo& t = g->tensors.get(name);
        ASSERT_EQ(ggml_type_name(t.dtype), want["tensors"][name][0].get<std::string>()) << name;
        ASSERT_EQ(sha256_hex(t.data, t.nbytes).substr(0, 16), want["tensors"][name][1].get<std::string>()) << name;
      }
      FAIL() << "the tensors agree but the files do not: the metadata or the layout differs (" << got.size() << " vs "
             << want["bytes"] << " bytes)";
    }
  std::filesystem::remove(out);
  EXPECT_EQ(files, 40);
}

TEST(GgufQuantize, RefusesWhatItCannotDo) {
  const std::string dir = test::fixtures_dir() + "/quantize/";
  const std::string out = (std::filesystem::temp_directory_path() / ("kvlm-refuse-" + std::to_string(getpid()) + ".gguf")).string();
  EXPECT_THROW(parse_quant_file_type("IQ2_XXS"), KvlmError);
  EXPECT_THROW(quantize_gguf_file(dir + "values.f32", out, parse_quant_file_type("Q4_K_M")), KvlmError);
  // an input already quantized is refused by name (requantizing would compound the error)
  quantize_gguf_file(dir + "gpt2-f32.gguf", out, parse_quant_file_type("Q8_0"));
  const std::string again = out + ".2";
  try {
    quantize_gguf_file(out, again, parse_quant_file_type("Q4_K_M"));
    FAIL() << "requantized";
  } catch (const KvlmError& e) {
    EXPECT_NE(std::string(e.what()).find("already q8_0"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(again));
  std::filesystem::remove(out);
  // NaN or Inf in a tensor is refused naming it (a block's scale would spread it), and no file is left
  for (const float bad : {NAN, INFINITY}) {
    const std::string poisoned = test::edit_gguf(dir + "gpt2-f32.gguf", "poisoned.gguf", [&](auto&, auto& tensors) {
      for (auto& t : tensors)
        if (t.name == "blk.1.ffn_up.weight") std::memcpy(t.bytes.data() + 4 * 300, &bad, 4);
    });
    try {
      quantize_gguf_file(poisoned, out, parse_quant_file_type("Q4_K_M"));
      FAIL() << "quantized a tensor holding " << bad;
    } catch (const KvlmError& e) {
      EXPECT_NE(std::string(e.what()).find("blk.1.ffn_up.weight row 1 holds"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

}  // namespace
}  // namespace kvlm
