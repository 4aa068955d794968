// load_model: picks the reader by path (HF folder, GGUF, or llama2.c .bin) and binds the weights.
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/json.h"
#include "core/read_file.h"
#include "io/gguf.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "model/family.h"
#include "model/gguf_model.h"
#include "model/hf_config.h"
#include "model/model.h"

namespace kvlm {

namespace fs = std::filesystem;

EmbeddingRows Model::token_rows() const {
  if (tok_emb_type == DType::F32) return {DType::F32, tok_emb.data(), cfg.dim * sizeof(float), cfg.dim};
  return {tok_emb_type, tok_emb_rows.data(), tok_emb_rows.size() / static_cast<size_t>(cfg.vocab_size), cfg.dim};
}

std::vector<const Linear*> LayerWeights::matrices() const {
  std::vector<const Linear*> all{&wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down, &router};
  for (const Expert& e : experts) all.insert(all.end(), {&e.gate, &e.up, &e.down});
  all.insert(all.end(), {&shared_expert.gate, &shared_expert.up, &shared_expert.down, &q_a, &q_b, &kv_a});
  for (const Linear& l : uk_t) all.push_back(&l);
  for (const Linear& l : uv) all.push_back(&l);
  return all;
}

std::vector<Linear*> LayerWeights::matrices() {
  std::vector<Linear*> all;
  for (const Linear* l : std::as_const(*this).matrices()) all.push_back(const_cast<Linear*>(l));
  return all;
}

void Model::for_each_weight(const std::function<void(DType, size_t)>& f) const {
  auto linear = [&](const Linear& l) {
    f(l.fmt, l.bytes() - l.b.size() * sizeof(float));
    f(DType::F32, l.b.size() * sizeof(float));
  };
  f(tok_emb_type, embedding_bytes());
  f(DType::F32, (pos_emb.size() + final_norm.size() + final_norm_bias.size()) * sizeof(float));
  linear(lm_head);
  for (const LayerWeights& L : layers) {
    for (const Buffer<float>* v : L.vectors()) f(DType::F32, v->size() * sizeof(float));
    for (const Linear* l : L.matrices()) linear(*l);
  }
}

size_t Model::weight_bytes() const {
  size_t bytes = 0;
  for_each_weight([&](DType, size_t n) { bytes += n; });
  return bytes;
}

size_t Model::active_weight_bytes() const {
  size_t bytes = weight_bytes();
  for (const LayerWeights& L : layers) {
    if (L.experts.empty()) continue;
    size_t experts = 0;
    for (const Expert& e : L.experts) experts += e.gate.bytes() + e.up.bytes() + e.down.bytes();
    bytes -= experts - experts / L.experts.size() * cfg.experts_per_token;
  }
  return bytes;
}

std::map<std::string, size_t> Model::weight_bytes_by_type() const {
  std::map<std::string, size_t> by;
  for_each_weight([&](DType t, size_t n) {
    if (n) by[dtype_name(t)] += n;
  });
  return by;
}

size_t Model::n_params() const {
  size_t n =
      static_cast<size_t>(cfg.vocab_size) * cfg.dim + pos_emb.size() + final_norm.size() + final_norm_bias.size();
  auto lin = [](const Linear& l) { return static_cast<size_t>(l.out) * l.in + l.b.size(); };
  if (!cfg.tied_embeddings) n += lin(lm_head);
  for (const LayerWeights& L : layers) {
    for (const Buffer<float>* v : L.vectors()) n += v->size();
    for (const Linear* l : L.matrices()) n += lin(*l);
  }
  return n;
}

void Model::init_rope() {
  rope = RopeTable::for_config(cfg);
  if (cfg.rope_local_theta > 0) {
    ModelConfig local = cfg;
    local.rope_theta = cfg.rope_local_theta;
    local.rope_scaling.clear();
    local.rope_freq_divisors.clear();
    rope_local = RopeTable::for_config(local);
  }
}

void Model::check_shapes(const std::string& source) const {
  const ModelConfig& c = cfg;
  auto need = [&](size_t got, size_t want, const std::string& what) {
    if (got != want) fail(source, ": ", what, " has ", got, " values, the config needs ", want);
  };
  auto lin = [&](const Linear& l, int out, int in, const std::string& what) {
    if (l.out != out || l.in != in)
      fail(source, ": ", what, " is [", l.out, ", ", l.in, "], the config needs [", out, ", ", in, "]");
    if (!l.b.empty()) need(l.b.size(), static_cast<size_t>(out), what + " bias");
    if (l.fmt == DType::F32) need(l.w.size(), static_cast<size_t>(out) * in, what);
    if (l.fmt == DType::F16 || l.fmt == DType::BF16) need(l.w16.size(), static_cast<size_t>(out) * in, what);
  };
  const size_t dim = c.dim;
  if (tok_emb_type == DType::F32)
    need(tok_emb.size(), static_cast<size_t>(c.vocab_size) * dim, "token embedding");
  else
    need(tok_emb_rows.size(), static_cast<size_t>(c.vocab_size) * dtype_row_bytes(tok_emb_type, dim, "token embedding"),
         "token embedding (bytes)");
  if (c.learned_positions) need(pos_emb.size(), static_cast<size_t>(c.max_seq_len) * dim, "position embedding");
  need(final_norm.size(), dim, "final norm");
  if (c.norm == NormKind::LayerNorm) need(final_norm_bias.size(), dim, "final norm bias");
  if (!c.tied_embeddings) lin(lm_head, c.vocab_size, c.dim, "lm_head");
  need(layers.size(), static_cast<size_t>(c.n_layers), "layer list");
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerWeights& L = layers[i];
    const std::string p = "layer " + std::to_string(i) + " ";
    if (c.input_norms) need(L.attn_norm.size(), dim, p + "attention norm");
    if (c.input_norms && !c.parallel_residual) need(L.mlp_norm.size(), dim, p + "MLP norm");
    if (c.output_norms) {
      need(L.post_attn_norm.size(), dim, p + "attention output norm");
      need(L.post_mlp_norm.size(), dim, p + "MLP output norm");
    }
    if (c.norm == NormKind::LayerNorm) {
      need(L.attn_norm_bias.size(), dim, p + "attention norm bias");
      if (!c.parallel_residual) need(L.mlp_norm_bias.size(), dim, p + "MLP norm bias");
    }
    if (c.qk_norm != QkNorm::None) {
      const bool whole = c.qk_norm == QkNorm::Whole || c.qk_norm == QkNorm::EachHead;
      need(L.q_norm.size(), static_cast<size_t>(whole ? c.q_dim() : c.head_dim), p + "query norm");
      need(L.k_norm.size(), static_cast<size_t>(whole ? c.kv_dim() : c.head_dim), p + "key norm");
      if (c.norm == NormKind::LayerNorm && c.qk_norm == QkNorm::PerHead) {
        need(L.q_norm_bias.size(), static_cast<size_t>(c.head_dim), p + "query norm bias");
        need(L.k_norm_bias.size(), static_cast<size_t>(c.head_dim), p + "key norm bias");
      }
    }
    if (c.mla()) {
      const int q_width = c.n_heads * (c.qk_nope_dim + c.qk_rope_dim);
      if (c.q_lora_rank > 0) {
        lin(L.q_a, c.q_lora_rank, c.dim, p + "q_a projection");
        need(L.q_a_norm.size(), static_cast<size_t>(c.q_lora_rank), p + "q_a norm");
        lin(L.q_b, q_width, c.q_lora_rank, p + "q_b projection");
      } else {
        lin(L.wq, q_width, c.dim, p + "q projection");
      }
      lin(L.kv_a, c.kv_lora_rank + c.qk_rope_dim, c.dim, p + "kv_a projection");
      need(L.kv_a_norm.size(), static_cast<size_t>(c.kv_lora_rank), p + "kv_a norm");
      need(L.uk_t.size(), static_cast<size_t>(c.n_heads), p + "kv_b key heads");
      need(L.uv.size(), static_cast<size_t>(c.n_heads), p + "kv_b value heads");
      for (int h = 0; h < c.n_heads; ++h) {  // both lists hold n_heads: checked above
        lin(L.uk_t[h], c.kv_lora_rank, c.qk_nope_dim, p + "kv_b key head " + std::to_string(h));
        lin(L.uv[h], c.v_head_dim, c.kv_lora_rank, p + "kv_b value head " + std::to_string(h));
      }
      lin(L.wo, c.dim, c.n_heads * c.v_head_dim, p + "output projection");
    } else {
      lin(L.wq, c.q_dim(), c.dim, p + "q projection");
      lin(L.wk, c.kv_dim(), c.dim, p + "k projection");
      lin(L.wv, c.kv_dim(), c.dim, p + "v projection");
      lin(L.wo, c.dim, c.q_dim(), p + "output projection");
    }
    if (c.attn_sinks) need(L.attn_sinks.size(), static_cast<size_t>(c.n_heads), p + "attention sinks");
    if (c.is_moe_layer(i)) {
      lin(L.router, c.n_experts, c.dim, p + "router");
      need(L.experts.size(), static_cast<size_t>(c.n_experts), p + "expert list");
      for (size_t e = 0; e < L.experts.size(); ++e) {
        const std::string x = p + "expert " + std::to_string(e) + " ";
        lin(L.experts[e].gate, c.expert_hidden_dim, c.dim, x + "gate projection");
        lin(L.experts[e].up, c.expert_hidden_dim, c.dim, x + "up projection");
        lin(L.experts[e].down, c.dim, c.expert_hidden_dim, x + "down projection");
      }
      if (c.route_sigmoid)
        need(L.router_choice_bias.size(), static_cast<size_t>(c.n_experts), p + "router choice bias");
      if (c.shared_hidden_dim > 0) {
        lin(L.shared_expert.gate, c.shared_hidden_dim, c.dim, p + "shared expert gate projection");
        lin(L.shared_expert.up, c.shared_hidden_dim, c.dim, p + "shared expert up projection");
        lin(L.shared_expert.down, c.dim, c.shared_hidden_dim, p + "shared expert down projection");
      }
      continue;
    }
    if (c.mlp == MlpKind::SwiGLU) lin(L.w_gate, c.hidden_dim, c.dim, p + "gate projection");
    lin(L.w_up, c.hidden_dim, c.dim, p + "up projection");
    lin(L.w_down, c.dim, c.hidden_dim, p + "down projection");
  }
  if (c.rope != RopeKind::None) {
    need(rope.inv_freq.size(), static_cast<size_t>(c.rotary_dims() / 2), "RoPE frequency table");
    for (float f : rope.inv_freq)
      if (!std::isfinite(f) || !(f > 0)) fail(source, ": RoPE frequencies are not finite positive numbers");
  }
}

namespace {

// model.safetensors, or the shards named by model.safetensors.index.json.
void read_hf_weights(const fs::path& dir, TensorSource& src) {
  fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) {
    read_safetensors(single.string(), src);
    return;
  }
  if (!fs::exists(index)) fail(dir.string(), ": no model.safetensors or model.safetensors.index.json");
  auto j = parse_json_strict(read_file(index.string()), index.string());
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(index.string(), ": expected an object with a 'weight_map'");
  std::set<std::string> shards;
  for (auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail(index.string(), ": weight_map entry for ", name, " is not a file name");
    std::string f = file.get<std::string>();
    if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
      fail(index.string(), ": shard name '", f, "' must be a plain file name");
    shards.insert(f);
  }
  for (const std::string& f : shards) read_safetensors((dir / f).string(), src);
  for (auto& [name, file] : j["weight_map"].items())
    if (!src.has(name)) fail(index.string(), ": tensor ", name, " is not in shard ", file.get<std::string>());
}

// The weights' type a config names ("torch_dtype", or "dtype" in newer transformers), for a
// folder without its weights: f32 where it names none, or names a type kvlm does not store.
DType hf_config_dtype(const std::string& config_text, const std::string& label) {
  const nlohmann::json j = parse_json_strict(config_text, label);
  for (const char* key : {"torch_dtype", "dtype"})
    if (j.is_object() && j.contains(key) && j[key].is_string()) {
      const std::string t = j[key].get<std::string>();
      if (t == "float16") return DType::F16;
      if (t == "bfloat16") return DType::BF16;
      return DType::F32;
    }
  return DType::F32;
}

// The first layer's query (or fused QKV) matrix stands for the matrices' type in the file.
DType hf_matrix_type(const TensorSource& src) {
  for (const char* probe : {"model.layers.0.self_attn.q_proj.weight", "transformer.h.0.attn.c_attn.weight",
                            "h.0.attn.c_attn.weight", "transformer.h.0.attn.attention.q_proj.weight"})
    if (auto it = src.all().find(probe); it != src.all().end()) return it->second.dtype;
  return DType::F32;
}

std::unique_ptr<Model> load_hf(const fs::path& dir) {
  auto m = std::make_unique<Model>();
  m->cfg = read_hf_config((dir / "config.json").string());
  TensorSource src;
  read_hf_weights(dir, src);
  m->source_format = hf_matrix_type(src);
  // Half precision stays in its own type: f16 is never narrowed to bf16.
  m->stored_format = runs_as_stored(m->source_format) ? m->source_format : DType::F32;
  family_named(m->cfg.arch, dir.string()).bind(src, *m, TensorLayout::HuggingFace);
  m->init_rope();
  return m;
}

ModelConfig llama2c_config(const Llama2cHeader& h, const std::string& path) {
  ModelConfig c;
  c.arch = "llama";
  c.dim = h.dim;
  c.hidden_dim = h.hidden_dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.vocab_size = h.vocab_size;
  c.max_seq_len = h.seq_len;
  c.norm_eps = 1e-5f;
  c.rope = RopeKind::AdjacentPairs;  // llama2.c rows are not HF-permuted
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.tied_embeddings = h.shared_classifier;
  c.layer_window.assign(c.n_layers, 0);
  c.validate(path);
  return c;
}

std::unique_ptr<Model> load_llama2c(const std::string& path) {
  TensorSource src;
  Llama2cHeader h = read_llama2c(path, src);
  auto m = std::make_unique<Model>();
  m->cfg = llama2c_config(h, path);
  family_named("llama", path).bind(src, *m, TensorLayout::HuggingFace);
  m->init_rope();
  return m;
}

}  // namespace

std::map<std::string, size_t> stored_bytes_by_type(const std::string& path) {
  TensorSource src;
  std::unique_ptr<GgufFile> g;
  if (fs::is_directory(path)) {
    read_hf_weights(path, src);
  } else if (looks_like_gguf(path)) {
    g = read_gguf(path);
  } else {
    read_llama2c(path, src);
  }
  std::map<std::string, size_t> bytes;
  for (const auto& [name, t] : (g ? g->tensors : src).all()) bytes[dtype_name(t.dtype)] += t.nbytes;
  return bytes;
}

ModelConfig load_model_config(const std::string& path, size_t* weight_bytes, DType* source_format) {
  fs::path p(path);
  size_t bytes = 0;
  DType format = DType::F32;
  ModelConfig c;
  if (fs::is_directory(p)) {
    const std::string config_path = (p / "config.json").string(), config_text = read_file(config_path);
    c = parse_hf_config(config_text, config_path);
    bool weights_here = false;
    for (auto& e : fs::directory_iterator(p)) {
      if (e.path().extension() != ".safetensors") continue;
      bytes += fs::file_size(e.path());
      weights_here = true;
    }
    if (source_format) {
      // The files' headers (mapped, their tensors never touched); without them (a config alone, or
      // a download still under way, which this plan never needed whole) the dtype the config names.
      bool from_headers = false;
      if (weights_here) {
        try {
          TensorSource src;
          read_hf_weights(p, src);
          format = hf_matrix_type(src);
          from_headers = true;
        } catch (const KvlmError&) {
        }
      }
      if (!from_headers) format = hf_config_dtype(config_text, config_path);
    }
  } else if (!fs::exists(p)) {
    fail(path, ": no such file or folder");
  } else if (looks_like_gguf(path)) {
    auto g = read_gguf(path);
    c = gguf_config(*g);
    format = gguf_matrix_type(*g);
    bytes = fs::file_size(p);
  } else {
    TensorSource src;
    c = llama2c_config(read_llama2c(path, src), path);
    bytes = fs::file_size(p);
  }
  if (weight_bytes) *weight_bytes = bytes;
  if (source_format) *source_format = format;
  return c;
}

DType auto_kv_dtype(DType source_format) { return source_format == DType::F32 ? DType::F32 : DType::F16; }

int Model::convert_weights(DType f) {
  int kept = 0;
  if (f != DType::F32 && cfg.tied_embeddings && lm_head.out == 0) {
    lm_head.out = cfg.vocab_size;  // the head gets its own (smaller) copy; tok_emb stays f32
    lm_head.in = cfg.dim;
    lm_head.w = tok_emb;
  }
  auto conv = [&](Linear& l) {
    if (l.out == 0 || l.fmt == f) return;
    if (!l.convert(f)) ++kept;
  };
  for (LayerWeights& L : layers)
    for (Linear* l : L.matrices()) conv(*l);
  conv(lm_head);
  source_format = f;  // the matrices' run types enter the fingerprint through each matrix
  return kept;
}

std::unique_ptr<Model> load_model(const std::string& path, const std::string& weights) {
  fs::path p(path);
  std::unique_ptr<Model> m;
  if (fs::is_directory(p)) {
    if (!fs::exists(p / "config.json")) fail(path, ": folder has no config.json");
    m = load_hf(p);
  } else if (!fs::exists(p)) {
    fail(path, ": no such file or folder");
  } else if (looks_like_gguf(path)) {
    m = load_gguf_model(*read_gguf(path));
  } else {
    m = load_llama2c(path);
  }
  m->check_shapes(path);
  // Each matrix was bound in its stored type (or widened exactly where no kernel takes it). Only
  // an asked-for type converts them all; as stored, halves re-encode the matrices that had to be
  // copied (GPT-2's transposed Conv1D) exactly, and nothing is ever narrowed unasked.
  if (!weights.empty()) {
    // f32 too: a quantized file's matrices widen (they used to stay quantized under --weights f32).
    m->convert_weights(parse_dtype(weights, kAsWeights, "weight type"));
  } else if (m->stored_format == DType::F16 || m->stored_format == DType::BF16) {
    m->convert_weights(m->stored_format);
  }
  m->fingerprint_source = path;
  return m;
}

}  // namespace kvlm
