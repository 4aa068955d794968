#include "kv/kv_pages.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/memory.h"

namespace kvlm {

size_t KvPages::block_bytes(const ModelConfig& cfg, int block_size, DType dtype) {
  const KvRowCodec row{dtype, cfg.kv_dim(), cfg.head_dim};
  return (cfg.mla() ? 1ull : 2ull) * cfg.n_layers * static_cast<size_t>(block_size) * row.bytes();
}

size_t KvPages::expanded_token_bytes(const ModelConfig& cfg, DType dtype) {
  if (!cfg.mla()) return 0;
  const int keys = cfg.n_heads * (cfg.qk_nope_dim + cfg.qk_rope_dim), values = cfg.n_heads * cfg.v_head_dim;
  if (!kv_dtype_fits(dtype, keys) || !kv_dtype_fits(dtype, values)) return 0;
  const KvRowCodec k{dtype, keys, cfg.qk_nope_dim + cfg.qk_rope_dim}, v{dtype, values, cfg.v_head_dim};
  return static_cast<size_t>(cfg.n_layers) * (k.bytes() + v.bytes());
}

std::string KvPages::token_bytes_formula(const ModelConfig& c, DType dtype) {
  const KvRowCodec row{dtype, c.kv_dim(), c.head_dim};
  if (c.mla())
    return std::to_string(c.n_layers) + " layers x 1 latent row of " + std::to_string(c.kv_lora_rank) + " + " +
           std::to_string(c.qk_rope_dim) + " values, read as keys and values (" + std::to_string(row.bytes()) +
           " bytes of " + dtype_name(dtype) + " with any scales)";
  const std::string layers = "2 x " + std::to_string(c.n_layers) + " layers x ";
  if (row.n_params() == 0)
    return layers + std::to_string(c.n_kv_heads) + " kv_heads x " + std::to_string(c.head_dim) + " head_dim x " +
           std::to_string(row.data_bytes() / c.kv_dim()) + " bytes (" + dtype_name(dtype) + ")";
  return layers + "(" + std::to_string(row.data_bytes()) + " bytes of " + dtype_name(dtype) + " values + " +
         std::to_string(row.n_params()) + " f32 " + (dtype == DType::Int4 ? "scales and zero points)" : "scales)");
}

KvPages::KvPages(const ModelConfig& cfg, int block_size, int num_blocks, DType dtype, Device device)
    : block_size_(block_size),
      num_blocks_(num_blocks),
      kv_dim_(cfg.kv_dim()),
      n_layers_(cfg.n_layers),
      values_are_keys_(cfg.mla()),
      codec_{dtype, cfg.kv_dim(), cfg.head_dim},
      device_(device) {
  if (block_size < 1 || block_size > 4096) fail("block size must be in 1..4096, got ", block_size);
  if (num_blocks < 1) fail("the KV pool needs at least one block, got ", num_blocks);
  if (!kv_dtype_fits(dtype, kv_dim_))
    fail("KV dtype ", dtype_name(dtype), " needs kv_dim divisible by 32, got ", kv_dim_);
  for (int l = 0; l < cfg.n_layers; ++l) {
    const int w = l < static_cast<int>(cfg.layer_window.size()) ? cfg.layer_window[l] : 0;
    if (w <= 0) {
      window_ = 0;
      break;
    }
    window_ = std::max(window_, w);
  }
  bytes_per_block_ = block_bytes(cfg, block_size, dtype);
  check_memory_for(
      checked_mul(static_cast<uint64_t>(num_blocks), bytes_per_block_, "KV pool size"),
      "a KV pool of " + std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) + " tokens");
  const size_t rows = static_cast<size_t>(num_blocks) * block_size;
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (dtype == DType::F32) {
      k_.emplace_back(rows * kv_dim_, device);
      if (!values_are_keys_) v_.emplace_back(rows * kv_dim_, device);
    } else {
      kq_.emplace_back(rows * codec_.data_bytes(), device);
      kp_.emplace_back(rows * codec_.n_params(), device);
      if (values_are_keys_) continue;
      vq_.emplace_back(rows * codec_.data_bytes(), device);
      vp_.emplace_back(rows * codec_.n_params(), device);
    }
  }
}

void KvPages::copy_block(int dst, int src) {
  const size_t n = static_cast<size_t>(block_size_) * kv_dim_;
  for (int l = 0; l < static_cast<int>(k_.size()); ++l) {
    std::memcpy(k(l, dst), k(l, src), n * sizeof(float));
    if (!values_are_keys_) std::memcpy(v(l, dst), v(l, src), n * sizeof(float));
  }
  const size_t nd = static_cast<size_t>(block_size_) * codec_.data_bytes();
  const size_t np = static_cast<size_t>(block_size_) * codec_.n_params();
  for (int l = 0; l < static_cast<int>(kq_.size()); ++l) {
    std::memcpy(kq(l, dst), kq(l, src), nd);
    if (np > 0) std::memcpy(kp(l, dst), kp(l, src), np * sizeof(float));  // bf16 keeps no parameters
    if (values_are_keys_) continue;
    std::memcpy(vq(l, dst), vq(l, src), nd);
    if (np > 0) std::memcpy(vp(l, dst), vp(l, src), np * sizeof(float));
  }
}

template <class Fn>
void KvPages::for_each_span(int b, Fn&& fn) const {
  const size_t bs = static_cast<size_t>(block_size_);
  for (int l = 0; l < n_layers_; ++l) {
    if (codec_.dtype == DType::F32) {
      fn(k(l, b), bs * kv_dim_ * sizeof(float));
      if (!values_are_keys_) fn(v(l, b), bs * kv_dim_ * sizeof(float));
      continue;
    }
    fn(kq(l, b), bs * codec_.data_bytes());
    fn(kp(l, b), bs * codec_.n_params() * sizeof(float));
    if (values_are_keys_) continue;
    fn(vq(l, b), bs * codec_.data_bytes());
    fn(vp(l, b), bs * codec_.n_params() * sizeof(float));
  }
}

void KvPages::read_block(int b, uint8_t* out) const {
  for_each_span(b, [&](const void* p, size_t n) {
    if (n == 0) return;  // a codec without parameters (bf16): its parameter buffer is empty
    std::memcpy(out, p, n);
    out += n;
  });
}

void KvPages::write_block(int b, const uint8_t* in) {
  // The spans are this object's own rows: writing through them is writing our storage.
  for_each_span(b, [&](const void* p, size_t n) {
    if (n == 0) return;
    std::memcpy(const_cast<void*>(p), in, n);
    in += n;
  });
}

}  // namespace kvlm
