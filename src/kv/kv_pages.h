// KvPages: the storage behind paged KV caches, held in the backend's buffers (host memory
// today). The BlockPool (block_pool.h) hands out block ids and counts references; this holds
// what the ids index, as vLLM v1 splits its block pool from the worker's KV tensors. A device
// backend allocates these buffers on its device; the bookkeeping does not change.
//
//   k_[layer] : [num_blocks][block_size][kv_dim]   (v_ likewise), f32 pages
//   kq_[layer]: [num_blocks][block_size][codec data bytes], kp_ the codec's parameters (v likewise),
//               quantized pages (f16, bf16, int8, int4): rows are encoded as they are stored
// A latent-attention model's values are its keys (one latent row per position, read as both):
// its pages hold the K side alone, and the V accessors return it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/kv_quant.h"
#include "model/config.h"

namespace kvlm {

class KvPages {
 public:
  KvPages(const ModelConfig& cfg, int block_size, int num_blocks, DType dtype = DType::F32,
          Device device = Device::Host);
  // Bytes one block of `block_size` positions takes (K and V, every layer), before any exists.
  static size_t block_bytes(const ModelConfig& cfg, int block_size, DType dtype);
  // Latent attention (cfg.mla()): the bytes per token the same model's keys and values would take
  // in this type cached expanded, per head (heads x (qk_nope + qk_rope) keys and heads x v_head
  // values per layer), as transformers' and most engines' caches hold them; 0 when the type cannot
  // hold those rows or the model has no latent.
  static size_t expanded_token_bytes(const ModelConfig& cfg, DType dtype);
  // block_bytes(cfg, 1, dtype) in words: "2 x L layers x ..." with the codec's values and scales.
  static std::string token_bytes_formula(const ModelConfig& cfg, DType dtype);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int kv_dim() const { return kv_dim_; }
  int n_layers() const { return n_layers_; }
  size_t bytes_per_block() const { return bytes_per_block_; }
  const KvRowCodec& codec() const { return codec_; }
  DType dtype() const { return codec_.dtype; }
  Device device() const { return device_; }
  // Positions older than (newest - window + 1) are never attended again, so their blocks can be
  // freed: the largest layer window, or 0 when some layer attends globally (nothing is freed).
  int window() const { return window_; }

  float* k(int layer, int b) { return k_[layer].data() + row0(b) * kv_dim_; }
  float* v(int layer, int b) { return values_are_keys_ ? k(layer, b) : v_[layer].data() + row0(b) * kv_dim_; }
  const float* k(int layer, int b) const { return k_[layer].data() + row0(b) * kv_dim_; }
  const float* v(int layer, int b) const {
    return values_are_keys_ ? k(layer, b) : v_[layer].data() + row0(b) * kv_dim_;
  }
  // Quantized pages: a block's first row of encoded data, and of codec parameters.
  uint8_t* kq(int layer, int b) { return kq_[layer].data() + row0(b) * codec_.data_bytes(); }
  uint8_t* vq(int layer, int b) {
    return values_are_keys_ ? kq(layer, b) : vq_[layer].data() + row0(b) * codec_.data_bytes();
  }
  float* kp(int layer, int b) { return kp_[layer].data() + row0(b) * codec_.n_params(); }
  float* vp(int layer, int b) {
    return values_are_keys_ ? kp(layer, b) : vp_[layer].data() + row0(b) * codec_.n_params();
  }
  const uint8_t* kq(int layer, int b) const { return kq_[layer].data() + row0(b) * codec_.data_bytes(); }
  const uint8_t* vq(int layer, int b) const {
    return values_are_keys_ ? kq(layer, b) : vq_[layer].data() + row0(b) * codec_.data_bytes();
  }
  const float* kp(int layer, int b) const { return kp_[layer].data() + row0(b) * codec_.n_params(); }
  const float* vp(int layer, int b) const {
    return values_are_keys_ ? kp(layer, b) : vp_[layer].data() + row0(b) * codec_.n_params();
  }
  // The values are the keys (latent attention): stores write the K side alone.
  bool values_are_keys() const { return values_are_keys_; }
  void copy_block(int dst, int src);  // all layers
  // A block's rows as one flat payload of bytes_per_block() bytes (every layer's K then V, each
  // as stored: f32 rows, or encoded rows and their codec parameters), for tiers and snapshots.
  // Quantized pages travel as they are: nothing is re-encoded.
  void read_block(int b, uint8_t* out) const;
  void write_block(int b, const uint8_t* in);

 private:
  size_t row0(int b) const { return static_cast<size_t>(b) * block_size_; }
  template <class Fn>
  void for_each_span(int b, Fn&& fn) const;  // fn(const void* rows, size_t bytes), in payload order

  int block_size_, num_blocks_, kv_dim_, n_layers_, window_ = 0;
  bool values_are_keys_ = false;
  KvRowCodec codec_;
  size_t bytes_per_block_;
  Device device_;
  std::vector<Buffer<float>> k_, v_;      // f32 pages
  std::vector<Buffer<uint8_t>> kq_, vq_;  // quantized pages
  std::vector<Buffer<float>> kp_, vp_;
};

}  // namespace kvlm
