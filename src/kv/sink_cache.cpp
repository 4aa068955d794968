#include "kv/sink_cache.h"

#include <cstring>

#include "core/error.h"

namespace kvlm {

SinkKvCache::SinkKvCache(const ModelConfig& cfg, const RopeTable& rope, int sinks, int window)
    : rope_(rope), n_kv_heads_(cfg.n_kv_heads), sinks_(sinks), slots_(0), kv_dim_(cfg.kv_dim()) {
  if (sinks < 0 || window < 1) fail("attention sinks need sink tokens >= 0 and a window >= 1");
  // A latent row rotates only its last part: re-rotating it as whole heads would be wrong.
  if (cfg.mla()) fail("attention sinks are not supported with latent attention (MLA)");
  const int64_t slots = static_cast<int64_t>(sinks) + window;  // in 64 bits: no wrap before the check
  if (slots > cfg.max_seq_len)
    fail("sink tokens + window (", slots, ") exceed the model's context ", cfg.max_seq_len);
  slots_ = static_cast<int>(slots);
  if (rope.kind == RopeKind::None)  // the table this cache re-rotates keys with
    fail("attention sinks need a RoPE model: ", cfg.arch, " bakes positions into its embeddings");
  for (int l = 0; l < cfg.n_layers; ++l) {
    k_.emplace_back(static_cast<size_t>(slots_) * kv_dim_);
    v_.emplace_back(static_cast<size_t>(slots_) * kv_dim_);
  }
}

void SinkKvCache::prepare(int pos, int n) {
  KVLM_CHECK(pos == length_, "sink cache writes must append");
  if (n > slots_ - sinks_) fail("a chunk of ", n, " tokens does not fit the window of ", slots_ - sinks_);
  if (length_ + n > slots_) evict(length_ + n - slots_);
}

void SinkKvCache::evict(int e) {
  const int first = sinks_ + e, keep = length_ - first;  // rows [first, length) move to [sinks, ...)
  for (size_t l = 0; l < k_.size(); ++l) {
    float* k = k_[l].data();
    float* v = v_[l].data();
    std::memmove(k + static_cast<size_t>(sinks_) * kv_dim_, k + static_cast<size_t>(first) * kv_dim_,
                 static_cast<size_t>(keep) * kv_dim_ * sizeof(float));
    std::memmove(v + static_cast<size_t>(sinks_) * kv_dim_, v + static_cast<size_t>(first) * kv_dim_,
                 static_cast<size_t>(keep) * kv_dim_ * sizeof(float));
    for (int r = 0; r < keep; ++r)
      rope_.rotate_heads(k + static_cast<size_t>(sinks_ + r) * kv_dim_, n_kv_heads_, -e);
  }
  length_ -= e;
  evicted_ += e;
}

void SinkKvCache::store(int layer, int pos, int n, const float* k, const float* v) {
  KVLM_CHECK(pos >= 0 && pos + n <= slots_, "sink cache store out of range");
  std::memcpy(k_[layer].data() + static_cast<size_t>(pos) * kv_dim_, k, static_cast<size_t>(n) * kv_dim_ * sizeof(float));
  std::memcpy(v_[layer].data() + static_cast<size_t>(pos) * kv_dim_, v, static_cast<size_t>(n) * kv_dim_ * sizeof(float));
}

void SinkKvCache::set_length(int n) {
  if (n < 0 || n > slots_) fail("sink cache length ", n, " out of range [0, ", slots_, "]");
  length_ = n;
}

}  // namespace kvlm
