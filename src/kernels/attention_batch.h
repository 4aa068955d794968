// Attention over a batch, driven by metadata alone. Shaped after vLLM's attention metadata
// (FlashAttentionMetadata: per sequence its block table, the context already cached and where
// its new query rows start): the caches describe where their rows live (block table, ring, an
// f32 ring of the newest positions, the codec of encoded rows) and this kernel reads them
// directly, with no call back into the cache. A GPU kernel would take the same metadata.
#pragma once
#include <climits>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/kv_quant.h"

namespace kvlm {

class ThreadPool;

// Where one layer's cached K and V rows of one sequence live.
//  - Position p >= hot_from: row p % hot_rows of the f32 ring hot_k / hot_v (the quantized
//    caches' newest positions, kept at full precision).
//  - Otherwise row r = block_table[p / block_size] * block_size + p % block_size (paged), or
//    r = p % ring_rows (contiguous: a ring, or a plain array when ring_rows >= the length):
//    f32 at k / v + r * kv_dim, or encoded by codec at kq / vq + r * data_bytes with its
//    parameters at kp / vp + r * n_params.
struct KvLayerView {
  const int* block_table = nullptr;  // null: contiguous
  int block_size = 0, ring_rows = 0;
  const KvRowCodec* codec = nullptr;  // null: f32 rows
  const float* k = nullptr;
  const float* v = nullptr;
  const uint8_t* kq = nullptr;
  const uint8_t* vq = nullptr;
  const float* kp = nullptr;
  const float* vp = nullptr;
  int hot_from = INT_MAX, hot_rows = 0;
  const float* hot_k = nullptr;
  const float* hot_v = nullptr;
};

// One sequence of the batch: its new rows [first_row, first_row + n_rows) of q/k/v sit at
// positions context_len, context_len + 1, ...; it attends to its cached positions through kv
// and to its own new rows.
struct AttentionSeq {
  int context_len = 0;
  int first_row = 0, n_rows = 0;
  KvLayerView kv;
};

// One new row of the batch: the sequence it belongs to and its absolute position.
struct AttentionRow {
  int seq, pos;
};

struct AttentionBatch {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: each scaled score s becomes softcap * tanh(s / softcap) (Gemma 2)
  int window = 0;  // 0: every earlier position; W: the last W positions, self included
  // [n_heads] or null: learned sink logits (gpt-oss), one per head, each joining its head's
  // softmax denominator as a score whose value row is zero.
  const float* sinks = nullptr;
  const float* q = nullptr;  // [rows][n_heads * head_dim]
  const float* k = nullptr;  // [rows][n_kv_heads * head_dim], the new rows (not yet stored)
  const float* v = nullptr;
  float* out = nullptr;      // [rows][n_heads * head_dim]
  std::vector<AttentionSeq> seqs;
  std::vector<AttentionRow> rows;  // every new row, sequence after sequence (made by add_seq)

  // Appends a sequence whose n_rows new rows follow context_len cached positions.
  void add_seq(int context_len, int n_rows);
};

// Causal attention of every new row, with an online softmax over spans of 256 logical
// positions (attention.h), so each cache layout gives bit-identical results.
void attention_batch(const AttentionBatch& b, ThreadPool& pool);

}  // namespace kvlm
