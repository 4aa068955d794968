// Binds named tensors to Model weights, one function per family of tensor names.
#pragma once
#include "io/tensor_source.h"
#include "model/model.h"

namespace kvlm {

void bind_llama(const TensorSource& src, Model& m);   // llama, mistral, qwen2, llama2.c
// GPT2LMHeadModel: HF stores Conv1D weights [in][out]; GGUF already holds them [out][in].
void bind_gpt2(const TensorSource& src, Model& m, bool conv1d_layout = true);
void bind_gpt_neo(const TensorSource& src, Model& m); // GPTNeoForCausalLM

}  // namespace kvlm
