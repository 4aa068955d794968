// StreamingLLM's attention sinks: keep the first `sinks` positions and the last `window`, drop
// the middle, and generate for as long as wanted within a fixed footprint.
//
// Positions are cache indices (as in StreamingLLM). Keys are re-rotated on eviction: when E
// tokens leave, every kept window key moves E slots down and is rotated by -E positions (RoPE
// rotations compose), exactly as if it had been computed at its new index.
#pragma once
#include <vector>

#include "kv/kv_cache.h"
#include "model/rope.h"

namespace kvlm {

class SinkKvCache : public KvCache {
 public:
  SinkKvCache(const ModelConfig& cfg, const RopeTable& rope, int sinks, int window);

  int length() const override { return length_; }
  int capacity() const override { return 1 << 30; }  // a stream: eviction keeps it bounded
  void prepare(int pos, int n) override;
  void store(int layer, int pos, int n, const float* k, const float* v) override;
  const float* key(int layer, int pos) const { return k_[layer].data() + static_cast<size_t>(pos) * kv_dim_; }
  const float* value(int layer, int pos) const { return v_[layer].data() + static_cast<size_t>(pos) * kv_dim_; }
  KvLayerView view(int layer) const override {
    KvLayerView v;
    v.ring_rows = slots_;  // positions are cache indices below slots_: a plain array
    v.k = k_[layer].data();
    v.v = v_[layer].data();
    return v;
  }
  void set_length(int n) override;
  size_t bytes_allocated() const override { return 2ull * k_.size() * slots_ * kv_dim_ * sizeof(float); }

  long consumed() const override { return length_ + evicted_; }
  std::unique_ptr<KvCache> fork() const override { return std::make_unique<SinkKvCache>(*this); }
  void clear() override { length_ = 0, evicted_ = 0; }  // its buffers are its fixed footprint
  KvSeqStats stats() const override {
    KvSeqStats s;
    s.tokens = length_;
    s.evicted = evicted_;
    s.bytes = bytes_allocated();
    return s;
  }

  int slots() const { return slots_; }      // sinks + window: the most positions ever held
  long evicted() const { return evicted_; }  // tokens dropped so far

 private:
  void evict(int e);

  const RopeTable& rope_;
  int n_kv_heads_;
  int sinks_, slots_, kv_dim_, length_ = 0;
  long evicted_ = 0;
  std::vector<std::vector<float>> k_, v_;  // [n_layers][slots][kv_dim]
};

}  // namespace kvlm
