#include "kv/paged_cache.h"

#include <cstring>

#include "core/error.h"

namespace kvlm {

PagedKvCache::PagedKvCache(BlockPool& pool, int max_len, std::string salt)
    : pool_(pool), max_len_(max_len), salt_(std::move(salt)) {
  if (max_len <= 0) fail("KV cache length must be positive, got ", max_len);
}

PagedKvCache::~PagedKvCache() { release_all(); }

void PagedKvCache::release_all() {
  // Release the tail first, so the head of a prefix stays cached longest (LRU evicts the tail).
  for (auto it = table_.rbegin(); it != table_.rend(); ++it) pool_.release(*it);
  table_.clear();
  hashes_.clear();
  length_ = 0;
}

int PagedKvCache::blocks_needed(int pos, int n) const {
  const int bs = pool_.block_size();
  if (n <= 0) return 0;
  int last_block = (pos + n - 1) / bs;
  int need = std::max(0, last_block + 1 - static_cast<int>(table_.size()));
  for (int b = pos / bs; b <= last_block && b < static_cast<int>(table_.size()); ++b)
    need += pool_.ref(table_[b]) > 1;
  return need;
}

void PagedKvCache::prepare(int pos, int n) {
  if (pos < 0 || n < 0 || pos + n > max_len_) fail("KV cache overflow: position ", pos + n, " > capacity ", max_len_);
  if (n == 0) return;
  if (blocks_needed(pos, n) > pool_.num_free())
    fail("KV pool exhausted: need ", blocks_needed(pos, n), " blocks, ", pool_.num_free(), " free");
  const int bs = pool_.block_size();
  const int last_block = (pos + n - 1) / bs;
  for (int b = pos / bs; b <= last_block && b < static_cast<int>(table_.size()); ++b) {
    if (pool_.ref(table_[b]) > 1) {  // copy-on-write
      int fresh = pool_.allocate();
      pool_.copy_block(fresh, table_[b]);
      pool_.release(table_[b]);
      table_[b] = fresh;
    }
  }
  while (static_cast<int>(table_.size()) <= last_block) table_.push_back(pool_.allocate());
}

void PagedKvCache::store(int layer, int pos, int n, const float* k, const float* v) {
  const int bs = pool_.block_size(), dim = pool_.kv_dim();
  for (int t = 0; t < n; ++t) {
    int p = pos + t, b = p / bs;
    if (b >= static_cast<int>(table_.size())) fail("internal error: store past the prepared blocks");
    size_t off = static_cast<size_t>(p % bs) * dim;
    std::memcpy(pool_.k(layer, table_[b]) + off, k + static_cast<size_t>(t) * dim, dim * sizeof(float));
    std::memcpy(pool_.v(layer, table_[b]) + off, v + static_cast<size_t>(t) * dim, dim * sizeof(float));
  }
}

const float* PagedKvCache::key(int layer, int pos) const {
  const int bs = pool_.block_size();
  return pool_.k(layer, table_[pos / bs]) + static_cast<size_t>(pos % bs) * pool_.kv_dim();
}

const float* PagedKvCache::value(int layer, int pos) const {
  const int bs = pool_.block_size();
  return pool_.v(layer, table_[pos / bs]) + static_cast<size_t>(pos % bs) * pool_.kv_dim();
}

void PagedKvCache::set_length(int n) {
  if (n < 0 || n > max_len_) fail("KV cache length ", n, " out of range [0, ", max_len_, "]");
  const int bs = pool_.block_size();
  size_t keep = static_cast<size_t>((n + bs - 1) / bs);
  while (table_.size() > keep) {
    pool_.release(table_.back());
    table_.pop_back();
  }
  if (hashes_.size() > static_cast<size_t>(n / bs)) hashes_.resize(n / bs);
  length_ = n;
}

std::unique_ptr<PagedKvCache> PagedKvCache::fork() const {
  auto child = std::make_unique<PagedKvCache>(pool_, max_len_, salt_);
  for (int b : table_) pool_.retain(b);
  child->table_ = table_;
  child->hashes_ = hashes_;
  child->length_ = length_;
  return child;
}

int PagedKvCache::adopt_prefix(const std::vector<int>& tokens) {
  if (!table_.empty() || length_ != 0) fail("internal error: adopt_prefix needs an empty cache");
  const int bs = pool_.block_size();
  // At least one token must be computed (its logits start generation), and it must not land
  // in an adopted block: published blocks are never written again, so another sequence may
  // adopt them at any time without the writer noticing.
  const int full = tokens.empty() ? 0 : (static_cast<int>(tokens.size()) - 1) / bs;
  for (int i = 0; i < full; ++i) {
    BlockHash h = chain_block_hash(i ? &hashes_.back() : nullptr, salt_, tokens.data() + i * bs, bs);
    int b = pool_.lookup(h);
    if (b < 0) break;
    pool_.retain(b);
    table_.push_back(b);
    hashes_.push_back(h);
  }
  length_ = static_cast<int>(table_.size()) * bs;
  return length_;
}

void PagedKvCache::publish_full_blocks(const std::vector<int>& tokens) {
  const int bs = pool_.block_size();
  const int full = std::min(length_, static_cast<int>(tokens.size())) / bs;
  for (int i = static_cast<int>(hashes_.size()); i < full; ++i) {
    hashes_.push_back(chain_block_hash(i ? &hashes_.back() : nullptr, salt_, tokens.data() + i * bs, bs));
    pool_.publish(table_[i], hashes_.back());
  }
}

}  // namespace kvlm
