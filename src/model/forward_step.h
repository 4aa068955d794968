// ForwardStep: one forward pass over a batch as a family's forward sees it. The family (its
// forward function, families/*.cpp) calls the backend's ops in its own order on the step's
// activations; the engine, which owns the batch's sequences and KV caches, implements the two
// calls that need them: attention over each sequence's cache, and the choice of output rows.
// Ops run as they are called (eagerly): the step is a recipe in code, as llama.cpp's
// src/models/*.cpp are, not a graph kept in memory.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/backend.h"

namespace kvlm {

// What attention of one layer needs beyond q, k and v.
struct AttentionParams {
  int layer = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;    // multiplier on q.k
  float softcap = 0.0f;  // > 0: scores soft-capped at it after scaling (Gemma 2)
  int window = 0;        // 0: every earlier position; W: the last W positions, self included
  const float* sinks = nullptr;  // [n_heads] learned sink logits (gpt-oss), or null
};

class ForwardStep {
 public:
  ForwardStep(Backend& ops, std::vector<int> tokens, std::vector<int> positions)
      : ops(ops), tokens(std::move(tokens)), positions(std::move(positions)) {}
  virtual ~ForwardStep() = default;
  ForwardStep(const ForwardStep&) = delete;
  ForwardStep& operator=(const ForwardStep&) = delete;

  Backend& ops;
  const std::vector<int> tokens;     // [rows]: every sequence's new tokens, one after another
  const std::vector<int> positions;  // [rows]: each token's position in its sequence
  int rows() const { return static_cast<int>(tokens.size()); }

  // Scratch for [rows][width] activations, kept per slot between steps (grown, never shrunk);
  // contents undefined until written. Slots are the family's to number.
  virtual float* act(int slot, size_t width) = 0;
  // Attention of p.layer: q [rows][n_heads * head_dim] and k, v [rows][n_kv_heads * head_dim]
  // with RoPE applied; stores k and v in each sequence's cache and writes out [rows][q width].
  virtual void attention(const AttentionParams& p, const float* q, const float* k, const float* v, float* out) = 0;
  // The rows whose logits were asked for, copied from x [rows][width] into out; returns how many.
  virtual int output_rows(const float* x, int width, float* out) = 0;
  // Where the logits of those rows go: [count][vocab].
  virtual float* logits(int count, int vocab) = 0;
};

}  // namespace kvlm
