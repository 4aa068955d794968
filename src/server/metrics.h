// Prometheus metrics in the text exposition format, under the names vLLM exposes (routers and
// dashboards read those: vllm:num_requests_waiting, vllm:kv_cache_usage_perc, ...), plus kvlm's
// own kvlm:* series where the ledger knows more. Written by hand because Debian packages no
// Prometheus client for C++; tests run promtool over the output.
#pragma once
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvlm::server {

class KvEventPublisher;

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Appends `name`'s _bucket/_sum/_count lines with `labels` (already formatted, may be empty).
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<unsigned long long> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  unsigned long long count_ = 0;
};

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  // Per request, from the HTTP side.
  void request_finished(const std::string& finish_reason, double e2e_s, double ttft_s, const std::vector<double>& itl_s);
  void queue_time(double s);
  // Engine state after each step, from the engine thread.
  struct EngineGauges {
    int running = 0, waiting = 0;
    double kv_usage = 0;  // 0..1
    long prompt_tokens = 0, reused_tokens = 0, generated_tokens = 0, preemptions = 0;
    int blocks_total = 0, blocks_free = 0, blocks_cached = 0, blocks_shared = 0;
    size_t kv_bytes = 0, residual_bytes = 0;
    std::string page_dtype;
    double decode_bytes = 0, decode_seconds = 0, decode_gbps = 0;
    bool has_tiers = false;  // the series below appear only with KV tiers
    int tiers = 2;  // host, disk; and remote (Redis) with --kv-remote
    size_t tier_bytes[3] = {0, 0, 0}, tier_blocks[3] = {0, 0, 0};  // [host, disk, remote]
    long tier_hits[3] = {0, 0, 0}, tier_misses = 0;
    bool remote_up = false;
    long remote_written = 0, remote_failures = 0;
    std::map<std::string, long> tier_rejected;  // verification failures by reason
  };
  void set_engine(const EngineGauges& g);
  void rejected(const std::string& reason);  // requests refused before the engine (429, 4xx)
  void set_events(const KvEventPublisher* p) { events_ = p; }  // its counters join the output

  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::string labels_;  // model_name="..."
  EngineGauges engine_;
  std::map<std::string, unsigned long long> success_, rejected_;
  Histogram ttft_, itl_, e2e_, queue_;
  const KvEventPublisher* events_ = nullptr;
};

}  // namespace kvlm::server
