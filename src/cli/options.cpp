#include "cli/options.h"

#include "cli/common.h"

namespace kvlm::cli {

void add_model_options(CLI::App* sub, ModelArgs& a, unsigned which, const std::string& model_help) {
  CLI::Option* m = sub->add_option("--model", a.model,
                                   model_help.empty() ? "llama2.c .bin, GGUF file or Hugging Face folder" : model_help);
  if (which & kModelRequired) m->required();
  sub->add_option("--weights", a.weights, "run the matrices as f32, f16, bf16, q8_0 or q4_0 (default: as stored)");
  if (which & kModelTokenizer)
    sub->add_option("--tokenizer", a.tokenizer, "tokenizer file (default: found beside the model)");
}

void add_kv_codec_options(CLI::App* sub, KvCodecArgs& a) {
  sub->add_option("--kv-dtype", a.kv_dtype, "KV element type: auto (default: f32 beside f32 matrices or with attention sinks, else f16), f32, f16, bf16, int8, int4");
  sub->add_option("--kv-residual", a.kv_residual, "newest positions each sequence keeps f32 beside quantized pages (default 128)")
      ->check(CLI::Range(0, 1 << 24));
}

void add_kv_pool_options(CLI::App* sub, KvPoolArgs& a) {
  sub->add_option("--block-size", a.block_size, "tokens per KV block (default 16)")->check(CLI::Range(1, 4096));
  sub->add_option("--kv-capacity", a.kv_capacity, "KV pool capacity: tokens (4096 or 4096tok) or bytes (64MB, 1GB)");
  sub->add_option("--kv-blocks", a.kv_blocks, "KV pool size in blocks (default: what the run needs)")
      ->check(CLI::Range(1, 1 << 24));
}

void add_kv_tier_options(CLI::App* sub, KvTierArgs& a) {
  sub->add_option("--kv-host-capacity", a.kv_host_capacity,
                  "keep prefix blocks evicted from the pool in host memory, up to SIZE (e.g. 2GB)");
  sub->add_option("--kv-disk-dir", a.kv_disk_dir,
                  "write prefix blocks to DIR and read them back on a hit, across restarts");
  sub->add_option("--kv-disk-capacity", a.kv_disk_capacity, "bytes of block files kept in --kv-disk-dir (default 4GB)");
  sub->add_option("--kv-remote", a.kv_remote,
                  "share prefix blocks through Redis (redis://HOST:PORT): write every published block, read on a miss");
  sub->add_option("--kv-remote-timeout-ms", a.kv_remote_timeout_ms,
                  "Redis connect and command timeout; down, it is retried after 1 s (default 200)")
      ->check(CLI::Range(1, 60000));
  sub->add_option("--kv-remote-ttl", a.kv_remote_ttl, "seconds a block lives in Redis (default 3600; 0 = no expiry)")
      ->check(CLI::Range(0, 1 << 30));
}

KvTierOptions kv_tier_options(const KvTierArgs& a) {
  KvTierOptions o;
  if (!a.kv_host_capacity.empty()) o.host_capacity = parse_bytes(a.kv_host_capacity, "--kv-host-capacity");
  o.disk_dir = a.kv_disk_dir;
  if (!a.kv_disk_dir.empty()) o.disk_capacity = parse_bytes(a.kv_disk_capacity, "--kv-disk-capacity");
  o.remote_url = a.kv_remote;
  if (!o.remote_url.empty()) parse_redis_url(o.remote_url);  // a bad address fails before the model loads
  o.remote_timeout_ms = a.kv_remote_timeout_ms;
  o.remote_ttl_s = a.kv_remote_ttl;
  return o;
}

void add_sink_options(CLI::App* sub, SinkArgs& a) {
  sub->add_option("--window", a.window, "attention sinks: keep --sink-tokens plus the last W tokens, drop the middle, "
                                        "and generate past the context (RoPE models, f32 pages)")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--sink-tokens", a.sink_tokens, "first tokens always kept with --window (default 4)")
      ->check(CLI::Range(0, 1 << 24));
}

void add_sampling_options(CLI::App* sub, SamplingArgs& a, const std::string& seed_help) {
  sub->add_option("--temperature", a.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  sub->add_option("--top-k", a.top_k, "keep the k most likely tokens (0 = all)")->check(CLI::Range(0, 1 << 24));
  sub->add_option("--top-p", a.top_p, "nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--seed", a.seed, seed_help);
}

}  // namespace kvlm::cli
