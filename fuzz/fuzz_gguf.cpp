// libFuzzer target: GGUF metadata, tensor infos and data layout, the types `kvlm quantize` would
// give each tensor in every file type, then the model config, tokenizer and (for small files) the
// bound model and one forward pass: a shape the loader's checks let through would show up here as
// an out-of-bounds access under ASan.
#include "core/error.h"
#include "engine/forward.h"
#include "io/gguf.h"
#include "kv/kv_cache.h"
#include "model/gguf_model.h"
#include "model/quant_mix.h"
#include "tokenizer/gguf_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto g = kvlm::parse_gguf(data, size, "fuzz.gguf");
    for (const auto& [name, t] : g->tensors.all())
      if (t.numel() < (1 << 20)) (void)kvlm::to_f32(t);
    for (const kvlm::QuantFileType& ft : kvlm::quant_file_types()) {
      try {
        (void)kvlm::plan_quantization(*g, ft);
      } catch (const kvlm::KvlmError&) {
      }
    }
    try {
      auto tok = kvlm::tokenizer_from_gguf(*g);
      (void)tok->encode("Hello world, <s> 123");
    } catch (const kvlm::KvlmError&) {
    }
    kvlm::ModelConfig c = kvlm::gguf_config(*g);
    if (static_cast<size_t>(c.dim) * c.hidden_dim * c.n_layers > (1u << 20) || c.vocab_size > 4096) return 0;
    auto m = kvlm::load_gguf_model(*g);
    m->check_shapes("fuzz.gguf");
    kvlm::ContiguousKvCache kv(m->cfg, 4);
    std::vector<float> logits;
    int ids[3] = {0, m->cfg.vocab_size - 1, 0};
    kvlm::forward(*m, kv, ids, 3, kvlm::LogitsFor::All, logits);
  } catch (const kvlm::KvlmError&) {
  }
  return 0;
}
