#include "kv/redis_store.h"

#include <cerrno>
#include <cstdlib>

#ifdef KVLM_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

#include "core/error.h"

namespace kvlm {

RedisAddress parse_redis_url(const std::string& url) {
  const std::string scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) fail("--kv-remote: '", url, "' is not a redis://HOST:PORT address");
  std::string rest = url.substr(scheme.size());
  RedisAddress a;
  if (size_t at = rest.rfind('@'); at != std::string::npos) {
    std::string auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    a.password = auth.substr(auth.find(':') == std::string::npos ? 0 : auth.find(':') + 1);
  }
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      char* end = nullptr;
      long v = std::strtol(db.c_str(), &end, 10);
      if (*end || v < 0 || v > 1000000) fail("--kv-remote: bad database number '", db, "'");
      a.db = static_cast<int>(v);
    }
  }
  if (size_t colon = rest.rfind(':'); colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    char* end = nullptr;
    long v = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end || v < 1 || v > 65535) fail("--kv-remote: bad port '", port, "'");
    a.port = static_cast<int>(v);
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) fail("--kv-remote: '", url, "' names no host");
  a.host = rest;
  return a;
}

#ifdef KVLM_HAVE_HIREDIS

namespace {

constexpr auto kRetryAfter = std::chrono::seconds(1);

// A reply freed however the caller leaves.
struct Reply {
  redisReply* r = nullptr;
  ~Reply() {
    if (r) freeReplyObject(r);
  }
};

timeval to_timeval(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

}  // namespace

RedisStore::RedisStore(RedisAddress addr, int timeout_ms) : addr_(std::move(addr)), timeout_ms_(timeout_ms) {}

RedisStore::~RedisStore() {
  if (c_) redisFree(c_);
}

bool RedisStore::retry_now(int attempt) {
  // A connection Redis closed (it restarted) fails once at once, and a fresh one may work: one
  // more try. A timeout is not retried: the engine's thread would wait for it twice.
  const int err = errno;  // of the failed read or write
  const bool timed_out = c_ && c_->err == REDIS_ERR_IO && (err == EAGAIN || err == EWOULDBLOCK || err == ETIMEDOUT);
  const bool retry = c_ && !timed_out && attempt == 0;
  drop(!retry);
  return retry;
}

void RedisStore::drop(bool backoff) {
  if (c_) redisFree(c_);
  c_ = nullptr;
  up_ = false;
  ++failures_;
  if (backoff) retry_at_ = std::chrono::steady_clock::now() + kRetryAfter;
}

bool RedisStore::ensure() {
  if (c_) return true;
  if (std::chrono::steady_clock::now() < retry_at_) return false;
  c_ = redisConnectWithTimeout(addr_.host.c_str(), addr_.port, to_timeval(timeout_ms_));
  if (!c_ || c_->err || redisSetTimeout(c_, to_timeval(timeout_ms_)) != REDIS_OK) {
    drop(true);
    return false;
  }
  auto ok = [&](Reply& rep) { return rep.r && rep.r->type != REDIS_REPLY_ERROR; };
  if (!addr_.password.empty()) {
    Reply rep{static_cast<redisReply*>(redisCommand(c_, "AUTH %b", addr_.password.data(), addr_.password.size()))};
    if (!ok(rep)) return drop(true), false;
  }
  if (addr_.db != 0) {
    Reply rep{static_cast<redisReply*>(redisCommand(c_, "SELECT %d", addr_.db))};
    if (!ok(rep)) return drop(true), false;
  }
  up_ = true;
  return true;
}

RedisStore::Get RedisStore::get(const std::string& key, size_t bytes, std::vector<uint8_t>& out) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!ensure()) return Get::Down;
    // Pipelined: the length first, and the value only up to the size expected (memory bounded
    // whatever another writer left under the key).
    redisAppendCommand(c_, "STRLEN %b", key.data(), key.size());
    redisAppendCommand(c_, "GETRANGE %b 0 %lld", key.data(), key.size(), static_cast<long long>(bytes) - 1);
    Reply len, val;
    if (redisGetReply(c_, reinterpret_cast<void**>(&len.r)) != REDIS_OK ||
        redisGetReply(c_, reinterpret_cast<void**>(&val.r)) != REDIS_OK) {
      if (!retry_now(attempt)) return Get::Down;
      continue;
    }
    if (len.r->type != REDIS_REPLY_INTEGER || val.r->type != REDIS_REPLY_STRING) return Get::Miss;  // not a string key
    if (len.r->integer == 0) return Get::Miss;
    if (static_cast<size_t>(len.r->integer) != bytes || val.r->len != bytes) return Get::WrongSize;
    out.assign(val.r->str, val.r->str + val.r->len);
    return Get::Hit;
  }
  return Get::Down;
}

bool RedisStore::set_if_absent(const std::string& key, const std::vector<uint8_t>& value, int ttl_s) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!ensure()) return false;
    Reply rep;
    if (ttl_s > 0)
      rep.r = static_cast<redisReply*>(
          redisCommand(c_, "SET %b %b NX EX %d", key.data(), key.size(), value.data(), value.size(), ttl_s));
    else
      rep.r = static_cast<redisReply*>(redisCommand(c_, "SET %b %b NX", key.data(), key.size(), value.data(), value.size()));
    if (!rep.r) {
      if (!retry_now(attempt)) return false;
      continue;
    }
    return rep.r->type != REDIS_REPLY_ERROR;
  }
  return false;
}

#else  // built without hiredis (the engine-only cross build, the Python wheel)

RedisStore::RedisStore(RedisAddress, int) { fail("--kv-remote: this kvlm was built without hiredis"); }
RedisStore::~RedisStore() = default;
RedisStore::Get RedisStore::get(const std::string&, size_t, std::vector<uint8_t>&) { return Get::Down; }
bool RedisStore::set_if_absent(const std::string&, const std::vector<uint8_t>&, int) { return false; }

#endif

}  // namespace kvlm
