// Mixtral (MixtralForCausalLM): Mistral's layer with a mixture of SwiGLU experts as its MLP, a
// softmax router choosing num_experts_per_tok of num_local_experts per token, their scores
// renormalized. llama.cpp writes Mixtral GGUF files as "llama" (the Llama family reads them).
#include "model/families/llama.h"

namespace kvlm {

namespace {

ModelConfig mixtral_from_hf(const HfReader& r) {
  ModelConfig c = mistral_like_from_hf(r, "mixtral");
  read_hf_experts(r, c, r.integer("num_local_experts"), c.hidden_dim);
  c.norm_topk_prob = true;
  // Training-only: jitter multiplies inputs in training mode alone; the aux loss and the router
  // logits output change nothing in inference.
  for (const char* key : {"router_jitter_noise", "router_aux_loss_coef", "output_router_logits"}) r.has(key);
  return c;
}

}  // namespace

extern const Family kMixtralFamily = {"mixtral", "mixtral", "MixtralForCausalLM", nullptr,      mixtral_from_hf,
                                      nullptr,   nullptr,   bind_llama_like,      forward_llama};

}  // namespace kvlm
