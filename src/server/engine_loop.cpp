#include "server/engine_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace kvlm::server {

double steady_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

EngineLoop::EngineLoop(const Model& m, const EngineOptions& opt, Metrics* metrics)
    : model_(m), opt_(opt), metrics_(metrics), engine_(m, opt) {
  publish();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    stop_ = true;
  }
  q_cv_.notify_all();
  thread_.join();
  for (auto& [key, a] : active_) {  // wake anyone still waiting
    std::lock_guard<std::mutex> lock(a.job->mu);
    a.job->error = "the server is shutting down";
    for (ChoiceState& c : a.job->choices) c.finished = true;
    a.job->cv.notify_all();
  }
}

void EngineLoop::submit(const std::shared_ptr<Job>& job) {
  job->choices.assign(job->n, ChoiceState{});
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    incoming_.push_back(job);
  }
  q_cv_.notify_one();
}

void EngineLoop::poke() {
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    poked_ = true;
  }
  q_cv_.notify_one();
}

nlohmann::json EngineLoop::status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return status_;
}

// Blocks with a reference count above zero, counted one by one (not derived from the free list),
// so the fault tests can check that every refcount returned to zero.
int EngineLoop::referenced_blocks() {
  const BlockPool& pool = engine_.pool();
  int n = 0;
  for (int b = 0; b < pool.num_blocks(); ++b) n += pool.ref(b) > 0;
  return n;
}

void EngineLoop::publish() {
  KvLedger L = engine_.ledger();
  kv_bytes_held_ = L.private_bytes + L.shared_bytes;
  nlohmann::json s = {{"running", 0}, {"waiting", 0}, {"active_requests", active_.size()},
                      {"blocks_total", engine_.pool().num_blocks()}, {"blocks_free", engine_.pool().num_free()},
                      {"blocks_cached", engine_.pool().num_cached()},
                      {"blocks_referenced", referenced_blocks()}, {"engine_sequences", engine_.num_sequences()},
                      {"ledger", L.to_json()},
                      {"prompt_tokens", engine_.stats().prompt_tokens}, {"reused_tokens", engine_.stats().reused_tokens},
                      {"generated_tokens", engine_.stats().generated_tokens}, {"preemptions", engine_.stats().preemptions},
                      {"steps", engine_.stats().steps}, {"decode_gbps", decode_gbps_}};
  for (auto& [key, a] : active_)
    for (int id : a.seqs)
      if (id >= 0) {
        const Sequence& q = engine_.seq(id);
        if (q.state == SeqState::Running) s["running"] = s["running"].get<int>() + 1;
        if (q.state == SeqState::Waiting) s["waiting"] = s["waiting"].get<int>() + 1;
      }
  if (metrics_) {
    Metrics::EngineGauges g;
    g.running = s["running"];
    g.waiting = s["waiting"];
    const int total = engine_.pool().num_blocks(), free_blocks = engine_.pool().num_free();
    g.kv_usage = total ? static_cast<double>(total - free_blocks) / total : 0.0;
    const EngineStats& st = engine_.stats();
    g.prompt_tokens = st.prompt_tokens;
    g.reused_tokens = st.reused_tokens;
    g.generated_tokens = st.generated_tokens;
    g.preemptions = st.preemptions;
    g.blocks_total = total;
    g.blocks_free = free_blocks;
    g.blocks_cached = engine_.pool().num_cached();
    g.blocks_shared = L.bytes_per_block ? static_cast<int>(L.shared_bytes / L.bytes_per_block) : 0;
    g.kv_bytes = L.private_bytes + L.shared_bytes;
    g.residual_bytes = L.residual_bytes;
    g.page_dtype = L.page_dtype;
    g.decode_bytes = decode_bytes_;
    g.decode_seconds = decode_seconds_;
    g.decode_gbps = decode_gbps_;
    if (KvTiers* tiers = engine_.tiers()) {
      const KvTierStats t = tiers->stats();
      g.has_tiers = true;
      g.tier_bytes[0] = t.host_bytes;
      g.tier_bytes[1] = t.disk_bytes;
      g.tier_blocks[0] = t.host_blocks;
      g.tier_blocks[1] = t.disk_blocks;
      g.tier_hits[0] = t.host_hits;
      g.tier_hits[1] = t.disk_hits;
      g.tier_misses = t.misses;
      if (t.has_remote) {
        g.tiers = 3;
        g.tier_hits[2] = t.remote_hits;
        g.remote_up = t.remote_up;
        g.remote_written = t.remote_written;
        g.remote_failures = t.remote_failures;
      }
      for (int r = 0; r < kKvRejectReasons; ++r) g.tier_rejected[kv_reject_name(static_cast<KvReject>(r))] = t.rejected[r];
    }
    metrics_->set_engine(g);
  }
  std::lock_guard<std::mutex> lock(status_mu_);
  status_ = std::move(s);
}

void EngineLoop::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(q_mu_);
      auto woken = [&] { return stop_ || poked_ || !incoming_.empty() || engine_.has_work(); };
      if (!engine_.tiers()) {
        q_cv_.wait(lock, woken);
      } else if (!q_cv_.wait_for(lock, std::chrono::milliseconds(500), woken)) {
        // Idle with tiers: the disk writer still lands blocks; /metrics and /v1/kv follow it.
        lock.unlock();
        publish();
        continue;
      }
      if (stop_) return;
      poked_ = false;
    }
    admit_new();
    apply_cancels();
    if (engine_.has_work()) {
      std::vector<StepEvent> events;
      try {
        const long computed_before = engine_.stats().computed_tokens;
        const double t0 = steady_ms();
        events = engine_.step();
        const double seconds = (steady_ms() - t0) / 1000.0;
        // A pure decode step computes one token for each sequence that produced one; a step
        // with prefill work computes more, and is left out.
        const long computed = engine_.stats().computed_tokens - computed_before;
        if (!events.empty() && computed == static_cast<long>(events.size()) && seconds > 0) {
          const double bytes = static_cast<double>(model_.active_weight_bytes() + kv_bytes_held_);
          decode_bytes_ += bytes;
          decode_seconds_ += seconds;
          const double gbps = bytes / seconds / 1e9;
          decode_gbps_ = decode_gbps_ == 0 ? gbps : 0.9 * decode_gbps_ + 0.1 * gbps;  // smoothed over ~10 steps
        }
      } catch (const std::exception& e) {
        // A step that throws is an engine bug: fail every active job rather than spin on it.
        for (auto& [key, a] : active_) {
          std::lock_guard<std::mutex> lock(a.job->mu);
          a.job->error = std::string("internal error: ") + e.what();
        }
        for (auto& [key, a] : active_)
          for (size_t c = 0; c < a.seqs.size(); ++c) finish_choice(a, static_cast<int>(c), "error");
      }
      // A sequence that finished is answered as soon as it is handled: the metrics must count
      // its last token before its client can ask for them.
      if (std::any_of(events.begin(), events.end(), [](const StepEvent& ev) { return ev.finished; })) publish();
      for (const StepEvent& ev : events) handle(ev);
    }
    // Jobs whose choices are all finished leave; their sequences are forgotten.
    for (auto it = active_.begin(); it != active_.end();) {
      bool done;
      {
        std::lock_guard<std::mutex> lock(it->second.job->mu);
        done = it->second.job->all_finished();
      }
      if (done) {
        for (int id : it->second.seqs)
          if (id >= 0) {
            engine_.remove(id);
            seq_owner_.erase(id);
          }
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
    publish();
  }
}

void EngineLoop::admit_new() {
  std::deque<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    jobs.swap(incoming_);
  }
  for (auto& job : jobs) {
    int key = next_key_++;
    Active& a = active_[key];
    a.job = job;
    a.seqs.assign(job->n, -1);
    int id = engine_.add(job->params);
    a.seqs[0] = id;
    seq_owner_[id] = {key, 0};
    const Sequence& s = engine_.seq(id);
    if (s.state == SeqState::Failed) {
      {
        std::lock_guard<std::mutex> lock(job->mu);
        job->error = s.error;
      }
      for (int c = 0; c < job->n; ++c) finish_choice(a, c, "error");
    }
  }
}

void EngineLoop::apply_cancels() {
  for (auto& [key, a] : active_) {
    std::vector<int> to_cancel;
    {
      std::lock_guard<std::mutex> lock(a.job->mu);
      for (size_t c = 0; c < a.seqs.size(); ++c) {
        ChoiceState& ch = a.job->choices[c];
        if (!ch.finished && (a.job->cancelled || ch.cancel)) to_cancel.push_back(static_cast<int>(c));
      }
    }
    for (int c : to_cancel) {
      if (a.seqs[c] >= 0) engine_.cancel(a.seqs[c]);
      finish_choice(a, c, a.job->cancelled ? "cancelled" : "stop");
    }
  }
}

TokenLogprob EngineLoop::logprob_of(const Sequence& s, int token, int top) const {
  const std::vector<float>& l = s.last_logits;
  TokenLogprob t;
  t.token = token;
  double mx = *std::max_element(l.begin(), l.end()), z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(z);
  t.logprob = static_cast<float>(l[token] - lse);
  if (top > 0) {
    std::vector<int> idx(l.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
    const size_t k = std::min<size_t>(top, idx.size());
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    for (size_t i = 0; i < k; ++i) t.top.push_back({idx[i], static_cast<float>(l[idx[i]] - lse)});
  }
  return t;
}

void EngineLoop::finish_choice(Active& a, int choice, const std::string& reason) {
  std::lock_guard<std::mutex> lock(a.job->mu);
  ChoiceState& ch = a.job->choices[choice];
  if (ch.finished) return;
  ch.finished = true;
  ch.finish_reason = reason;
  a.job->started = true;
  a.job->cv.notify_all();
}

void EngineLoop::handle(const StepEvent& ev) {
  auto owner = seq_owner_.find(ev.seq);
  if (owner == seq_owner_.end()) return;
  auto found = active_.find(owner->second.first);
  if (found == active_.end()) return;
  Active& a = found->second;
  const int choice = owner->second.second;
  const Sequence& s = engine_.seq(ev.seq);
  if (ev.token < 0) {
    {
      std::lock_guard<std::mutex> lock(a.job->mu);
      if (a.job->error.empty()) a.job->error = s.error;
    }
    for (size_t c = 0; c < a.seqs.size(); ++c) {
      if (a.seqs[c] >= 0 && a.seqs[c] != ev.seq && !engine_.seq(a.seqs[c]).done()) engine_.cancel(a.seqs[c]);
      finish_choice(a, static_cast<int>(c), "error");
    }
    return;
  }
  auto push = [&](int c, const Sequence& q, int token) {
    std::lock_guard<std::mutex> lock(a.job->mu);
    ChoiceState& ch = a.job->choices[c];
    if (ch.finished) return;
    ch.tokens.push_back(token);
    ch.token_ms.push_back(steady_ms());
    if (a.job->want_logprobs) ch.logprobs.push_back(logprob_of(q, token, a.job->top_logprobs));
    a.job->started = true;
    a.job->cv.notify_all();
  };
  auto reason = [&](const Sequence& q, int token) {
    bool eos = q.params.stop_at_eos && (token == model_.cfg.eos_id || token == model_.cfg.bos_id);
    return eos ? "stop" : "length";
  };
  push(choice, s, ev.token);
  // n > 1: the other samples fork off the first one's prefill, sharing its KV blocks.
  if (choice == 0 && s.generated() == 1) {
    {
      std::lock_guard<std::mutex> lock(a.job->mu);
      a.job->cached_tokens = s.reused_tokens;
      a.job->snapshot_error = s.snapshot_error;
    }
    if (metrics_ && s.admitted_at_ms >= 0) metrics_->queue_time((s.admitted_at_ms - s.added_at_ms) / 1000.0);
    for (int c = 1; c < static_cast<int>(a.seqs.size()); ++c) {
      int id = engine_.fork(ev.seq, s.params.sampling.seed + static_cast<uint64_t>(c));
      a.seqs[c] = id;
      seq_owner_[id] = {owner->second.first, c};
      const Sequence& f = engine_.seq(id);
      push(c, f, f.tokens.back());
      if (f.done()) finish_choice(a, c, reason(f, f.tokens.back()));
    }
  }
  if (ev.finished && !s.snapshot_error.empty()) {  // kv_save happens as the sequence finishes
    std::lock_guard<std::mutex> lock(a.job->mu);
    a.job->snapshot_error = s.snapshot_error;
  }
  if (ev.finished) finish_choice(a, choice, reason(s, ev.token));
}

}  // namespace kvlm::server
