// The KV cache interface the forward pass reads and writes, and its contiguous store.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "model/config.h"

namespace kvlm {

// Keys and values of every past position, per layer. The forward pass computes K/V for new
// positions, attends over cached positions plus the new ones, then stores the new ones.
class KvCache {
 public:
  virtual ~KvCache() = default;
  // Number of positions whose K/V are stored (the next position to compute).
  virtual int length() const = 0;
  // Largest position count this cache can hold for global layers.
  virtual int capacity() const = 0;
  // Called once per forward, before any layer stores: makes room for positions [pos, pos+n)
  // (a paged cache allocates blocks and copies shared ones here). Throws if it cannot.
  virtual void prepare(int pos, int n) = 0;
  // Stores rows for positions [pos, pos+n) of `layer`; k, v are [n][kv_dim].
  virtual void store(int layer, int pos, int n, const float* k, const float* v) = 0;
  // [kv_dim] rows for one stored position. Windowed layers only keep the last W positions.
  virtual const float* key(int layer, int pos) const = 0;
  virtual const float* value(int layer, int pos) const = 0;
  // How many positions from `pos` (at most max_n) lie in consecutive kv_dim rows of memory,
  // so attention can stream them without a lookup per position.
  virtual int contiguous_run(int layer, int pos, int max_n) const = 0;
  // Advances (after a forward) or truncates the sequence length.
  virtual void set_length(int n) = 0;
  // Bytes the cache has allocated for K and V.
  virtual size_t bytes_allocated() const = 0;
};

// One contiguous buffer per layer, reserved up front for the maximum length.
// A windowed layer (GPT-Neo local, Mistral) is a ring of W slots: it never needs more.
class ContiguousKvCache : public KvCache {
 public:
  ContiguousKvCache(const ModelConfig& cfg, int max_len);

  int length() const override { return length_; }
  int capacity() const override { return max_len_; }
  void prepare(int pos, int n) override;
  void store(int layer, int pos, int n, const float* k, const float* v) override;
  const float* key(int layer, int pos) const override { return k_[layer].data() + slot(layer, pos); }
  const float* value(int layer, int pos) const override { return v_[layer].data() + slot(layer, pos); }
  int contiguous_run(int layer, int pos, int max_n) const override {
    return std::min(max_n, slots_[layer] - pos % slots_[layer]);
  }
  void set_length(int n) override;
  size_t bytes_allocated() const override;
  // Slots reserved for one layer (max_len, or its window).
  int layer_slots(int layer) const { return slots_[layer]; }

 private:
  size_t slot(int layer, int pos) const { return static_cast<size_t>(pos % slots_[layer]) * kv_dim_; }

  int kv_dim_, max_len_, length_ = 0;
  std::vector<int> slots_;               // [n_layers]
  std::vector<std::vector<float>> k_;    // [n_layers][slots][kv_dim]
  std::vector<std::vector<float>> v_;    // [n_layers][slots][kv_dim]
};

}  // namespace kvlm
