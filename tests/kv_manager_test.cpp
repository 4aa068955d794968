// The KV-manager interface (kv/kv_cache.h): every layout forks, clears and reports itself through
// it, and attention sinks run in the paged layout and the batched engine with the same logits
// and tokens as the contiguous sink cache, shared blocks and cached prefixes included.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/generator.h"
#include "kv/block_pool.h"
#include "kv/ledger.h"
#include "kv/paged_cache.h"
#include "kv/sink_cache.h"
#include "test_support.h"

namespace kvlm {
namespace {

std::vector<int> tokens(int n, int seed) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + seed * 11 + 5) % 256);
  return t;
}

// Feeds ids in chunks of `chunk` (the last may be shorter); returns each chunk's last logits.
std::vector<std::vector<float>> feed(const Model& m, KvCache& kv, const std::vector<int>& ids, int chunk) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    const int n = static_cast<int>(std::min<size_t>(chunk, ids.size() - i));
    out.emplace_back();
    forward(m, kv, ids.data() + i, n, LogitsFor::Last, out.back());
  }
  return out;
}

PagedKvOptions sink_options(const Model& m, int sinks, int window) {
  PagedKvOptions o;
  o.sinks = sinks;
  o.window = window;
  o.rope = &m.rope;
  return o;
}

// Rows move down through the block table exactly as they move in the contiguous buffer, and each
// moved key is rotated the same way: the logits are bit-identical, eviction after eviction, with
// block sizes that do and do not divide the sinks, decode and chunked prefill alike.
TEST(PagedSinks, LogitsEqualTheContiguousSinkCache) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");  // llama3-scaled RoPE, GQA
  const std::vector<int> ids = tokens(90, 1);
  for (int bs : {1, 3, 4, 16})
    for (int chunk : {1, 3}) {
      const int sinks = 2, window = 9;
      SinkKvCache want_kv(m->cfg, m->rope, sinks, window);
      KvPages pages(m->cfg, bs, 64);
      BlockPool pool(pages);
      PagedKvCache got_kv(pages, pool, sink_options(*m, sinks, window));
      auto want = feed(*m, want_kv, ids, chunk), got = feed(*m, got_kv, ids, chunk);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(test::max_abs_diff(got[i], want[i]), 0.0f) << "block size " << bs << " chunk " << chunk << " step " << i;
      EXPECT_EQ(got_kv.evicted(), want_kv.evicted());
      EXPECT_EQ(got_kv.consumed(), static_cast<long>(ids.size()));
      EXPECT_EQ(got_kv.length(), want_kv.length());
      // Bounded: the blocks of sinks + window, no more, and every other block back in the pool.
      EXPECT_LE(got_kv.live_blocks(), (sinks + window + bs - 1) / bs);
      EXPECT_EQ(pool.num_blocks() - pool.num_free(), got_kv.live_blocks());
      pool.check_invariants();
    }
}

// A fork shares every block; the first eviction on either side copies what it rewrites, so both
// continue exactly as two independent sink caches would. A prefix published before any eviction
// is adopted by a new stream, and the publisher's later evictions leave it untouched.
TEST(PagedSinks, ForksAndAdoptedPrefixesAreNeverRewrittenUnderAnother) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  const int sinks = 4, window = 16, bs = 4;
  KvPages pages(m->cfg, bs, 64);
  BlockPool pool(pages);
  PagedKvCache a(pages, pool, sink_options(*m, sinks, window));
  SinkKvCache a_ref(m->cfg, m->rope, sinks, window);
  const std::vector<int> head = tokens(14, 2);  // under sinks + window: nothing evicted yet
  feed(*m, a, head, 14);
  feed(*m, a_ref, head, 14);
  a.publish(head);
  ASSERT_GT(pool.num_cached(), 0);
  // B adopts A's published prefix blocks.
  PagedKvCache b(pages, pool, sink_options(*m, sinks, window));
  std::vector<int> b_ids = head;
  b_ids.push_back(7);
  const int adopted = b.adopt_prefix(b_ids);
  ASSERT_EQ(adopted, 12);
  auto fork = a.fork();
  std::unique_ptr<KvCache> fork_ref = a_ref.fork();
  // A, its fork and B all run on, evicting many times over.
  const std::vector<int> more_a = tokens(40, 3), more_f = tokens(40, 4), more_b = tokens(40, 5);
  auto ga = feed(*m, a, more_a, 1), wa = feed(*m, a_ref, more_a, 1);
  auto gf = feed(*m, *fork, more_f, 1), wf = feed(*m, *fork_ref, more_f, 1);
  SinkKvCache b_ref(m->cfg, m->rope, sinks, window);
  std::vector<int> b_all(b_ids.begin(), b_ids.end());
  b_all.insert(b_all.end(), more_b.begin(), more_b.end());
  auto wb = feed(*m, b_ref, b_all, 1);
  std::vector<int> b_rest(b_all.begin() + adopted, b_all.end());
  auto gb = feed(*m, b, b_rest, 1);
  for (size_t i = 0; i < ga.size(); ++i) {
    ASSERT_EQ(test::max_abs_diff(ga[i], wa[i]), 0.0f) << "publisher, step " << i;
    ASSERT_EQ(test::max_abs_diff(gf[i], wf[i]), 0.0f) << "fork, step " << i;
  }
  for (size_t i = 0; i < gb.size(); ++i)
    ASSERT_EQ(test::max_abs_diff(gb[i], wb[i + adopted]), 0.0f) << "adopter, step " << i;
  pool.check_invariants();
  // The last holder of the published blocks rewrote them in place: they must have stopped being
  // findable first. A newcomer with B's prompt adopts only what still holds that prefix.
  PagedKvCache c(pages, pool, sink_options(*m, sinks, window));
  const int c_adopted = c.adopt_prefix(b_ids);
  std::vector<int> c_rest(b_ids.begin() + c_adopted, b_ids.end());
  SinkKvCache c_ref(m->cfg, m->rope, sinks, window);
  EXPECT_EQ(test::max_abs_diff(feed(*m, c, c_rest, 1).back(), feed(*m, c_ref, b_ids, 1).back()), 0.0f)
      << "adopted " << c_adopted << " tokens";
  // Blocks rewritten after an eviction are never findable as prefixes again.
  const int cached_before = pool.num_cached();
  a.publish(tokens(60, 9));
  EXPECT_EQ(pool.num_cached(), cached_before);
}

// Every layout, through the interface alone: a fork continues as the original does, clear()
// empties it and gives its storage back, and stats() says what it holds.
TEST(KvManager, EveryLayoutForksClearsAndReports) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  KvPages pages(m->cfg, 4, 64);
  BlockPool pool(pages);
  std::vector<std::unique_ptr<KvCache>> caches;
  caches.push_back(std::make_unique<ContiguousKvCache>(m->cfg, 64));
  caches.push_back(std::make_unique<ContiguousKvCache>(m->cfg, 64, DType::Int8, 4));
  caches.push_back(std::make_unique<SinkKvCache>(m->cfg, m->rope, 2, 10));
  caches.push_back(std::make_unique<PagedKvCache>(pages, pool, 64));
  caches.push_back(std::make_unique<PagedKvCache>(pages, pool, sink_options(*m, 2, 10)));
  const std::vector<int> ids = tokens(20, 6), next = tokens(5, 7);
  for (auto& kv : caches) {
    const auto first = feed(*m, *kv, ids, 5);  // chunks within the sink cache's window
    std::unique_ptr<KvCache> twin = kv->fork();
    auto a = feed(*m, *kv, next, 1), b = feed(*m, *twin, next, 1);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(test::max_abs_diff(a[i], b[i]), 0.0f);
    const KvSeqStats st = kv->stats();
    EXPECT_EQ(st.tokens, kv->length());
    EXPECT_EQ(st.tokens + st.evicted, 25);
    EXPECT_EQ(kv->consumed(), 25);
    EXPECT_GT(st.bytes, 0u);
    kv->clear();
    twin->clear();
    EXPECT_EQ(kv->length(), 0);
    EXPECT_EQ(kv->consumed(), 0);
    EXPECT_EQ(kv->stats().blocks, 0);
    // Cleared, it computes what it computed when new.
    auto again = feed(*m, *kv, ids, 5);
    EXPECT_EQ(test::max_abs_diff(again.back(), first.back()), 0.0f);
    kv->clear();
  }
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
  pool.check_invariants();
}

// The batched engine runs streams: each one's tokens equal the single-sequence generator's with
// the contiguous sink cache, long past the window and the context, in a pool sized to exactly
// their footprints (admission reserves them, so nothing is preempted). The ledger sees evictions.
TEST(PagedSinks, EngineStreamsMatchTheGeneratorInAnExactlySizedPool) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");  // 128 positions
  const int sinks = 4, window = 20, bs = 4, n_new = 300;
  EngineOptions eo;
  eo.block_size = bs;
  eo.sink_tokens = sinks;
  eo.window = window;
  eo.num_blocks = 3 * ((sinks + window) / bs);
  Engine e(*m, eo);
  std::vector<std::vector<int>> prompts = {tokens(10, 1), tokens(10, 1), tokens(17, 2)};
  prompts[1].push_back(9);  // shares prompt 0's full blocks
  std::vector<int> ids;
  SamplingParams sp;
  for (auto& p : prompts) ids.push_back(e.add({p, n_new, sp, false, ""}));
  bool saw_eviction = false;
  for (int steps = 0; e.has_work() && steps < 2000; ++steps) {
    e.step();
    for (const auto& s : e.ledger().seqs) saw_eviction |= s.evicted_tokens > 0;
  }
  EXPECT_TRUE(saw_eviction);
  EXPECT_EQ(e.stats().preemptions, 0);
  GenerateOptions go;
  go.max_new_tokens = n_new;
  go.stop_at_eos = false;
  go.sink_tokens = sinks;
  go.window = window;
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(e.seq(ids[i]).state, SeqState::Finished) << e.seq(ids[i]).error;
    EXPECT_EQ(test::generated(e, ids[i]), generate(*m, prompts[i], go).generated) << "stream " << i;
  }
  EXPECT_EQ(e.pool().num_free(), e.pool().num_blocks());
}

TEST(PagedSinks, RefusesWhatItCannotDo) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  KvPages int8_pages(m->cfg, 4, 16, DType::Int8);
  BlockPool int8_pool(int8_pages);
  EXPECT_THROW(PagedKvCache bad(int8_pages, int8_pool, sink_options(*m, 2, 8)), KvlmError);  // re-rotating would re-encode
  auto gpt2 = load_model(test::fixtures_dir() + "/gpt2_tiny");
  KvPages pages(gpt2->cfg, 4, 16);
  BlockPool pool(pages);
  EXPECT_THROW(PagedKvCache bad(pages, pool, sink_options(*gpt2, 2, 8)), KvlmError);  // no RoPE to re-rotate with
  EngineOptions eo;
  eo.window = 8;
  eo.num_blocks = 2;  // a stream of 4 sinks + a window of 8 needs 3 blocks of 4
  eo.block_size = 4;
  EXPECT_THROW(Engine bad(*m, eo), KvlmError);
  // A prompt longer than the window is refused alone, with a reason.
  eo.num_blocks = 16;
  Engine e(*m, eo);
  int bad = e.add({tokens(9, 1), 4, {}, false, ""});
  int good = e.add({tokens(8, 1), 4, {}, false, ""});
  test::drain(e);
  EXPECT_EQ(e.seq(bad).state, SeqState::Failed);
  EXPECT_NE(e.seq(bad).error.find("window"), std::string::npos) << e.seq(bad).error;
  EXPECT_EQ(e.seq(good).state, SeqState::Finished);
}

}  // namespace
}  // namespace kvlm
