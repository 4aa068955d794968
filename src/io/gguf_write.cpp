#include "io/gguf_write.h"

#include "core/error.h"

namespace kvlm {

namespace {

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void put_scalar(std::string& out, GgufType t, const GgufValue& v) {
  switch (t) {
    case GgufType::U8: put<uint8_t>(out, static_cast<uint8_t>(v.as_int("u8"))); break;
    case GgufType::I8: put<int8_t>(out, static_cast<int8_t>(v.as_int("i8"))); break;
    case GgufType::U16: put<uint16_t>(out, static_cast<uint16_t>(v.as_int("u16"))); break;
    case GgufType::I16: put<int16_t>(out, static_cast<int16_t>(v.as_int("i16"))); break;
    case GgufType::U32: put<uint32_t>(out, static_cast<uint32_t>(v.as_int("u32"))); break;
    case GgufType::I32: put<int32_t>(out, static_cast<int32_t>(v.as_int("i32"))); break;
    case GgufType::U64:  // a u64 above INT64_MAX is held as is (as_int would refuse it)
      put<uint64_t>(out, std::holds_alternative<uint64_t>(v.scalar) ? std::get<uint64_t>(v.scalar)
                                                                     : static_cast<uint64_t>(v.as_int("u64")));
      break;
    case GgufType::I64: put<int64_t>(out, v.as_int("i64")); break;
    case GgufType::F32: put<float>(out, static_cast<float>(v.as_float("f32"))); break;  // read as float: exact
    case GgufType::F64: put<double>(out, v.as_float("f64")); break;
    case GgufType::BOOL: put<uint8_t>(out, v.as_bool("bool") ? 1 : 0); break;
    case GgufType::STRING: put_string(out, v.as_string("string")); break;
    case GgufType::ARRAY:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, v.array.size());
      for (const GgufValue& e : v.array) put_scalar(out, v.elem_type, e);
      break;
  }
}

}  // namespace

uint64_t gguf_data_bytes(const GgufTensorSpec& t) {
  if (t.shape.empty()) fail("tensor ", t.name, " has no dimensions");
  uint64_t rows = 1;
  for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows = checked_mul(rows, static_cast<uint64_t>(t.shape[d]), t.name);
  return checked_mul(rows, dtype_row_bytes(t.type, static_cast<uint64_t>(t.shape.back()), "tensor " + t.name), t.name);
}

uint64_t gguf_padding(uint64_t bytes, uint64_t alignment) { return (alignment - bytes % alignment) % alignment; }

void append_gguf_value(std::string& out, const GgufValue& v) { put_scalar(out, v.type, v); }

std::string gguf_header(const GgufMeta& meta, const std::vector<GgufTensorSpec>& tensors, uint64_t alignment) {
  std::string out;
  out += "GGUF";
  put<uint32_t>(out, 3);
  put<int64_t>(out, static_cast<int64_t>(tensors.size()));
  put<int64_t>(out, static_cast<int64_t>(meta.size()));
  for (const auto& [key, v] : meta) {
    put_string(out, key);
    put<uint32_t>(out, static_cast<uint32_t>(v.type));
    append_gguf_value(out, v);
  }
  uint64_t offset = 0;
  for (const GgufTensorSpec& t : tensors) {
    put_string(out, t.name);
    size_t n_dims = t.shape.size();  // innermost first below; trailing (outermost) 1s dropped
    size_t keep = 1;
    for (size_t d = 0; d < n_dims; ++d)
      if (t.shape[d] != 1) {
        keep = n_dims - d;
        break;
      }
    put<uint32_t>(out, static_cast<uint32_t>(keep));
    for (size_t d = 0; d < keep; ++d) put<int64_t>(out, t.shape[n_dims - 1 - d]);
    put<int32_t>(out, static_cast<int32_t>(ggml_type_id(t.type)));
    put<uint64_t>(out, offset);
    const uint64_t bytes = gguf_data_bytes(t);
    offset += bytes + gguf_padding(bytes, alignment);
  }
  out.append(gguf_padding(out.size(), alignment), '\0');
  return out;
}

}  // namespace kvlm
