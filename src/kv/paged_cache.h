// PagedKvCache: one sequence's view of the BlockPool through its block table.
// Position p lives in block table_[p / block_size] at slot p % block_size. Blocks may be shared
// (fork, prefix cache); the first write into a shared block copies it (copy-on-write).
// In a quantized pool, rows are encoded into the pages as they are stored, and the sequence
// keeps its newest `residual` positions at f32 in a ring of its own, which attention reads
// instead of the page rows (HF's quantized cache keeps 128 so). When every layer is windowed,
// blocks wholly before the window are given back at once (their table entry becomes kFreed).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache.h"

namespace kvlm {

class PagedKvCache : public KvCache {
 public:
  static constexpr int kFreed = -1;  // a table entry whose block left the sliding window

  PagedKvCache(BlockPool& pool, int max_len, std::string salt = "", int residual = 0);
  ~PagedKvCache() override;
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  int length() const override { return length_; }
  int capacity() const override { return max_len_; }
  void prepare(int pos, int n) override;
  void store(int layer, int pos, int n, const float* k, const float* v) override;
  KvLayerView view(int layer) const override;
  void set_length(int n) override;  // shrinking releases blocks past the new end
  size_t bytes_allocated() const override { return live_blocks() * pool_.bytes_per_block() + residual_bytes(); }

  // Net blocks prepare(pos, n) takes from the pool: new blocks plus copies of shared ones,
  // less the private blocks it frees for having left the window (never below 0).
  int blocks_needed(int pos, int n) const;
  // Gives back the blocks no query from `length()` on will read (prepare does it too). A
  // scheduler calls it before planning a step, so the blocks it frees are plainly free (and
  // adoptable as cached prefixes) while it counts what each sequence needs.
  void release_window_blocks() { release_before(length_); }
  int live_blocks() const;   // table entries still holding a block
  int freed_blocks() const;  // table entries given back for having left the window
  int residual() const { return residual_; }
  size_t residual_bytes() const;  // the f32 ring of newest positions (quantized pools)
  // A new sequence sharing every block of this one (ref counts rise; nothing is copied).
  std::unique_ptr<PagedKvCache> fork() const;
  // Reuses cached blocks for the longest prefix of `tokens` found in the pool, leaving at least
  // one token to compute, outside the adopted blocks. Only on an empty cache. Returns the
  // number of tokens reused.
  int adopt_prefix(const std::vector<int>& tokens);
  // Publishes the prefix hashes of blocks that `tokens` (the sequence so far) has filled.
  void publish_full_blocks(const std::vector<int>& tokens);
  // Gives every block back to the pool; the cache is empty afterwards.
  void release_all();

  const std::vector<int>& block_table() const { return table_; }
  BlockPool& pool() const { return pool_; }

 private:
  int dead_before(int pos) const;  // blocks [0, result) are outside every layer's window at pos
  void release_before(int pos);

  BlockPool& pool_;
  int max_len_, length_ = 0;
  int residual_ = 0, hot_from_ = 0;  // the ring holds positions >= hot_from_ it computed itself
  std::vector<std::vector<float>> ring_k_, ring_v_;  // [n_layers][residual][kv_dim]
  std::string salt_;
  std::vector<int> table_;         // block ids, one per block_size positions
  std::vector<BlockHash> hashes_;  // chained hash of each published full block
};

}  // namespace kvlm
