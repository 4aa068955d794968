// The one dtype table (kernels/dtype.h): every row is where its type says, names parse back only
// in the roles a type has, and the from-float direction writes the blocks the PyPI gguf package
// writes for the same values (its to-float direction is checked in gguf_test.cpp).
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/dtype.h"
#include "kernels/kv_quant.h"
#include "kernels/row_dot.h"
#include "test_support.h"

namespace kvlm {
namespace {

constexpr DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,   DType::Q4_K,
                               DType::Q6_K, DType::Int8, DType::Int4, DType::Q4_1,   DType::Q5_0,   DType::Q5_1,
                               DType::Q2_K, DType::Q3_K, DType::Q5_K, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4};

TEST(DTypeTable, RowsNamesAndRoles) {
  for (DType t : kAllTypes) {
    const DTypeTraits& r = dtype_traits(t);
    EXPECT_EQ(r.type, t) << r.name;
    for (DTypeRole role : {kInFiles, kAsWeights, kInKvPages, kAsStored}) {
      if (r.roles & role) {
        EXPECT_EQ(parse_dtype(r.name, role, "type"), t);
      } else {
        try {
          parse_dtype(r.name, role, "type");
          ADD_FAILURE() << r.name << " parsed in a role it lacks";
        } catch (const KvlmError& e) {
          EXPECT_NE(std::string(e.what()).find("known:"), std::string::npos) << e.what();
        }
      }
    }
    // A type in files has a layout to widen; a type Linear runs row by row has a dot.
    if (r.roles & kInFiles) {
      EXPECT_TRUE(r.to_float && r.block_bytes > 0) << r.name;
    }
    if ((r.roles & kAsWeights) && r.block == 1) {
      EXPECT_TRUE(r.dot) << r.name;
    }
    if (r.roles & kInKvPages) {
      EXPECT_TRUE(kv_dtype_fits(t, 64)) << r.name;
    }
    // A type that runs as stored has the row codec its Linear runs through.
    EXPECT_EQ((r.roles & kAsStored) != 0, is_row_quant(t)) << r.name;
    EXPECT_TRUE(is_dtype(static_cast<unsigned>(t))) << r.name;
  }
  EXPECT_FALSE(is_dtype(std::size(kAllTypes)));
  EXPECT_FALSE(kv_dtype_fits(DType::Q8_0, 64));  // a weight type is not a KV codec
  EXPECT_FALSE(kv_dtype_fits(DType::Int4, 48));  // int4 groups are 32 wide
  EXPECT_THROW(parse_dtype("q4_k", kAsWeights, "weight type"), KvlmError);
}

TEST(DTypeTable, QuantizesAsTheGgufPackageDoes) {
  const std::string dir = test::fixtures_dir() + "/quants/";
  const std::vector<float> src = test::read_f32(dir + "quantize_src.f32");
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    const DTypeTraits& r = dtype_traits(t);
    const std::string want = test::read_file(dir + "quantize_" + (t == DType::Q8_0 ? "Q8_0" : "Q4_0") + ".bin");
    std::string got(src.size() / r.block * r.block_bytes, '\0');
    r.from_float(src.data(), reinterpret_cast<uint8_t*>(got.data()), src.size());
    ASSERT_EQ(got.size(), want.size()) << r.name;
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0u) << r.name << ": bytes that differ from gguf.quants.quantize";
  }
}

TEST(DTypeTable, PlainTypesRoundTripAndDot) {
  const std::vector<float> x = test::randn(37, 1), w = test::randn(37, 2);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const DTypeTraits& r = dtype_traits(t);
    std::vector<uint8_t> stored(x.size() * r.block_bytes);
    r.from_float(w.data(), stored.data(), w.size());
    std::vector<float> back(w.size());
    r.to_float(stored.data(), back.data(), back.size());
    double want = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const float exact = t == DType::F32 ? w[i] : t == DType::F16 ? f16_to_f32(f32_to_f16(w[i])) : bf16_to_f32(f32_to_bf16(w[i]));
      ASSERT_EQ(back[i], exact) << r.name << " element " << i;
      want += static_cast<double>(exact) * x[i];
    }
    EXPECT_NEAR(r.dot(stored.data(), x.data(), static_cast<int>(x.size())), want, 1e-4) << r.name;
  }
}

}  // namespace
}  // namespace kvlm
