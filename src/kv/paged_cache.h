// PagedKvCache: one sequence's view of the BlockPool through its block table.
// Position p lives in block table_[p / block_size] at slot p % block_size. Blocks may be shared
// (fork, prefix cache); the first write into a shared block copies it (copy-on-write).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache.h"

namespace kvlm {

class PagedKvCache : public KvCache {
 public:
  PagedKvCache(BlockPool& pool, int max_len, std::string salt = "");
  ~PagedKvCache() override;
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  int length() const override { return length_; }
  int capacity() const override { return max_len_; }
  void prepare(int pos, int n) override;
  void store(int layer, int pos, int n, const float* k, const float* v) override;
  const float* key(int layer, int pos) const override;
  const float* value(int layer, int pos) const override;
  int contiguous_run(int, int pos, int max_n) const override {
    return std::min(max_n, pool_.block_size() - pos % pool_.block_size());
  }
  void set_length(int n) override;  // shrinking releases blocks past the new end
  size_t bytes_allocated() const override { return table_.size() * pool_.bytes_per_block(); }

  // Blocks prepare(pos, n) would take from the pool (new blocks plus copies of shared ones).
  int blocks_needed(int pos, int n) const;
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
  const float* row(const std::vector<float>* base, int layer, int pos) const;

  BlockPool& pool_;
  int max_len_, length_ = 0;
  std::string salt_;
  std::vector<int> table_;         // block ids, one per block_size positions
  std::vector<BlockHash> hashes_;  // chained hash of each published full block
};

}  // namespace kvlm
