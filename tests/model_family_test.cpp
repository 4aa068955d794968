// The family registry (model/family.h): one table, unique names, every lookup's error names the
// architecture it did not find and the ones it knows.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "model/family.h"
#include "model/hf_config.h"

using namespace kvlm;

namespace {

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const KvlmError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelFamily, TableIsCompleteAndUnique) {
  std::set<std::string> names, hf_types, gguf_archs;
  for (const Family* f : families()) {
    ASSERT_NE(f->name, nullptr);
    EXPECT_TRUE(names.insert(f->name).second) << f->name;
    ASSERT_NE(f->hf_model_type, nullptr);
    EXPECT_TRUE(hf_types.insert(f->hf_model_type).second) << f->hf_model_type;
    EXPECT_NE(f->hf_class, nullptr);
    EXPECT_NE(f->from_hf, nullptr);
    EXPECT_NE(f->bind, nullptr);
    EXPECT_NE(f->forward, nullptr);
    // A family read from GGUF has all three GGUF pieces, or none.
    EXPECT_EQ(f->gguf_arch != nullptr, f->from_gguf != nullptr) << f->name;
    EXPECT_EQ(f->gguf_arch != nullptr, f->gguf_names != nullptr) << f->name;
    if (f->gguf_arch) {
      EXPECT_TRUE(gguf_archs.insert(f->gguf_arch).second) << f->gguf_arch;
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "smollm3", "granite", "olmo2", "olmo3", "gemma2", "gemma3", "phi3", "phi2", "stablelm", "gpt_oss", "deepseek_v2", "deepseek_v3", "gpt2", "gpt_neo"}));
  EXPECT_EQ(gguf_archs, (std::set<std::string>{"llama", "qwen2", "qwen3", "qwen3moe", "smollm3", "granite", "olmo2", "gemma2", "gemma3", "phi3", "phi2", "stablelm", "gpt-oss", "deepseek2", "gpt2"}));
  for (const std::string& n : names) EXPECT_EQ(family_named(n, "test").name, n);
}

TEST(ModelFamily, UnknownArchitecturesAreNamed) {
  std::string e = error_of([] { family_named("mamba", "m.bin"); });
  EXPECT_NE(e.find("'mamba'"), std::string::npos) << e;
  EXPECT_NE(e.find("gpt_neo"), std::string::npos) << e;
  e = error_of([] { family_for_gguf_arch("falcon", "f.gguf"); });
  EXPECT_NE(e.find("f.gguf: unsupported GGUF architecture 'falcon' (supported: llama, qwen2, qwen3, qwen3moe, smollm3, granite, olmo2, gemma2, gemma3, phi3, phi2, stablelm, gpt-oss, deepseek2, gpt2)"),
            std::string::npos) << e;
  e = error_of([] { parse_hf_config(R"({"model_type":"bert"})", "config.json"); });
  EXPECT_NE(e.find("unsupported model_type 'bert' (supported: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, smollm3, granite, olmo2, olmo3, gemma2, gemma3_text, phi3, phi, stablelm, gpt_oss, deepseek_v2, deepseek_v3, gpt2, gpt_neo)"),
            std::string::npos) << e;
  // The class must be the family's own: another class under a known model_type is refused.
  e = error_of([] {
    parse_hf_config(R"({"model_type":"llama","architectures":["LlamaForSequenceClassification"],"hidden_size":64,
      "intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":32,
      "max_position_embeddings":64})", "config.json");
  });
  EXPECT_NE(e.find("'LlamaForSequenceClassification' is not supported for model_type 'llama' (supported: LlamaForCausalLM)"),
            std::string::npos) << e;
}
