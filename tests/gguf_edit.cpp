#include "gguf_edit.h"

#include <cstring>

#include "test_support.h"

namespace kvlm::test {

namespace {

uint32_t ggml_type(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q8_0: return 8;
    case DType::Q4_K: return 12;
    case DType::Q6_K: return 14;
    case DType::BF16: return 30;
    case DType::Q4_1: return 3;
    case DType::Q5_0: return 6;
    case DType::Q5_1: return 7;
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 11;
    case DType::Q5_K: return 13;
    case DType::IQ4_NL: return 20;
    case DType::IQ4_XS: return 23;
    case DType::MXFP4: return 39;
    case DType::Int8:
    case DType::Int4: break;  // KV-only codecs: no GGUF type
  }
  throw std::runtime_error("no GGUF type for this dtype");
}

struct Out {
  std::string b;
  template <typename T>
  void put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b += s;
  }
  void scalar(GgufType t, const GgufValue& v) {
    switch (t) {
      case GgufType::U8: put<uint8_t>(static_cast<uint8_t>(v.as_int("u8"))); break;
      case GgufType::I8: put<int8_t>(static_cast<int8_t>(v.as_int("i8"))); break;
      case GgufType::U16: put<uint16_t>(static_cast<uint16_t>(v.as_int("u16"))); break;
      case GgufType::I16: put<int16_t>(static_cast<int16_t>(v.as_int("i16"))); break;
      case GgufType::U32: put<uint32_t>(static_cast<uint32_t>(v.as_int("u32"))); break;
      case GgufType::I32: put<int32_t>(static_cast<int32_t>(v.as_int("i32"))); break;
      case GgufType::U64: put<uint64_t>(static_cast<uint64_t>(v.as_int("u64"))); break;
      case GgufType::I64: put<int64_t>(v.as_int("i64")); break;
      case GgufType::F32: put<float>(static_cast<float>(v.as_float("f32"))); break;
      case GgufType::F64: put<double>(v.as_float("f64")); break;
      case GgufType::BOOL: put<uint8_t>(std::get<bool>(v.scalar) ? 1 : 0); break;
      case GgufType::STRING: str(std::get<std::string>(v.scalar)); break;
      case GgufType::ARRAY:
        put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        put<uint64_t>(v.array.size());
        for (const GgufValue& e : v.array) scalar(v.elem_type, e);
        break;
    }
  }
};

GgufValue make(GgufType t, decltype(GgufValue::scalar) s) {
  GgufValue v;
  v.type = t;
  v.scalar = std::move(s);
  return v;
}

}  // namespace

GgufValue gguf_u32(uint32_t v) { return make(GgufType::U32, static_cast<uint64_t>(v)); }
GgufValue gguf_u8(uint8_t v) { return make(GgufType::U8, static_cast<uint64_t>(v)); }
GgufValue gguf_f32(double v) { return make(GgufType::F32, v); }
GgufValue gguf_bool(bool v) { return make(GgufType::BOOL, v); }
GgufValue gguf_str(const std::string& s) { return make(GgufType::STRING, s); }

std::string edit_gguf(const std::string& path, const std::string& out_name,
                      const std::function<void(std::map<std::string, GgufValue>&, std::vector<GgufTensorOut>&)>& edit) {
  auto g = read_gguf(path);
  std::map<std::string, GgufValue> meta = g->meta;
  std::vector<GgufTensorOut> tensors;
  for (const auto& [name, t] : g->tensors.all())
    tensors.push_back({name, t.shape, t.dtype, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)});
  edit(meta, tensors);
  constexpr uint64_t kAlign = 32;
  meta.erase("general.alignment");
  Out o;
  o.put<uint32_t>(0x46554747);
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors.size());
  o.put<uint64_t>(meta.size());
  for (const auto& [key, v] : meta) {
    o.str(key);
    o.put<uint32_t>(static_cast<uint32_t>(v.type));
    o.scalar(v.type, v);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const GgufTensorOut& t : tensors) {
    o.str(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) o.put<uint64_t>(static_cast<uint64_t>(*it));
    o.put<uint32_t>(ggml_type(t.dtype));
    uint64_t at = t.force_offset >= 0 ? static_cast<uint64_t>(t.force_offset) : offset;
    o.put<uint64_t>(at);
    offsets.push_back(at);
    if (t.force_offset < 0) offset = (offset + t.bytes.size() + kAlign - 1) / kAlign * kAlign;
  }
  while (o.b.size() % kAlign) o.b += '\0';
  const size_t data_start = o.b.size();
  uint64_t end = 0;
  for (size_t i = 0; i < tensors.size(); ++i) end = std::max<uint64_t>(end, offsets[i] + tensors[i].bytes.size());
  o.b.resize(data_start + end, '\0');
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].force_offset < 0) std::memcpy(o.b.data() + data_start + offsets[i], tensors[i].bytes.data(), tensors[i].bytes.size());
  std::string out = temp_path(out_name);
  write_file(out, o.b);
  return out;
}

}  // namespace kvlm::test
