// GGUF (v2, v3) reader: metadata of every value type, tensor infos, aligned data.
// Every count, length, dimension and offset is checked against the bytes that remain before
// anything is allocated or read: GGUF parsers elsewhere have had heap overflows through these.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "io/tensor_source.h"

namespace kvlm {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, U64 = 10,
  I64 = 11, F64 = 12
};

// A metadata value: scalars widen to int64/uint64/double; arrays hold one element type.
struct GgufValue {
  GgufType type = GgufType::U32;
  GgufType elem_type = GgufType::U32;  // for arrays
  std::variant<int64_t, uint64_t, double, bool, std::string> scalar;
  std::vector<GgufValue> array;

  bool is_integer() const;
  int64_t as_int(const std::string& key) const;      // throws unless an integer that fits
  double as_float(const std::string& key) const;     // integer or float
  bool as_bool(const std::string& key) const;        // bool, or any integer type (0 = false)
  const std::string& as_string(const std::string& key) const;
};

struct GgufFile {
  uint32_t version = 0;
  uint64_t alignment = 32;
  std::map<std::string, GgufValue> meta;
  std::vector<std::string> key_order;     // meta's keys as the file lists them
  TensorSource tensors;  // names as stored; shapes outermost first (GGUF dims reversed)
  std::vector<std::string> tensor_order;  // tensor names as the file lists them
  std::string path;

  // Both note the key as read: a loader refuses the "<arch>." keys nobody read (they may change
  // the arithmetic), so a family honours a key by reading it.
  bool has(const std::string& key) const {
    read_keys.insert(key);
    return meta.count(key) != 0;
  }
  const GgufValue& get(const std::string& key) const;  // throws naming the key
  mutable std::set<std::string> read_keys;
};

std::unique_ptr<GgufFile> read_gguf(const std::string& path);
// Parses bytes already in memory; `keep` owns them when non-null (used by read_gguf).
std::unique_ptr<GgufFile> parse_gguf(const uint8_t* data, size_t size, const std::string& label,
                                     std::shared_ptr<MappedFile> keep = nullptr);
bool looks_like_gguf(const std::string& path);
// ggml's number for a type (ggml.h's enum ggml_type).
uint32_t ggml_type_id(DType t);
// ggml's name for a type ("Q4_K"), as llama.cpp prints it.
const char* ggml_type_name(DType t);

}  // namespace kvlm
