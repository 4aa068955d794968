// GGUF: dequantization against the PyPI gguf package, the stories260K GGUF against the goldens,
// and crafted bad files, each rejected with a clear error.
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/generator.h"
#include "io/gguf.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

TEST(GgufDequant, MatchesGgufPackageReference) {
  struct Q {
    const char* name;
    DType type;
  };
  for (Q q : {Q{"Q8_0", DType::Q8_0}, Q{"Q4_0", DType::Q4_0}, Q{"Q4_1", DType::Q4_1}, Q{"Q5_0", DType::Q5_0},
              Q{"Q5_1", DType::Q5_1}, Q{"Q2_K", DType::Q2_K}, Q{"Q3_K", DType::Q3_K}, Q{"Q4_K", DType::Q4_K},
              Q{"Q5_K", DType::Q5_K}, Q{"Q6_K", DType::Q6_K}, Q{"IQ4_NL", DType::IQ4_NL},
              Q{"IQ4_XS", DType::IQ4_XS}, Q{"MXFP4", DType::MXFP4}}) {
    std::string dir = test::fixtures_dir() + "/quants/";
    std::string blocks = test::read_file(dir + q.name + ".bin");
    std::vector<float> want = test::read_f32(dir + q.name + ".f32");
    ASSERT_EQ(blocks.size() / dtype_block_bytes(q.type) * dtype_block(q.type), want.size()) << q.name;
    std::vector<float> got(want.size());
    dequantize(q.type, reinterpret_cast<const uint8_t*>(blocks.data()), got.data(), got.size());
    // Bit for bit (MXFP4's largest exponent makes infinities on both sides).
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << q.name;
  }
}

TEST(GgufStories260K, GreedyGoldenAndTokenizerFromMetadata) {
  KVLM_NEED_SHARED("models/stories260K/stories260K-f32.gguf", "stories260K GGUF against the llama2.c golden");
  nlohmann::json g =
      nlohmann::json::parse(test::read_file(test::shared_path("golden/stories260K/greedy_long_prompt_mia.json")));
  std::string path = test::shared_path("models/stories260K/stories260K-f32.gguf");
  auto model = load_model(path);
  auto tok = load_tokenizer(path);
  EXPECT_EQ(tok->encode_prompt(g["prompt"].get<std::string>()), g["prompt_ids"].get<std::vector<int>>());
  GenerateOptions opt;
  opt.max_new_tokens = 200;
  opt.stop_at_eos = false;
  opt.context = 512;  // the file's metadata says 128; RoPE runs past it, as llama.c did
  EXPECT_EQ(generate(*model, g["prompt_ids"].get<std::vector<int>>(), opt).generated,
            g["generated_ids"].get<std::vector<int>>());
}

// A minimal GGUF writer for crafting bad files.
struct Writer {
  std::string b;
  template <typename T>
  Writer& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Writer& str(const std::string& s) {
    put<uint64_t>(s.size());
    b += s;
    return *this;
  }
  Writer& header(uint64_t tensors, uint64_t kvs) { return put<uint32_t>(0x46554747).put<uint32_t>(3).put(tensors).put(kvs); }
  Writer& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(dims.size());
    for (uint64_t d : dims) put(d);
    return put(type).put(offset);
  }
  Writer& pad() {
    while (b.size() % 32) b += '\0';
    return *this;
  }
};

std::string gguf_error(const std::string& bytes) {
  try {
    parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "bad.gguf");
  } catch (const KvlmError& e) {
    return e.what();
  }
  return "";
}

TEST(BadGguf, GoodMinimalFileParses) {
  Writer w;
  w.header(1, 0).tensor("t", {4}, 0, 0).pad();
  w.b += std::string(16, '\0');
  EXPECT_EQ(gguf_error(w.b), "");
}

TEST(BadGguf, HugeTensorCount) {
  Writer w;
  w.header(1ull << 60, 0);
  EXPECT_NE(gguf_error(w.b).find("tensor count"), std::string::npos) << gguf_error(w.b);
}

TEST(BadGguf, DimensionProductOverflows) {
  Writer w;
  w.header(1, 0).tensor("t", {1ull << 32, 1ull << 32, 1ull << 32}, 0, 0).pad();
  EXPECT_NE(gguf_error(w.b).find("overflow"), std::string::npos) << gguf_error(w.b);
}

TEST(BadGguf, StringLengthPastTheEnd) {
  Writer w;
  w.header(0, 1).put<uint64_t>(1ull << 40) /* key length */;
  EXPECT_NE(gguf_error(w.b).find("only"), std::string::npos) << gguf_error(w.b);
  Writer v;
  v.header(0, 1).str("k").put<uint32_t>(8).put<uint64_t>(1000).b += "short";
  EXPECT_NE(gguf_error(v.b).find("string of 1000 bytes"), std::string::npos) << gguf_error(v.b);
}

TEST(BadGguf, UnknownTypes) {
  Writer w;
  w.header(1, 0).tensor("t", {32}, 99, 0).pad();
  EXPECT_NE(gguf_error(w.b).find("unknown ggml type 99 (supported: F32, F16, Q4_0, Q4_1"), std::string::npos)
      << gguf_error(w.b);
  // A type ggml has and kvlm does not run is refused by its name, with the list it runs.
  Writer iq;
  iq.header(1, 0).tensor("t", {256}, 16, 0).pad();
  EXPECT_NE(gguf_error(iq.b).find("is IQ2_XXS (ggml type 16), which kvlm does not run (supported: "),
            std::string::npos)
      << gguf_error(iq.b);
  EXPECT_NE(gguf_error(iq.b).find("IQ4_XS, BF16, MXFP4)"), std::string::npos) << gguf_error(iq.b);
  Writer v;
  v.header(0, 1).str("k").put<uint32_t>(77);
  EXPECT_NE(gguf_error(v.b).find("unknown value type 77"), std::string::npos) << gguf_error(v.b);
}

TEST(BadGguf, MisalignedData) {
  Writer w;
  w.header(1, 0).tensor("t", {4}, 0, 3).pad();
  w.b += std::string(32, '\0');
  EXPECT_NE(gguf_error(w.b).find("not aligned"), std::string::npos) << gguf_error(w.b);
  Writer v;
  v.header(0, 1).str("general.alignment").put<uint32_t>(4).put<uint32_t>(24);
  EXPECT_NE(gguf_error(v.b).find("power of two"), std::string::npos) << gguf_error(v.b);
}

TEST(BadGguf, ArrayOfNestedWrongType) {
  Writer w;  // array whose elements are arrays
  w.header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(1);
  EXPECT_NE(gguf_error(w.b).find("arrays of arrays"), std::string::npos) << gguf_error(w.b);
  Writer v;  // array claiming more elements than bytes remain
  v.header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(6).put<uint64_t>(1ull << 61);
  std::string e = gguf_error(v.b);
  EXPECT_TRUE(e.find("overflow") != std::string::npos || e.find("remain") != std::string::npos) << e;
}

TEST(BadGguf, TensorOutsideDataAndBadMagic) {
  Writer w;
  w.header(1, 0).tensor("t", {64}, 0, 0).pad();
  w.b += std::string(16, '\0');
  EXPECT_NE(gguf_error(w.b).find("outside the data"), std::string::npos) << gguf_error(w.b);
  EXPECT_NE(gguf_error("GGUX1234").find("bad magic"), std::string::npos);
  Writer q;  // Q8_0 row not a multiple of 32
  q.header(1, 0).tensor("t", {33}, 8, 0).pad();
  EXPECT_NE(gguf_error(q.b).find("multiple"), std::string::npos) << gguf_error(q.b);
}

}  // namespace
}  // namespace kvlm
