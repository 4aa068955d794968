// The KV cache interface the forward pass reads and writes, and its contiguous store.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "kernels/attention_batch.h"
#include "kernels/kv_quant.h"
#include "model/config.h"

namespace kvlm {

// What a scheduler (the engine) and the ledger read of one sequence's cache, whatever its layout.
struct KvSeqStats {
  int tokens = 0;            // positions held (cache indices: after sink eviction, fewer than consumed)
  long evicted = 0;          // tokens dropped by attention sinks so far
  int blocks = 0;            // pool blocks referenced (0 for a cache that owns its memory)
  int freed_blocks = 0;      // blocks given back for having left a sliding window
  int residual_tokens = 0;   // newest positions also held at f32 (quantized pages)
  size_t residual_bytes = 0;
  size_t bytes = 0;          // everything it holds: its blocks in full (shared ones too), or its buffers
};

// Keys and values of every past position, per layer: the one interface the forward pass, the
// engine and the ledger use (llama.cpp's llama_memory_i is the model). The forward pass computes
// K/V for new positions, attends over cached positions plus the new ones, then stores the new
// ones. The scheduler's half says what the next step costs, shares and frees.
// Implementations: ContiguousKvCache (a buffer per sequence, rings for windowed layers),
// PagedKvCache (blocks of a shared BlockPool, optionally with attention sinks), SinkKvCache.
class KvCache {
 public:
  virtual ~KvCache() = default;

  // --- The forward pass's half ---
  // Number of positions whose K/V are stored (the next position to compute).
  virtual int length() const = 0;
  // Largest position count this cache can hold for global layers.
  virtual int capacity() const = 0;
  // Called once per forward, before any layer stores: makes room for positions [pos, pos+n)
  // (a paged cache allocates blocks and copies shared ones here). Throws if it cannot.
  virtual void prepare(int pos, int n) = 0;
  // Stores rows for positions [pos, pos+n) of `layer`; k, v are [n][kv_dim].
  virtual void store(int layer, int pos, int n, const float* k, const float* v) = 0;
  // Where layer `layer`'s stored rows live (attention reads them through this, with no further
  // calls: kernels/attention_batch.h). Valid until the next prepare/store/set_length.
  virtual KvLayerView view(int layer) const = 0;
  // Advances (after a forward) or truncates the sequence length.
  virtual void set_length(int n) = 0;
  // Bytes the cache has allocated for K and V.
  virtual size_t bytes_allocated() const = 0;

  // --- The scheduler's half (the KV manager) ---
  // Tokens fed so far: length() plus those attention sinks evicted. The next token to feed is
  // tokens[consumed()].
  virtual long consumed() const { return length(); }
  // Net pool blocks the next prepare(length(), n) takes (0 for a cache that owns its memory).
  virtual int blocks_needed(int n) const { (void)n; return 0; }
  // Blocks it may take later beyond what it holds now, reserved at admission: a bounded stream
  // (attention sinks) knows its whole footprint; 0 when growth is planned step by step.
  virtual int blocks_to_reserve() const { return 0; }
  // Gives back storage no later query reads (blocks behind a sliding window).
  virtual void release_unreachable() {}
  // A new cache with the same contents: blocks are shared copy-on-write where the layout can.
  virtual std::unique_ptr<KvCache> fork() const = 0;
  // On an empty cache: reuses cached storage for the longest prefix of `tokens` (leaving at
  // least one token to compute). Returns the tokens reused; 0 where the layout has no prefix cache.
  virtual int adopt_prefix(const std::vector<int>& tokens) { (void)tokens; return 0; }
  // Makes the full blocks `tokens` (the sequence so far) has filled findable by adopt_prefix.
  virtual void publish(const std::vector<int>& tokens) { (void)tokens; }
  // Drops every position and gives all storage back; the cache is empty afterwards.
  virtual void clear() = 0;
  virtual KvSeqStats stats() const = 0;
  // Pool block ids it references, in position order (-1: a block given back), for the ledger.
  virtual const std::vector<int>& blocks() const;
};

// One contiguous buffer per layer, grown geometrically as positions arrive (up to max_len).
// A windowed layer (GPT-Neo local, Mistral) is a ring of W slots: it never needs more.
// With a quantized dtype, the newest `residual` positions stay f32 in a ring of their own and
// each position is encoded as it leaves that window (HF's quantized cache keeps 128 there).
class ContiguousKvCache : public KvCache {
 public:
  ContiguousKvCache(const ModelConfig& cfg, int max_len, DType dtype = DType::F32, int residual = 0);

  int length() const override { return length_; }
  int capacity() const override { return max_len_; }
  void prepare(int pos, int n) override;
  void store(int layer, int pos, int n, const float* k, const float* v) override;
  // [kv_dim] rows of one stored position (f32 caches; windowed layers keep the last W).
  const float* key(int layer, int pos) const { return k_[layer].data() + slot(layer, pos); }
  const float* value(int layer, int pos) const { return v_[layer].data() + slot(layer, pos); }
  KvLayerView view(int layer) const override;
  DType dtype() const { return codec_.dtype; }
  int residual() const { return residual_; }  // newest positions also kept at f32 (0 for f32 caches)
  void set_length(int n) override;
  size_t bytes_allocated() const override;
  std::unique_ptr<KvCache> fork() const override { return std::make_unique<ContiguousKvCache>(*this); }
  void clear() override;
  KvSeqStats stats() const override;
  // Bytes this cache would hold once it stores `positions` positions (nothing is allocated).
  size_t bytes_for(int positions) const;
  // Bytes one decode step's attention reads once the cache holds `positions` positions: each
  // layer's rows (its window's at most), the newest `residual` at f32 beside quantized rows.
  size_t bytes_read_at(int positions) const;
  // Slots reserved for one layer (max_len, or its window).
  int layer_slots(int layer) const { return slots_[layer]; }

 private:
  size_t slot(int layer, int pos) const { return static_cast<size_t>(pos % slots_[layer]) * kv_dim_; }

  void grow(int positions);  // makes rows for positions [0, positions) of every layer
  size_t row_bytes(int positions, bool read) const;  // bytes_for (held) or bytes_read_at (read)

  int kv_dim_, max_len_, length_ = 0;
  bool values_are_keys_;  // latent attention: one row per position, read as key and value
  int rows_ = 0;                          // positions every layer has storage for (min'd with its ring)
  std::vector<int> slots_;               // [n_layers]
  // Buffers, not vectors: a layer's rows of 2 MiB or more get huge pages (core/buffer.h). On 4 KiB
  // pages a long-context step took a TLB miss every few rows of each head, and f32 and bf16 rows
  // came from memory at half the rate of the same rows on huge pages.
  std::vector<Buffer<float>> k_;    // [n_layers][slots][kv_dim] (f32), or [residual][kv_dim] hot ring
  std::vector<Buffer<float>> v_;    // likewise
  // Quantized dtypes only:
  KvRowCodec codec_;
  int residual_ = 0;
  std::vector<Buffer<uint8_t>> kq_, vq_;  // [n_layers][slots][codec data bytes]
  std::vector<Buffer<float>> kp_, vp_;    // [n_layers][slots][codec params]
  void encode_cold(int layer, int pos, const float* k, const float* v);
};

}  // namespace kvlm
