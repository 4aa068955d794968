#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "core/error.h"
#include "engine/forward.h"
#include "kv/kv_snapshot.h"
#include "kv/paged_cache.h"

namespace kvlm {

namespace {
double clock_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Engine::Engine(const Model& m, EngineOptions opt) : model_(m), opt_(opt) {
  if (opt_.context <= 0) opt_.context = m.cfg.max_seq_len;
  if (opt_.block_size < 1) fail("block size must be >= 1");
  if (opt_.num_blocks <= 0) opt_.num_blocks = (opt_.context + opt_.block_size - 1) / opt_.block_size;
  if (opt_.max_batch_tokens < 1) fail("max batch tokens must be >= 1");
  pages_ = std::make_unique<KvPages>(m.cfg, opt_.block_size, opt_.num_blocks, opt_.kv_dtype,
                                     Context::or_this_thread(opt_.exec).device());
  pool_ = std::make_unique<BlockPool>(*pages_);
  if (opt_.tiers.enabled()) {
    if (!opt_.prefix_cache) fail("KV tiers hold prefix blocks: they need the prefix cache");
    tiers_ = std::make_unique<KvTiers>(*pages_, m.fingerprint(), opt_.tiers);
    pool_->add_listener(tiers_.get());
  }
  if (opt_.events) {
    if (!opt_.prefix_cache) fail("KV events describe the prefix cache: they need it");
    hasher_ = std::make_unique<ExternalHasher>(opt_.prefix_hash, opt_.prefix_hash_seed);
    pool_events_ = std::make_unique<PoolEventForwarder>(*opt_.events, opt_.block_size);
    pool_->add_listener(pool_events_.get());
    if (tiers_) tiers_->set_event_sink(opt_.events);
  }
  if (streams()) {
    make_cache("");  // refuses a model without RoPE, quantized pages, or sinks + window past the context
    const int footprint = (opt_.sink_tokens + opt_.window + opt_.block_size - 1) / opt_.block_size;
    if (footprint > pool_->num_blocks())
      fail("a stream of ", opt_.sink_tokens, " sink tokens + a window of ", opt_.window, " needs ", footprint,
           " KV blocks but the pool has ", pool_->num_blocks());
  }
}

std::unique_ptr<KvCache> Engine::make_cache(const std::string& salt) const {
  PagedKvOptions o{opt_.context, salt, opt_.kv_residual};
  o.tiers = tiers_.get();
  o.hasher = hasher_.get();
  if (streams()) {
    o.sinks = opt_.sink_tokens;
    o.window = opt_.window;
    o.rope = &model_.rope;
  }
  return std::make_unique<PagedKvCache>(*pages_, *pool_, std::move(o));
}

int Engine::reserved_by_running() const {
  if (!streams()) return 0;
  int r = 0;
  for (int id : running_) r += seqs_.at(id)->cache->blocks_to_reserve();
  return r;
}

Engine::~Engine() {
  for (auto& [id, s] : seqs_) s->cache.reset();  // blocks go back before the pool dies
  if (pool_) pool_->clear_listeners();
}

double Engine::now_ms() const { return clock_ms(); }

int Engine::add(SeqParams p) {
  auto s = std::make_unique<Sequence>();
  s->id = next_id_++;
  s->sampler = std::make_unique<Sampler>(p.sampling);
  s->tokens = p.prompt;
  s->prompt_len = static_cast<int>(p.prompt.size());
  s->params = std::move(p);
  s->added_at_ms = now_ms();
  int id = s->id;
  Sequence& ref = *s;
  seqs_[id] = std::move(s);
  if (ref.tokens.empty()) {
    finish(ref, SeqState::Failed, "prompt is empty: it needs at least one token");
  } else if (const int limit = streams() ? opt_.window : opt_.context; static_cast<int>(ref.tokens.size()) > limit) {
    finish(ref, SeqState::Failed, "prompt of " + std::to_string(ref.tokens.size()) + " tokens is longer than the " +
                                      (streams() ? "window" : "context") + " of " + std::to_string(limit) + " tokens");
  } else if (auto bad = std::find_if(ref.tokens.begin(), ref.tokens.end(),
                                     [&](int t) { return t < 0 || t >= model_.cfg.vocab_size; });
             bad != ref.tokens.end()) {
    // Checked here, before any step: an id past the embedding would fail the whole batch's forward.
    finish(ref, SeqState::Failed, "prompt token id " + std::to_string(*bad) + " is outside the vocabulary of " +
                                      std::to_string(model_.cfg.vocab_size));
  } else if (ref.params.max_new_tokens <= 0) {
    finish(ref, SeqState::Finished);
  } else {
    stats_.prompt_tokens += ref.prompt_len;
    waiting_.push_back(id);
  }
  return id;
}

int Engine::fork(int id, uint64_t seed) {
  Sequence& p = *seqs_.at(id);
  // A sequence that finished on its first token (max_new_tokens 1, or EOS) can still be forked:
  // the fork re-samples that token and, if it must go on, is recomputed over the cached prefix.
  const bool finished_first = p.state == SeqState::Finished && p.generated() == 1;
  if ((p.state != SeqState::Running && !finished_first) || p.last_logits.empty() || p.generated() == 0)
    fail("fork needs a running sequence that has produced a token");
  auto s = std::make_unique<Sequence>();
  s->id = next_id_++;
  s->params = p.params;
  s->params.sampling.seed = seed;
  s->sampler = std::make_unique<Sampler>(s->params.sampling);
  s->tokens = p.tokens;
  s->prompt_len = p.prompt_len;
  s->last_logits = p.last_logits;
  s->ttft_ms = p.ttft_ms;
  s->added_at_ms = p.added_at_ms;
  s->tokens.back() = s->sampler->sample(s->last_logits.data(), model_.cfg.vocab_size, s->tokens.data(),
                                        static_cast<int>(s->tokens.size()) - 1, s->prompt_len);  // the token it replaces is not history
  int nid = s->id;
  Sequence& ref = *s;
  seqs_[nid] = std::move(s);
  if (!finished_first) {
    ref.cache = p.cache->fork();
    running_.push_back(nid);
    if (reserved_by_running() > pool_->num_free()) {  // streams: both now share blocks each may copy
      running_.pop_back();
      seqs_.erase(nid);
      fail("fork needs more KV blocks reserved than the pool has free");
    }
    ref.state = SeqState::Running;
    return nid;
  }
  const int tok = ref.tokens.back();
  const bool stop = ref.generated() >= ref.params.max_new_tokens || past_context(ref) ||
                    (ref.params.stop_at_eos && (tok == model_.cfg.eos_id || tok == model_.cfg.bos_id));
  if (stop) {
    ref.state = SeqState::Finished;
  } else {
    ref.state = SeqState::Waiting;
    waiting_.push_back(nid);
  }
  return nid;
}

void Engine::cancel(int id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail("no sequence ", id);
  if (!it->second->done()) finish(*it->second, SeqState::Cancelled);
}

void Engine::remove(int id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  if (!it->second->done()) finish(*it->second, SeqState::Cancelled);
  seqs_.erase(it);
}

const Sequence& Engine::seq(int id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail("no sequence ", id);
  return *it->second;
}

void Engine::evict_cached_prefixes() {
  std::vector<int> taken;  // allocating every free block evicts each cached one, oldest first
  while (pool_->num_free() > 0) taken.push_back(pool_->allocate());
  for (int b : taken) pool_->release(b);
}

bool Engine::has_work() const { return !waiting_.empty() || !running_.empty(); }

void Engine::finish(Sequence& s, SeqState st, const std::string& error) {
  s.state = st;
  s.error = error;
  if (st == SeqState::Finished && !s.params.kv_save.empty() && s.cache) {
    try {
      save_kv_snapshot(dynamic_cast<const PagedKvCache&>(*s.cache), s.tokens, model_.fingerprint(), s.params.salt,
                       s.params.kv_save);
    } catch (const KvlmError& e) {  // the tokens stand; the caller learns the file was not written
      s.snapshot_error = e.what();
    }
  }
  s.cache.reset();  // full blocks stay in the pool as cached prefixes
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s.id), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), s.id), running_.end());
}

void Engine::preempt(Sequence& s) {
  // A stream past its window cannot be recomputed as it was (what it dropped shaped what it
  // kept). Admission reserves a stream's blocks so this never happens; if it did, it fails alone.
  if (streams() && static_cast<int>(s.tokens.size()) > opt_.window) {
    finish(s, SeqState::Failed, "a stream past its window was preempted and cannot be recomputed");
    return;
  }
  // Recompute later: drop its blocks, keep its tokens; it rejoins the head of the queue.
  s.cache.reset();
  s.state = SeqState::Waiting;
  ++s.preemptions;
  ++stats_.preemptions;
  running_.erase(std::remove(running_.begin(), running_.end(), s.id), running_.end());
  waiting_.push_front(s.id);
}

bool Engine::admit(Sequence& s, int& budget, int& taken, bool alone) {
  s.cache = make_cache(s.params.salt);
  int reused = -1;
  if (!s.params.kv_load.empty() && s.preemptions == 0) {
    try {
      reused = restore_kv_snapshot(dynamic_cast<PagedKvCache&>(*s.cache), s.tokens, model_.fingerprint(), s.params.salt,
                                   s.params.kv_load);
    } catch (const KvlmError& e) {  // refused: never used, the prompt is computed instead
      s.snapshot_error = e.what();
    }
  }
  if (reused <= 0) reused = opt_.prefix_cache ? s.cache->adopt_prefix(s.tokens) : 0;
  int n = todo(s);
  // A stream reserves its whole footprint (adopting a prefix may have raised the reservations of
  // the streams it shares with, so they are counted afresh); anything else takes this step's blocks.
  const int takes = step_takes(s, n);
  const int reserved = reserved_by_running() + s.cache->blocks_to_reserve();
  // An oversized prompt may run alone rather than never.
  if ((n > budget && !alone) || taken + takes + reserved > pool_->num_free()) {
    s.cache.reset();
    return false;
  }
  taken += takes;
  if (s.preemptions == 0) {
    s.admitted_at_ms = now_ms();
    s.reused_tokens = std::min(reused, s.prompt_len);
    stats_.reused_tokens += s.reused_tokens;
  }
  budget -= n;
  s.state = SeqState::Running;
  running_.push_back(s.id);
  return true;
}

std::vector<StepEvent> Engine::step() {
  std::vector<StepEvent> events;
  const int vocab = model_.cfg.vocab_size;
  int budget = opt_.max_batch_tokens;
  std::vector<Sequence*> batch;
  // Blocks behind a sliding window go back now: counted as "freed later" instead, an admission
  // below could adopt one of them as a cached prefix and leave the pool a block short.
  for (int id : running_) seqs_.at(id)->cache->release_unreachable();
  // Blocks spoken for: what the scheduled sequences take in prepare() (`taken`), and the
  // reservations of running streams, which cover their own steps.
  int taken = 0;
  // 1. Running sequences first, oldest first; when the pool runs dry, the newest is preempted.
  for (size_t i = 0; i < running_.size();) {
    Sequence& s = *seqs_.at(running_[i]);
    int n = todo(s);
    if (step_takes(s, n) + taken + reserved_by_running() > pool_->num_free()) {
      preempt(*seqs_.at(running_.back()));  // never one already in the batch (those sit before i)
      continue;
    }
    if (n > budget && !batch.empty()) break;
    budget -= n;
    taken += step_takes(s, n);
    batch.push_back(&s);
    ++i;
  }
  // 2. Admit waiting sequences in order while they fit. A prompt that shares a full block with
  // one being computed in this very step waits one step and then finds it in the prefix cache:
  // prompts that arrive together compute their common prefix once.
  std::set<BlockHash> inflight;
  auto note_inflight = [&](const Sequence& s) {
    if (!opt_.prefix_cache) return;
    for (const BlockHash& h : block_hashes(s))
      if (pool_->lookup(h) < 0) inflight.insert(h);
  };
  for (Sequence* s : batch)
    if (todo(*s) > 1) note_inflight(*s);
  if (batch.size() == running_.size()) {
    while (!waiting_.empty()) {
      if (opt_.max_seqs > 0 && static_cast<int>(running_.size()) >= opt_.max_seqs) break;
      Sequence& s = *seqs_.at(waiting_.front());
      if (!inflight.empty()) {
        bool shares = false;
        for (const BlockHash& h : block_hashes(s))
          if (inflight.count(h)) shares = true;
        if (shares) {
          ++stats_.deferred_admissions;
          break;
        }
      }
      int total_need = (static_cast<int>(s.tokens.size()) + opt_.block_size - 1) / opt_.block_size;  // streams: checked at start
      if (total_need > pool_->num_blocks()) {  // can never fit: fail it, keep serving the others
        int id = s.id;
        finish(s, SeqState::Failed, "needs " + std::to_string(total_need) + " KV blocks but the pool has " +
                                        std::to_string(pool_->num_blocks()));
        events.push_back({id, -1, true});
        continue;
      }
      if (!admit(s, budget, taken, batch.empty())) break;
      waiting_.pop_front();
      batch.push_back(&s);
      note_inflight(s);
    }
  }
  if (batch.empty()) return events;

  // 3. One forward over every scheduled sequence.
  std::vector<SeqChunk> chunks;
  for (Sequence* s : batch) {
    int n = todo(*s);
    chunks.push_back({s->cache.get(), s->tokens.data() + s->cache->consumed(), n, LogitsFor::Last});
    stats_.computed_tokens += n;
  }
  std::vector<float> logits;
  forward_batch(Context::or_this_thread(opt_.exec), model_, chunks, logits);
  ++stats_.steps;

  // 4. Sample, append, finish.
  const double t = now_ms();
  for (size_t i = 0; i < batch.size(); ++i) {
    Sequence& s = *batch[i];
    s.cache->publish(s.tokens);
    s.last_logits.assign(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
    int tok;
    try {
      tok = s.sampler->sample(s.last_logits.data(), vocab, s.tokens.data(), static_cast<int>(s.tokens.size()), s.prompt_len);
    } catch (const KvlmError& e) {  // this sequence fails; the others in the batch go on
      finish(s, SeqState::Failed, e.what());
      events.push_back({s.id, -1, true});
      continue;
    }
    s.tokens.push_back(tok);
    ++stats_.generated_tokens;
    if (s.ttft_ms < 0) s.ttft_ms = t - s.added_at_ms;
    bool stop = s.generated() >= s.params.max_new_tokens || past_context(s) ||
                (s.params.stop_at_eos && (tok == model_.cfg.eos_id || tok == model_.cfg.bos_id));
    events.push_back({s.id, tok, stop});
    if (stop) finish(s, SeqState::Finished);
  }
  return events;
}

std::vector<BlockHash> Engine::block_hashes(const Sequence& s) const {
  std::vector<BlockHash> out;
  const int bs = opt_.block_size;
  for (int b = 0; (b + 1) * bs <= static_cast<int>(s.tokens.size()); ++b)
    out.push_back(chain_block_hash(out.empty() ? nullptr : &out.back(), s.params.salt, s.tokens.data() + b * bs, bs));
  return out;
}

KvLedger Engine::ledger() const {
  std::vector<std::pair<int, const KvCache*>> caches;
  for (auto& [id, s] : seqs_)
    if (s->cache) caches.push_back({id, s->cache.get()});
  KvLedger L = compute_ledger(*pool_, *pages_, caches);
  if (tiers_) L.tiers = tiers_->stats().to_json();
  return L;
}

}  // namespace kvlm
