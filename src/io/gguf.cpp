#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace kvlm {

namespace {

constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxKv = 1u << 20;
constexpr uint32_t kMaxDims = 4;

class Cursor {
 public:
  Cursor(const uint8_t* d, size_t n, const std::string& label) : d_(d), n_(n), label_(label) {}
  size_t pos() const { return off_; }
  size_t left() const { return n_ - off_; }
  void need(uint64_t bytes, const std::string& what) const {
    if (bytes > left())
      fail(label_, ": ", what, " needs ", bytes, " bytes at offset ", off_, " but only ", left(), " remain");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, d_ + off_, sizeof(T));
    off_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& what) {
    uint64_t len = read<uint64_t>(what + " length");
    need(len, what + " (string of " + std::to_string(len) + " bytes)");
    std::string s(reinterpret_cast<const char*>(d_ + off_), len);
    off_ += len;
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_, off_ = 0;
  const std::string& label_;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& key, const std::string& label, bool in_array) {
  GgufValue v;
  v.type = t;
  switch (t) {
    case GgufType::U8: v.scalar = static_cast<uint64_t>(c.read<uint8_t>(key)); break;
    case GgufType::I8: v.scalar = static_cast<int64_t>(c.read<int8_t>(key)); break;
    case GgufType::U16: v.scalar = static_cast<uint64_t>(c.read<uint16_t>(key)); break;
    case GgufType::I16: v.scalar = static_cast<int64_t>(c.read<int16_t>(key)); break;
    case GgufType::U32: v.scalar = static_cast<uint64_t>(c.read<uint32_t>(key)); break;
    case GgufType::I32: v.scalar = static_cast<int64_t>(c.read<int32_t>(key)); break;
    case GgufType::U64: v.scalar = c.read<uint64_t>(key); break;
    case GgufType::I64: v.scalar = c.read<int64_t>(key); break;
    case GgufType::F32: v.scalar = static_cast<double>(c.read<float>(key)); break;
    case GgufType::F64: v.scalar = c.read<double>(key); break;
    case GgufType::BOOL: {
      uint8_t b = c.read<uint8_t>(key);
      if (b > 1) fail(label, ": metadata ", key, ": bool value ", int(b), " is not 0 or 1");
      v.scalar = b == 1;
      break;
    }
    case GgufType::STRING: v.scalar = c.string("metadata " + key); break;
    case GgufType::ARRAY: {
      if (in_array) fail(label, ": metadata ", key, ": nested arrays are not supported");
      uint32_t et = c.read<uint32_t>(key + " array type");
      if (et > static_cast<uint32_t>(GgufType::F64)) fail(label, ": metadata ", key, ": unknown array element type ", et);
      v.elem_type = static_cast<GgufType>(et);
      if (v.elem_type == GgufType::ARRAY) fail(label, ": metadata ", key, ": arrays of arrays are not supported");
      uint64_t n = c.read<uint64_t>(key + " array length");
      // Each element takes at least its scalar size (8 for a string's length): bound n first.
      uint64_t min_each = v.elem_type == GgufType::STRING ? 8 : scalar_size(v.elem_type);
      c.need(checked_mul(n, min_each, label + ": metadata " + key), "metadata " + key + " array of " + std::to_string(n));
      v.array.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.array.push_back(read_value(c, v.elem_type, key, label, true));
      break;
    }
    default:
      fail(label, ": metadata ", key, ": unknown value type ", static_cast<uint32_t>(t));
  }
  return v;
}

// ggml's type numbers (ggml.h's enum ggml_type), the ones kvlm runs and the ones it names to refuse.
struct GgmlTypeName {
  uint32_t id;
  const char* name;
  bool runs;
  DType type;
};
constexpr GgmlTypeName kGgmlTypes[] = {
    {0, "F32", true, DType::F32},         {1, "F16", true, DType::F16},       {2, "Q4_0", true, DType::Q4_0},
    {3, "Q4_1", true, DType::Q4_1},       {6, "Q5_0", true, DType::Q5_0},     {7, "Q5_1", true, DType::Q5_1},
    {8, "Q8_0", true, DType::Q8_0},       {9, "Q8_1", false, {}},             {10, "Q2_K", true, DType::Q2_K},
    {11, "Q3_K", true, DType::Q3_K},      {12, "Q4_K", true, DType::Q4_K},    {13, "Q5_K", true, DType::Q5_K},
    {14, "Q6_K", true, DType::Q6_K},      {15, "Q8_K", false, {}},            {16, "IQ2_XXS", false, {}},
    {17, "IQ2_XS", false, {}},            {18, "IQ3_XXS", false, {}},         {19, "IQ1_S", false, {}},
    {20, "IQ4_NL", true, DType::IQ4_NL},  {21, "IQ3_S", false, {}},           {22, "IQ2_S", false, {}},
    {23, "IQ4_XS", true, DType::IQ4_XS},  {24, "I8", false, {}},              {25, "I16", false, {}},
    {26, "I32", false, {}},               {27, "I64", false, {}},             {28, "F64", false, {}},
    {29, "IQ1_M", false, {}},             {30, "BF16", true, DType::BF16},    {34, "TQ1_0", false, {}},
    {35, "TQ2_0", false, {}},             {39, "MXFP4", true, DType::MXFP4},  {40, "NVFP4", false, {}},
    {41, "Q1_0", false, {}},
};

std::string supported_ggml_types() {
  std::string s;
  for (const GgmlTypeName& g : kGgmlTypes)
    if (g.runs) s += (s.empty() ? "" : ", ") + std::string(g.name);
  return s;
}

DType ggml_type(uint32_t t, const std::string& label, const std::string& name) {
  for (const GgmlTypeName& g : kGgmlTypes)
    if (g.id == t) {
      if (g.runs) return g.type;
      fail(label, ": tensor ", name, " is ", g.name, " (ggml type ", t, "), which kvlm does not run (supported: ",
           supported_ggml_types(), ")");
    }
  fail(label, ": tensor ", name, " has unknown ggml type ", t, " (supported: ", supported_ggml_types(), ")");
}

const GgmlTypeName& ggml_type_of(DType t) {
  for (const GgmlTypeName& g : kGgmlTypes)
    if (g.runs && g.type == t) return g;
  fail("type ", dtype_name(t), " has no ggml type");
}

}  // namespace

uint32_t ggml_type_id(DType t) { return ggml_type_of(t).id; }
const char* ggml_type_name(DType t) { return ggml_type_of(t).name; }

bool GgufValue::is_integer() const {
  return std::holds_alternative<int64_t>(scalar) || std::holds_alternative<uint64_t>(scalar);
}

int64_t GgufValue::as_int(const std::string& key) const {
  if (std::holds_alternative<int64_t>(scalar)) return std::get<int64_t>(scalar);
  if (std::holds_alternative<uint64_t>(scalar)) {
    uint64_t u = std::get<uint64_t>(scalar);
    if (u > static_cast<uint64_t>(INT64_MAX)) fail("GGUF metadata ", key, ": value ", u, " is too large");
    return static_cast<int64_t>(u);
  }
  fail("GGUF metadata ", key, " must be an integer");
}

double GgufValue::as_float(const std::string& key) const {
  if (std::holds_alternative<double>(scalar)) return std::get<double>(scalar);
  return static_cast<double>(as_int(key));
}

bool GgufValue::as_bool(const std::string& key) const {
  if (std::holds_alternative<bool>(scalar)) return std::get<bool>(scalar);
  if (is_integer()) return as_int(key) != 0;
  fail("GGUF metadata ", key, " must be a bool or an integer");
}

const std::string& GgufValue::as_string(const std::string& key) const {
  if (!std::holds_alternative<std::string>(scalar) || type != GgufType::STRING)
    fail("GGUF metadata ", key, " must be a string");
  return std::get<std::string>(scalar);
}

const GgufValue& GgufFile::get(const std::string& key) const {
  read_keys.insert(key);
  auto it = meta.find(key);
  if (it == meta.end()) fail(path, ": missing GGUF metadata key '", key, "'");
  return it->second;
}

std::unique_ptr<GgufFile> parse_gguf(const uint8_t* data, size_t size, const std::string& label,
                                     std::shared_ptr<MappedFile> keep) {
  auto g = std::make_unique<GgufFile>();
  g->path = label;
  Cursor c(data, size, label);
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) fail(label, ": not a GGUF file (bad magic)");
  c.read<uint32_t>("magic");
  g->version = c.read<uint32_t>("version");
  if (g->version != 2 && g->version != 3) fail(label, ": unsupported GGUF version ", g->version, " (supported: 2, 3)");
  uint64_t n_tensors = c.read<uint64_t>("tensor count"), n_kv = c.read<uint64_t>("metadata count");
  if (n_tensors > kMaxTensors) fail(label, ": tensor count ", n_tensors, " exceeds the limit of ", kMaxTensors);
  if (n_kv > kMaxKv) fail(label, ": metadata count ", n_kv, " exceeds the limit of ", kMaxKv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("metadata key");
    uint32_t t = c.read<uint32_t>("metadata type of " + key);
    if (t > static_cast<uint32_t>(GgufType::F64)) fail(label, ": metadata ", key, ": unknown value type ", t);
    if (g->meta.count(key)) fail(label, ": metadata key ", key, " appears twice");
    g->meta[key] = read_value(c, static_cast<GgufType>(t), key, label, false);
    g->key_order.push_back(key);
  }
  if (g->has("general.alignment")) {
    int64_t a = g->get("general.alignment").as_int("general.alignment");
    if (a <= 0 || a > 65536 || (a & (a - 1)) != 0) fail(label, ": general.alignment ", a, " is not a power of two");
    g->alignment = static_cast<uint64_t>(a);
  }
  struct Info {
    TensorInfo t;
    uint64_t offset;
  };
  std::vector<Info> infos;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Info info;
    info.t.name = c.string("tensor name");
    info.t.file = label;
    uint32_t n_dims = c.read<uint32_t>("tensor " + info.t.name + " dims");
    if (n_dims == 0 || n_dims > kMaxDims) fail(label, ": tensor ", info.t.name, " has ", n_dims, " dimensions (1..4 allowed)");
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t v = c.read<uint64_t>("tensor " + info.t.name + " dimension");
      if (v == 0 || v > static_cast<uint64_t>(INT64_MAX)) fail(label, ": tensor ", info.t.name, " has dimension ", v);
      numel = checked_mul(numel, v, label + ": tensor " + info.t.name + " dimensions");
      dims.push_back(static_cast<int64_t>(v));
    }
    info.t.shape.assign(dims.rbegin(), dims.rend());  // GGUF lists the innermost dimension first
    info.t.dtype = ggml_type(c.read<uint32_t>("tensor type"), label, info.t.name);
    uint64_t row = dtype_row_bytes(info.t.dtype, static_cast<uint64_t>(dims[0]), label + ": tensor " + info.t.name);
    info.t.nbytes = checked_mul(row, numel / static_cast<uint64_t>(dims[0]), label + ": tensor " + info.t.name);
    info.offset = c.read<uint64_t>("tensor offset");
    if (info.offset % g->alignment != 0)
      fail(label, ": tensor ", info.t.name, " offset ", info.offset, " is not aligned to ", g->alignment);
    infos.push_back(std::move(info));
  }
  uint64_t data_start = (c.pos() + g->alignment - 1) / g->alignment * g->alignment;
  if (data_start > size && n_tensors > 0) fail(label, ": tensor data would start past the end of the file");
  uint64_t data_size = data_start <= size ? size - data_start : 0;
  // Tensors may not share bytes (llama.cpp refuses such files too).
  std::vector<size_t> order(infos.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return infos[a].offset < infos[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const Info& prev = infos[order[i - 1]];
    const Info& cur = infos[order[i]];
    if (cur.offset - prev.offset < prev.t.nbytes)
      fail(label, ": tensors ", prev.t.name, " and ", cur.t.name, " overlap in the data section");
  }
  for (Info& info : infos) {
    if (info.offset > data_size || info.t.nbytes > data_size - info.offset)
      fail(label, ": tensor ", info.t.name, " [", info.offset, ", +", info.t.nbytes, ") lies outside the data (",
           data_size, " bytes)");
    info.t.data = data + data_start + info.offset;
    g->tensor_order.push_back(info.t.name);
    g->tensors.add(std::move(info.t));
  }
  if (keep) g->tensors.add_file(std::move(keep));
  return g;
}

std::unique_ptr<GgufFile> read_gguf(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  return parse_gguf(file->data(), file->size(), path, file);
}

bool looks_like_gguf(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;  // never open a FIFO or device
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace kvlm
