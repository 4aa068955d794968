// BlockPool: fixed-size KV blocks for every layer at once, with reference counts, an O(1)
// free list, and the prefix-cache index. Pure bookkeeping plus the K/V storage; no model code.
//
//   k_[layer] : [num_blocks][block_size][kv_dim]   (v_ likewise), an f32 pool
//   kq_[layer]: [num_blocks][block_size][codec data bytes], kp_ the codec's parameters (v likewise),
//               a quantized pool (bf16, int8, int4): rows are encoded as they are stored
//
// A block with ref 0 sits in the free list. If it still carries a prefix hash it is "cached":
// a later prompt with the same prefix can take it back (lookup), until allocation needs the
// space and evicts it, least recently released first.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/kv_quant.h"
#include "model/config.h"

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

class BlockPool {
 public:
  BlockPool(const ModelConfig& cfg, int block_size, int num_blocks, KvDtype dtype = KvDtype::F32);
  // Bytes one block of `block_size` positions takes (K and V, every layer), before a pool exists.
  static size_t block_bytes(const ModelConfig& cfg, int block_size, KvDtype dtype);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(ref_.size()); }
  int num_free() const { return num_free_; }  // ref 0, cached or not
  int num_cached() const { return static_cast<int>(by_hash_.size()); }
  size_t bytes_per_block() const { return bytes_per_block_; }
  int kv_dim() const { return kv_dim_; }
  int n_layers() const { return n_layers_; }
  const KvRowCodec& codec() const { return codec_; }
  KvDtype dtype() const { return codec_.dtype; }
  // Positions older than (newest - window + 1) are never attended again, so their blocks can be
  // freed: the largest layer window, or 0 when some layer attends globally (nothing is freed).
  int window() const { return window_; }

  // Takes the least recently released free block (evicting its hash); ref becomes 1.
  // Throws KvlmError when none is free.
  int allocate();
  void retain(int b);   // ref++ (a free cached block leaves the free list)
  void release(int b);  // ref--; at 0 the block joins the free list's tail
  int ref(int b) const { return ref_[b]; }

  // The block holding this prefix hash, or -1. The caller retains it to use it.
  int lookup(const BlockHash& h) const;
  // Marks a full block as holding the prefix `h` (no-op if another block already does).
  void publish(int b, const BlockHash& h);
  // Forgets a block's prefix hash: its holder is about to rewrite it (sink eviction).
  void unpublish(int b);
  bool has_hash(int b) const { return hashed_[b]; }

  float* k(int layer, int b) { return k_[layer].data() + static_cast<size_t>(b) * block_size_ * kv_dim_; }
  float* v(int layer, int b) { return v_[layer].data() + static_cast<size_t>(b) * block_size_ * kv_dim_; }
  const float* k(int layer, int b) const { return k_[layer].data() + static_cast<size_t>(b) * block_size_ * kv_dim_; }
  const float* v(int layer, int b) const { return v_[layer].data() + static_cast<size_t>(b) * block_size_ * kv_dim_; }
  // Quantized pools: a block's first row of encoded data, and of codec parameters.
  uint8_t* kq(int layer, int b) { return kq_[layer].data() + row0(b) * codec_.data_bytes(); }
  uint8_t* vq(int layer, int b) { return vq_[layer].data() + row0(b) * codec_.data_bytes(); }
  float* kp(int layer, int b) { return kp_[layer].data() + row0(b) * codec_.n_params(); }
  float* vp(int layer, int b) { return vp_[layer].data() + row0(b) * codec_.n_params(); }
  const uint8_t* kq(int layer, int b) const { return kq_[layer].data() + row0(b) * codec_.data_bytes(); }
  const uint8_t* vq(int layer, int b) const { return vq_[layer].data() + row0(b) * codec_.data_bytes(); }
  const float* kp(int layer, int b) const { return kp_[layer].data() + row0(b) * codec_.n_params(); }
  const float* vp(int layer, int b) const { return vp_[layer].data() + row0(b) * codec_.n_params(); }
  void copy_block(int dst, int src);  // all layers

  // Debug check of every invariant (free list vs ref counts, hash index); throws on a breach.
  void check_invariants() const;

 private:
  void unlink(int b);
  void push_tail(int b);

  size_t row0(int b) const { return static_cast<size_t>(b) * block_size_; }

  int block_size_, kv_dim_, n_layers_, window_ = 0;
  KvRowCodec codec_;
  size_t bytes_per_block_;
  std::vector<int> ref_;                 // [num_blocks]
  std::vector<int> prev_, next_;         // [num_blocks] intrusive free list (-1 = none)
  std::vector<bool> in_free_;            // [num_blocks]
  int head_ = -1, tail_ = -1, num_free_ = 0;
  std::vector<bool> hashed_;             // [num_blocks]
  std::vector<BlockHash> hash_;          // [num_blocks], valid where hashed_
  std::unordered_map<BlockHash, int, BlockHashKey> by_hash_;
  std::vector<std::vector<float>> k_, v_;  // [n_layers][num_blocks * block_size * kv_dim] (f32)
  std::vector<std::vector<uint8_t>> kq_, vq_;  // quantized dtypes only
  std::vector<std::vector<float>> kp_, vp_;
};

}  // namespace kvlm
