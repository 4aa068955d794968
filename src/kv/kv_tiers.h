// KvTiers: where prefix blocks go when the pool lets them go, and where a prefix lookup that
// misses the pool looks next. Two tiers, both keyed by the block's chained token hash:
//   - host memory, bounded in bytes: a cached block evicted from the pool is copied here (LRU);
//   - a disk directory, bounded in bytes: every published block is written behind by a writer
//     thread (a temporary file, then an atomic rename), so a restarted server is warm and a
//     crash leaves each file whole or absent.
// Pages travel as they are stored (quantized ones are never re-encoded). A block read back is
// used only if its checksum (SHA-256 of the payload), the model fingerprint, the KV codec and
// block shape, the tenant salt and the chained hash all match; anything else is counted by
// reason, dropped, and the prefix is recomputed.
#pragma once
#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/sha256.h"
#include "kv/block_pool.h"
#include "kv/kv_pages.h"

namespace kvlm {

struct KvTierOptions {
  size_t host_capacity = 0;  // bytes; 0 = no host tier
  std::string disk_dir;      // "" = no disk tier
  size_t disk_capacity = 0;  // bytes of block files kept (with disk_dir)
  bool enabled() const { return host_capacity > 0 || !disk_dir.empty(); }
};

// Why a stored block was refused.
enum class KvReject { Checksum, Truncated, Model, Codec, Tenant, Hash, Io };
constexpr int kKvRejectReasons = 7;
const char* kv_reject_name(KvReject r);  // "checksum", "truncated", "model", "codec", "tenant", "hash", "io"

struct KvTierStats {
  size_t host_bytes = 0, host_blocks = 0, disk_bytes = 0, disk_blocks = 0;
  long host_hits = 0, disk_hits = 0, misses = 0;
  long host_stored = 0, disk_written = 0, disk_dropped = 0;  // dropped: writer queue full
  std::array<long, kKvRejectReasons> rejected{};
  nlohmann::json to_json() const;
};

class KvTiers : public BlockPool::Listener {
 public:
  // `pages` are the blocks' storage (read when a block goes down a tier); `model` the fingerprint.
  KvTiers(const KvPages& pages, const Sha256Digest& model, KvTierOptions opt);
  ~KvTiers() override;  // finishes the queued disk writes
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  // BlockPool::Listener: a full block got its prefix hash (written behind to disk), or a cached
  // block is being reused for other rows (copied to host memory first).
  void published(int block, const BlockHash& h, const std::string& salt) override;
  void evicted(int block, const BlockHash& h, const std::string& salt) override;

  // The payload (pages.bytes_per_block() bytes) of the block with this hash and salt, host
  // first, then disk, verified. False on a miss or a refusal (counted).
  bool fetch(const BlockHash& h, const std::string& salt, uint8_t* out);
  void flush();  // waits until every queued disk write has landed
  KvTierStats stats() const;
  size_t payload_bytes() const { return payload_bytes_; }

  struct FileHeader;  // a block file's fixed header (kv_tiers.cpp)

 private:
  struct HostEntry {
    Sha256Digest salt, checksum;
    std::vector<uint8_t> payload;
    std::list<BlockHash>::iterator lru;
  };
  struct DiskJob {
    BlockHash hash;
    Sha256Digest salt;
    std::vector<uint8_t> payload;
  };
  struct DiskEntry {
    size_t bytes;
    uint64_t used;  // LRU clock
  };

  std::string file_of(const BlockHash& h) const;
  FileHeader header(const BlockHash& h, const Sha256Digest& salt, const Sha256Digest& checksum) const;
  bool fetch_host(const BlockHash& h, const Sha256Digest& salt, uint8_t* out);
  bool fetch_disk(const BlockHash& h, const Sha256Digest& salt, uint8_t* out);
  void reject(KvReject r);
  void writer_loop();
  void write_file(const DiskJob& job);
  void trim_disk_locked();  // drops least recently used files past the capacity

  const KvPages& pages_;
  Sha256Digest model_;
  KvTierOptions opt_;
  size_t payload_bytes_;

  // Host tier: touched only by the engine's thread.
  std::unordered_map<BlockHash, HostEntry, BlockHashKey> host_;
  std::list<BlockHash> host_lru_;  // front = most recent
  size_t host_bytes_ = 0;

  // Disk tier: the index and the queue are shared with the writer thread.
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::unordered_map<BlockHash, DiskEntry, BlockHashKey> disk_;
  std::unordered_map<BlockHash, bool, BlockHashKey> pending_;  // queued or being written
  std::deque<DiskJob> queue_;
  size_t queued_bytes_ = 0, disk_bytes_ = 0;
  uint64_t clock_ = 0;
  bool stop_ = false, writing_ = false;
  KvTierStats counts_;
  std::thread writer_;
};

}  // namespace kvlm
