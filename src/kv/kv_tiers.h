// KvTiers: where prefix blocks go when the pool lets them go, and where a prefix lookup that
// misses the pool looks next. Three tiers, all keyed by the block's chained token hash:
//   - host memory, bounded in bytes: a cached block evicted from the pool is copied here (LRU);
//   - a disk directory, bounded in bytes: every published block is written behind by a writer
//     thread (a temporary file, then an atomic rename), so a restarted server is warm and a
//     crash leaves each file whole or absent;
//   - a Redis server shared by replicas (--kv-remote): every published block is written behind
//     too, under the key  kvlm@<model fingerprint, 16 hex>@<KV dtype>x<block size>@<hash, 64 hex>,
//     so a replica reuses a prefix another one computed. Redis down: lookups miss, writes are
//     counted as failed, nothing else changes; it is tried again after a second.
// Pages travel as they are stored (quantized ones are never re-encoded), as block records
// (kv/block_record.h): a block read back is used only if its checksum, the model fingerprint,
// the KV codec and block shape, the tenant salt and the chained hash all match; anything else is
// counted by reason, dropped, and the prefix is recomputed.
// With an event sink, every block entering or leaving a tier is announced (kv/block_events.h).
#pragma once
#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <unordered_set>

#include "core/sha256.h"
#include "kv/block_events.h"
#include "kv/block_pool.h"
#include "kv/block_record.h"
#include "kv/kv_pages.h"
#include "kv/redis_store.h"

namespace kvlm {

struct KvTierOptions {
  size_t host_capacity = 0;  // bytes; 0 = no host tier
  std::string disk_dir;      // "" = no disk tier
  size_t disk_capacity = 0;  // bytes of block files kept (with disk_dir)
  std::string remote_url;    // "" = no Redis tier; redis://HOST:PORT
  int remote_timeout_ms = 200;  // connecting, and each command
  int remote_ttl_s = 3600;      // blocks expire from Redis after this (0: never; Redis' maxmemory policy then)
  bool enabled() const { return host_capacity > 0 || !disk_dir.empty() || !remote_url.empty(); }
};

struct KvTierStats {
  size_t host_bytes = 0, host_blocks = 0, disk_bytes = 0, disk_blocks = 0;
  long host_hits = 0, disk_hits = 0, misses = 0;
  long host_stored = 0, disk_written = 0, disk_dropped = 0;  // dropped: writer queue full
  bool has_remote = false, remote_up = false;
  long remote_hits = 0, remote_written = 0, remote_failures = 0;
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
  void published(int block, const BlockHash& h, const std::string& salt, const BlockMeta* meta) override;
  void evicted(int block, const BlockHash& h, const std::string& salt, const BlockMeta* meta) override;

  // Blocks entering and leaving the tiers are announced here (set before any traffic).
  void set_event_sink(BlockEventSink* sink) { events_ = sink; }

  // The payload (pages.bytes_per_block() bytes) of the block with this hash and salt, host
  // first, then disk, then Redis, verified. False on a miss or a refusal (counted).
  bool fetch(const BlockHash& h, const std::string& salt, uint8_t* out);
  void flush();  // waits until every queued disk and Redis write has landed
  KvTierStats stats() const;
  size_t payload_bytes() const { return format_.payload_bytes(); }
  std::string remote_key(const BlockHash& h) const;  // the block's Redis key

 private:
  struct HostEntry {
    Sha256Digest salt, checksum;
    std::vector<uint8_t> payload;
    std::list<BlockHash>::iterator lru;
    std::optional<BlockMeta> meta;  // with events
  };
  struct WriteJob {  // a published block, for the disk, Redis, or both
    BlockHash hash;
    Sha256Digest salt;
    std::vector<uint8_t> payload;
    bool to_disk = false, to_remote = false;
    std::optional<BlockMeta> meta;  // with events
  };
  struct DiskEntry {
    size_t bytes;
    uint64_t used;  // LRU clock
    std::optional<BlockHash> ext;  // the external hash, for the removal event (unknown for an earlier run's files)
  };

  std::string file_of(const BlockHash& h) const;
  bool fetch_host(const BlockHash& h, const Sha256Digest& salt, uint8_t* out);
  bool fetch_disk(const BlockHash& h, const Sha256Digest& salt, uint8_t* out);
  bool fetch_remote(const BlockHash& h, const Sha256Digest& salt, uint8_t* out);
  void reject(KvReject r);
  void writer_loop();
  // Both take the job's block record (its header and payload), encoded once for the two.
  void write_file(const WriteJob& job, const std::vector<uint8_t>& record);
  void write_remote(const WriteJob& job, const std::vector<uint8_t>& record);
  void remember_remote_locked(const BlockHash& h);  // in Redis: not sent again from here
  void trim_disk_locked();  // drops least recently used files past the capacity
  void emit(BlockEvent e) {
    if (events_) events_->emit(std::move(e));
  }
  void emit_host_removed(const HostEntry& e);

  const KvPages& pages_;
  Sha256Digest model_;
  KvTierOptions opt_;
  BlockRecordFormat format_;
  BlockEventSink* events_ = nullptr;

  // Host tier: touched only by the engine's thread.
  std::unordered_map<BlockHash, HostEntry, BlockHashKey> host_;
  std::vector<uint8_t> read_buffer_;  // a record read back from disk or Redis
  std::list<BlockHash> host_lru_;  // front = most recent
  size_t host_bytes_ = 0;

  // Disk tier: the index and the queue are shared with the writer thread.
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::unordered_map<BlockHash, DiskEntry, BlockHashKey> disk_;
  std::unordered_map<BlockHash, bool, BlockHashKey> pending_;  // queued or being written
  std::deque<WriteJob> queue_;
  size_t queued_bytes_ = 0, disk_bytes_ = 0;
  uint64_t clock_ = 0;
  bool stop_ = false, writing_ = false;
  KvTierStats counts_;

  // Redis tier: one connection read by the engine's thread, one written by the writer thread.
  std::unique_ptr<RedisStore> remote_reader_, remote_writer_;
  std::unordered_set<BlockHash, BlockHashKey> remote_sent_;  // written (or found there) by this replica
  std::thread writer_;
};

}  // namespace kvlm
