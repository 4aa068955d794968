#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"

namespace kvlm {

namespace {

DType parse_dtype(const std::string& s, const std::string& label, const std::string& name) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  fail(label, ": tensor ", name, " has unsupported dtype '", s, "' (supported: F32, F16, BF16)");
}

uint64_t json_u64(const nlohmann::json& v, const std::string& label, const std::string& name,
                  const char* field) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
    fail(label, ": tensor ", name, ": ", field, " must hold non-negative integers");
  return v.get<uint64_t>();
}

}  // namespace

void parse_safetensors(const uint8_t* data, size_t size, const std::string& label, TensorSource& out) {
  if (size < 8) fail(label, ": file is ", size, " bytes, too small for a safetensors header");
  uint64_t header_len;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxSafetensorsHeader)
    fail(label, ": header length ", header_len, " exceeds the 100 MB limit");
  if (header_len > size - 8)
    fail(label, ": header length ", header_len, " runs past the end of the file (", size, " bytes)");
  const char* hdr = reinterpret_cast<const char*>(data + 8);
  // Strict: a tensor named twice is an error (a plain parse keeps the last one silently).
  nlohmann::json j = parse_json_strict(hdr, hdr + header_len, label + " header");
  if (!j.is_object()) fail(label, ": header is not a JSON object");

  const uint8_t* body = data + 8 + header_len;
  uint64_t body_size = size - 8 - header_len;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<std::string> names;
  for (auto& [name, e] : j.items()) {
    if (name == "__metadata__") continue;
    if (!e.is_object()) fail(label, ": tensor ", name, ": entry is not an object");
    if (!e.contains("dtype") || !e["dtype"].is_string()) fail(label, ": tensor ", name, ": missing dtype");
    if (!e.contains("shape") || !e["shape"].is_array()) fail(label, ": tensor ", name, ": missing shape");
    if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
      fail(label, ": tensor ", name, ": data_offsets must be [begin, end]");
    TensorInfo t;
    t.name = name;
    t.file = label;
    t.dtype = parse_dtype(e["dtype"].get<std::string>(), label, name);
    uint64_t numel = 1;
    for (auto& d : e["shape"]) {
      uint64_t dim = json_u64(d, label, name, "shape");
      if (dim > static_cast<uint64_t>(INT64_MAX)) fail(label, ": tensor ", name, ": dimension too large");
      numel = checked_mul(numel, dim, label + ": tensor " + name);
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t nbytes = checked_mul(numel, dtype_block_bytes(t.dtype), label + ": tensor " + name);
    uint64_t begin = json_u64(e["data_offsets"][0], label, name, "data_offsets");
    uint64_t end = json_u64(e["data_offsets"][1], label, name, "data_offsets");
    if (begin > end) fail(label, ": tensor ", name, ": data_offsets begin ", begin, " > end ", end);
    if (end > body_size)
      fail(label, ": tensor ", name, ": data_offsets [", begin, ", ", end, "] out of range (data is ",
           body_size, " bytes)");
    if (end - begin != nbytes)
      fail(label, ": tensor ", name, ": shape ", shape_str(t.shape), " of ", dtype_name(t.dtype), " needs ",
           nbytes, " bytes but data_offsets span ", end - begin);
    t.data = body + begin;
    t.nbytes = nbytes;
    ranges.push_back({begin, end});
    names.push_back(name);
    out.add(std::move(t));
  }
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    auto prev = ranges[order[i - 1]], cur = ranges[order[i]];
    if (cur.first < prev.second && cur.first != cur.second && prev.first != prev.second)
      fail(label, ": tensors ", names[order[i - 1]], " and ", names[order[i]], " overlap");
  }
}

void read_safetensors(const std::string& path, TensorSource& out) {
  auto file = std::make_shared<MappedFile>(path);
  parse_safetensors(file->data(), file->size(), path, out);
  out.add_file(std::move(file));
}

}  // namespace kvlm
