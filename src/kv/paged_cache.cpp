#include "kv/paged_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kvlm {

namespace {
// One staging buffer per thread for blocks coming back from a tier.
std::vector<uint8_t>& tier_buffer() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}
}  // namespace

PagedKvCache::PagedKvCache(KvPages& pages, BlockPool& pool, PagedKvOptions opt)
    : pages_(pages), pool_(pool), max_len_(opt.max_len), salt_(std::move(opt.salt)) {
  tiers_ = opt.tiers;
  hasher_ = opt.hasher;
  KVLM_CHECK(pool.num_blocks() == pages.num_blocks() && pool.block_size() == pages.block_size(),
             "a block pool and pages of different shapes");
  if (opt.residual < 0) fail("KV residual window must be >= 0, got ", opt.residual);
  if (opt.window > 0) {
    if (opt.sinks < 0) fail("attention sinks need sink tokens >= 0, got ", opt.sinks);
    if (!opt.rope || opt.rope->kind == RopeKind::None)
      fail("attention sinks need a RoPE model: moved keys are re-rotated to their new index");
    // A quantized page would be decoded, rotated and encoded again at every eviction: rounding
    // error that piles up, unlike the f32 rows the contiguous sink cache moves.
    if (pages.dtype() != DType::F32) fail("attention sinks need f32 KV pages, not ", dtype_name(pages.dtype()));
    // A latent row rotates only its last part: re-rotating it as whole heads would be wrong.
    if (pages.values_are_keys()) fail("attention sinks are not supported with latent attention (MLA)");
    const int64_t slots = static_cast<int64_t>(opt.sinks) + opt.window;
    if (opt.max_len > 0 && slots > opt.max_len)
      fail("sink tokens + window (", slots, ") exceed the context of ", opt.max_len, " tokens");
    max_len_ = static_cast<int>(slots);
    sinks_ = opt.sinks;
    window_ = opt.window;
    rope_ = opt.rope;
  }
  if (max_len_ <= 0) fail("KV cache length must be positive, got ", max_len_);
  if (pages.dtype() != DType::F32 && opt.residual > 0) {
    residual_ = std::min(opt.residual, max_len_);
    const size_t n = static_cast<size_t>(residual_) * pages.kv_dim();
    ring_k_.assign(pages.n_layers(), std::vector<float>(n));
    ring_v_.assign(pages.n_layers(), std::vector<float>(n));
  }
}

PagedKvCache::~PagedKvCache() { release_all(); }

void PagedKvCache::release_all() {
  // Release the tail first, so the head of a prefix stays cached longest (LRU evicts the tail).
  for (auto it = table_.rbegin(); it != table_.rend(); ++it)
    if (*it != kFreed) pool_.release(*it);
  table_.clear();
  truncate_hashes(0);
  length_ = hot_from_ = 0;
  evicted_ = 0;
}

int PagedKvCache::dead_before(int pos) const {
  const int w = pages_.window();
  // With sinks, positions are cache indices and rows move down into earlier blocks: none is dead.
  if (w <= 0 || sinks_on()) return 0;
  // The query at `pos` reads positions >= pos - w + 1; later queries read no earlier ones.
  return std::max(0, pos - w + 1) / pool_.block_size();
}

void PagedKvCache::release_before(int pos) {
  // Tail first, as release_all does, so the oldest stay cached longest.
  for (int b = std::min(dead_before(pos), static_cast<int>(table_.size())) - 1; b >= 0; --b)
    if (table_[b] != kFreed) {
      pool_.release(table_[b]);
      table_[b] = kFreed;
    }
}

int PagedKvCache::live_blocks() const {
  return static_cast<int>(std::count_if(table_.begin(), table_.end(), [](int b) { return b != kFreed; }));
}

int PagedKvCache::freed_blocks() const { return static_cast<int>(table_.size()) - live_blocks(); }

size_t PagedKvCache::residual_bytes() const {
  return 2ull * ring_k_.size() * residual_ * pages_.kv_dim() * sizeof(float);
}

int PagedKvCache::blocks_needed(int n) const { return blocks_needed(length_, n); }

int PagedKvCache::blocks_needed(int pos, int n) const {
  const int bs = pool_.block_size();
  if (n <= 0) return 0;
  const int e = pos == length_ ? evicting(n) : 0;
  const int end = pos - e + n;  // positions held once this step has stored
  const int last_block = (end - 1) / bs;
  // Blocks written: those the chunk lands in, and with an eviction every block past the sinks.
  const int first_written = e > 0 ? sinks_ / bs : (pos - e) / bs;
  int need = std::max(0, last_block + 1 - static_cast<int>(table_.size()));
  for (int b = first_written; b <= last_block && b < static_cast<int>(table_.size()); ++b)
    need += table_[b] != kFreed && pool_.ref(table_[b]) > 1;
  const int dead = std::min(dead_before(pos), static_cast<int>(table_.size()));
  for (int b = 0; b < dead; ++b) need -= table_[b] != kFreed && pool_.ref(table_[b]) == 1;
  return std::max(0, need);
}

int PagedKvCache::blocks_to_reserve() const {
  if (!sinks_on()) return 0;
  // The whole footprint, less the blocks it holds alone (shared ones are copied when written).
  const int bs = pool_.block_size();
  int own = 0;
  for (int b : table_) own += b != kFreed && pool_.ref(b) == 1;
  return std::max(0, (max_len_ + bs - 1) / bs - own);
}

void PagedKvCache::make_writable(int first, int last, bool unpublish) {
  for (int b = first; b <= last && b < static_cast<int>(table_.size()); ++b) {
    KVLM_CHECK(table_[b] != kFreed, "writing into a block freed by the sliding window");
    if (pool_.ref(table_[b]) > 1) {  // copy-on-write
      int fresh = pool_.allocate();
      pages_.copy_block(fresh, table_[b]);
      pool_.release(table_[b]);
      table_[b] = fresh;
    } else if (unpublish) {  // ours alone, but findable as a prefix: it must stop being one
      pool_.unpublish(table_[b]);
    }
  }
}

void PagedKvCache::evict(int e) {
  const int bs = pool_.block_size(), dim = pages_.kv_dim();
  const int keep = length_ - sinks_ - e;  // rows [sinks + e, length) move to [sinks, sinks + keep)
  make_writable(sinks_ / bs, static_cast<int>(table_.size()) - 1, true);
  truncate_hashes(static_cast<size_t>(sinks_ / bs));
  auto row = [&](float* base_of_block0, int p) { return base_of_block0 + (static_cast<size_t>(table_[p / bs]) * bs + p % bs) * dim; };
  for (int l = 0; l < pages_.n_layers(); ++l) {
    float* k0 = pages_.k(l, 0);
    float* v0 = pages_.v(l, 0);
    for (int r = 0; r < keep; ++r) {  // ascending: a source row is read before any later write reaches it
      const int from = sinks_ + e + r, to = sinks_ + r;
      std::memcpy(row(k0, to), row(k0, from), dim * sizeof(float));
      std::memcpy(row(v0, to), row(v0, from), dim * sizeof(float));
      rope_->rotate_heads(row(k0, to), dim / rope_->head_dim, -e);
    }
  }
  length_ -= e;
  evicted_ += e;
  const size_t blocks = static_cast<size_t>((length_ + bs - 1) / bs);
  while (table_.size() > blocks) {
    pool_.release(table_.back());
    table_.pop_back();
  }
}

void PagedKvCache::prepare(int pos, int n) {
  if (sinks_on()) {
    KVLM_CHECK(pos == length_, "a sink stream's writes must append");
    if (n > window_) fail("a chunk of ", n, " tokens does not fit the window of ", window_);
  } else if (pos < 0 || n < 0 || pos + n > max_len_) {
    fail("KV cache overflow: position ", pos + n, " > capacity ", max_len_);
  }
  if (n == 0) return;
  if (blocks_needed(pos, n) > pool_.num_free())
    fail("KV pool exhausted: need ", blocks_needed(pos, n), " blocks, ", pool_.num_free(), " free");
  const int bs = pool_.block_size();
  if (int e = evicting(n); e > 0) {
    evict(e);
    pos = length_;
  }
  release_before(pos);
  const int last_block = (pos + n - 1) / bs;
  make_writable(pos / bs, last_block, false);
  while (static_cast<int>(table_.size()) <= last_block) table_.push_back(pool_.allocate());
}

void PagedKvCache::store(int layer, int pos, int n, const float* k, const float* v) {
  const int bs = pool_.block_size(), dim = pages_.kv_dim();
  KVLM_CHECK(!pages_.values_are_keys() || k == v, "a latent cache stores one row as key and value");
  const KvRowCodec& codec = pages_.codec();
  for (int t = 0; t < n; ++t) {
    int p = pos + t, b = p / bs;
    if (b >= static_cast<int>(table_.size()) || table_[b] == kFreed)
      KVLM_CHECK(false, "store outside the prepared blocks");
    const float* kt = k + static_cast<size_t>(t) * dim;
    const float* vt = v + static_cast<size_t>(t) * dim;
    const size_t slot = static_cast<size_t>(p % bs);
    if (codec.dtype == DType::F32) {
      std::memcpy(pages_.k(layer, table_[b]) + slot * dim, kt, dim * sizeof(float));
      if (!pages_.values_are_keys()) std::memcpy(pages_.v(layer, table_[b]) + slot * dim, vt, dim * sizeof(float));
      continue;
    }
    // Encoded at once, so a page is complete for any sequence that shares or adopts it.
    codec.encode(kt, pages_.kq(layer, table_[b]) + slot * codec.data_bytes(), pages_.kp(layer, table_[b]) + slot * codec.n_params());
    if (!pages_.values_are_keys())
      codec.encode(vt, pages_.vq(layer, table_[b]) + slot * codec.data_bytes(), pages_.vp(layer, table_[b]) + slot * codec.n_params());
    if (residual_ > 0) {
      const size_t r = static_cast<size_t>(p % residual_) * dim;
      std::memcpy(ring_k_[layer].data() + r, kt, dim * sizeof(float));
      std::memcpy(ring_v_[layer].data() + r, vt, dim * sizeof(float));
    }
  }
}

KvLayerView PagedKvCache::view(int layer) const {
  KvLayerView v;
  v.block_table = table_.data();  // kFreed entries: blocks that left the window, never read
  v.block_size = pool_.block_size();
  if (pages_.dtype() == DType::F32) {
    v.k = pages_.k(layer, 0);
    v.v = pages_.v(layer, 0);
    return v;
  }
  v.codec = &pages_.codec();
  v.kq = pages_.kq(layer, 0);
  v.vq = pages_.vq(layer, 0);
  v.kp = pages_.kp(layer, 0);
  v.vp = pages_.vp(layer, 0);
  if (residual_ > 0) {  // the newest positions this sequence computed itself, at full precision
    v.hot_from = std::max(hot_from_, length_ - residual_);
    v.hot_rows = residual_;
    v.hot_k = ring_k_[layer].data();
    v.hot_v = ring_v_[layer].data();
  }
  return v;
}

void PagedKvCache::set_length(int n) {
  if (n < 0 || n > max_len_) fail("KV cache length ", n, " out of range [0, ", max_len_, "]");
  const int bs = pool_.block_size();
  if (n < length_) {
    // Rewinding: the positions attended next must still hold blocks, and ring slots of
    // positions before n may hold later ones now, so the ring restarts at n.
    for (int b = dead_before(n); b < std::min((n + bs - 1) / bs, static_cast<int>(table_.size())); ++b)
      if (table_[b] == kFreed) fail("cannot rewind to ", n, " tokens: the sliding window already freed that context");
    hot_from_ = n;
  }
  size_t keep = static_cast<size_t>((n + bs - 1) / bs);
  while (table_.size() > keep) {
    if (table_.back() != kFreed) pool_.release(table_.back());
    table_.pop_back();
  }
  truncate_hashes(static_cast<size_t>(n / bs));
  length_ = n;
}

std::unique_ptr<KvCache> PagedKvCache::fork() const {
  PagedKvOptions o{max_len_, salt_, residual_, sinks_, window_, rope_, tiers_, hasher_};
  if (sinks_on()) o.max_len = 0;  // the stream's slots come from sinks + window again
  auto child = std::make_unique<PagedKvCache>(pages_, pool_, o);
  for (int b : table_)
    if (b != kFreed) pool_.retain(b);
  child->table_ = table_;
  child->hashes_ = hashes_;
  child->ext_hashes_ = ext_hashes_;
  child->length_ = length_;
  child->evicted_ = evicted_;
  child->hot_from_ = hot_from_;
  child->ring_k_ = ring_k_;
  child->ring_v_ = ring_v_;
  return child;
}

void PagedKvCache::restore_rows(int length, const uint8_t* payloads, const float* ring, int hot_from) {
  KVLM_CHECK(table_.empty() && length_ == 0, "restore_rows needs an empty cache");
  if (length <= 0 || length > max_len_) fail("snapshot of ", length, " positions does not fit a context of ", max_len_);
  const int bs = pool_.block_size(), blocks = (length + bs - 1) / bs;
  if (blocks > pool_.num_free()) fail("KV pool exhausted: the snapshot needs ", blocks, " blocks, ", pool_.num_free(), " free");
  for (int i = 0; i < blocks; ++i) {
    table_.push_back(pool_.allocate());
    pages_.write_block(table_.back(), payloads + static_cast<size_t>(i) * pages_.bytes_per_block());
  }
  length_ = length;
  hot_from_ = std::clamp(hot_from, 0, length);
  if (residual_ > 0 && ring) {
    const size_t n = static_cast<size_t>(residual_) * pages_.kv_dim();
    for (size_t l = 0; l < ring_k_.size(); ++l) {
      std::copy_n(ring + (2 * l) * n, n, ring_k_[l].begin());
      std::copy_n(ring + (2 * l + 1) * n, n, ring_v_[l].begin());
    }
  } else {
    hot_from_ = length;  // no ring rows: the restored positions are read from the pages
  }
}

KvSeqStats PagedKvCache::stats() const {
  KvSeqStats s;
  s.tokens = length_;
  s.evicted = evicted_;
  s.blocks = live_blocks();
  s.freed_blocks = freed_blocks();
  s.residual_tokens = std::min(residual_, length_);
  s.residual_bytes = residual_bytes();
  s.bytes = s.blocks * pool_.bytes_per_block() + s.residual_bytes;
  return s;
}

int PagedKvCache::adopt_prefix(const std::vector<int>& tokens) {
  KVLM_CHECK(table_.empty() && length_ == 0, "adopt_prefix needs an empty cache");
  const int bs = pool_.block_size();
  // At least one token must be computed (its logits start generation), and it must not land
  // in an adopted block: published blocks are never written again, so another sequence may
  // adopt them at any time without the writer noticing.
  const int full = tokens.empty() ? 0 : (static_cast<int>(tokens.size()) - 1) / bs;
  for (int i = 0; i < full; ++i) {
    push_hash(i, tokens.data() + i * bs);
    const BlockHash& h = hashes_.back();
    int b = pool_.lookup(h);
    if (b >= 0)
      pool_.retain(b);
    else if ((b = load_from_tier(h, meta_of(i, tokens.data() + i * bs))) < 0) {
      truncate_hashes(static_cast<size_t>(i));
      break;
    }
    table_.push_back(b);
  }
  length_ = hot_from_ = static_cast<int>(table_.size()) * bs;  // adopted rows exist only as pages
  // Blocks already behind the window are never read from here: give them straight back, so no
  // count of "blocks this sequence will free" is ever pending when a scheduler plans a step.
  release_before(length_);
  return length_;
}

int PagedKvCache::load_from_tier(const BlockHash& h, BlockMeta* meta) {
  if (!tiers_ || pool_.num_free() == 0) return -1;
  std::vector<uint8_t>& buf = tier_buffer();
  buf.resize(tiers_->payload_bytes());
  if (!tiers_->fetch(h, salt_, buf.data())) return -1;
  const int b = pool_.allocate();  // ref 1: ours (it may push another cached block down a tier)
  pages_.write_block(b, buf.data());
  pool_.publish(b, h, salt_, meta);
  return b;
}

void PagedKvCache::publish(const std::vector<int>& tokens) {
  if (evicted_ > 0) return;  // rows past the sinks have moved: blocks no longer match their tokens
  const int bs = pool_.block_size();
  const int full = std::min(length_, static_cast<int>(tokens.size())) / bs;
  for (int i = static_cast<int>(hashes_.size()); i < full; ++i) {
    push_hash(i, tokens.data() + i * bs);
    if (table_[i] != kFreed) pool_.publish(table_[i], hashes_.back(), salt_, meta_of(i, tokens.data() + i * bs));
  }
}

void PagedKvCache::push_hash(int i, const int* block_tokens) {
  const int bs = pool_.block_size();
  hashes_.push_back(chain_block_hash(i ? &hashes_[i - 1] : nullptr, salt_, block_tokens, bs));
  if (hasher_)
    ext_hashes_.push_back(hasher_->block(i ? &ext_hashes_[i - 1] : nullptr, salt_, block_tokens, bs, hashes_.back()));
}

BlockMeta* PagedKvCache::meta_of(int i, const int* block_tokens) {
  if (!hasher_) return nullptr;
  meta_.ext = ext_hashes_[i];
  meta_.has_parent = i > 0;
  if (i > 0) meta_.parent_ext = ext_hashes_[i - 1];
  meta_.tokens.assign(block_tokens, block_tokens + pool_.block_size());
  return &meta_;
}

void PagedKvCache::truncate_hashes(size_t n) {
  if (hashes_.size() > n) hashes_.resize(n);
  if (ext_hashes_.size() > n) ext_hashes_.resize(n);
}

}  // namespace kvlm
