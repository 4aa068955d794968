// Model files and configs that must be honoured or refused by name, never run wrong (each class
// below was once found silently wrong or crashing from outside). GGUF variants are made by
// rewriting the gguf-package fixtures (tests/gguf_edit.h).
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/sampler.h"
#include "gguf_edit.h"
#include "model/hf_config.h"
#include "model/model.h"
#include "test_support.h"

namespace kvlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::edit_gguf;
using Meta = std::map<std::string, GgufValue>;
using Tensors = std::vector<test::GgufTensorOut>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const KvlmError& e) {
    return e.what();
  }
  return "";
}

// A copy of an HF fixture folder with config.json edited.
std::string hf_variant(const std::string& fixture, const std::string& name, const std::function<void(json&)>& edit) {
  fs::path src = fs::path(test::fixtures_dir()) / fixture, dst = test::temp_path(name);
  fs::create_directories(dst);
  fs::copy_file(src / "model.safetensors", dst / "model.safetensors", fs::copy_options::overwrite_existing);
  json c = json::parse(test::read_file((src / "config.json").string()));
  edit(c);
  test::write_file((dst / "config.json").string(), c.dump());
  return dst.string();
}

std::string gguf_fixture(const char* fixture, const char* file = "model-F32.gguf") {
  return test::fixtures_dir() + "/" + fixture + "/" + file;
}

#define EXPECT_ERROR_HAS(expr, text)                                   \
  do {                                                                 \
    std::string err_ = error_of([&] { expr; });                        \
    EXPECT_NE(err_.find(text), std::string::npos) << "error: " << err_; \
  } while (0)

// Item 6: head counts that do not tile the width overflowed the heap; now refused before binding.
TEST(ShapeValidation, Gpt2HeadCountsThatDoNotDivideTheWidth) {
  std::string dir = hf_variant("gpt2_tiny", "gpt2_nhead3", [](json& c) { c["n_head"] = 3; });
  EXPECT_ERROR_HAS(load_model(dir), "head count must divide the width");
  for (uint32_t heads : {3u, 5u, 7u, 33u}) {
    std::string g = edit_gguf(gguf_fixture("gpt2_tiny"), "gpt2_heads.gguf", [&](Meta& m, Tensors&) {
      m["gpt2.attention.head_count"] = test::gguf_u32(heads);
    });
    EXPECT_ERROR_HAS(load_model(g), "head count must divide the width");
  }
  std::string kv = edit_gguf(gguf_fixture("gpt2_tiny"), "gpt2_kv2.gguf", [](Meta& m, Tensors&) {
    m["gpt2.attention.head_count_kv"] = test::gguf_u32(2);
  });
  EXPECT_ERROR_HAS(load_model(kv), "n_kv_heads must equal n_heads");
  for (uint32_t kl : {8u, 32u}) {  // 32 once ran and returned garbage
    std::string g = edit_gguf(gguf_fixture("gpt2_tiny"), "gpt2_keylen.gguf", [&](Meta& m, Tensors&) {
      m["gpt2.attention.key_length"] = test::gguf_u32(kl);
    });
    EXPECT_ERROR_HAS(load_model(g), "head count must divide the width");
  }
}

TEST(ShapeValidation, TensorShapesMustMatchTheConfig) {
  // A Llama whose config claims a wider MLP than its tensors hold: refused naming the tensor.
  std::string dir = hf_variant("llama_tiny", "llama_wide_mlp", [](json& c) { c["intermediate_size"] = 160; });
  EXPECT_ERROR_HAS(load_model(dir), "mlp.gate_proj.weight has shape");
  std::string heads = hf_variant("llama_tiny", "llama_head_dim", [](json& c) { c["head_dim"] = 8; });
  EXPECT_ERROR_HAS(load_model(heads), "q_proj.weight has shape");
}

// Items 1, 2, 18 and the config-key rule: every key that changes the arithmetic is honoured or refused.
TEST(ConfigKeys, RefusedByName) {
  struct Case {
    const char* fixture;
    std::function<void(json&)> edit;
    const char* message;
  } cases[] = {
      {"llama_tiny", [](json& c) { c["partial_rotary_factor"] = 0.5; }, "partial_rotary_factor"},
      {"llama_tiny", [](json& c) { c["final_logit_softcapping"] = 30.0; }, "final_logit_softcapping"},
      {"llama_tiny", [](json& c) { c["num_local_experts"] = 8; }, "num_local_experts"},
      {"llama_tiny", [](json& c) { c["architectures"] = {"Qwen3ForCausalLM"}; }, "Qwen3ForCausalLM"},
      {"llama_tiny", [](json& c) { c["model_type"] = "mamba"; }, "unsupported model_type 'mamba'"},
      {"llama_tiny", [](json& c) { c["attention_bias"] = true; }, "q_proj.bias"},
      {"qwen2_tiny", [](json& c) { c["model_type"] = "mistral"; c["architectures"] = {"MistralForCausalLM"}; },
       "config says attention_bias is false"},
      {"llama_tiny", [](json& c) { c["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; }, "yarn"},
      {"llama_tiny", [](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; }, "disagree"},
      // The newer families' arithmetic kvlm does not implement, each named.
      {"phi3_tiny", [](json& c) {
         c["rope_parameters"] = {{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {2.0}}};
       }, "unsupported rope scaling type 'longrope'"},
      {"gemma3_tiny", [](json& c) { c["use_bidirectional_attention"] = true; }, "use_bidirectional_attention"},
      {"gemma3_tiny", [](json& c) { c["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 2.0}}; },
       "rope scaling on sliding layers is not supported"},
      {"olmo3_tiny", [](json& c) { c["rope_parameters"]["full_attention"] = {{"rope_type", "yarn"}, {"factor", 8.0}}; },
       "unsupported rope scaling type 'yarn'"},
      {"qwen3_tiny", [](json& c) { c["partial_rotary_factor"] = 0.5; }, "partial_rotary_factor"},
      {"phi2_tiny", [](json& c) { c["rope_parameters"]["partial_rotary_factor"] = 0.2; }, "even count"},
      {"gemma2_tiny", [](json& c) { c["attn_logit_softcapping"] = "fifty"; }, "attn_logit_softcapping' must be a number"},
      // Mixture-of-experts shapes and layer lists out of range.
      {"mixtral_tiny", [](json& c) { c["num_experts_per_tok"] = 5; }, "num_experts_per_tok = 5 must be in 1..the expert count 4"},
      {"qwen3moe_sparse", [](json& c) { c["mlp_only_layers"] = {7}; }, "mlp_only_layers holds 7"},
      {"qwen3moe_sparse", [](json& c) { c["decoder_sparse_step"] = 0; }, "decoder_sparse_step must be at least 1"},
      {"qwen3moe_tiny", [](json& c) { c["num_experts"] = 6; }, "num_experts and num_local_experts disagree"},
      {"gptoss_tiny", [](json& c) { c["swiglu_limit"] = 0; }, "swiglu_limit must be positive"},
      {"mixtral_tiny", [](json& c) { c["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; },
       "unsupported rope scaling type 'yarn'"},
      // DeepSeek-V2's routing rules and arithmetic V3 does not have, each named.
      {"deepseek3_tiny", [](json& c) { c["scoring_func"] = "softmax"; }, "scoring_func 'softmax' is not supported"},
      {"deepseek3_tiny", [](json& c) { c["topk_method"] = "group_limited_greedy"; }, "topk_method"},
      {"deepseek3_tiny", [](json& c) { c["moe_layer_freq"] = 2; }, "moe_layer_freq"},
      {"deepseek3_tiny", [](json& c) { c["attention_bias"] = true; }, "attention_bias = true is not supported"},
      {"deepseek3_tiny", [](json& c) { c["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}}; },
       "rope scaling 'linear' is not supported for deepseek_v3"},
      {"deepseek3_tiny", [](json& c) { c["topk_group"] = 5; }, "topk_group must be in 1..n_group"},
      {"deepseek2_tiny", [](json& c) { c["norm_topk_prob"] = true; }, "norm_topk_prob = true is not supported for deepseek_v2"},
      {"deepseek2_tiny", [](json& c) { c["topk_method"] = "noaux_tc"; }, "topk_method 'noaux_tc' is not supported for deepseek_v2"},
  };
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    std::string dir = hf_variant(c.fixture, "cfg_" + std::to_string(i++), c.edit);
    EXPECT_ERROR_HAS(load_model(dir), c.message);
  }
}

TEST(ConfigKeys, NeutralValuesAreAccepted) {
  std::string dir = hf_variant("llama_tiny", "cfg_neutral", [](json& c) {
    c["partial_rotary_factor"] = 1.0;
    c["attn_logit_softcapping"] = nullptr;
    c["num_local_experts"] = 0;
    c["pretraining_tp"] = 1;
  });
  EXPECT_NO_THROW(load_model(dir));
}

// Item 14: RoPE parameters that would give NaN logits are refused at load.
TEST(RopeValidation, InvalidParametersAreRefused) {
  for (double theta : {0.0, -1.0}) {
    std::string dir = hf_variant("llama_tiny", "rope_theta", [&](json& c) { c["rope_parameters"]["rope_theta"] = theta; });
    EXPECT_ERROR_HAS(load_model(dir), "rope_theta");
  }
  std::string nan_base = edit_gguf(gguf_fixture("llama_tiny"), "rope_nan.gguf", [](Meta& m, Tensors&) {
    m["llama.rope.freq_base"] = test::gguf_f32(NAN);
  });
  EXPECT_ERROR_HAS(load_model(nan_base), "not a finite number");
  std::string zeros = edit_gguf(gguf_fixture("llama_tiny"), "rope_zero.gguf", [](Meta&, Tensors& ts) {
    for (auto& t : ts)
      if (t.name == "rope_freqs.weight") t.bytes.assign(t.bytes.size(), '\0');
  });
  EXPECT_ERROR_HAS(load_model(zeros), "rope_freqs entries must be positive");
}

// Item 3: the GGUF rope keys llama.cpp honours are honoured (linear scaling: conformance test),
// and the others refused.
TEST(GgufRope, UnsupportedRopeKeysAreRefused) {
  auto with = [](const char* name, std::function<void(Meta&)> f) {
    return edit_gguf(gguf_fixture("llama_ropelinear"), name, [&](Meta& m, Tensors&) { f(m); });
  };
  EXPECT_ERROR_HAS(load_model(with("yarn.gguf", [](Meta& m) { m["llama.rope.scaling.type"] = test::gguf_str("yarn"); })),
                   "rope.scaling.type 'yarn'");
  EXPECT_ERROR_HAS(load_model(with("partial.gguf", [](Meta& m) { m["llama.rope.dimension_count"] = test::gguf_u32(9); })),
                   "rope.dimension_count = 9 must be even");
  EXPECT_ERROR_HAS(load_model(with("attnf.gguf", [](Meta& m) { m["llama.rope.scaling.attn_factor"] = test::gguf_f32(0.5); })),
                   "attn_factor");
  EXPECT_ERROR_HAS(load_model(with("unknown.gguf", [](Meta& m) { m["llama.attention.clamp_kqv"] = test::gguf_f32(8); })),
                   "llama.attention.clamp_kqv is not supported");
  // The older rope.scale_linear key means the same as scaling.type linear + factor.
  std::string legacy = edit_gguf(gguf_fixture("llama_ropelinear"), "legacy.gguf", [](Meta& m, Tensors&) {
    m.erase("llama.rope.scaling.type");
    m.erase("llama.rope.scaling.factor");
    m["llama.rope.scale_linear"] = test::gguf_f32(2.0);
  });
  auto a = load_model(gguf_fixture("llama_ropelinear")), b = load_model(legacy);
  EXPECT_EQ(a->rope.inv_freq, b->rope.inv_freq);
  EXPECT_EQ(b->cfg.rope_scaling, "linear");
  EXPECT_FLOAT_EQ(b->cfg.rope_factor, 2.0f);
}

// The LayerNorm families read their RoPE keys as llama-like ones do: scaling honoured or refused,
// never ignored, and no rotated width below two.
TEST(GgufRope, LayerNormFamiliesReadTheSameRopeKeys) {
  for (const char* fixture : {"phi2_tiny", "stablelm_tiny"}) {
    SCOPED_TRACE(fixture);
    const std::string arch = fixture == std::string("phi2_tiny") ? "phi2." : "stablelm.";
    auto with = [&](const char* name, std::function<void(Meta&)> f) {
      return edit_gguf(gguf_fixture(fixture), name, [&](Meta& m, Tensors&) { f(m); });
    };
    EXPECT_ERROR_HAS(load_model(with("ln_yarn.gguf", [&](Meta& m) { m[arch + "rope.scaling.type"] = test::gguf_str("yarn"); })),
                     "rope.scaling.type 'yarn'");
    EXPECT_ERROR_HAS(load_model(with("ln_rot0.gguf", [&](Meta& m) { m[arch + "rope.dimension_count"] = test::gguf_u32(0); })),
                     "rope.dimension_count");
    auto linear = load_model(with("ln_linear.gguf", [&](Meta& m) {
      m[arch + "rope.scaling.type"] = test::gguf_str("linear");
      m[arch + "rope.scaling.factor"] = test::gguf_f32(2.0f);
    }));
    EXPECT_EQ(linear->cfg.rope_scaling, "linear");
    EXPECT_FLOAT_EQ(linear->cfg.rope_factor, 2.0f);
  }
}

// Item 15: overlapping tensor data and tensors no layer uses are refused, as llama.cpp does.
TEST(GgufStructure, OverlapAndUnusedTensorsAreRefused) {
  std::string overlap = edit_gguf(gguf_fixture("llama_tiny"), "overlap.gguf", [](Meta&, Tensors& ts) {
    ts[1].force_offset = 0;  // the second tensor starts where the first does
  });
  EXPECT_ERROR_HAS(load_model(overlap), "overlap");
  std::string fewer = edit_gguf(gguf_fixture("llama_tiny"), "fewer_blocks.gguf", [](Meta& m, Tensors&) {
    m["llama.block_count"] = test::gguf_u32(1);
  });
  EXPECT_ERROR_HAS(load_model(fewer), "not used");
  std::string stray = edit_gguf(gguf_fixture("gpt2_tiny"), "stray.gguf", [](Meta&, Tensors& ts) {
    test::GgufTensorOut t = ts.front();
    t.name = "blk.0.attn_extra.weight";
    ts.push_back(t);
  });
  EXPECT_ERROR_HAS(load_model(stray), "blk.0.attn_extra.weight");
}

// Item 17: add_space_prefix stored as u8 (any integer or bool is accepted).
TEST(GgufMetadata, IntegerFlagsAreAccepted) {
  std::string path = test::shared_path("models/stories260K/stories260K-f32.gguf");
  KVLM_NEED_SHARED("models/stories260K/stories260K-f32.gguf", "GGUF add_space_prefix stored as u8");
  std::string g = edit_gguf(path, "u8_prefix.gguf", [](Meta& m, Tensors&) {
    m["tokenizer.ggml.add_space_prefix"] = test::gguf_u8(1);
    m["tokenizer.ggml.add_bos_token"] = test::gguf_u8(1);
  });
  auto r = test::run_kvlm({"generate", "--model", g, "--prompt", "Once upon", "--max-new-tokens", "4", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Item 16: special ids outside the vocabulary are refused (generation would never stop).
TEST(ConfigKeys, SpecialIdsOutsideTheVocabulary) {
  std::string dir = hf_variant("llama_tiny", "eos_out", [](json& c) { c["eos_token_id"] = 300; });
  EXPECT_ERROR_HAS(load_model(dir), "eos");
}

// Item 14 (second half): NaN logits are an error from the sampler, never token 0.
TEST(Sampler, NonFiniteLogitsAreAnError) {
  std::vector<float> logits = {0.1f, NAN, 0.3f};
  Sampler greedy({});
  EXPECT_THROW(greedy.sample(logits.data(), 3), KvlmError);
  Sampler hot({0.8f, 0, 1.0f, 1});
  logits[1] = INFINITY;
  EXPECT_THROW(hot.sample(logits.data(), 3), KvlmError);
  // A tokenizer smaller than the model's embedding: ids past it are never produced.
  std::vector<float> l2 = {0.0f, 0.0f, 5.0f};
  Sampler limited({0.0f, 0, 1.0f, 0, 2});
  EXPECT_LT(limited.sample(l2.data(), 3), 2);
}

}  // namespace
}  // namespace kvlm
