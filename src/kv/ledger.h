// The KV memory ledger: exact bytes of the pool by state, per layer and per sequence.
// private + shared + cached + free always equals the capacity.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache.h"

namespace kvlm {

struct KvLedger {
  int block_size = 0, num_blocks = 0, n_layers = 0;
  std::string page_dtype;   // precision of every page row in this pool (f32, f16, bf16, int8, int4)
  size_t bytes_per_block = 0, capacity_bytes = 0;
  size_t residual_bytes = 0;  // f32 rows of the newest positions, per sequence, outside the pool
  size_t private_bytes = 0;  // blocks referenced by one sequence
  size_t shared_bytes = 0;   // blocks referenced by several (fork, prefix cache), counted once
  size_t cached_bytes = 0;   // unreferenced blocks still holding a reusable prefix
  size_t free_bytes = 0;     // unreferenced, empty
  std::vector<size_t> layer_bytes;  // [n_layers] bytes in use (private + shared) per layer
  struct Seq {
    int id, tokens, blocks, shared_blocks;
    size_t bytes;  // blocks it references x block bytes (shared ones counted in full)
    int freed_blocks = 0;       // blocks given back for having left the sliding window
    int residual_tokens = 0;    // newest positions also held at f32 (quantized pages)
    size_t residual_bytes = 0;
    long evicted_tokens = 0;    // dropped by attention sinks
  };
  std::vector<Seq> seqs;
  nlohmann::json tiers;  // KvTierStats::to_json() when the pool has tiers below it, else null
  size_t slots_in_use = 0, slots_filled = 0;  // token slots of referenced blocks, and those holding a token
  double waste_pct() const { return slots_in_use ? 100.0 * (slots_in_use - slots_filled) / slots_in_use : 0.0; }

  std::string to_text() const;
  nlohmann::json to_json() const;
};

// Sequences are read through the KV-manager interface: any layout whose blocks come from `pool`.
KvLedger compute_ledger(const BlockPool& pool, const KvPages& pages, const std::vector<std::pair<int, const KvCache*>>& seqs);

}  // namespace kvlm
