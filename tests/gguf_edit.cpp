#include "gguf_edit.h"

#include <cstring>

#include "io/gguf_write.h"
#include "test_support.h"

namespace kvlm::test {

namespace {

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
    append_gguf_value(o.b, v);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const GgufTensorOut& t : tensors) {
    o.str(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) o.put<uint64_t>(static_cast<uint64_t>(*it));
    o.put<uint32_t>(ggml_type_id(t.dtype));
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
