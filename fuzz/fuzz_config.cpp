// libFuzzer target: Hugging Face config.json parsing and validation; a config that validates is
// built with synthetic weights and run for a few tokens, so shape classes the validation misses
// (heads that do not tile the width, odd head_dim, windows) surface under ASan.
#include <string>

#include "core/error.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"
#include "model/hf_config.h"
#include "model/synthetic.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kvlm::ModelConfig c = kvlm::parse_hf_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    if (static_cast<size_t>(c.dim) * (c.hidden_dim + c.q_dim()) * c.n_layers > (1u << 18) || c.vocab_size > 1024 ||
        c.max_seq_len > 4096)
      return 0;
    auto m = kvlm::synthetic_model(c, 1);
    m->check_shapes("fuzz");
    kvlm::ContiguousKvCache kv(m->cfg, 4);
    std::vector<float> logits;
    int ids[3] = {0, c.vocab_size - 1, 0};
    kvlm::forward(*m, kv, ids, 3, kvlm::LogitsFor::All, logits);
  } catch (const kvlm::KvlmError&) {
  }
  return 0;
}
