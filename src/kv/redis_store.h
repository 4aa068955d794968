// RedisStore: one connection to a Redis server (hiredis), for the shared KV tier. Every call is
// bounded: connecting and each command time out (--kv-remote-timeout-ms), values are read only up
// to the size the caller expects, and after a failure the store stays down for a second before it
// tries to reconnect, so a dead Redis costs a request at most one timeout per second, never an error.
// Not thread-safe: each thread that talks to Redis holds its own store.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

struct redisContext;

namespace kvlm {

struct RedisAddress {
  std::string host = "127.0.0.1", password;
  int port = 6379, db = 0;
};
// redis://[:PASSWORD@]HOST[:PORT][/DB]; throws on anything else.
RedisAddress parse_redis_url(const std::string& url);

class RedisStore {
 public:
  RedisStore(RedisAddress addr, int timeout_ms);
  ~RedisStore();
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  enum class Get { Hit, Miss, WrongSize, Down };
  // The value of `key` when it is exactly `bytes` long (WrongSize otherwise, without reading it).
  Get get(const std::string& key, size_t bytes, std::vector<uint8_t>& out);
  // SET key value NX EX ttl (ttl_s 0: no expiry). False when Redis is down or refuses.
  bool set_if_absent(const std::string& key, const std::vector<uint8_t>& value, int ttl_s);
  // Both may be read from any thread (the metrics).
  bool connected() const { return up_.load(std::memory_order_relaxed); }
  long failures() const { return failures_.load(std::memory_order_relaxed); }  // connections lost or refused

 private:
  bool ensure();   // connects when the backoff allows
  void drop(bool backoff);
  bool retry_now(int attempt);  // after a failed command: drops the connection; true to try again at once  // after an error: disconnect (and, with backoff, wait a second before the next try)

  RedisAddress addr_;
  int timeout_ms_;
  redisContext* c_ = nullptr;
  std::chrono::steady_clock::time_point retry_at_{};
  std::atomic<long> failures_{0};
  std::atomic<bool> up_{false};
};

}  // namespace kvlm
