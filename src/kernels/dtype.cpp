// The dtype table. The ggml block decoders follow ggml-quants.c (dequantize_row_q8_0 / q4_0 here,
// the row-quant types in kernels/ggml_blocks.cpp), checked against the PyPI gguf package in
// tests/gguf_test.cpp.
#include "kernels/dtype.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/half_dot.h"
#include "kernels/ggml_blocks.h"
#include "kernels/quantize.h"

namespace kvlm {

namespace {

void q8_0(const uint8_t* b, float* y) {
  float d = f16_at(b);
  const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int i = 0; i < 32; ++i) y[i] = d * q[i];
}

void q4_0(const uint8_t* b, float* y) {
  float d = f16_at(b);
  const uint8_t* q = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * ((q[i] & 0xF) - 8);
    y[i + 16] = d * ((q[i] >> 4) - 8);
  }
}

// Plain and block types, widened row by row.
void f32_to(const uint8_t* s, float* d, size_t n) {
  if (n) std::memcpy(d, s, n * 4);  // an empty tensor may have no buffer at all (null)
}
template <float (*widen)(uint16_t)>
void half_to(const uint8_t* s, float* d, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, s + 2 * i, 2);
    d[i] = widen(h);
  }
}
template <void (*block)(const uint8_t*, float*), size_t values, size_t bytes>
void blocks_to(const uint8_t* s, float* d, size_t n) {
  for (size_t i = 0; i < n / values; ++i) block(s + i * bytes, d + i * values);
}

void f32_from(const float* s, uint8_t* d, size_t n) {
  if (n) std::memcpy(d, s, n * 4);  // as f32_to: an empty tensor may have no buffer
}
template <uint16_t (*narrow)(float)>
void half_from(const float* s, uint8_t* d, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = narrow(s[i]);
    std::memcpy(d + 2 * i, &h, 2);
  }
}
// ggml's block layout: the scale as f16, then the quants (quantize_row_q8_0_ref's rounding).
void q8_0_from(const float* s, uint8_t* d, size_t n) {
  for (size_t b = 0; b < n / 32; ++b, d += 34) {
    float scale;
    quantize_row_q8_0(s + b * 32, 32, &scale, reinterpret_cast<int8_t*>(d + 2));
    const uint16_t h = f32_to_f16(scale);
    std::memcpy(d, &h, 2);
  }
}
void q4_0_from(const float* s, uint8_t* d, size_t n) {
  for (size_t b = 0; b < n / 32; ++b, d += 18) {
    float scale;
    quantize_row_q4_0(s + b * 32, 32, &scale, d + 2);
    const uint16_t h = f32_to_f16(scale);
    std::memcpy(d, &h, 2);
  }
}

float f32_dot(const void* w, const float* x, int n) { return dot_f32(static_cast<const float*>(w), x, n); }
float f16_dot(const void* w, const float* x, int n) { return dot_f16(static_cast<const uint16_t*>(w), x, n); }
float bf16_dot(const void* w, const float* x, int n) { return dot_bf16(static_cast<const uint16_t*>(w), x, n); }

constexpr unsigned kAll = kInFiles | kAsWeights | kInKvPages;
constexpr unsigned kRows = kInFiles | kAsStored;  // the row-quant types
template <DType T>
void row_quant_to(const uint8_t* s, float* d, size_t n) {
  blocks_to_float(T, s, d, n);
}

// In DType's order.
const DTypeTraits kTable[] = {
    {DType::F32, "f32", 1, 4, kAll, f32_to, f32_from, f32_dot},
    {DType::F16, "f16", 1, 2, kAll, half_to<f16_to_f32>, half_from<f32_to_f16>, f16_dot},
    {DType::BF16, "bf16", 1, 2, kAll, half_to<bf16_to_f32>, half_from<f32_to_bf16>, bf16_dot},
    {DType::Q8_0, "q8_0", 32, 34, kInFiles | kAsWeights, blocks_to<q8_0, 32, 34>, q8_0_from, nullptr},
    {DType::Q4_0, "q4_0", 32, 18, kInFiles | kAsWeights, blocks_to<q4_0, 32, 18>, q4_0_from, nullptr},
    {DType::Q4_K, "q4_k", 256, 144, kRows, row_quant_to<DType::Q4_K>, nullptr, nullptr},
    {DType::Q6_K, "q6_k", 256, 210, kRows, row_quant_to<DType::Q6_K>, nullptr, nullptr},
    // KV codecs: rows with their scales beside them (kernels/kv_quant.h), no file layout.
    {DType::Int8, "int8", 0, 0, kInKvPages, nullptr, nullptr, nullptr},
    {DType::Int4, "int4", 32, 0, kInKvPages, nullptr, nullptr, nullptr},
    {DType::Q4_1, "q4_1", 32, 20, kRows, row_quant_to<DType::Q4_1>, nullptr, nullptr},
    {DType::Q5_0, "q5_0", 32, 22, kRows, row_quant_to<DType::Q5_0>, nullptr, nullptr},
    {DType::Q5_1, "q5_1", 32, 24, kRows, row_quant_to<DType::Q5_1>, nullptr, nullptr},
    {DType::Q2_K, "q2_k", 256, 84, kRows, row_quant_to<DType::Q2_K>, nullptr, nullptr},
    {DType::Q3_K, "q3_k", 256, 110, kRows, row_quant_to<DType::Q3_K>, nullptr, nullptr},
    {DType::Q5_K, "q5_k", 256, 176, kRows, row_quant_to<DType::Q5_K>, nullptr, nullptr},
    {DType::IQ4_NL, "iq4_nl", 32, 18, kRows, row_quant_to<DType::IQ4_NL>, nullptr, nullptr},
    {DType::IQ4_XS, "iq4_xs", 256, 136, kRows, row_quant_to<DType::IQ4_XS>, nullptr, nullptr},
    {DType::MXFP4, "mxfp4", 32, 17, kRows, row_quant_to<DType::MXFP4>, nullptr, nullptr},
};

}  // namespace

const DTypeTraits& dtype_traits(DType t) {
  const auto i = static_cast<size_t>(t);
  KVLM_CHECK(i < std::size(kTable) && kTable[i].type == t, "dtype table out of order at ", i);
  return kTable[i];
}

const char* dtype_name(DType t) { return dtype_traits(t).name; }

bool is_dtype(unsigned t) { return t < std::size(kTable); }

std::string dtype_names(DTypeRole role) {
  std::string known;
  for (const DTypeTraits& r : kTable)
    if (r.roles & role) known += (known.empty() ? "" : ", ") + std::string(r.name);
  return known;
}

DType parse_dtype(const std::string& name, DTypeRole role, const char* what) {
  for (const DTypeTraits& r : kTable)
    if ((r.roles & role) && name == r.name) return r.type;
  fail("unknown ", what, " '", name, "' (known: ", dtype_names(role), ")");
}

uint64_t dtype_row_bytes(DType t, uint64_t n, const std::string& what) {
  const DTypeTraits& r = dtype_traits(t);
  KVLM_CHECK(r.block_bytes > 0, dtype_name(t), " has no file layout");
  if (n % r.block != 0) fail(what, ": row of ", n, " values is not a multiple of the ", r.name, " block (", r.block, ")");
  return checked_mul(n / r.block, r.block_bytes, what);
}

void dequantize(DType t, const uint8_t* src, float* dst, size_t n) {
  const DTypeTraits& r = dtype_traits(t);
  KVLM_CHECK(r.to_float, dtype_name(t), " has no file layout to widen");
  // A model's embedding table is tens of millions of values: widened on every thread at load.
  constexpr size_t kChunk = 1 << 16;  // values; a multiple of every block
  if (n < 4 * kChunk || n % r.block != 0) return r.to_float(src, dst, n);
  const size_t chunks = (n + kChunk - 1) / kChunk, chunk_bytes = kChunk / r.block * r.block_bytes;
  ThreadPool::global().parallel_for(chunks, [&](size_t c0, size_t c1) {
    for (size_t c = c0; c < c1; ++c)
      r.to_float(src + c * chunk_bytes, dst + c * kChunk, std::min(kChunk, n - c * kChunk));
  });
}

}  // namespace kvlm
