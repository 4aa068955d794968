// kvlm kv-plan: "does this fit, and how much is left?" before anything runs. Reads only the
// model's config (and the weight files' sizes), never the weights.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/memory.h"
#include "kernels/kv_quant.h"
#include "kv/kv_pages.h"
#include "model/synthetic.h"

namespace kvlm::cli {

namespace {

struct PlanArgs : KvCodecArgs {
  std::string model, preset;
  int ctx = 0, batch = 1, block_size = 16;
  double memory_gb = 0;
  bool json = false;
};

int run_plan(const PlanArgs& a) {
  if (a.model.empty() == a.preset.empty()) fail("kv-plan needs exactly one of --model or --preset");
  size_t weights = 0;
  ModelConfig c;
  DType source_format = DType::F32;  // a preset's synthetic matrices are f32
  std::map<std::string, size_t> by_type;  // the file's bytes by stored type
  if (!a.model.empty()) {
    c = load_model_config(a.model, &weights, &source_format);
    try {  // a folder may hold a config alone, or a shard still downloading: then no breakdown
      by_type = stored_bytes_by_type(a.model);
    } catch (const KvlmError&) {
    }
  } else {
    c = preset_config(a.preset);
    weights = synthetic_model_bytes(c);
  }
  const int ctx = a.ctx > 0 ? a.ctx : c.max_seq_len;
  const DType dtype = kv_dtype_for(a.kv_dtype, source_format);
  if (!kv_dtype_fits(dtype, c.kv_dim())) fail("KV dtype ", dtype_name(dtype), " needs kv_dim divisible by 32, got ", c.kv_dim());
  // Sizes are products of user numbers (ctx x batch x layers x heads ...): computed in long double,
  // which cannot wrap, and clamped when turned back into integers for the report.
  using LD = long double;
  // A token's page rows (K and V in the codec's layout: values and any scales), as KvPages
  // allocates them; beside quantized pages each sequence keeps its newest positions at f32.
  const LD per_token = static_cast<LD>(KvPages::block_bytes(c, 1, dtype));
  const LD per_block = per_token * a.block_size;
  // The f32 rows of a sequence's newest `tokens` positions (none beside f32 pages).
  auto f32_window_bytes = [&](int tokens) { return dtype == DType::F32 ? 0.0L : 2.0L * c.n_layers * tokens * c.kv_dim() * 4.0L; };
  const int residual = dtype == DType::F32 ? 0 : std::min(a.kv_residual, ctx);
  const LD residual_per_seq = f32_window_bytes(residual);
  // A sequence whose every layer slides a window never holds more than window + one block.
  int window_cap = 0;
  bool all_windowed = !c.layer_window.empty();
  for (int w : c.layer_window) {
    all_windowed = all_windowed && w > 0;
    window_cap = std::max(window_cap, w);
  }
  const int tokens_held = all_windowed ? static_cast<int>(std::min<int64_t>(ctx, int64_t{window_cap} + a.block_size)) : ctx;
  const int64_t blocks_per_seq = (int64_t{tokens_held} + a.block_size - 1) / a.block_size;
  const LD per_seq = static_cast<LD>(blocks_per_seq) * per_block + residual_per_seq;
  const LD kv_total = per_seq * a.batch;
  const LD memory = a.memory_gb > 0 ? static_cast<LD>(a.memory_gb) * 1e9L : static_cast<LD>(available_memory_bytes());
  const LD need = static_cast<LD>(weights) + kv_total;
  const bool fits = need <= memory;
  const LD left = memory - need;
  const LD room = memory > weights ? memory - weights : 0;
  auto clamp_count = [](LD v) { return static_cast<uint64_t>(std::min<LD>(std::max<LD>(v, 0), 1e18L)); };
  const uint64_t max_batch = clamp_count(std::floor(room / std::max<LD>(1, per_seq)));
  // At the longest context a sequence's window is whole.
  LD max_ctx_ld = std::floor((room / a.batch - f32_window_bytes(a.kv_residual)) / std::max<LD>(1, per_block)) * a.block_size;
  if (c.learned_positions) max_ctx_ld = std::min<LD>(max_ctx_ld, c.max_seq_len);
  const uint64_t max_ctx = clamp_count(max_ctx_ld);
  const double kv_total_d = static_cast<double>(kv_total), memory_d = static_cast<double>(memory);

  nlohmann::json j{{"arch", c.arch},
                   {"kv_bytes_per_token", static_cast<double>(per_token)},
                   {"formula", KvPages::token_bytes_formula(c, dtype)},
                   {"kv_dtype", dtype_name(dtype)},
                   {"residual_tokens", residual},
                   {"residual_bytes_per_sequence", static_cast<double>(residual_per_seq)},
                   {"block_size", a.block_size},
                   {"bytes_per_block", static_cast<double>(per_block)},
                   {"ctx", ctx},
                   {"batch", a.batch},
                   {"tokens_held_per_sequence", tokens_held},
                   {"blocks_per_sequence", blocks_per_seq},
                   {"kv_bytes", kv_total_d},
                   {"weight_bytes", weights},
                   {"weight_bytes_by_type", by_type},
                   {"memory_bytes", memory_d},
                   {"fits", fits},
                   {"bytes_left", static_cast<double>(left)},
                   {"max_batch_at_ctx", max_batch},
                   {"max_ctx_at_batch", max_ctx}};
  if (c.mla())  // what the latent saves: the same model's keys and values cached per head
    j["expanded_kv_bytes_per_token"] = KvPages::expanded_token_bytes(c, dtype);
  if (a.json) {
    std::puts(j.dump(1).c_str());
    return 0;
  }
  std::printf("model: %s, %d layers, %d KV heads x %d head_dim, context %d\n", c.arch.c_str(), c.n_layers, c.n_kv_heads,
              c.head_dim, c.max_seq_len);
  std::printf("KV per token: %.0f bytes (%s)\n", static_cast<double>(per_token), j["formula"].get<std::string>().c_str());
  if (c.mla() && KvPages::expanded_token_bytes(c, dtype) > 0)
    std::printf("latent attention: %.0f bytes per token cached; its keys and values expanded per head would take %zu (%.1fx)\n",
                static_cast<double>(per_token), KvPages::expanded_token_bytes(c, dtype),
                KvPages::expanded_token_bytes(c, dtype) / static_cast<double>(per_token));
  std::printf("KV block: %d tokens = %.0f bytes; a sequence of %d tokens holds %lld blocks%s\n", a.block_size,
              static_cast<double>(per_block), ctx, static_cast<long long>(blocks_per_seq),
              all_windowed ? " (every layer is windowed)" : "");
  if (residual > 0)
    std::printf("f32 window: the newest %d tokens of each sequence, %.0f bytes beside its blocks (--kv-residual)\n", residual,
                static_cast<double>(residual_per_seq));
  std::printf("batch %d x ctx %d: %.6g GB of KV, weights %.3f GB, memory %.6g GB\n", a.batch, ctx, kv_total_d / 1e9,
              weights / 1e9, memory_d / 1e9);
  if (!by_type.empty()) {
    std::string parts;
    for (const auto& [type, bytes] : by_type) parts += (parts.empty() ? "" : ", ") + type + " " + std::to_string(bytes / 1000000) + " MB";
    std::printf("weights by stored type: %s\n", parts.c_str());
  }
  std::printf("fits: %s; %s %.6g GB\n", fits ? "yes" : "NO", fits ? "left" : "short by",
              static_cast<double>(std::fabs(left)) / 1e9);
  std::printf("at ctx %d at most %llu sequences fit; at batch %d at most %llu tokens each\n", ctx,
              static_cast<unsigned long long>(max_batch), a.batch, static_cast<unsigned long long>(max_ctx));
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
  add_kv_codec_options(sub, *a);
  sub->add_option("--memory-gb", a->memory_gb, "memory to plan for (default: MemAvailable)")->check(CLI::Range(0.001, 1e9));
  sub->add_flag("--json", a->json, "print one JSON object");
  return [a] { return run_plan(*a); };
}

}  // namespace kvlm::cli
