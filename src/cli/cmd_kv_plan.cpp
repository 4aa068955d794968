// kvlm kv-plan: "does this fit, and how much is left?" before anything runs. Reads only the
// model's config (and the weight files' sizes), never the weights.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "core/error.h"
#include "model/synthetic.h"

namespace kvlm::cli {

namespace {

struct PlanArgs {
  std::string model, preset;
  int ctx = 0, batch = 1, block_size = 16;
  double memory_gb = 0;
  bool json = false;
};

size_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

int run_plan(const PlanArgs& a) {
  if (a.model.empty() == a.preset.empty()) fail("kv-plan needs exactly one of --model or --preset");
  size_t weights = 0;
  ModelConfig c;
  if (!a.model.empty()) {
    c = load_model_config(a.model, &weights);
  } else {
    c = preset_config(a.preset);
    weights = synthetic_model_bytes(c);
  }
  const int ctx = a.ctx > 0 ? a.ctx : c.max_seq_len;
  const size_t per_token = c.kv_bytes_per_token(4);
  const size_t per_block = per_token * a.block_size;
  // A sequence whose every layer slides a window never holds more than window + one block.
  int window_cap = 0;
  bool all_windowed = !c.layer_window.empty();
  for (int w : c.layer_window) {
    all_windowed = all_windowed && w > 0;
    window_cap = std::max(window_cap, w);
  }
  int tokens_held = all_windowed ? std::min(ctx, window_cap + a.block_size) : ctx;
  const size_t blocks_per_seq = (tokens_held + a.block_size - 1) / a.block_size;
  const size_t kv_total = blocks_per_seq * a.batch * per_block;
  const size_t memory = a.memory_gb > 0 ? static_cast<size_t>(a.memory_gb * 1e9) : mem_available();
  const bool fits = weights + kv_total <= memory;
  const long long left = static_cast<long long>(memory) - static_cast<long long>(weights + kv_total);
  const size_t room = memory > weights ? memory - weights : 0;
  const size_t max_batch = room / std::max<size_t>(1, blocks_per_seq * per_block);
  size_t max_ctx_blocks = room / std::max<size_t>(1, static_cast<size_t>(a.batch) * per_block);
  size_t max_ctx = std::min<size_t>(max_ctx_blocks * a.block_size, c.learned_positions ? c.max_seq_len : SIZE_MAX);

  nlohmann::json j{{"arch", c.arch},
                   {"kv_bytes_per_token", per_token},
                   {"formula", "2 x " + std::to_string(c.n_layers) + " layers x " + std::to_string(c.n_kv_heads) +
                                   " kv_heads x " + std::to_string(c.head_dim) + " head_dim x 4 bytes (f32)"},
                   {"block_size", a.block_size},
                   {"bytes_per_block", per_block},
                   {"ctx", ctx},
                   {"batch", a.batch},
                   {"tokens_held_per_sequence", tokens_held},
                   {"blocks_per_sequence", blocks_per_seq},
                   {"kv_bytes", kv_total},
                   {"weight_bytes", weights},
                   {"memory_bytes", memory},
                   {"fits", fits},
                   {"bytes_left", left},
                   {"max_batch_at_ctx", max_batch},
                   {"max_ctx_at_batch", max_ctx}};
  if (a.json) {
    std::puts(j.dump(1).c_str());
    return 0;
  }
  std::printf("model: %s, %d layers, %d KV heads x %d head_dim, context %d\n", c.arch.c_str(), c.n_layers, c.n_kv_heads,
              c.head_dim, c.max_seq_len);
  std::printf("KV per token: %zu bytes (%s)\n", per_token, j["formula"].get<std::string>().c_str());
  std::printf("KV block: %d tokens = %zu bytes; a sequence of %d tokens holds %zu blocks%s\n", a.block_size, per_block,
              ctx, blocks_per_seq, all_windowed ? " (every layer is windowed)" : "");
  std::printf("batch %d x ctx %d: %.3f GB of KV, weights %.3f GB, memory %.3f GB\n", a.batch, ctx, kv_total / 1e9,
              weights / 1e9, memory / 1e9);
  std::printf("fits: %s; %s %.3f GB\n", fits ? "yes" : "NO", fits ? "left" : "short by", std::llabs(left) / 1e9);
  std::printf("at ctx %d at most %zu sequences fit; at batch %d at most %zu tokens each\n", ctx, max_batch, a.batch, max_ctx);
  return 0;
}

}  // namespace

Runner add_kv_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* sub = app.add_subcommand("kv-plan", "does a context x batch fit in memory, and how much is left");
  sub->add_option("--model", a->model, "llama2.c .bin, GGUF file or Hugging Face folder (config only is read)");
  sub->add_option("--preset", a->preset, "or a built-in shape: distilgpt2, gpt2, gpt-neo-1.3B, tinyllama-1.1b");
  sub->add_option("--ctx", a->ctx, "tokens per sequence (default: the model's context)")->check(CLI::Range(1, 1 << 26));
  sub->add_option("--batch", a->batch, "concurrent sequences (default 1)")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--block-size", a->block_size, "tokens per KV block (default 16)")->check(CLI::Range(1, 4096));
  sub->add_option("--memory-gb", a->memory_gb, "memory to plan for (default: MemAvailable)")->check(CLI::PositiveNumber);
  sub->add_flag("--json", a->json, "print one JSON object");
  return [a] { return run_plan(*a); };
}

}  // namespace kvlm::cli
