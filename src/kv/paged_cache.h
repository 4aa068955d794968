// PagedKvCache: one sequence's view of the BlockPool through its block table.
// Position p lives in block table_[p / block_size] at slot p % block_size. Blocks may be shared
// (fork, prefix cache); the first write into a shared block copies it (copy-on-write).
// In a quantized pool, rows are encoded into the pages as they are stored, and the sequence
// keeps its newest `residual` positions at f32 in a ring of its own, which attention reads
// instead of the page rows (HF's quantized cache keeps 128 so). When every layer is windowed,
// blocks wholly before the window are given back at once (their table entry becomes kFreed).
// With attention sinks (StreamingLLM, as SinkKvCache does in a buffer of its own), the sequence
// keeps its first `sinks` positions and the last `window`: rows past the sinks move down through
// the block table when the middle is dropped, each key re-rotated to its new index, and blocks
// past the new end go back to the pool. Its footprint is bounded, so the engine reserves it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kv/block_events.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "kv/kv_tiers.h"
#include "model/rope.h"

namespace kvlm {

struct PagedKvOptions {
  int max_len = 0;         // positions it may hold (a sink stream: sinks + window)
  std::string salt;        // tenant: prefixes are shared only between equal salts
  int residual = 0;        // newest positions also kept at f32 (quantized pools)
  int sinks = 0;           // with window > 0: attention sinks, keep the first `sinks` tokens
  int window = 0;          //   and the last `window`, drop the middle
  const RopeTable* rope = nullptr;  // re-rotates moved keys (sinks only)
  KvTiers* tiers = nullptr;         // where adopt_prefix looks after the pool (kv_tiers.h)
  const ExternalHasher* hasher = nullptr;  // block events on: published blocks carry BlockMeta
};

class PagedKvCache : public KvCache {
 public:
  static constexpr int kFreed = -1;  // a table entry whose block left the sliding window

  // Blocks come from `pool`; their rows live in `pages` (the backend's storage).
  PagedKvCache(KvPages& pages, BlockPool& pool, PagedKvOptions opt);
  PagedKvCache(KvPages& pages, BlockPool& pool, int max_len, std::string salt = "", int residual = 0)
      : PagedKvCache(pages, pool, PagedKvOptions{max_len, std::move(salt), residual}) {}
  ~PagedKvCache() override;
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  int length() const override { return length_; }
  int capacity() const override { return sinks_on() ? (1 << 30) : max_len_; }  // a stream: eviction bounds it
  void prepare(int pos, int n) override;
  void store(int layer, int pos, int n, const float* k, const float* v) override;
  KvLayerView view(int layer) const override;
  void set_length(int n) override;  // shrinking releases blocks past the new end
  size_t bytes_allocated() const override { return live_blocks() * pool_.bytes_per_block() + residual_bytes(); }

  // The KV manager's half (kv/kv_cache.h).
  long consumed() const override { return length_ + evicted_; }
  // Net blocks prepare(length(), n) takes from the pool: new blocks plus copies of shared ones,
  // less the private blocks it frees for having left the window (never below 0).
  int blocks_needed(int n) const override;
  int blocks_to_reserve() const override;
  // Gives back the blocks no query from `length()` on will read (prepare does it too). A
  // scheduler calls it before planning a step, so the blocks it frees are plainly free (and
  // adoptable as cached prefixes) while it counts what each sequence needs.
  void release_unreachable() override { release_before(length_); }
  std::unique_ptr<KvCache> fork() const override;
  // Reuses cached blocks for the longest prefix of `tokens` found in the pool, leaving at least
  // one token to compute, outside the adopted blocks. Only on an empty cache.
  int adopt_prefix(const std::vector<int>& tokens) override;
  // Publishes the prefix hashes of blocks that `tokens` (the sequence so far) has filled
  // (none once sinks have evicted: the rows past the sinks no longer sit at their positions).
  void publish(const std::vector<int>& tokens) override;
  // Gives every block back to the pool.
  void clear() override { release_all(); }
  KvSeqStats stats() const override;
  const std::vector<int>& blocks() const override { return table_; }

  int blocks_needed(int pos, int n) const;  // as above, for a prepare at any position
  int live_blocks() const;   // table entries still holding a block
  int freed_blocks() const;  // table entries given back for having left the window
  int residual() const { return residual_; }
  size_t residual_bytes() const;  // the f32 ring of newest positions (quantized pools)
  void release_all();
  long evicted() const { return evicted_; }

  // Snapshots (kv_snapshot.h): what a file needs, and the way back into an empty cache.
  bool can_snapshot() const { return evicted_ == 0 && freed_blocks() == 0; }
  int hot_from() const { return hot_from_; }
  // Layer l's f32 ring of newest rows ([residual][kv_dim]), K or V (quantized pools only).
  const std::vector<float>& ring(int layer, bool value) const { return value ? ring_v_[layer] : ring_k_[layer]; }
  // Takes private blocks for `length` positions and fills them from `payloads` (one block
  // payload each, in position order), and the ring from `ring` (K then V per layer), if any.
  // Throws when the pool has too few free blocks; the cache is empty then.
  void restore_rows(int length, const uint8_t* payloads, const float* ring, int hot_from);

  const std::vector<int>& block_table() const { return table_; }
  BlockPool& pool() const { return pool_; }
  KvPages& pages() const { return pages_; }

 private:
  int dead_before(int pos) const;  // blocks [0, result) are outside every layer's window at pos
  void release_before(int pos);
  bool sinks_on() const { return window_ > 0; }
  int evicting(int n) const { return sinks_on() ? std::max(0, length_ + n - max_len_) : 0; }  // sink eviction before n more
  // Makes table entries [first, last] writable: shared blocks are copied, published ones unpublished.
  void make_writable(int first, int last, bool unpublish);
  void evict(int e);  // sinks: drops the e positions after the sinks, moving the rest down
  int load_from_tier(const BlockHash& h, BlockMeta* meta);  // a pool block holding h's rows from a tier, or -1
  // Appends block i's chained hashes (internal, and external with a hasher), computed from its tokens.
  void push_hash(int i, const int* block_tokens);
  BlockMeta* meta_of(int i, const int* block_tokens);  // for pool.publish: null without a hasher
  void truncate_hashes(size_t n);

  KvPages& pages_;
  BlockPool& pool_;
  int max_len_, length_ = 0;
  int sinks_ = 0, window_ = 0;
  long evicted_ = 0;
  const RopeTable* rope_ = nullptr;
  KvTiers* tiers_ = nullptr;
  int residual_ = 0, hot_from_ = 0;  // the ring holds positions >= hot_from_ it computed itself
  std::vector<std::vector<float>> ring_k_, ring_v_;  // [n_layers][residual][kv_dim]
  std::string salt_;
  std::vector<int> table_;         // block ids, one per block_size positions
  std::vector<BlockHash> hashes_;  // chained hash of each published full block
  const ExternalHasher* hasher_ = nullptr;
  std::vector<BlockHash> ext_hashes_;  // their external hashes (with a hasher)
  BlockMeta meta_;                     // scratch for publish
};

}  // namespace kvlm
