// ModelConfig: the shape and conventions of a decoder-only transformer.
// The fields every family shares (shapes, norm epsilon, RoPE, windows) and the flags its loader,
// shape checks and KV planning read; each family's forward (families/*.cpp) does its own arithmetic.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace kvlm {

enum class NormKind { RMSNorm, LayerNorm };
enum class RopeKind { None, AdjacentPairs, RotateHalf };  // llama2.c/GGUF vs Hugging Face
enum class MlpKind { SwiGLU, GeluTanh };
enum class QkNorm { None, PerHead, Whole, EachHead };  // EachHead: every head its own weights

struct ModelConfig {
  std::string arch;    // "llama", "mistral", "qwen2", "gpt2", "gpt_neo"
  int dim = 0;         // residual width
  int hidden_dim = 0;  // MLP width
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int head_dim = 0;
  int vocab_size = 0;
  int max_seq_len = 0;  // context length the model was trained for
  float norm_eps = 1e-5f;
  NormKind norm = NormKind::RMSNorm;
  RopeKind rope = RopeKind::None;
  float rope_theta = 10000.0f;
  int rope_dims = 0;  // dimensions of each head that rotate (partial rotary: StableLM, Phi-2); 0 = head_dim
  // rope_scaling: "" (none), "linear", "llama3" (Llama 3.1's frequency-dependent rescaling) or
  // "yarn" (frequencies blended between interpolated and original over a band between
  // beta_fast and beta_slow rotations, the band's ends rounded outward when rope_yarn_truncate;
  // rotated q and k multiplied by rope_attn_factor, so scores by its square).
  std::string rope_scaling;
  float rope_factor = 1.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  int rope_original_max_pos = 8192;
  float rope_beta_fast = 32.0f, rope_beta_slow = 1.0f, rope_attn_factor = 1.0f;
  bool rope_yarn_truncate = true;
  std::vector<float> rope_freq_divisors;  // [head_dim/2] from GGUF rope_freqs: freq_i /= divisor_i
  MlpKind mlp = MlpKind::SwiGLU;          // SwiGLU: gated (gate, up, down), GeGLU's too; GeluTanh: up, down
  bool learned_positions = false;         // GPT-2 / GPT-Neo position embeddings
  float attn_scale = 0.0f;                // multiplier on q.k; 1/sqrt(head_dim) unless the arch says otherwise
  bool attn_scale_by_layer = false;       // GPT-2 scale_attn_by_inverse_layer_idx: layer i divides scores by i+1
  // Which projections carry a bias, as the config says: 1 yes, 0 no, -1 look at the file's tensors
  // (llama2.c and GGUF, whose metadata has no such key).
  int qkv_bias = -1, o_bias = -1, mlp_bias = -1;
  // A norm of queries and keys before RoPE (the family's norm kind): per head of head_dim values
  // with one weight for all heads (Qwen3, Gemma 3, Phi-2), per head with each head's own weights
  // (StableLM), or over all heads at once (OLMo 2).
  QkNorm qk_norm = QkNorm::None;
  // Where a block's norms sit: before attention and the MLP (input_norms; every family but OLMo 2),
  // and on their outputs before the residual add (output_norms: OLMo 2, Gemma 2/3).
  bool input_norms = true, output_norms = false;
  // Attention and the MLP read the same normed input and both add to the residual stream, so a
  // block has one input norm (Phi-2).
  bool parallel_residual = false;
  // Granite's multipliers: on the embeddings, on each block's output before its residual add, and
  // logits divided by logit_divisor (1 = none).
  float embedding_scale = 1.0f, residual_scale = 1.0f, logit_divisor = 1.0f;
  // Gemma 2's soft caps: scores and final logits x become cap * tanh(x / cap); 0 = none.
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  // The RoPE base of the sliding-window layers where it differs from rope_theta (Gemma 3's local
  // layers, OLMo 3's); those layers take no rope scaling. 0: one table for every layer.
  float rope_local_theta = 0.0f;
  std::vector<int> layer_rope;    // [n_layers]: 0 = no positional encoding in that layer (SmolLM3); empty: all rotate
  std::vector<int> layer_window;  // [n_layers]: 0 = global, W = attend to the last W positions (self included)
  // Mixture of experts (Mixtral, Qwen3-MoE): a MoE layer's MLP is n_experts SwiGLU experts of
  // expert_hidden_dim each, of which a router picks experts_per_token per token by softmax score;
  // the chosen scores renormalized to sum 1 (norm_topk_prob) weigh their outputs.
  int n_experts = 0, experts_per_token = 0, expert_hidden_dim = 0;
  bool norm_topk_prob = true;
  // gpt-oss's experts: gate clamped to at most swiglu_limit, up to +-swiglu_limit, and
  // (up + 1) * gate * sigmoid(swiglu_alpha * gate) in place of SiLU's product; 0: plain SwiGLU.
  float swiglu_limit = 0.0f, swiglu_alpha = 1.0f;
  // gpt-oss's learned attention sinks: one logit per head that joins every softmax's denominator.
  bool attn_sinks = false;
  // DeepSeek-V3's routing: sigmoid scores; choice by score + a learned bias among the topk_group
  // of n_group expert groups with the highest two-best sums; the chosen scores (renormalized
  // where norm_topk_prob) times routed_scaling_factor. Its MoE layers add n_shared_experts'
  // worth of an always-on expert (shared_hidden_dim wide).
  // DeepSeek-V2 routes by softmax scores over groups ranked by their best score, not renormalized.
  bool route_sigmoid = false;
  int n_group = 1, topk_group = 1, group_top = 2, shared_hidden_dim = 0;
  float routed_scaling_factor = 1.0f;
  // DeepSeek's multi-head latent attention (MLA): each position caches one row of kv_lora_rank
  // latent values and qk_rope_dim rotated key values, read by every head as its key and value
  // (n_kv_heads 1, head_dim kv_lora_rank + qk_rope_dim); queries are absorbed into the latent
  // (qk_nope_dim per head through the key half of kv_b_proj), outputs leave it through the value
  // half (v_head_dim per head). q_lora_rank > 0: queries through a low-rank pair with a norm.
  int kv_lora_rank = 0, q_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  float mla_pe_scale = 1.0f;  // YaRN's attention factor squared, on the rotated part's scores only
  std::vector<int> layer_moe;  // [n_layers]: 1 = experts, 0 = the dense MLP of hidden_dim; empty: all dense
  bool tied_embeddings = true;
  int bos_id = 1, eos_id = 2;

  int q_dim() const { return n_heads * head_dim; }
  int rotary_dims() const { return rope_dims > 0 ? rope_dims : head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  bool is_moe_layer(int l) const { return !layer_moe.empty() && layer_moe[l] != 0; }
  bool mla() const { return kv_lora_rank > 0; }
  // KV bytes one token costs in a cache with no windows: 2 x layers x kv_heads x head_dim x bytes
  // (latent attention: its one row per layer, read as key and value).
  size_t kv_bytes_per_token(size_t bytes_per_element = 4) const {
    return (mla() ? 1ull : 2ull) * n_layers * n_kv_heads * head_dim * bytes_per_element;
  }
  // The score multiplier of one layer (YaRN's attention factor squared where the layer rotates
  // with the scaled table).
  float layer_attn_scale(int layer) const {
    float s = attn_scale_by_layer ? attn_scale / (layer + 1) : attn_scale;
    const bool local_table = rope_local_theta > 0 && layer_window[layer] > 0;
    if (rope_scaling == "yarn" && !local_table && !mla()) s *= rope_attn_factor * rope_attn_factor;
    return s;
  }
  // Throws KvlmError when a field is out of range or inconsistent.
  void validate(const std::string& source) const;
};

}  // namespace kvlm
