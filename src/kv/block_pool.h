// BlockPool: the ids of fixed-size KV blocks (every layer at once), with reference counts, an
// O(1) free list, and the prefix-cache index. Pure bookkeeping: the pages the ids index are a
// KvPages (kv_pages.h), which the backend owns, as in vLLM v1's block pool.
//
// A block with ref 0 sits in the free list. If it still carries a prefix hash it is "cached":
// a later prompt with the same prefix can take it back (lookup), until allocation needs the
// space and evicts it, least recently released first.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_pages.h"

namespace kvlm {

using BlockHash = std::array<uint8_t, 32>;  // SHA-256

struct BlockHashKey {
  size_t operator()(const BlockHash& h) const {
    size_t v;
    static_assert(sizeof v <= sizeof(BlockHash));
    std::copy_n(h.data(), sizeof v, reinterpret_cast<uint8_t*>(&v));
    return v;
  }
};

// hash(parent, salt, tokens of one full block), chained so equal hashes mean equal prefixes.
BlockHash chain_block_hash(const BlockHash* parent, const std::string& salt, const int* tokens, int n);

// What the world outside learns of a published block (kv/block_events.h): its external hash, its
// parent's, and its tokens. Kept only while block events are on.
struct BlockMeta {
  BlockHash ext{}, parent_ext{};
  bool has_parent = false;
  std::vector<int> tokens;
};

class BlockPool {
 public:
  // Told when a block gets its prefix hash, when a cached block is about to be reused for other
  // rows (its pages still hold the prefix then), and when a holder takes a hash back to rewrite
  // the block: the KV tiers (kv_tiers.h) and the event stream (block_events.h) listen. `meta` is
  // null unless the publisher gave one.
  struct Listener {
    virtual ~Listener() = default;
    virtual void published(int block, const BlockHash& h, const std::string& salt, const BlockMeta* meta) = 0;
    virtual void evicted(int block, const BlockHash& h, const std::string& salt, const BlockMeta* meta) = 0;
    virtual void unpublished(int /*block*/, const BlockMeta* /*meta*/) {}
  };

  BlockPool(int num_blocks, int block_size, size_t bytes_per_block);
  explicit BlockPool(const KvPages& pages) : BlockPool(pages.num_blocks(), pages.block_size(), pages.bytes_per_block()) {}

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(ref_.size()); }
  int num_free() const { return num_free_; }  // ref 0, cached or not
  int num_cached() const { return static_cast<int>(by_hash_.size()); }
  size_t bytes_per_block() const { return bytes_per_block_; }

  // Takes the least recently released free block (evicting its hash); ref becomes 1.
  // Throws KvlmError when none is free.
  int allocate();
  void retain(int b);   // ref++ (a free cached block leaves the free list)
  void release(int b);  // ref--; at 0 the block joins the free list's tail
  int ref(int b) const { return ref_[b]; }

  // The block holding this prefix hash, or -1. The caller retains it to use it.
  int lookup(const BlockHash& h) const;
  // Marks a full block as holding the prefix `h` of tenant `salt` (no-op if another block
  // already does). `meta`, when given, is kept with the hash and handed to the listeners.
  void publish(int b, const BlockHash& h, const std::string& salt = "", BlockMeta* meta = nullptr);
  // Forgets a block's prefix hash: its holder is about to rewrite it (sink eviction).
  void unpublish(int b);
  bool has_hash(int b) const { return hashed_[b]; }

  void add_listener(Listener* l) { listeners_.push_back(l); }  // told in the order added
  void clear_listeners() { listeners_.clear(); }

  // Debug check of every invariant (free list vs ref counts, hash index); throws on a breach.
  void check_invariants() const;

 private:
  void unlink(int b);
  void push_tail(int b);

  int block_size_;
  size_t bytes_per_block_;
  std::vector<int> ref_;                 // [num_blocks]
  std::vector<int> prev_, next_;         // [num_blocks] intrusive free list (-1 = none)
  std::vector<bool> in_free_;            // [num_blocks]
  int head_ = -1, tail_ = -1, num_free_ = 0;
  std::vector<bool> hashed_;             // [num_blocks]
  std::vector<BlockHash> hash_;          // [num_blocks], valid where hashed_
  std::vector<std::string> salt_;        // [num_blocks], the tenant of a hashed block
  std::vector<std::optional<BlockMeta>> meta_;  // [num_blocks], where hashed with meta
  std::vector<Listener*> listeners_;
  std::unordered_map<BlockHash, int, BlockHashKey> by_hash_;
};

}  // namespace kvlm
