#include "kv/ledger.h"

#include <cstdio>
#include <map>

namespace kvlm {

KvLedger compute_ledger(const BlockPool& pool, const KvPages& pages, const std::vector<std::pair<int, const KvCache*>>& seqs) {
  KvLedger L;
  L.block_size = pool.block_size();
  L.num_blocks = pool.num_blocks();
  L.n_layers = pages.n_layers();
  L.bytes_per_block = pool.bytes_per_block();
  L.page_dtype = dtype_name(pages.dtype());
  L.capacity_bytes = L.bytes_per_block * L.num_blocks;
  std::vector<int> filled(L.num_blocks, 0);  // most slots any sequence fills in each block
  for (auto& [id, cache] : seqs) {
    const KvSeqStats st = cache->stats();
    KvLedger::Seq s{id, st.tokens, st.blocks, 0, 0};
    s.freed_blocks = st.freed_blocks;
    s.residual_tokens = st.residual_tokens;
    s.residual_bytes = st.residual_bytes;
    s.evicted_tokens = st.evicted;
    L.residual_bytes += s.residual_bytes;
    const std::vector<int>& table = cache->blocks();
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i] < 0) continue;  // given back by the sliding window
      int in_block = std::min<int>(L.block_size, std::max<int>(0, st.tokens - static_cast<int>(i) * L.block_size));
      filled[table[i]] = std::max(filled[table[i]], in_block);
      s.shared_blocks += pool.ref(table[i]) > 1;
    }
    s.bytes = s.blocks * L.bytes_per_block;
    L.seqs.push_back(s);
  }
  size_t used_blocks = 0;
  for (int b = 0; b < L.num_blocks; ++b) {
    if (pool.ref(b) > 1) {
      L.shared_bytes += L.bytes_per_block;
    } else if (pool.ref(b) == 1) {
      L.private_bytes += L.bytes_per_block;
    } else {
      (pool.has_hash(b) ? L.cached_bytes : L.free_bytes) += L.bytes_per_block;
      continue;
    }
    ++used_blocks;
    L.slots_in_use += L.block_size;
    L.slots_filled += filled[b];
  }
  L.layer_bytes.assign(L.n_layers, used_blocks * L.bytes_per_block / std::max(1, L.n_layers));
  return L;
}

std::string KvLedger::to_text() const {
  auto mb = [](size_t b) { return b / 1e6; };
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof buf,
                "KV ledger: %d blocks x %d tokens x %zu B (%s pages) = %.3f MB capacity\n"
                "  in use   private %.3f MB | shared %.3f MB (counted once)\n"
                "  idle     cached prefixes %.3f MB | free %.3f MB\n"
                "  waste    %.1f%% of slots in referenced blocks are empty (%zu of %zu)\n",
                num_blocks, block_size, bytes_per_block, page_dtype.c_str(), mb(capacity_bytes), mb(private_bytes), mb(shared_bytes),
                mb(cached_bytes), mb(free_bytes), waste_pct(), slots_in_use - slots_filled, slots_in_use);
  s += buf;
  std::snprintf(buf, sizeof buf, "  per layer %.3f MB in use (x %d layers)\n", layer_bytes.empty() ? 0.0 : mb(layer_bytes[0]),
                n_layers);
  s += buf;
  if (residual_bytes) {
    std::snprintf(buf, sizeof buf, "  f32 rows of the newest tokens, outside the pool: %.3f MB\n", mb(residual_bytes));
    s += buf;
  }
  if (!tiers.is_null()) {
    const auto& h = tiers["host"];
    const auto& d = tiers["disk"];
    long rejected = 0;
    for (const auto& [reason, n] : tiers["rejected"].items()) rejected += n.get<long>();
    std::snprintf(buf, sizeof buf,
                  "  tiers    host %.3f MB in %zu blocks (%ld hits) | disk %.3f MB in %zu blocks (%ld hits) | "
                  "%ld misses, %ld refused\n",
                  mb(h["bytes"].get<size_t>()), h["blocks"].get<size_t>(), h["hits"].get<long>(), mb(d["bytes"].get<size_t>()),
                  d["blocks"].get<size_t>(), d["hits"].get<long>(), tiers["misses"].get<long>(), rejected);
    s += buf;
  }
  for (const Seq& q : seqs) {
    std::snprintf(buf, sizeof buf, "  seq %-4d %6d tokens  %4d blocks (%d shared, %d freed by the window)  %.3f MB", q.id,
                  q.tokens, q.blocks, q.shared_blocks, q.freed_blocks, mb(q.bytes));
    s += buf;
    if (q.residual_bytes) {
      std::snprintf(buf, sizeof buf, " + %d newest tokens at f32 %.3f MB", q.residual_tokens, mb(q.residual_bytes));
      s += buf;
    }
    if (q.evicted_tokens) {
      std::snprintf(buf, sizeof buf, "  (%ld tokens evicted between the sinks and the window)", q.evicted_tokens);
      s += buf;
    }
    s += "\n";
  }
  return s;
}

nlohmann::json KvLedger::to_json() const {
  nlohmann::json seq = nlohmann::json::array();
  for (const Seq& q : seqs)
    seq.push_back({{"id", q.id}, {"tokens", q.tokens}, {"blocks", q.blocks}, {"shared_blocks", q.shared_blocks},
                   {"bytes", q.bytes}, {"freed_blocks", q.freed_blocks}, {"residual_tokens", q.residual_tokens},
                   {"residual_bytes", q.residual_bytes}, {"evicted_tokens", q.evicted_tokens}});
  return {{"block_size", block_size},     {"num_blocks", num_blocks},     {"bytes_per_block", bytes_per_block},
          {"page_dtype", page_dtype},     {"residual_bytes", residual_bytes},
          {"capacity_bytes", capacity_bytes}, {"private_bytes", private_bytes}, {"shared_bytes", shared_bytes},
          {"cached_bytes", cached_bytes}, {"free_bytes", free_bytes},     {"layer_bytes", layer_bytes},
          {"waste_pct", waste_pct()},     {"sequences", seq},             {"tiers", tiers}};
}

}  // namespace kvlm
