// A loaded model: config plus weights (in backend buffers); its family's forward runs it.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/rope.h"

namespace kvlm {

// One expert of a mixture-of-experts MLP: a SwiGLU MLP of its own.
struct Expert {
  Linear gate, up;  // [expert_hidden][dim]
  Linear down;      // [dim][expert_hidden]
};

struct LayerWeights {
  Buffer<float> attn_norm, attn_norm_bias;        // [dim]; bias only for LayerNorm
  Linear wq, wk, wv, wo;                         // wq [q_dim][dim], wk/wv [kv_dim][dim], wo [dim][q_dim]
  Buffer<float> q_norm, k_norm;                   // [head_dim] or [q_dim] / [kv_dim]: cfg.qk_norm
  Buffer<float> q_norm_bias, k_norm_bias;         // [head_dim]: a LayerNorm's (Phi-2's qk_layernorm)
  Buffer<float> post_attn_norm, post_mlp_norm;    // [dim]: cfg.output_norms
  Buffer<float> attn_sinks;                       // [n_heads]: cfg.attn_sinks
  Buffer<float> mlp_norm, mlp_norm_bias;          // [dim]
  Linear w_gate;                                 // [hidden][dim], SwiGLU only
  Linear w_up;                                   // [hidden][dim]
  Linear w_down;                                 // [dim][hidden]
  Linear router;                                 // [n_experts][dim]: MoE layers only, which then have
  std::vector<Expert> experts;                   // experts instead of w_gate / w_up / w_down
  Buffer<float> router_choice_bias;              // [n_experts]: sigmoid routing's choice bias
  Expert shared_expert;                          // cfg.shared_hidden_dim wide, where > 0
  // Latent attention (cfg.mla()): queries straight (wq) or through q_a, its norm and q_b; the
  // latent row from kv_a (normed by kv_a_norm, its rotated part not); per head the key half of
  // kv_b_proj transposed (uk_t[h]: [kv_lora_rank][qk_nope]) and its value half (uv[h]:
  // [v_head_dim][kv_lora_rank]); wo [dim][n_heads * v_head_dim].
  Linear q_a, q_b, kv_a;
  Buffer<float> q_a_norm, kv_a_norm;
  std::vector<Linear> uk_t, uv;

  // Every matrix of the layer, experts and router included (empty ones too).
  std::vector<const Linear*> matrices() const;
  std::vector<Linear*> matrices();

  // Every per-layer vector (norm weights and biases), for the byte and parameter counts.
  std::array<const Buffer<float>*, 14> vectors() const {
    return {&attn_norm,      &attn_norm_bias, &q_norm,   &k_norm,        &q_norm_bias, &k_norm_bias,       &post_attn_norm,
            &post_mlp_norm,  &mlp_norm,       &mlp_norm_bias, &attn_sinks, &q_a_norm,  &kv_a_norm, &router_choice_bias};
  }
};

struct Model {
  ModelConfig cfg;
  Buffer<float> tok_emb;                       // [vocab][dim] when the file stores it in f32 (else empty)
  DType tok_emb_type = DType::F32;             // the table's stored type
  Buffer<uint8_t> tok_emb_rows;                // [vocab] rows as stored, when not f32 (one widened per token)
  Buffer<float> pos_emb;                       // [max_seq_len][dim], learned positions only
  std::vector<LayerWeights> layers;            // [n_layers]
  Buffer<float> final_norm, final_norm_bias;  // [dim]
  Linear lm_head;                              // [vocab][dim]; empty when tied to tok_emb
  RopeTable rope;                              // RoPE inverse frequencies (none without RoPE)
  RopeTable rope_local;                        // the sliding layers' table when cfg.rope_local_theta is set
  // The table layer l rotates with.
  const RopeTable& rope_of_layer(int l) const {
    return cfg.rope_local_theta > 0 && cfg.layer_window[l] > 0 ? rope_local : rope;
  }
  DType stored_format = DType::F32;  // the type the matrices were bound in (f32 where the file's type does not run)
  // The matrices' type as given: the file's (Q4_K stays Q4_K), or the one --weights asked for.
  // It picks the KV type "auto" (auto_kv_dtype).
  DType source_format = DType::F32;
  // What KV computed by this model must match to be reused by another run (tiers, snapshots; see
  // fingerprint.cpp): the content of the files at fingerprint_source and the arithmetic. Computed
  // on first use, since it reads every weight file once, then kept.
  const std::array<uint8_t, 32>& fingerprint() const;
  // Replaces it (a test standing in for another model's weights).
  void set_fingerprint(const std::array<uint8_t, 32>& f);
  std::string fingerprint_source;  // the model's file or folder, or a synthetic preset's name

  // The token embedding table as the backend's embed op reads it.
  EmbeddingRows token_rows() const;
  size_t embedding_bytes() const { return tok_emb.bytes() + tok_emb_rows.bytes(); }
  // Bytes of all weights.
  size_t weight_bytes() const;
  // Bytes one token's decode step reads at least: every weight but, in MoE layers, only
  // experts_per_token of the experts (the average expert's bytes each).
  size_t active_weight_bytes() const;
  // The same bytes by the type each matrix runs in ("q4_k" -> bytes; norms and biases as f32).
  std::map<std::string, size_t> weight_bytes_by_type() const;
  // f(type, bytes) for every weight tensor as it is held (the two above are its sums).
  void for_each_weight(const std::function<void(DType, size_t)>& f) const;
  size_t n_params() const;
  // Fills the RoPE table from cfg; call after the config is final.
  void init_rope();
  // Checks every weight's shape against cfg (throws naming the tensor): run before any forward,
  // so a file whose shapes disagree with its config is an error, never an out-of-bounds access.
  void check_shapes(const std::string& source) const;
  // Re-encodes every matrix (and the LM head, untied for the purpose) as `f`. Matrices whose
  // rows are not a multiple of 32 stay f32; returns how many did.
  int convert_weights(DType f);

 private:
  struct LazyFingerprint {
    std::once_flag once;
    std::array<uint8_t, 32> value{};
  };
  std::shared_ptr<LazyFingerprint> fingerprint_ = std::make_shared<LazyFingerprint>();
};

// The fingerprint of a loaded model read from `source` (a file, a folder or a preset's name):
// the files' bytes (a folder's config.json and safetensors, by name within it), never their
// paths or times, so two copies of a model anywhere give the same one.
std::array<uint8_t, 32> model_fingerprint(const Model& m, const std::string& source);

// Loads a llama2.c .bin checkpoint, a GGUF file or a Hugging Face folder (config.json +
// safetensors). Matrices keep the file's type (widened exactly where no kernel takes it) unless
// `weights` names another ("f32", "f16", "bf16", "q8_0", "q4_0"; "" = as stored).
std::unique_ptr<Model> load_model(const std::string& path, const std::string& weights = "");
// The config alone (no weights read), the bytes the weight files take on disk, and the
// matrices' type in the file (from the files' headers).
ModelConfig load_model_config(const std::string& path, size_t* weight_bytes = nullptr, DType* source_format = nullptr);
// Bytes of the tensors a model file or folder stores, by stored type ("q4_k" -> bytes), from the
// headers alone (a Q4_K_M file mixes several types).
std::map<std::string, size_t> stored_bytes_by_type(const std::string& path);

// The KV type "auto" stands for: f32 beside matrices given in f32, f16 beside any other (half,
// bf16 or quantized matrices). f16 is llama.cpp's default KV and vLLM's "auto" follows the
// model's precision the same way; f16 keeps 11 significant bits to bf16's 8.
DType auto_kv_dtype(DType source_format);

}  // namespace kvlm
