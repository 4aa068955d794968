#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kvlm {

ContiguousKvCache::ContiguousKvCache(const ModelConfig& cfg, int max_len)
    : kv_dim_(cfg.kv_dim()), max_len_(max_len) {
  if (max_len <= 0) fail("KV cache length must be positive, got ", max_len);
  for (int l = 0; l < cfg.n_layers; ++l) {
    int w = cfg.layer_window[l];
    int slots = (w > 0 && w < max_len) ? w : max_len;
    slots_.push_back(slots);
    k_.emplace_back(static_cast<size_t>(slots) * kv_dim_);
    v_.emplace_back(static_cast<size_t>(slots) * kv_dim_);
  }
}

void ContiguousKvCache::prepare(int pos, int n) {
  if (pos < 0 || n < 0 || pos + n > max_len_) fail("KV cache overflow: position ", pos + n, " > capacity ", max_len_);
}

void ContiguousKvCache::store(int layer, int pos, int n, const float* k, const float* v) {
  if (pos < 0 || pos + n > max_len_) fail("KV cache overflow: position ", pos + n, " > capacity ", max_len_);
  // A ring keeps only the last `slots` positions of a long chunk.
  int first = std::max(0, n - slots_[layer]);
  for (int t = first; t < n; ++t) {
    size_t off = slot(layer, pos + t);
    std::memcpy(k_[layer].data() + off, k + static_cast<size_t>(t) * kv_dim_, kv_dim_ * sizeof(float));
    std::memcpy(v_[layer].data() + off, v + static_cast<size_t>(t) * kv_dim_, kv_dim_ * sizeof(float));
  }
}

void ContiguousKvCache::set_length(int n) {
  if (n < 0 || n > max_len_) fail("KV cache length ", n, " out of range [0, ", max_len_, "]");
  length_ = n;
}

size_t ContiguousKvCache::bytes_allocated() const {
  size_t b = 0;
  for (size_t l = 0; l < k_.size(); ++l) b += (k_[l].size() + v_[l].size()) * sizeof(float);
  return b;
}

}  // namespace kvlm
