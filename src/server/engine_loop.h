// The engine's own thread. HTTP handlers never touch the Engine: they submit a Job and read
// what the loop writes into it. One step runs for every sequence at once, and a job submitted
// meanwhile joins the running batch at the next step (continuous batching).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/metrics.h"

namespace kvlm::server {

double steady_ms();  // the clock token times and request times are taken on

struct TokenLogprob {
  int token = 0;
  float logprob = 0;
  std::vector<std::pair<int, float>> top;  // alternatives, most likely first
};

// One of a request's n samples, as the engine produces it.
struct ChoiceState {
  std::vector<int> tokens;
  std::vector<double> token_ms;        // steady-clock time each token was produced
  std::vector<TokenLogprob> logprobs;  // one per token when asked for
  bool finished = false;
  std::string finish_reason;  // "stop" (EOS, or a stop string) | "length" | "error"
  bool cancel = false;        // set by the HTTP side: a stop string matched
};

struct Job {
  // Set before submit, read-only afterwards.
  SeqParams params;
  int n = 1;
  bool want_logprobs = false;
  int top_logprobs = 0;

  // Written by the engine thread under mu; readers wait on cv.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ChoiceState> choices;
  int cached_tokens = 0;
  std::string snapshot_error;  // kv_load refused (the prompt was computed) or kv_save not written
  bool started = false;  // first token produced (or failed)
  std::string error;     // the engine failed it (then every choice is finished)
  bool cancelled = false;  // the client went away: stop everything

  bool all_finished() const {
    for (const ChoiceState& c : choices)
      if (!c.finished) return false;
    return true;
  }
};

class EngineLoop {
 public:
  EngineLoop(const Model& m, const EngineOptions& opt, Metrics* metrics = nullptr);
  ~EngineLoop();

  void submit(const std::shared_ptr<Job>& job);
  // Wakes the loop after a job's cancel flags changed (flags are set under job->mu).
  void poke();
  // A snapshot taken after every step: queue lengths, pool blocks, the ledger.
  nlohmann::json status() const;
  const EngineOptions& options() const { return opt_; }

 private:
  struct Active {
    std::shared_ptr<Job> job;
    std::vector<int> seqs;  // per choice; -1 until forked
  };
  void run();
  void admit_new();
  void apply_cancels();
  void handle(const StepEvent& ev);
  void finish_choice(Active& a, int choice, const std::string& reason);
  TokenLogprob logprob_of(const Sequence& s, int token, int top) const;
  void publish();
  int referenced_blocks();

  const Model& model_;
  EngineOptions opt_;
  Metrics* metrics_;
  // Decode bandwidth: bytes a pure decode step reads (weights + the KV of its sequences) over
  // its time; kvlm:decode_gbps on /metrics.
  double decode_bytes_ = 0, decode_seconds_ = 0, decode_gbps_ = 0;
  size_t kv_bytes_held_ = 0;  // at the last publish
  Engine engine_;
  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<std::shared_ptr<Job>> incoming_;
  bool stop_ = false, poked_ = false;
  std::map<int, std::pair<int, int>> seq_owner_;  // seq id -> (active index key, choice)
  std::map<int, Active> active_;                  // key -> job
  int next_key_ = 0;
  mutable std::mutex status_mu_;
  nlohmann::json status_;
  std::thread thread_;
};

}  // namespace kvlm::server
