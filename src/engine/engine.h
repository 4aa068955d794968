// Engine: many sequences over one paged KV pool. Each step() runs one batched forward that
// computes, for every scheduled sequence, the tokens it still lacks (its whole prompt when
// admitted, one token when decoding), so weights are read once per step for all of them.
// The scheduler thinks in "tokens computed vs total", not in prefill/decode phases.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "kernels/context.h"
#include "kv/ledger.h"
#include "kv/kv_cache.h"
#include "kv/block_events.h"
#include "kv/kv_tiers.h"
#include "model/model.h"

namespace kvlm {

struct EngineOptions {
  int block_size = 16;
  int num_blocks = 0;            // pool size; 0 = enough for one full context
  bool prefix_cache = true;
  int max_batch_tokens = 4096;   // tokens computed per step, all sequences together
  int context = 0;               // per-sequence limit; 0 = the model's max_seq_len
  DType kv_dtype = DType::F32;  // precision of the pages
  int kv_residual = 128;         // newest positions each sequence also keeps at f32 (quantized pages)
  int max_seqs = 0;              // sequences decoded together; 0 = as many as the pool holds
  // Attention sinks (StreamingLLM) with window > 0: every sequence keeps its first sink_tokens
  // and its last `window` tokens, drops the middle, and may generate past the context. Its
  // blocks are bounded, so admission reserves them all: a stream is never preempted.
  int sink_tokens = 4;
  int window = 0;
  KvTierOptions tiers = {};      // host-memory, disk and Redis tiers below the pool (kv/kv_tiers.h)
  // Block events (kv/block_events.h): where they go (null = none), and the external hash they carry.
  BlockEventSink* events = nullptr;
  PrefixHashScheme prefix_hash = PrefixHashScheme::Salted;
  std::string prefix_hash_seed = "0";
  Context* exec = nullptr;       // execution context of the steps; null = the stepping thread's default
};

struct SeqParams {
  std::vector<int> prompt;
  int max_new_tokens = 128;
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::string salt;  // tenant: prefixes are shared only between equal salts
  // Snapshots (kv/kv_snapshot.h): restore the KV of the longest common prefix from this file at
  // admission (instead of the prefix cache), and/or save the sequence's KV here when it finishes.
  std::string kv_load = "", kv_save = "";
};

enum class SeqState { Waiting, Running, Finished, Cancelled, Failed };

struct Sequence {
  int id = -1;
  SeqParams params;
  std::vector<int> tokens;  // prompt + generated
  int prompt_len = 0;
  SeqState state = SeqState::Waiting;
  std::string error;                     // why it Failed
  std::string snapshot_error;            // why kv_load was refused (then recomputed) or kv_save failed
  std::unique_ptr<KvCache> cache;        // null while waiting
  std::unique_ptr<Sampler> sampler;
  std::vector<float> last_logits;        // [vocab] from its latest step (fork resamples from it)
  int reused_tokens = 0;                 // prompt tokens taken from the prefix cache
  int preemptions = 0;
  double ttft_ms = -1;                   // add() to first token
  double added_at_ms = 0;
  double admitted_at_ms = -1;            // first admission into the running batch

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  bool done() const { return state == SeqState::Finished || state == SeqState::Cancelled || state == SeqState::Failed; }
};

struct StepEvent {
  int seq;
  int token;     // -1 when the sequence failed
  bool finished;
};

struct EngineStats {
  long steps = 0, prompt_tokens = 0, reused_tokens = 0, computed_tokens = 0, generated_tokens = 0, preemptions = 0;
  long deferred_admissions = 0;  // waits of one step to share a prefix another prompt is computing
  double prefix_hit_rate() const { return prompt_tokens ? static_cast<double>(reused_tokens) / prompt_tokens : 0.0; }
};

class Engine {
 public:
  Engine(const Model& m, EngineOptions opt);
  ~Engine();

  int add(SeqParams p);
  // A new sequence continuing from `id`'s current state, sharing its KV blocks (copy-on-write).
  // Its pending token is re-sampled with its own seed, so K forks give K continuations.
  int fork(int id, uint64_t seed);
  void cancel(int id);  // stops it and frees its blocks; other sequences are untouched
  void remove(int id);  // forgets a done sequence

  std::vector<StepEvent> step();
  // Pushes every cached prefix out of the pool (down to the tiers, when there are any), keeping
  // the blocks sequences hold: a cold pool with warm tiers (benchmarks, an operator's reset).
  void evict_cached_prefixes();
  bool has_work() const;

  const Sequence& seq(int id) const;
  int num_sequences() const { return static_cast<int>(seqs_.size()); }  // not yet removed
  KvLedger ledger() const;
  const EngineStats& stats() const { return stats_; }
  BlockPool& pool() { return *pool_; }
  KvPages& pages() { return *pages_; }
  KvTiers* tiers() { return tiers_.get(); }  // null without tiers
  const EngineOptions& options() const { return opt_; }

 private:
  void preempt(Sequence& s);
  void finish(Sequence& s, SeqState st, const std::string& error = "");
  bool admit(Sequence& s, int& budget, int& taken, bool alone);
  std::unique_ptr<KvCache> make_cache(const std::string& salt) const;
  bool streams() const { return opt_.window > 0; }
  // A stream never runs out of context; anything else stops at it.
  bool past_context(const Sequence& s) const { return !streams() && static_cast<int>(s.tokens.size()) >= opt_.context; }
  // Blocks the running sequences may still take beyond those they hold (sink streams).
  int reserved_by_running() const;
  // Blocks prepare() takes for s's next n tokens beyond its reservation: none for a stream
  // (its reservation covers them), else what the step stores.
  static int step_takes(const Sequence& s, int n) {
    return s.cache->blocks_to_reserve() > 0 ? 0 : s.cache->blocks_needed(n);
  }
  // Chained hashes of the full blocks of s's tokens (the prefix-cache keys).
  std::vector<BlockHash> block_hashes(const Sequence& s) const;
  int todo(const Sequence& s) const { return static_cast<int>(s.tokens.size() - s.cache->consumed()); }
  double now_ms() const;

  const Model& model_;
  EngineOptions opt_;
  std::unique_ptr<KvPages> pages_;  // the backend's storage of every block
  std::unique_ptr<BlockPool> pool_;  // block ids, reference counts, the prefix index
  std::unique_ptr<KvTiers> tiers_;   // where evicted prefix blocks go, and come back from
  std::unique_ptr<ExternalHasher> hasher_;             // with events: the keys they carry
  std::unique_ptr<PoolEventForwarder> pool_events_;    // with events: the pool's changes as events
  std::map<int, std::unique_ptr<Sequence>> seqs_;
  std::deque<int> waiting_;
  std::vector<int> running_;  // admission order
  int next_id_ = 0;
  EngineStats stats_;
};

}  // namespace kvlm
