// One table of element types: what a file stores, what a Linear multiplies, what a KV page
// holds. Each row says its block (values and bytes), where it may be used, and its to-float,
// from-float and dot functions where it has them. A new type is one row here plus its kernels.
//
//   f32, f16, bf16     plain values
//   q8_0, q4_0         ggml blocks of 32: an f16 scale + int8 values / nibbles (files, weights)
//   q4_1 q5_0 q5_1 iq4_nl mxfp4 q2_k q3_k q4_k q5_k q6_k iq4_xs
//                      ggml blocks of 32 and super-blocks of 256, run as the file stores them
//                      (kernels/ggml_blocks.h, kernels/row_dot.h)
//   int8               KV rows: int8 values + one f32 scale per head (the block is the head)
//   int4               KV rows: nibbles + an f32 scale and zero point per 32 values
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvlm {

// The numbers are kept in KV snapshots: new types go at the end.
enum class DType { F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Int8, Int4, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS, MXFP4 };

// Where a type may appear; a row lists every role it has.
enum DTypeRole : unsigned {
  kInFiles = 1,    // a tensor type in safetensors / GGUF / llama2.c files
  kAsWeights = 2,  // a Linear's matrices run in it (--weights)
  kInKvPages = 4,  // a KV cache's rows are stored in it (--kv-dtype)
  kAsStored = 8,   // a Linear runs a file's matrices in it as stored (no from-float: not for --weights)
};

struct DTypeTraits {
  DType type;
  const char* name;    // lowercase, as flags and JSON spell it ("q8_0", "int8")
  int block;           // values per block along a row (1: plain; 0: a KV head, known per model)
  size_t block_bytes;  // bytes of one block in the file layout (0 where there is no file layout)
  unsigned roles;
  // Widens n values (a multiple of block) from the file layout; null where there is none.
  void (*to_float)(const uint8_t* src, float* dst, size_t n);
  // Narrows n values into the file layout (the llama.cpp rounding); null where kvlm never writes it.
  void (*from_float)(const float* src, uint8_t* dst, size_t n);
  // sum_i w[i] * x[i] over a stored row of n plain values; null for block types (their
  // products run in kernels/qgemm.h, a group of rows at a time).
  float (*dot)(const void* w, const float* x, int n);
};

const DTypeTraits& dtype_traits(DType t);
const char* dtype_name(DType t);
inline size_t dtype_block(DType t) { return dtype_traits(t).block; }              // values per block
inline size_t dtype_block_bytes(DType t) { return dtype_traits(t).block_bytes; }  // bytes per block (file layout)
// The type called `name` that may serve `role`; throws listing the names that may.
DType parse_dtype(const std::string& name, DTypeRole role, const char* what);
// The names of the types that may serve `role`, comma-separated.
std::string dtype_names(DTypeRole role);
// Bytes of a row of n values in the file layout; throws unless n is a multiple of the block.
uint64_t dtype_row_bytes(DType t, uint64_t n, const std::string& what);
// Whether a file's matrices of type t run in t (else they are widened to f32).
inline bool runs_as_stored(DType t) { return (dtype_traits(t).roles & (kAsWeights | kAsStored)) != 0; }
// Whether t is a DType value (a number read from a file).
bool is_dtype(unsigned t);
// Widens n values of type t (file layout) to f32.
void dequantize(DType t, const uint8_t* src, float* dst, size_t n);

}  // namespace kvlm
