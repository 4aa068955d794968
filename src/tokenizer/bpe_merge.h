// The BPE merge loop shared by both tokenizer algorithms: repeatedly merge the adjacent pair
// with the highest priority (leftmost on ties) until none is mergeable. O(n log n) with a heap,
// so whole documents (perplexity corpora) encode quickly.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace kvlm {

struct MergeRule {
  float priority;  // higher merges first (SentencePiece score, or -rank)
  int merged;      // id of the merged piece
};

using MergeTable = std::unordered_map<uint64_t, MergeRule>;

inline uint64_t pair_key(int a, int b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Merges `ids` in place.
void bpe_merge(std::vector<int>& ids, const MergeTable& merges);

}  // namespace kvlm
