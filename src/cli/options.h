// Option groups the subcommands share: one registration each, so a flag means the same thing
// (name, help, range) in every command that has it. A command's argument struct inherits the
// groups it uses and registers them with add_*_options.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "kv/kv_tiers.h"

namespace kvlm::cli {

// --model, --weights, --tokenizer.
struct ModelArgs {
  std::string model;
  std::string weights;    // "" = as stored in the file
  std::string tokenizer;  // "" = found beside the model
};
enum ModelOptions : unsigned {
  kModelRequired = 1,   // --model must be given (else a preset may stand in)
  kModelTokenizer = 2,  // the command tokenizes text: --tokenizer
};
void add_model_options(CLI::App* sub, ModelArgs& a, unsigned which, const std::string& model_help = "");

// The KV cache's page codec: --kv-dtype, --kv-residual.
struct KvCodecArgs {
  std::string kv_dtype = "auto";  // kv_dtype_for
  int kv_residual = 128;
};
void add_kv_codec_options(CLI::App* sub, KvCodecArgs& a);

// The KV block pool: --block-size, --kv-capacity, --kv-blocks.
struct KvPoolArgs {
  int block_size = 16;
  std::string kv_capacity;  // "" = the command's default pool
  int kv_blocks = 0;        // 0 = the command's default pool
};
void add_kv_pool_options(CLI::App* sub, KvPoolArgs& a);

// KV tiers below the pool: --kv-host-capacity, --kv-disk-dir, --kv-disk-capacity.
struct KvTierArgs {
  std::string kv_host_capacity;  // "" = no host tier
  std::string kv_disk_dir;       // "" = no disk tier
  std::string kv_disk_capacity = "4GB";
  std::string kv_remote;          // "" = no Redis tier
  int kv_remote_timeout_ms = 200, kv_remote_ttl = 3600;
};
void add_kv_tier_options(CLI::App* sub, KvTierArgs& a);
// The engine's tier options from the flags (sizes parsed: B, KB, MB, GB, KiB, MiB, GiB).
KvTierOptions kv_tier_options(const KvTierArgs& a);

// Attention sinks (StreamingLLM): --window, --sink-tokens.
struct SinkArgs {
  int sink_tokens = 4;
  int window = 0;  // 0 = off
};
void add_sink_options(CLI::App* sub, SinkArgs& a);

// --temperature, --top-k, --top-p, --seed.
struct SamplingArgs {
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
};
void add_sampling_options(CLI::App* sub, SamplingArgs& a, const std::string& seed_help = "sampling seed");

}  // namespace kvlm::cli
