// The rules follow llama-quant.cpp (tensor_allows_quantization, llama_tensor_get_type_impl,
// tensor_type_fallback) for the file types listed here; the IQ1/IQ2/IQ3 mixes, which need an
// importance matrix or types kvlm does not write, are left out and refused by name.
#include "model/quant_mix.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/error.h"

namespace kvlm {

namespace {

const std::vector<QuantFileType> kFileTypes = {
    {"Q4_0", 2, DType::Q4_0, "4.34 bits per weight"},
    {"Q4_1", 3, DType::Q4_1, "4.78 bits per weight"},
    {"MXFP4_MOE", 38, DType::MXFP4, "experts MXFP4, the rest Q8_0"},
    {"Q5_0", 8, DType::Q5_0, "5.21 bits per weight"},
    {"Q5_1", 9, DType::Q5_1, "5.65 bits per weight"},
    {"IQ4_NL", 25, DType::IQ4_NL, "4.50 bits per weight, non-linear"},
    {"IQ4_XS", 30, DType::IQ4_XS, "4.25 bits per weight, non-linear"},
    {"Q2_K", 10, DType::Q2_K, "2.96 bits per weight: Q2_K with Q3_K/Q4_K where it matters"},
    {"Q3_K_S", 11, DType::Q3_K, "3.41 bits per weight"},
    {"Q3_K_M", 12, DType::Q3_K, "3.74 bits per weight: Q3_K with Q4_K/Q5_K where it matters"},
    {"Q3_K_L", 13, DType::Q3_K, "4.03 bits per weight"},
    {"Q4_K_S", 14, DType::Q4_K, "4.37 bits per weight"},
    {"Q4_K_M", 15, DType::Q4_K, "4.58 bits per weight: Q4_K with Q6_K where it matters"},
    {"Q5_K_S", 16, DType::Q5_K, "5.21 bits per weight"},
    {"Q5_K_M", 17, DType::Q5_K, "5.33 bits per weight: Q5_K with Q6_K where it matters"},
    {"Q6_K", 18, DType::Q6_K, "6.56 bits per weight"},
    {"Q8_0", 7, DType::Q8_0, "8.50 bits per weight"},
    {"F16", 1, DType::F16, "16 bits per weight"},
    {"BF16", 32, DType::BF16, "16 bits per weight"},
    {"F32", 0, DType::F32, "32 bits per weight"},
};

// llama.h's llama_ftype numbers used by the rules below.
enum Ftype : int {
  kQ4_0 = 2, kQ5_0 = 8, kQ2_K = 10, kQ3_K_M = 12, kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_M = 17,
  kIQ4_NL = 25, kIQ4_XS = 30, kMXFP4_MOE = 38
};

enum class Category { Output, TokenEmbd, AttnQkv, AttnKvB, AttnV, AttnK, AttnQ, AttnOutput, FfnUp, FfnGate, FfnDown, Other };

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

Category category(const std::string& n) {
  if (n == "output.weight") return Category::Output;
  if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return Category::TokenEmbd;
  if (has(n, "attn_qkv.weight")) return Category::AttnQkv;
  if (has(n, "attn_kv_b.weight")) return Category::AttnKvB;
  if (has(n, "attn_v.weight")) return Category::AttnV;
  if (has(n, "attn_k.weight")) return Category::AttnK;
  if (has(n, "attn_q.weight")) return Category::AttnQ;
  if (has(n, "attn_output.weight")) return Category::AttnOutput;
  if (has(n, "ffn_up")) return Category::FfnUp;
  if (has(n, "ffn_gate")) return Category::FfnGate;
  if (has(n, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

bool like_attn_v(Category c) { return c == Category::AttnV || c == Category::AttnQkv || c == Category::AttnKvB; }

// ggml_n_dims: the dimensions up to the last (outermost) one above 1.
size_t ggml_dims(const std::vector<int64_t>& shape) {
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) return shape.size() - d;
  return 1;
}

bool may_change_type(const TensorInfo& t) {
  if (ggml_dims(t.shape) < 2) return false;
  const std::string& n = t.name;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  static const char* const kKept[] = {
      "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
      "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
      "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
      "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
      "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
      "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd",
      "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd"};
  for (const char* k : kKept)
    if (has(n, k)) return false;
  return n != "position_embd.weight" && n != "token_types.weight";
}

// The hyperparameters the rules read.
struct Shape {
  std::string arch;
  int n_layer = 0, n_head = 0, n_head_kv = 0, n_expert = 0;
  bool is_70b = false;
  int n_gqa() const { return n_head_kv ? n_head / n_head_kv : 0; }
};

int first_int(const GgufFile& g, const std::string& key, int fallback) {
  if (!g.has(key)) return fallback;
  const GgufValue& v = g.get(key);
  if (v.type == GgufType::ARRAY) return v.array.empty() ? fallback : static_cast<int>(v.array[0].as_int(key));
  return static_cast<int>(v.as_int(key));
}

Shape read_shape(const GgufFile& g) {
  Shape s;
  s.arch = g.get("general.architecture").as_string("general.architecture");
  for (const char* own : {"glm5-next", "bailingmoe3"})
    if (s.arch == own) fail(g.path, ": architecture ", s.arch, " has quantization rules of its own that kvlm does not follow");
  s.n_layer = first_int(g, s.arch + ".block_count", -1);
  if (s.n_layer <= 0) fail(g.path, ": ", s.arch, ".block_count is missing or not positive");
  s.n_head = first_int(g, s.arch + ".attention.head_count", 0);
  s.n_head_kv = first_int(g, s.arch + ".attention.head_count_kv", s.n_head);
  s.n_expert = first_int(g, s.arch + ".expert_count", 0);
  // the one model size the rules name (llama.cpp's LLM_TYPE_70B, as each architecture's loader sets it)
  s.is_70b = (s.n_layer == 80 && (s.arch == "qwen2" || s.arch == "olmo" || s.arch == "deci" ||
                                  (s.arch == "llama" && s.n_head != s.n_head_kv))) ||
             (s.n_layer == 68 && s.arch == "jais2");
  return s;
}

// llama-quant.cpp's layer counters: each category counts its tensors in file order.
struct Counters {
  int n_attention_wv = 0, i_attention_wv = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
  bool tied_embeddings = true;
};

bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The layer of an FFN tensor: the counter, or with experts (not consecutive in files) its name.
int ffn_layer(const Shape& s, int counter, const std::string& name) {
  if (s.n_expert <= 1) return counter;
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) fail("cannot tell the layer of tensor ", name);
  if (layer < 0 || layer >= s.n_layer) fail("tensor ", name, " names layer ", layer, " of ", s.n_layer);
  return layer;
}

DType mix_type(const Shape& s, Counters& c, DType t, const TensorInfo& tensor, int ft, Category cat) {
  const bool falcon = s.arch == "falcon";
  const int n = s.n_layer;
  if (cat == Category::Output || (c.tied_embeddings && cat == Category::TokenEmbd)) {
    const int64_t nx = tensor.shape.back();
    if (ft == kMXFP4_MOE || falcon || nx % static_cast<int64_t>(dtype_block(t)) != 0) return DType::Q8_0;
    return t != DType::Q8_0 ? DType::Q6_K : t;
  }
  if (ft == kMXFP4_MOE) return tensor.shape.size() >= 3 && tensor.shape[tensor.shape.size() - 3] > 1 ? DType::MXFP4 : DType::Q8_0;
  if (cat == Category::TokenEmbd) return t;
  if (like_attn_v(cat)) {
    if (ft == kQ2_K) t = s.n_gqa() >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (ft == kQ3_K_M) t = c.i_attention_wv < 2 ? DType::Q5_K : DType::Q4_K;
    else if (ft == kQ3_K_L) t = DType::Q5_K;
    else if ((ft == kIQ4_NL || ft == kIQ4_XS) && s.n_gqa() >= 4) t = DType::Q5_K;
    else if ((ft == kQ4_K_M || ft == kQ5_K_M) && more_bits(c.i_attention_wv, c.n_attention_wv)) t = DType::Q6_K;
    else if (ft == kQ4_K_S && c.i_attention_wv < 4) t = DType::Q5_K;
    if (s.is_70b && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;
    if (s.n_expert == 8) t = DType::Q8_0;
    ++c.i_attention_wv;
    return t;
  }
  if (cat == Category::AttnK) return s.n_expert == 8 ? DType::Q8_0 : t;
  if (cat == Category::AttnQ) return t;
  if (cat == Category::FfnDown) {
    const int i = ffn_layer(s, c.i_ffn_down, tensor.name);
    if (ft == kQ2_K) t = DType::Q3_K;
    else if (ft == kQ3_K_M) t = i < n / 16 ? DType::Q5_K : !falcon || more_bits(i, n) ? DType::Q4_K : DType::Q3_K;
    else if (ft == kQ3_K_L) t = falcon ? DType::Q4_K : DType::Q5_K;
    else if (ft == kQ4_K_M) {
      if (falcon) t = i < n / 16 ? DType::Q6_K : more_bits(i, n) ? DType::Q5_K : DType::Q4_K;
      else if (more_bits(i, n)) t = DType::Q6_K;
    } else if (i < n / 8 && (ft == kIQ4_NL || ft == kIQ4_XS)) t = DType::Q5_K;
    else if (ft == kQ5_K_M && more_bits(i, n)) t = DType::Q6_K;
    else if (ft == kQ4_K_S && !falcon && i < n / 8) t = DType::Q5_K;
    // (Q4_0 / Q5_0 raise the first eighth only with an importance matrix)
    ++c.i_ffn_down;
    return t;
  }
  if (cat == Category::AttnOutput) {
    if (!falcon) {
      if (s.n_expert == 8) {
        if (ft == kQ2_K || ft == kQ3_K_M || ft == 11 || ft == kIQ4_NL || ft == kQ4_K_S || ft == kQ4_K_M || ft == kIQ4_XS)
          t = DType::Q5_K;
      } else if (ft == kQ2_K) t = DType::Q3_K;
      else if (ft == kQ3_K_M) t = DType::Q4_K;
      else if (ft == kQ3_K_L) t = DType::Q5_K;
    } else if (ft == kQ3_K_L) {
      t = DType::Q4_K;
    }
    return t;
  }
  if (cat == Category::AttnQkv) return t;  // handled with attn_v above (llama.cpp's branch is unreachable)
  if (cat == Category::FfnGate) {
    ++c.i_ffn_gate;
    return t;
  }
  if (cat == Category::FfnUp) {
    ++c.i_ffn_up;
    return t;
  }
  return t;
}

// tensor_type_fallback: a type whose block does not divide the rows gives way.
DType fit_rows(DType t, int64_t ncols, bool& fell_back) {
  const auto block = static_cast<int64_t>(dtype_block(t));
  if (ncols % block == 0) return t;
  fell_back = true;
  DType r = t;
  switch (t) {
    case DType::IQ4_XS: r = DType::IQ4_NL; break;
    case DType::Q2_K: case DType::Q3_K: r = DType::Q4_0; break;
    case DType::Q4_K: r = DType::Q5_0; break;
    case DType::Q5_K: r = DType::Q5_1; break;
    case DType::Q6_K: r = DType::Q8_0; break;
    default: break;
  }
  if (ncols % static_cast<int64_t>(dtype_block(r)) != 0) r = DType::F16;
  return r;
}

bool is_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

// llama_model_loader's order: tensors of no layer first, then by layer number, each by name.
int layer_of(const std::string& name) {
  int layer = -1;
  std::sscanf(name.c_str(), "blk.%d.", &layer);
  return layer;
}

}  // namespace

const std::vector<QuantFileType>& quant_file_types() { return kFileTypes; }

const QuantFileType& parse_quant_file_type(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  std::string known;
  for (const QuantFileType& f : kFileTypes) {
    if (upper == f.name) return f;
    known += (known.empty() ? "" : ", ") + std::string(f.name);
  }
  fail("unknown quantization type '", name, "' (kvlm writes: ", known, ")");
}

std::vector<TensorPlan> plan_quantization(const GgufFile& g, const QuantFileType& ft) {
  const Shape s = read_shape(g);
  std::vector<std::string> names = g.tensor_order;
  std::stable_sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    const int la = layer_of(a), lb = layer_of(b);
    return la != lb ? la < lb : a < b;
  });
  Counters c;
  for (const std::string& n : names) {
    const Category cat = category(n);
    if (like_attn_v(cat)) ++c.n_attention_wv;
    if (cat == Category::Output) c.tied_embeddings = false;
  }
  std::vector<TensorPlan> plan;
  for (const std::string& n : names) {
    const TensorInfo& t = g.tensors.all().at(n);
    TensorPlan p{n, t.dtype, t.dtype};
    if (may_change_type(t)) {
      DType to = ft.base;
      if (is_quantized(ft.base)) to = fit_rows(mix_type(s, c, ft.base, t, ft.ftype, category(n)), t.shape.back(), p.fell_back);
      if (to != t.dtype && is_quantized(t.dtype))
        fail(g.path, ": tensor ", n, " is already ", dtype_name(t.dtype), "; kvlm quantizes from F32, F16 or BF16 files only");
      p.to = to;
    }
    plan.push_back(p);
  }
  return plan;
}

}  // namespace kvlm
