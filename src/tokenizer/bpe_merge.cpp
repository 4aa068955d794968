#include "tokenizer/bpe_merge.h"

#include <queue>

namespace kvlm {

void bpe_merge(std::vector<int>& ids, const MergeTable& merges) {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    float priority;
    int left, left_id, right_id;
    bool operator<(const Cand& o) const {  // max-heap: highest priority, then leftmost
      if (priority != o.priority) return priority < o.priority;
      return left > o.left;
    }
  };
  std::priority_queue<Cand> heap;
  auto push = [&](int left) {
    int right = next[left];
    if (left < 0 || right < 0) return;
    auto it = merges.find(pair_key(ids[left], ids[right]));
    if (it != merges.end()) heap.push({it->second.priority, left, ids[left], ids[right]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    int right = alive[c.left] ? next[c.left] : -1;
    // Stale entry: a neighbour was merged since it was pushed.
    if (right < 0 || ids[c.left] != c.left_id || ids[right] != c.right_id) continue;
    ids[c.left] = merges.at(pair_key(c.left_id, c.right_id)).merged;
    alive[right] = false;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    if (prev[c.left] >= 0) push(prev[c.left]);
    push(c.left);
  }
  std::vector<int> out;
  for (int i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
  ids.swap(out);
}

}  // namespace kvlm
