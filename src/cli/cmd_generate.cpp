// kvlm generate: prompt -> streamed text (or one JSON object), with the KV cache on or off.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "engine/generator.h"

namespace kvlm::cli {

namespace {
struct GenerateArgs {
  std::string model, tokenizer, prompt;
  int max_new_tokens = 128, ctx = 0;
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool no_kv_cache = false, json = false, ignore_eos = false;
};

int run_generate(const GenerateArgs& a) {
  auto model = load_model(a.model);
  auto tok = load_tokenizer_for(a.model, a.tokenizer, *model);
  std::vector<int> prompt = tok->encode_prompt(a.prompt);
  GenerateOptions opt;
  opt.max_new_tokens = a.max_new_tokens;
  opt.sampling = {a.temperature, a.top_k, a.top_p, a.seed};
  opt.use_kv_cache = !a.no_kv_cache;
  opt.stop_at_eos = !a.ignore_eos;
  opt.context = a.ctx;
  int prev = prompt.back();
  std::string text;
  if (!a.json) {
    std::fputs(a.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  GenerateResult r = generate(*model, prompt, opt, [&](int id) {
    std::string piece = tok->decode(prev, id);
    prev = id;
    text += piece;
    if (!a.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
  });
  if (a.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["generated_ids"] = r.generated;
    j["text"] = text;
    j["ttft_ms"] = r.ttft_ms;
    j["tpot_ms"] = r.tpot_ms();
    j["kv_cache_bytes"] = r.kv_cache_bytes;
    j["kv_cache"] = !a.no_kv_cache;
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputc('\n', stdout);
    double tps = r.tpot_ms() > 0 ? 1000.0 / r.tpot_ms() : 0.0;
    std::fprintf(stderr, "[kvlm] prompt %zu tokens, generated %zu | TTFT %.2f ms | TPOT %.3f ms (%.1f tok/s) | KV cache %s, %zu bytes\n",
                 prompt.size(), r.generated.size(), r.ttft_ms, r.tpot_ms(), tps, a.no_kv_cache ? "off" : "on",
                 r.kv_cache_bytes);
  }
  return 0;
}
}  // namespace

Runner add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "generate text from a prompt");
  sub->add_option("--model", a->model, "llama2.c .bin or Hugging Face folder")->required();
  sub->add_option("--tokenizer", a->tokenizer, "tokenizer file (default: found beside the model)");
  sub->add_option("--prompt", a->prompt, "prompt text")->required();
  sub->add_option("--max-new-tokens", a->max_new_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  sub->add_option("--temperature", a->temperature, "0 = greedy")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", a->top_k, "keep the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", a->top_p, "nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--seed", a->seed, "sampling seed");
  sub->add_flag("--no-kv-cache", a->no_kv_cache, "recompute the whole sequence at every step");
  sub->add_flag("--json", a->json, "print one JSON object instead of streaming text");
  sub->add_option("--ctx", a->ctx, "context length (default: the model's); RoPE models may exceed it")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_flag("--ignore-eos", a->ignore_eos, "keep generating past EOS/BOS");
  return [a] { return run_generate(*a); };
}

}  // namespace kvlm::cli
