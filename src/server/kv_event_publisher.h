// KvEventPublisher: block events (kv/block_events.h) on a ZMQ PUB socket, in vLLM's wire format,
// so llm-d's KV-cache indexer, Dynamo's router or any subscriber can track this replica:
//   - a message is three frames: the topic, an 8-byte big-endian sequence number, and a msgpack
//     batch [timestamp (float seconds), [events...], data-parallel rank];
//   - an event is a tagged array: ["BlockStored", block_hashes, parent_block_hash, token_ids,
//     block_size, lora_id, medium], ["BlockRemoved", block_hashes, medium] or ["AllBlocksCleared"];
//   - a replay socket (ROUTER) answers a request whose last frame is an 8-byte big-endian
//     sequence number with every batch still buffered from there on, one reply each
//     [seq, payload], then [-1 as 8 signed bytes, empty]: a subscriber that saw a gap asks for it.
// Events come from the engine's and the disk writer's threads into a bounded queue; one thread
// of its own owns the sockets, batches what is queued every few milliseconds, and serves replays.
// The first batch is AllBlocksCleared: a replica that restarts tells its subscribers to forget it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kv/block_events.h"

namespace kvlm::server {

struct KvEventOptions {
  std::string endpoint;         // PUB socket, bound: tcp://*:5557
  std::string replay_endpoint;  // ROUTER socket, bound ("" = no replay)
  std::string topic;            // the first frame ("" as vLLM's default)
  size_t replay_batches = 10000;  // batches kept for replay (and at most 64 MiB of them)
  size_t max_queued = 100000;     // events waiting for the publisher thread; beyond, dropped (counted)
  bool hashes_as_int = false;     // block hashes as uint64 (sha256_cbor_64bit), else 32-byte bin
  int dp_rank = 0;
};

struct KvEventStats {
  long batches = 0, events = 0, dropped = 0, replays = 0;
  nlohmann::json to_json() const;
};

class KvEventPublisher : public BlockEventSink {
 public:
  explicit KvEventPublisher(KvEventOptions opt);  // binds both sockets; throws when it cannot
  ~KvEventPublisher() override;                   // publishes what is queued, then closes
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  void emit(BlockEvent e) override;
  KvEventStats stats() const;

  // One batch's msgpack bytes (exposed for the tests).
  static std::string encode_batch(const std::vector<BlockEvent>& events, double ts, int dp_rank, bool hashes_as_int);

 private:
  void run();
  void serve_replays();   // answers every replay request waiting
  void publish_queued();  // sends what is queued as one batch, and keeps it for replay

  KvEventOptions opt_;
  struct Sockets;
  std::unique_ptr<Sockets> z_;
  mutable std::mutex mu_;
  std::vector<BlockEvent> queue_;
  size_t queued_events_ = 0;
  KvEventStats stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvlm::server
