#include "server/metrics.h"

#include <cmath>
#include <cstdio>

#include "server/kv_event_publisher.h"

namespace kvlm::server {

namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A label value as the exposition format wants it: backslash, quote and newline escaped.
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void head(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// A series with one sample: its HELP and TYPE lines, then the sample.
void one(std::string& out, const char* name, const char* type, const char* help, const std::string& labels,
         const std::string& value) {
  head(out, name, type, help);
  out += std::string(name) + labels + " " + value + "\n";
}

std::string with(const std::string& labels, const std::string& more) {
  return "{" + labels + (more.empty() ? "" : "," + more) + "}";
}

const std::vector<double> kLatency = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                      2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  unsigned long long cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    out += name + "_bucket" + with(labels, "le=\"" + le + "\"") + " " + std::to_string(cum) + "\n";
  }
  out += name + "_sum" + with(labels, "") + " " + num(sum_) + "\n";
  out += name + "_count" + with(labels, "") + " " + std::to_string(count_) + "\n";
}

Metrics::Metrics(std::string model_name)
    : labels_("model_name=\"" + escape(model_name) + "\""), ttft_(kLatency), itl_(kLatency), e2e_(kLatency), queue_(kLatency) {
  success_["stop"] = success_["length"] = 0;
}

void Metrics::request_finished(const std::string& finish_reason, double e2e_s, double ttft_s, const std::vector<double>& itl_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ++success_[finish_reason];
  e2e_.observe(e2e_s);
  if (ttft_s >= 0) ttft_.observe(ttft_s);
  for (double x : itl_s) itl_.observe(x);
}

void Metrics::queue_time(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.observe(s);
}

void Metrics::set_engine(const EngineGauges& g) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_ = g;
}

void Metrics::rejected(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_[reason];
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string o;
  const std::string L = "{" + labels_ + "}";
  const EngineGauges& g = engine_;
  one(o, "vllm:num_requests_running", "gauge", "Sequences in the running batch.", L, std::to_string(g.running));
  one(o, "vllm:num_requests_waiting", "gauge", "Sequences waiting to be admitted.", L, std::to_string(g.waiting));
  one(o, "vllm:kv_cache_usage_perc", "gauge", "Fraction of KV blocks held by sequences (1 = full).", L, num(g.kv_usage));
  one(o, "vllm:prompt_tokens_total", "counter", "Prompt tokens admitted.", L, std::to_string(g.prompt_tokens));
  one(o, "vllm:generation_tokens_total", "counter", "Tokens generated.", L, std::to_string(g.generated_tokens));
  one(o, "vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", L, std::to_string(g.prompt_tokens));
  one(o, "vllm:prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.", L, std::to_string(g.reused_tokens));
  one(o, "vllm:num_preemptions_total", "counter", "Sequences preempted for KV memory.", L, std::to_string(g.preemptions));
  head(o, "vllm:request_success_total", "counter", "Requests finished, by finish reason.");
  for (const auto& [reason, n] : success_)
    o += "vllm:request_success_total" + with(labels_, "finished_reason=\"" + escape(reason) + "\"") + " " + std::to_string(n) + "\n";
  head(o, "vllm:time_to_first_token_seconds", "histogram", "Time to the first generated token.");
  ttft_.render(o, "vllm:time_to_first_token_seconds", labels_);
  head(o, "vllm:inter_token_latency_seconds", "histogram", "Time between generated tokens.");
  itl_.render(o, "vllm:inter_token_latency_seconds", labels_);
  head(o, "vllm:e2e_request_latency_seconds", "histogram", "Request latency, arrival to last token.");
  e2e_.render(o, "vllm:e2e_request_latency_seconds", labels_);
  head(o, "vllm:request_queue_time_seconds", "histogram", "Time from arrival to admission into the batch.");
  queue_.render(o, "vllm:request_queue_time_seconds", labels_);
  head(o, "kvlm:kv_blocks", "gauge", "KV pool blocks by state (used includes shared).");
  for (auto [state, n] : {std::pair<const char*, int>{"free", g.blocks_free}, {"used", g.blocks_total - g.blocks_free},
                          {"cached", g.blocks_cached}, {"shared", g.blocks_shared}})
    o += "kvlm:kv_blocks" + with(labels_, std::string("state=\"") + state + "\"") + " " + std::to_string(n) + "\n";
  head(o, "kvlm:kv_bytes", "gauge", "KV bytes held by sequences, by page precision.");
  o += "kvlm:kv_bytes" + with(labels_, "precision=\"" + escape(g.page_dtype) + "\"") + " " + std::to_string(g.kv_bytes) + "\n";
  one(o, "kvlm:kv_residual_bytes", "gauge", "Bytes of f32 residual rows kept beside quantized pages.", L, std::to_string(g.residual_bytes));
  one(o, "kvlm:decode_bytes_total", "counter", "Bytes read by pure decode steps: weights plus the KV of their sequences.", L, num(g.decode_bytes));
  one(o, "kvlm:decode_seconds_total", "counter", "Time spent in pure decode steps.", L, num(g.decode_seconds));
  one(o, "kvlm:decode_gbps", "gauge", "Decode bandwidth over the last ~10 decode steps, in GB/s (rate of the two counters above over longer windows).", L, num(g.decode_gbps));
  if (g.has_tiers) {
    const char* tiers[3] = {"host", "disk", "remote"};
    head(o, "kvlm:kv_tier_bytes", "gauge", "Bytes of prefix blocks held below the pool, by local tier.");
    for (int t = 0; t < 2; ++t)
      o += "kvlm:kv_tier_bytes" + with(labels_, std::string("tier=\"") + tiers[t] + "\"") + " " + std::to_string(g.tier_bytes[t]) + "\n";
    head(o, "kvlm:kv_tier_blocks", "gauge", "Prefix blocks held below the pool, by local tier.");
    for (int t = 0; t < 2; ++t)
      o += "kvlm:kv_tier_blocks" + with(labels_, std::string("tier=\"") + tiers[t] + "\"") + " " + std::to_string(g.tier_blocks[t]) + "\n";
    head(o, "kvlm:kv_tier_hits_total", "counter", "Blocks brought back into the pool from a tier, by tier.");
    for (int t = 0; t < g.tiers; ++t)
      o += "kvlm:kv_tier_hits_total" + with(labels_, std::string("tier=\"") + tiers[t] + "\"") + " " + std::to_string(g.tier_hits[t]) + "\n";
    one(o, "kvlm:kv_tier_misses_total", "counter", "Prefix blocks looked up below the pool and found in no tier.", L, std::to_string(g.tier_misses));
    head(o, "kvlm:kv_tier_verification_failures_total", "counter",
         "Blocks from a tier refused (and recomputed), by reason: checksum, truncated, model, codec, tenant, hash, io.");
    for (const auto& [reason, n] : g.tier_rejected)
      o += "kvlm:kv_tier_verification_failures_total" + with(labels_, "reason=\"" + escape(reason) + "\"") + " " + std::to_string(n) + "\n";
    if (g.tiers == 3) {
      one(o, "kvlm:kv_remote_up", "gauge", "1 while the Redis KV tier is connected.", L, std::to_string(g.remote_up ? 1 : 0));
      one(o, "kvlm:kv_remote_written_total", "counter", "Blocks this replica wrote to the Redis KV tier.", L, std::to_string(g.remote_written));
      one(o, "kvlm:kv_remote_failures_total", "counter", "Redis connections refused or lost, and commands failed.", L, std::to_string(g.remote_failures));
    }
  }
  if (events_) {
    const KvEventStats e = events_->stats();
    one(o, "kvlm:kv_event_batches_total", "counter", "KV event batches published (ZMQ).", L, std::to_string(e.batches));
    one(o, "kvlm:kv_events_total", "counter", "KV events published (ZMQ); a run of blocks is one event.", L, std::to_string(e.events));
    one(o, "kvlm:kv_events_dropped_total", "counter", "KV events dropped because the publisher's queue was full.", L, std::to_string(e.dropped));
    one(o, "kvlm:kv_event_replays_total", "counter", "Replay requests served.", L, std::to_string(e.replays));
  }
  head(o, "kvlm:requests_rejected_total", "counter", "Requests refused before reaching the engine, by reason.");
  if (rejected_.empty()) o += "kvlm:requests_rejected_total" + with(labels_, "reason=\"none\"") + " 0\n";
  for (const auto& [reason, n] : rejected_)
    o += "kvlm:requests_rejected_total" + with(labels_, "reason=\"" + escape(reason) + "\"") + " " + std::to_string(n) + "\n";
  return o;
}

}  // namespace kvlm::server
