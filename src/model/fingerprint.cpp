// The model fingerprint: what a KV block computed by one model must match before another run
// reuses it (kv tiers, snapshots, a Redis tier shared by replicas). The weights enter by content:
// the bytes of the files they were read from, so replicas with their own copies of a model agree
// and a file changed in place does not; it costs a read of every weight file, so Model computes
// it on first use only. The arithmetic enters through every config field that changes it, the
// RoPE table, and each matrix's shape and run type.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/sha256.h"
#include "model/model.h"

namespace kvlm {

namespace fs = std::filesystem;

namespace {

// The file's bytes, length first.
void add_file(Sha256& h, const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail(p.string(), ": cannot read it to fingerprint the model");
  std::error_code ec;
  h.add(static_cast<uint64_t>(fs::file_size(p, ec)));
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
}

// What in a Hugging Face folder defines the weights and the arithmetic.
bool defines_the_model(const fs::path& f) {
  const std::string n = f.filename().string();
  return n == "config.json" || f.extension() == ".safetensors" || n == "model.safetensors.index.json";
}

void add_linear(Sha256& h, const Linear& l) {
  h.add(l.out).add(l.in).add(l.fmt).add(static_cast<uint64_t>(l.b.size()));
}

}  // namespace

Sha256Digest model_fingerprint(const Model& m, const std::string& source) {
  Sha256 h;
  h.add_string("kvlm model fingerprint v2");
  const fs::path p(source);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file(ec) && defines_the_model(e.path())) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      h.add_string(f.filename().string());  // the name within the folder, not the folder's
      add_file(h, f);
    }
  } else if (fs::is_regular_file(p, ec)) {
    add_file(h, p);
  } else {
    h.add_string(source);  // a synthetic preset: its name and seed make its weights
  }
  const ModelConfig& c = m.cfg;
  h.add_string(c.arch);
  for (int v : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size, c.max_seq_len})
    h.add(v);
  h.add(c.norm_eps)
      .add(c.norm)
      .add(c.rope)
      .add(c.mlp)
      .add(c.learned_positions)
      .add(c.tied_embeddings)
      .add(c.qk_norm)
      .add(c.input_norms)
      .add(c.output_norms)
      .add(c.parallel_residual);
  for (int l = 0; l < c.n_layers; ++l) h.add(c.layer_attn_scale(l)).add(c.layer_window[l]);
  for (int r : c.layer_rope) h.add(r);
  h.add(c.rotary_dims());
  h.add(c.embedding_scale).add(c.residual_scale).add(c.logit_divisor).add(c.attn_softcap).add(c.final_softcap);
  h.add(m.rope.kind).update(m.rope.inv_freq.data(), m.rope.inv_freq.size() * sizeof(float));
  h.update(m.rope_local.inv_freq.data(), m.rope_local.inv_freq.size() * sizeof(float));
  if (!c.layer_moe.empty()) {
    h.add(c.n_experts).add(c.experts_per_token).add(c.expert_hidden_dim).add(c.norm_topk_prob);
    h.add(c.swiglu_limit).add(c.swiglu_alpha).add(c.attn_sinks);
    h.add(c.route_sigmoid)
        .add(c.n_group)
        .add(c.topk_group)
        .add(c.group_top)
        .add(c.shared_hidden_dim)
        .add(c.routed_scaling_factor);
    for (int moe : c.layer_moe) h.add(moe);
  }
  if (c.mla()) {
    h.add(c.kv_lora_rank)
        .add(c.q_lora_rank)
        .add(c.qk_nope_dim)
        .add(c.qk_rope_dim)
        .add(c.v_head_dim)
        .add(c.mla_pe_scale);
  }
  for (const LayerWeights& L : m.layers)
    for (const Linear* l : L.matrices()) add_linear(h, *l);
  add_linear(h, m.lm_head);
  return h.digest();
}

const std::array<uint8_t, 32>& Model::fingerprint() const {
  std::call_once(fingerprint_->once, [&] { fingerprint_->value = model_fingerprint(*this, fingerprint_source); });
  return fingerprint_->value;
}

void Model::set_fingerprint(const std::array<uint8_t, 32>& f) {
  std::call_once(fingerprint_->once, [] {});
  fingerprint_->value = f;
}

}  // namespace kvlm
