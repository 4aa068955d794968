// kvlm serve: the OpenAI-compatible HTTP server. It listens at once and answers /health with
// 503 while the model loads, then 200; SIGINT/SIGTERM stop it cleanly.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/common.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/read_file.h"
#include "server/http_server.h"
#include "server/kv_event_publisher.h"
#include "tokenizer/chat_template.h"

namespace kvlm::cli {

namespace {

struct ServeArgs : ModelArgs, KvCodecArgs, KvPoolArgs, KvTierArgs {
  std::string chat_template, host = "127.0.0.1", model_name;
  int port = 8080, max_seqs = 16, ctx = 0, max_batch_tokens = 4096;
  int http_threads = 0;  // 0: max(64, 2 x --max-seqs + 4) (an open connection holds its thread)
  size_t max_body = 4 << 20;
  bool no_prefix_cache = false, metrics_need_key = false;
  std::vector<std::string> api_keys;
  std::string api_key_file;
  int max_queue = 256, max_prompt_tokens = 0, max_tokens_cap = 0, io_timeout = 30, max_pending_connections = 64;
  double request_timeout = 600;
  std::string kv_snapshot_dir;
  std::string kv_events, kv_events_replay, kv_events_topic, prefix_hash = "salted", prefix_hash_seed;
  size_t kv_events_buffer = 10000;
};

// --api-key-file: one key per line; blank lines and lines starting with '#' are skipped.
std::vector<std::string> keys_from_file(const std::string& path) {
  std::vector<std::string> keys;
  std::string text = read_file(path, 1 << 20), line;
  for (size_t p = 0; p <= text.size();) {
    size_t nl = text.find('\n', p);
    line = text.substr(p, nl == std::string::npos ? std::string::npos : nl - p);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty() && line[0] != '#') keys.push_back(line);
    if (nl == std::string::npos) break;
    p = nl + 1;
  }
  if (keys.empty()) fail(path, ": no API keys in the file");
  return keys;
}

int run_serve(const ServeArgs& a) {
  check_kv_dtype_name(a.kv_dtype);  // before the (slow) model load
  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.model_name = a.model_name.empty() ? a.model : a.model_name;
  so.max_body_bytes = a.max_body;
  // A connection holds its thread for as long as it is open (keep-alive included), so the default
  // covers 64 concurrent clients; they sleep while they wait (see docs/benchmarks.md, load).
  so.http_threads = a.http_threads > 0 ? a.http_threads : std::max(64, 2 * a.max_seqs + 4);
  so.api_keys = a.api_keys;
  if (!a.api_key_file.empty())
    for (const std::string& k : keys_from_file(a.api_key_file)) so.api_keys.push_back(k);
  for (const std::string& k : so.api_keys)
    if (k.size() < 8) fail("API keys must be at least 8 characters");
  so.metrics_need_key = a.metrics_need_key;
  so.max_queue = a.max_queue;
  so.max_pending_connections = a.max_pending_connections;
  so.max_prompt_tokens = a.max_prompt_tokens;
  so.kv_snapshot_dir = a.kv_snapshot_dir;
  if (!so.kv_snapshot_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(so.kv_snapshot_dir, ec);
    if (!std::filesystem::is_directory(so.kv_snapshot_dir, ec))
      fail(so.kv_snapshot_dir, ": cannot create the snapshot directory");
  }
  so.max_tokens_cap = a.max_tokens_cap;
  so.request_timeout_s = a.request_timeout;
  so.io_timeout_s = a.io_timeout;
  // SIGINT/SIGTERM are taken by one thread with sigwait (a handler may not stop the server).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  // KV events: bound before the model loads, so a taken port fails at once.
  const PrefixHashScheme prefix_hash = parse_prefix_hash(a.prefix_hash);
  std::unique_ptr<server::KvEventPublisher> events;
  if (a.kv_events.empty() && !a.kv_events_replay.empty()) fail("--kv-events-replay needs --kv-events");
  if (!a.kv_events.empty()) {
    if (a.no_prefix_cache) fail("--kv-events describe the prefix cache: they need it (drop --no-prefix-cache)");
    server::KvEventOptions eo;
    eo.endpoint = a.kv_events;
    eo.replay_endpoint = a.kv_events_replay;
    eo.topic = a.kv_events_topic;
    eo.replay_batches = a.kv_events_buffer;
    eo.hashes_as_int = prefix_hash == PrefixHashScheme::Sha256Cbor64;
    events = std::make_unique<server::KvEventPublisher>(eo);
  }
  server::HttpServer http(so);
  const int port = http.bind();
  std::fprintf(stderr, "[kvlm] serve: listening on http://%s:%d (loading %s)\n", a.host.c_str(), port, a.model.c_str());
  std::fflush(stderr);

  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatTemplate> tpl;
  std::unique_ptr<server::EngineLoop> loop;
  server::Metrics metrics(so.model_name);
  metrics.set_events(events.get());
  std::string load_error;
  std::thread loader([&] {
    try {
      model = load_model(a.model, a.weights);
      const DType kv_dtype = kv_dtype_for(a.kv_dtype, *model);
      tok = load_tokenizer_for(a.model, a.tokenizer, *model);
      std::string bos, eos;
      std::string source = a.chat_template.empty() ? find_chat_template(a.model, &bos, &eos) : read_file(a.chat_template);
      if (source.empty() && !tok->chat_template.empty()) source = tok->chat_template;
      if (!source.empty()) tpl = std::make_unique<ChatTemplate>(source);  // an unrenderable template fails here
      EngineOptions eo;
      eo.block_size = a.block_size;
      eo.context = a.ctx > 0 ? a.ctx : model->cfg.max_seq_len;
      eo.kv_dtype = kv_dtype;
      eo.kv_residual = a.kv_residual;
      eo.max_seqs = a.max_seqs;
      eo.max_batch_tokens = a.max_batch_tokens;
      eo.prefix_cache = !a.no_prefix_cache;
      eo.tiers = kv_tier_options(a);
      eo.events = events.get();
      eo.prefix_hash = prefix_hash;
      eo.prefix_hash_seed = a.prefix_hash_seed;
      const size_t block_bytes = KvPages::block_bytes(model->cfg, a.block_size, kv_dtype);
      if (a.kv_blocks > 0) {
        eo.num_blocks = a.kv_blocks;
      } else if (!a.kv_capacity.empty()) {
        eo.num_blocks = parse_kv_capacity(a.kv_capacity, block_bytes, a.block_size);
      } else {
        // Room for --max-seqs sequences at the full context, capped at half the free memory.
        size_t want = static_cast<size_t>(a.max_seqs) * ((eo.context + a.block_size - 1) / a.block_size);
        size_t cap = std::max<size_t>(1, available_memory_bytes() / 2 / block_bytes);
        eo.num_blocks = static_cast<int>(std::min({want, cap, size_t{1} << 24}));
      }
      loop = std::make_unique<server::EngineLoop>(*model, eo, &metrics);
      server::Backend b;
      b.model = model.get();
      b.tokenizer = tok.get();
      b.chat_template = tpl.get();
      b.loop = loop.get();
      b.metrics = &metrics;
      b.context = eo.context;
      http.set_backend(b);
      std::fprintf(stderr, "[kvlm] serve: ready: %s, context %d, KV pool %d blocks of %d tokens (%s, %s), chat template %s\n",
                   so.model_name.c_str(), eo.context, eo.num_blocks, a.block_size, dtype_name(kv_dtype),
                   format_bytes(static_cast<double>(eo.num_blocks) * block_bytes).c_str(), tpl ? "yes" : "none");
    } catch (const std::exception& e) {
      load_error = e.what();
      http.stop();
    }
  });
  std::thread signals([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGINT || sig == SIGTERM) http.stop();
  });
  signals.detach();  // ends with the process
  http.listen();
  loader.join();
  loop.reset();  // the engine thread stops before the model it reads goes away (and before the events)
  if (!load_error.empty()) fail(load_error);
  std::fprintf(stderr, "[kvlm] serve: stopped\n");
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (continuous batching, prefix sharing)");
  add_model_options(sub, *a, kModelRequired | kModelTokenizer);
  sub->add_option("--model-name", a->model_name, "the name clients use in 'model' (default: the --model path)");
  sub->add_option("--host", a->host, "address to listen on (default 127.0.0.1)");
  sub->add_option("--port", a->port, "port (default 8080; 0 = any free port, printed at start)")->check(CLI::Range(0, 65535));
  sub->add_option("--max-seqs", a->max_seqs, "sequences decoded together (default 16)")->check(CLI::Range(1, 4096));
  sub->add_option("--ctx", a->ctx, "per-request context (default: the model's)")->check(CLI::Range(1, 1 << 24));
  sub->add_option("--chat-template", a->chat_template, "Jinja chat template file (default: the model's own)");
  add_kv_codec_options(sub, *a);
  add_kv_pool_options(sub, *a);
  add_kv_tier_options(sub, *a);
  sub->add_option("--max-batch-tokens", a->max_batch_tokens, "tokens computed per step (default 4096)")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--http-threads", a->http_threads, "HTTP worker threads: an open connection holds one, asleep while it waits (default: the larger of 64 and 2 x --max-seqs + 4)")
      ->check(CLI::Range(1, 1024));
  sub->add_flag("--no-prefix-cache", a->no_prefix_cache, "compute every prompt in full (for comparisons)");
  sub->add_option("--api-key", a->api_keys, "accept this API key (repeatable; each key is a tenant)");
  sub->add_option("--api-key-file", a->api_key_file, "file of API keys, one per line");
  sub->add_flag("--metrics-need-key", a->metrics_need_key, "require an API key for /metrics too");
  sub->add_option("--max-pending-connections", a->max_pending_connections,
                  "connections waiting for a free HTTP thread; beyond, 503 with Retry-After (default 64)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--max-queue", a->max_queue, "requests accepted at once; beyond, 429 with Retry-After (default 256)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--max-prompt-tokens", a->max_prompt_tokens, "longest prompt accepted (default: the context)")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--max-tokens-cap", a->max_tokens_cap, "largest max_tokens accepted (default: the context)")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--kv-snapshot-dir", a->kv_snapshot_dir,
                  "where requests' kv_save / kv_load conversation snapshots are kept (default: off)");
  sub->add_option("--request-timeout", a->request_timeout, "seconds a request may generate (default 600)")
      ->check(CLI::Range(0.1, 86400.0));
  sub->add_option("--io-timeout", a->io_timeout, "seconds to read a request or write a response (default 30)")
      ->check(CLI::Range(1, 3600));
  sub->add_option("--max-body", a->max_body, "largest request body in bytes (default 4 MiB)")->check(CLI::Range(1024, 1 << 30));
  sub->add_option("--kv-events", a->kv_events,
                  "publish KV block events in vLLM's format on this ZMQ PUB endpoint (e.g. tcp://*:5557)");
  sub->add_option("--kv-events-replay", a->kv_events_replay,
                  "serve missed event batches by sequence number on this ZMQ ROUTER endpoint (e.g. tcp://*:5558)");
  sub->add_option("--kv-events-topic", a->kv_events_topic, "the events' topic frame (default empty, as vLLM's)");
  sub->add_option("--kv-events-buffer", a->kv_events_buffer, "event batches kept for replay (default 10000)")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--prefix-hash", a->prefix_hash,
                  "block hash the events carry: salted (default, kvlm's own), sha256_cbor or sha256_cbor_64bit (vLLM's, "
                  "reproducible by an external indexer)");
  sub->add_option("--prefix-hash-seed", a->prefix_hash_seed,
                  "seed of the first block's parent hash, as vLLM's PYTHONHASHSEED (default: $PYTHONHASHSEED, else 0)");
  return [a] {
    if (a->prefix_hash_seed.empty()) {
      const char* env = std::getenv("PYTHONHASHSEED");
      a->prefix_hash_seed = env && *env ? env : "0";
    }
    return run_serve(*a);
  };
}

}  // namespace kvlm::cli
