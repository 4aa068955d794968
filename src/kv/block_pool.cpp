#include "kv/block_pool.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/sha256.h"

namespace kvlm {

BlockHash chain_block_hash(const BlockHash* parent, const std::string& salt, const int* tokens, int n) {
  Sha256 h;
  if (parent) h.update(parent->data(), parent->size());
  h.add(static_cast<uint64_t>(salt.size())).update(salt.data(), salt.size());
  return h.update(tokens, sizeof(int) * static_cast<size_t>(n)).digest();
}

BlockPool::BlockPool(int num_blocks, int block_size, size_t bytes_per_block)
    : block_size_(block_size), bytes_per_block_(bytes_per_block) {
  if (num_blocks < 1) fail("the KV pool needs at least one block, got ", num_blocks);
  ref_.assign(num_blocks, 0);
  prev_.assign(num_blocks, -1);
  next_.assign(num_blocks, -1);
  in_free_.assign(num_blocks, false);
  hashed_.assign(num_blocks, false);
  hash_.resize(num_blocks);
  salt_.resize(num_blocks);
  meta_.resize(num_blocks);
  for (int b = 0; b < num_blocks; ++b) push_tail(b);
}

void BlockPool::unlink(int b) {
  if (prev_[b] >= 0) next_[prev_[b]] = next_[b]; else head_ = next_[b];
  if (next_[b] >= 0) prev_[next_[b]] = prev_[b]; else tail_ = prev_[b];
  prev_[b] = next_[b] = -1;
  in_free_[b] = false;
  --num_free_;
}

void BlockPool::push_tail(int b) {
  prev_[b] = tail_;
  next_[b] = -1;
  if (tail_ >= 0) next_[tail_] = b; else head_ = b;
  tail_ = b;
  in_free_[b] = true;
  ++num_free_;
}

int BlockPool::allocate() {
  if (head_ < 0) fail("KV pool exhausted: all ", num_blocks(), " blocks are in use");
  int b = head_;
  unlink(b);
  if (hashed_[b]) {  // evict: the cached prefix leaves the pool (down a tier, when one listens)
    for (Listener* l : listeners_) l->evicted(b, hash_[b], salt_[b], meta_[b] ? &*meta_[b] : nullptr);
    by_hash_.erase(hash_[b]);
    hashed_[b] = false;
    meta_[b].reset();
  }
  ref_[b] = 1;
  return b;
}

void BlockPool::retain(int b) {
  if (ref_[b] == 0) unlink(b);
  ++ref_[b];
}

void BlockPool::release(int b) {
  KVLM_CHECK(ref_[b] > 0, "block ", b, " released with ref count ", ref_[b]);
  if (--ref_[b] == 0) push_tail(b);
}

int BlockPool::lookup(const BlockHash& h) const {
  auto it = by_hash_.find(h);
  return it == by_hash_.end() ? -1 : it->second;
}

void BlockPool::publish(int b, const BlockHash& h, const std::string& salt, BlockMeta* meta) {
  if (hashed_[b] || by_hash_.count(h)) return;
  hashed_[b] = true;
  hash_[b] = h;
  salt_[b] = salt;
  if (meta) meta_[b] = std::move(*meta);
  by_hash_.emplace(h, b);
  for (Listener* l : listeners_) l->published(b, h, salt, meta_[b] ? &*meta_[b] : nullptr);
}

void BlockPool::unpublish(int b) {
  if (!hashed_[b]) return;
  for (Listener* l : listeners_) l->unpublished(b, meta_[b] ? &*meta_[b] : nullptr);
  by_hash_.erase(hash_[b]);
  hashed_[b] = false;
  meta_[b].reset();
}

void BlockPool::check_invariants() const {
  int free_seen = 0;
  for (int b = head_, prev = -1; b >= 0; prev = b, b = next_[b]) {
    KVLM_CHECK(prev_[b] == prev, "free list links broken at block ", b);
    KVLM_CHECK(ref_[b] == 0 && in_free_[b], "block ", b, " in the free list has ref ", ref_[b]);
    KVLM_CHECK(++free_seen <= num_blocks(), "the free list has a cycle");
  }
  KVLM_CHECK(free_seen == num_free_, "free count ", num_free_, " but ", free_seen, " listed");
  int zero = 0;
  for (int b = 0; b < num_blocks(); ++b) {
    KVLM_CHECK(ref_[b] >= 0, "block ", b, " has negative ref count");
    zero += ref_[b] == 0;
    KVLM_CHECK(in_free_[b] == (ref_[b] == 0), "block ", b, " free-list membership disagrees with ref");
    if (hashed_[b] && (by_hash_.count(hash_[b]) == 0 || by_hash_.at(hash_[b]) != b))
      KVLM_CHECK(false, "block ", b, " hash not indexed");
  }
  KVLM_CHECK(zero == num_free_, zero, " blocks with ref 0 but ", num_free_, " free");
  for (auto& [h, b] : by_hash_)
    KVLM_CHECK(hashed_[b] && hash_[b] == h, "stale hash index entry for block ", b);
}

}  // namespace kvlm
