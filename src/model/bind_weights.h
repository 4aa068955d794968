// Binds named tensors to Model weights, one function per family of tensor names.
#pragma once
#include "io/tensor_source.h"
#include "model/model.h"

namespace kvlm {

void bind_llama(const TensorSource& src, Model& m);   // llama, mistral, qwen2, llama2.c
void bind_gpt2(const TensorSource& src, Model& m);    // GPT2LMHeadModel (Conv1D weights [in][out])
void bind_gpt_neo(const TensorSource& src, Model& m); // GPTNeoForCausalLM

}  // namespace kvlm
