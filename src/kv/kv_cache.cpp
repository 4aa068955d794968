#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/memory.h"

namespace kvlm {

ContiguousKvCache::ContiguousKvCache(const ModelConfig& cfg, int max_len, DType dtype, int residual)
    : kv_dim_(cfg.kv_dim()), max_len_(max_len), values_are_keys_(cfg.mla()), codec_{dtype, cfg.kv_dim(), cfg.head_dim} {
  if (max_len <= 0) fail("KV cache length must be positive, got ", max_len);
  if (residual < 0) fail("KV residual window must be >= 0, got ", residual);
  if (!kv_dtype_fits(dtype, kv_dim_))
    fail("KV dtype ", dtype_name(dtype), " needs kv_dim divisible by 32, got ", kv_dim_);
  const bool quantized = dtype != DType::F32;
  residual_ = quantized ? std::min(residual, max_len) : 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    int w = cfg.layer_window[l];
    slots_.push_back((w > 0 && w < max_len) ? w : max_len);
  }
  k_.resize(cfg.n_layers);
  v_.resize(cfg.n_layers);
  if (quantized) {
    kq_.resize(cfg.n_layers);
    vq_.resize(cfg.n_layers);
    kp_.resize(cfg.n_layers);
    vp_.resize(cfg.n_layers);
  }
}

void ContiguousKvCache::grow(int positions) {
  if (positions <= rows_) return;
  // Geometric growth up to the limit: memory follows the sequence, never the --ctx ceiling. Large
  // layers grow by moving their pages (Buffer's device_grow), not by copying them within a step.
  // A ring has not wrapped while positions <= its slots, so growing it keeps every slot in place.
  const int rows = std::min(max_len_, std::max(positions, std::max(64, 2 * rows_)));
  const bool quantized = codec_.dtype != DType::F32;
  const size_t add = bytes_for(rows) - bytes_allocated();
  if (add > (size_t{64} << 20)) check_memory_for(add, "the KV cache for " + std::to_string(rows) + " positions");
  for (size_t l = 0; l < slots_.size(); ++l) {
    size_t slots = static_cast<size_t>(std::min(rows, slots_[l]));
    size_t f32_rows = quantized ? std::min<size_t>(residual_, rows) : slots;
    k_[l].resize(f32_rows * kv_dim_);
    // The f32 ring beside quantized rows keeps both sides (it is small); whole rows keep K alone
    // where the values are the keys.
    if (!values_are_keys_ || quantized) v_[l].resize(f32_rows * kv_dim_);
    if (quantized) {
      kq_[l].resize(slots * codec_.data_bytes());
      kp_[l].resize(slots * codec_.n_params());
      if (!values_are_keys_) vq_[l].resize(slots * codec_.data_bytes()), vp_[l].resize(slots * codec_.n_params());
    }
  }
  rows_ = rows;
}

void ContiguousKvCache::encode_cold(int layer, int pos, const float* k, const float* v) {
  size_t s = static_cast<size_t>(pos % slots_[layer]);
  codec_.encode(k, kq_[layer].data() + s * codec_.data_bytes(), kp_[layer].data() + s * codec_.n_params());
  if (!values_are_keys_)
    codec_.encode(v, vq_[layer].data() + s * codec_.data_bytes(), vp_[layer].data() + s * codec_.n_params());
}

KvLayerView ContiguousKvCache::view(int layer) const {
  KvLayerView v;
  v.ring_rows = slots_[layer];
  if (codec_.dtype == DType::F32) {
    v.k = k_[layer].data();
    v.v = values_are_keys_ ? v.k : v_[layer].data();
    return v;
  }
  v.codec = &codec_;
  v.kq = kq_[layer].data();
  v.kp = kp_[layer].data();
  v.vq = values_are_keys_ ? v.kq : vq_[layer].data();
  v.vp = values_are_keys_ ? v.kp : vp_[layer].data();
  if (residual_ > 0) {  // the newest `residual` positions, at full precision
    v.hot_from = std::max(0, length_ - residual_);
    v.hot_rows = residual_;
    v.hot_k = k_[layer].data();
    v.hot_v = v_[layer].data();
  }
  return v;
}

void ContiguousKvCache::prepare(int pos, int n) {
  if (pos < 0 || n < 0 || pos + n > max_len_) fail("KV cache overflow: position ", pos + n, " > capacity ", max_len_);
  grow(pos + n);
}

void ContiguousKvCache::store(int layer, int pos, int n, const float* k, const float* v) {
  KVLM_CHECK(!values_are_keys_ || k == v, "a latent cache stores one row as key and value");
  if (pos < 0 || pos + n > max_len_) fail("KV cache overflow: position ", pos + n, " > capacity ", max_len_);
  grow(pos + n);  // normally done by prepare(); callers filling a cache directly rely on this
  if (codec_.dtype != DType::F32) {
    for (int t = 0; t < n; ++t) {
      const int p = pos + t;
      const float* kt = k + static_cast<size_t>(t) * kv_dim_;
      const float* vt = v + static_cast<size_t>(t) * kv_dim_;
      if (residual_ == 0) {
        encode_cold(layer, p, kt, vt);
        continue;
      }
      size_t slot = static_cast<size_t>(p % residual_) * kv_dim_;
      if (p >= residual_)  // position p - residual leaves the window: encode it
        encode_cold(layer, p - residual_, k_[layer].data() + slot, v_[layer].data() + slot);
      std::memcpy(k_[layer].data() + slot, kt, kv_dim_ * sizeof(float));
      std::memcpy(v_[layer].data() + slot, vt, kv_dim_ * sizeof(float));
    }
    return;
  }
  // A ring keeps only the last `slots` positions of a long chunk.
  int first = std::max(0, n - slots_[layer]);
  for (int t = first; t < n; ++t) {
    size_t off = slot(layer, pos + t);
    std::memcpy(k_[layer].data() + off, k + static_cast<size_t>(t) * kv_dim_, kv_dim_ * sizeof(float));
    if (!values_are_keys_)
      std::memcpy(v_[layer].data() + off, v + static_cast<size_t>(t) * kv_dim_, kv_dim_ * sizeof(float));
  }
}

void ContiguousKvCache::set_length(int n) {
  if (n < 0 || n > max_len_) fail("KV cache length ", n, " out of range [0, ", max_len_, "]");
  length_ = n;
}

const std::vector<int>& KvCache::blocks() const {
  static const std::vector<int> none;
  return none;
}

void ContiguousKvCache::clear() {
  // Memory follows need: a cleared cache holds nothing until positions arrive again.
  for (auto* rows : {&k_, &v_, &kp_, &vp_})
    for (auto& r : *rows) r.clear();
  for (auto* rows : {&kq_, &vq_})
    for (auto& r : *rows) r.clear();
  rows_ = length_ = 0;
}

KvSeqStats ContiguousKvCache::stats() const {
  KvSeqStats s;
  s.tokens = length_;
  s.residual_tokens = std::min(residual_, length_);
  if (residual_ > 0)
    for (size_t l = 0; l < k_.size(); ++l) s.residual_bytes += (k_[l].size() + v_[l].size()) * sizeof(float);
  s.bytes = bytes_allocated();
  return s;
}

size_t ContiguousKvCache::bytes_for(int positions) const { return row_bytes(positions, false); }

size_t ContiguousKvCache::bytes_read_at(int positions) const { return row_bytes(positions, true); }

size_t ContiguousKvCache::row_bytes(int positions, bool read) const {
  size_t b = 0;
  for (int slots : slots_) {
    const size_t rows = static_cast<size_t>(std::min(positions, slots));
    const size_t sides = values_are_keys_ ? 1 : 2;
    if (codec_.dtype == DType::F32) {
      b += sides * rows * kv_dim_ * sizeof(float);
      continue;
    }
    // Beside quantized rows the newest `residual` positions are kept at f32 too (a ring of its
    // own, whatever the layer's window), and read in place of their codec rows.
    const size_t f32_rows = std::min<size_t>(residual_, read ? rows : static_cast<size_t>(positions));
    const size_t codec_rows = read ? rows - f32_rows : rows;
    b += 2 * f32_rows * kv_dim_ * sizeof(float) + sides * codec_rows * codec_.bytes();
  }
  return b;
}

size_t ContiguousKvCache::bytes_allocated() const {
  size_t b = 0;
  for (size_t l = 0; l < k_.size(); ++l) b += (k_[l].size() + v_[l].size()) * sizeof(float);
  for (size_t l = 0; l < kq_.size(); ++l)
    b += kq_[l].size() + vq_[l].size() + (kp_[l].size() + vp_[l].size()) * sizeof(float);
  return b;
}

}  // namespace kvlm
