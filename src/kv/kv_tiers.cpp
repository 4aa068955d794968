#include "kv/kv_tiers.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/write_file.h"

namespace kvlm {

namespace fs = std::filesystem;

namespace {

// Writes queued beyond this are dropped (counted), never waited for: decode does not block on disk or Redis.
constexpr size_t kMaxQueuedBytes = size_t{256} << 20;
// Hashes remembered as already in Redis (so they are not sent again); forgotten all at once past this.
constexpr size_t kMaxRemoteSent = size_t{1} << 20;

bool hash_from_name(const std::string& name, BlockHash& h) {
  if (name.size() != 64 + 4 || name.substr(64) != ".kvb") return false;
  for (size_t i = 0; i < 32; ++i) {
    unsigned v = 0;
    if (std::sscanf(name.c_str() + 2 * i, "%2x", &v) != 1) return false;
    h[i] = static_cast<uint8_t>(v);
  }
  return true;
}

// Whether a block file is as long as its header says (a file of another codec or model is whole
// too; reading it refuses it for that reason).
bool whole_file(const std::string& path, size_t bytes) {
  BlockRecordHeader h;
  std::ifstream f(path, std::ios::binary);
  if (bytes < sizeof h || !f.read(reinterpret_cast<char*>(&h), sizeof h)) return false;
  return BlockRecordFormat::whole(h, bytes);
}

}  // namespace

nlohmann::json KvTierStats::to_json() const {
  nlohmann::json rej;
  for (int i = 0; i < kKvRejectReasons; ++i) rej[kv_reject_name(static_cast<KvReject>(i))] = rejected[i];
  nlohmann::json j = {
      {"host", {{"bytes", host_bytes}, {"blocks", host_blocks}, {"hits", host_hits}, {"stored", host_stored}}},
      {"disk", {{"bytes", disk_bytes}, {"blocks", disk_blocks}, {"hits", disk_hits}, {"written", disk_written},
                {"dropped", disk_dropped}}},
      {"misses", misses},
      {"rejected", rej}};
  if (has_remote)
    j["remote"] = {{"up", remote_up}, {"hits", remote_hits}, {"written", remote_written}, {"failures", remote_failures}};
  return j;
}

KvTiers::KvTiers(const KvPages& pages, const Sha256Digest& model, KvTierOptions opt)
    : pages_(pages), model_(model), opt_(std::move(opt)), format_(pages, model) {
  if (!opt_.remote_url.empty()) {
    const RedisAddress addr = parse_redis_url(opt_.remote_url);
    remote_reader_ = std::make_unique<RedisStore>(addr, opt_.remote_timeout_ms);
    remote_writer_ = std::make_unique<RedisStore>(addr, opt_.remote_timeout_ms);
    counts_.has_remote = true;
  }
  if (opt_.disk_dir.empty()) {
    if (remote_writer_) writer_ = std::thread([this] { writer_loop(); });
    return;
  }
  if (opt_.disk_capacity == 0) fail("a KV disk tier needs a capacity");
  std::error_code ec;
  fs::create_directories(opt_.disk_dir, ec);
  if (!fs::is_directory(opt_.disk_dir, ec)) fail(opt_.disk_dir, ": cannot create the KV disk tier's directory");
  // What an earlier run left: whole files are indexed (verified when read), temporary ones of a
  // write that never finished are removed. The oldest files count as least recently used.
  std::vector<std::pair<fs::file_time_type, BlockHash>> found;
  for (const auto& e : fs::directory_iterator(opt_.disk_dir, ec)) {
    const std::string name = e.path().filename().string();
    BlockHash h;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      fs::remove(e.path(), ec);
    } else if (e.is_regular_file(ec) && hash_from_name(name, h)) {
      const size_t bytes = static_cast<size_t>(e.file_size(ec));
      if (!whole_file(e.path().string(), bytes)) {  // torn: never indexed, so rewritten on its next publish
        fs::remove(e.path(), ec);
        ++counts_.rejected[static_cast<int>(KvReject::Truncated)];
        continue;
      }
      disk_[h] = {bytes, 0, std::nullopt};
      disk_bytes_ += bytes;
      found.push_back({e.last_write_time(ec), h});
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& f : found) disk_[f.second].used = ++clock_;
  trim_disk_locked();
  writer_ = std::thread([this] { writer_loop(); });
}

KvTiers::~KvTiers() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

std::string KvTiers::file_of(const BlockHash& h) const { return (fs::path(opt_.disk_dir) / (hex(h.data(), h.size()) + ".kvb")).string(); }

std::string KvTiers::remote_key(const BlockHash& h) const {
  return "kvlm@" + hex(model_.data(), 8) + "@" + dtype_name(pages_.dtype()) + "x" + std::to_string(pages_.block_size()) +
         "@" + hex(h.data(), h.size());
}

void KvTiers::reject(KvReject r) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_.rejected[static_cast<int>(r)];
}

void KvTiers::published(int block, const BlockHash& h, const std::string& salt, const BlockMeta* meta) {
  if (opt_.disk_dir.empty() && !remote_writer_) return;
  WriteJob job;
  job.hash = h;
  job.salt = Sha256::of_string(salt);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.count(h)) return;
    if (!opt_.disk_dir.empty()) {
      if (auto it = disk_.find(h); it != disk_.end())
        it->second.used = ++clock_;  // already there (an earlier run, or a block brought back)
      else
        job.to_disk = true;
    }
    job.to_remote = remote_writer_ && !remote_sent_.count(h);
    if (!job.to_disk && !job.to_remote) return;
    if (queued_bytes_ + payload_bytes() > kMaxQueuedBytes) {
      ++counts_.disk_dropped;
      return;
    }
    pending_[h] = true;
    queued_bytes_ += payload_bytes();
  }
  job.payload.resize(payload_bytes());
  pages_.read_block(block, job.payload.data());  // now: the block may be rewritten once released
  if (meta) job.meta = *meta;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void KvTiers::emit_host_removed(const HostEntry& e) {
  if (e.meta) emit(removed_event(e.meta->ext, "host"));
}

void KvTiers::evicted(int block, const BlockHash& h, const std::string& salt, const BlockMeta* meta) {
  if (opt_.host_capacity < payload_bytes()) return;
  if (auto it = host_.find(h); it != host_.end()) {  // already here: only fresher
    host_lru_.splice(host_lru_.begin(), host_lru_, it->second.lru);
    return;
  }
  while (host_bytes_ + payload_bytes() > opt_.host_capacity && !host_lru_.empty()) {
    auto old = host_.find(host_lru_.back());  // the disk tier, if any, has it already (written on publish)
    emit_host_removed(old->second);
    host_.erase(old);
    host_lru_.pop_back();
    host_bytes_ -= payload_bytes();
  }
  host_lru_.push_front(h);
  HostEntry& e = host_[h];  // built in place
  e.lru = host_lru_.begin();
  e.payload.resize(payload_bytes());
  pages_.read_block(block, e.payload.data());
  e.salt = Sha256::of_string(salt);
  e.checksum = Sha256::of(e.payload.data(), e.payload.size());
  if (meta) {
    e.meta = *meta;
    emit(stored_event(*meta, pages_.block_size(), "host"));
  }
  host_bytes_ += payload_bytes();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_.host_stored;
}

bool KvTiers::fetch(const BlockHash& h, const std::string& salt, uint8_t* out) {
  const Sha256Digest s = Sha256::of_string(salt);
  if (fetch_host(h, s, out)) return true;
  if (fetch_disk(h, s, out)) return true;
  if (fetch_remote(h, s, out)) return true;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_.misses;
  return false;
}

bool KvTiers::fetch_host(const BlockHash& h, const Sha256Digest& salt, uint8_t* out) {
  auto it = host_.find(h);
  if (it == host_.end()) return false;
  HostEntry& e = it->second;
  bool ok = true;
  if (e.salt != salt) {
    reject(KvReject::Tenant);
    ok = false;
  } else if (Sha256::of(e.payload.data(), e.payload.size()) != e.checksum) {
    reject(KvReject::Checksum);
    ok = false;
  } else {
    std::memcpy(out, e.payload.data(), payload_bytes());
  }
  // Back in the pool (or refused): either way it leaves this tier.
  emit_host_removed(e);
  host_lru_.erase(e.lru);
  host_.erase(it);
  host_bytes_ -= payload_bytes();
  if (ok) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_.host_hits;
  }
  return ok;
}

bool KvTiers::fetch_disk(const BlockHash& h, const Sha256Digest& salt, uint8_t* out) {
  if (opt_.disk_dir.empty()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!disk_.count(h)) return false;
  }
  const std::string path = file_of(h);
  // A damaged file goes; a whole one of another model, codec or tenant stays (it is theirs), and
  // so does one that could not be opened.
  auto refuse = [&](KvReject r, bool remove_file) {
    reject(r);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = disk_.find(h); it != disk_.end()) {
      if (it->second.ext) emit(removed_event(*it->second.ext, "disk"));
      disk_bytes_ -= it->second.bytes;
      disk_.erase(it);  // never tried again; a fresh copy is written on the next publish
    }
    std::error_code ec;
    if (remove_file) fs::remove(path, ec);
    return false;
  };
  std::ifstream f(path, std::ios::binary);
  if (!f) return refuse(KvReject::Io, false);
  std::vector<uint8_t>& buf = read_buffer_;
  buf.resize(format_.record_bytes() + 1);  // one more: a longer file shows
  f.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  if (auto r = format_.check(buf.data(), static_cast<size_t>(f.gcount()), h, salt, out))
    return refuse(*r, *r == KvReject::Truncated || *r == KvReject::Io || *r == KvReject::Checksum);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = disk_.find(h); it != disk_.end()) it->second.used = ++clock_;
  ++counts_.disk_hits;
  return true;
}

bool KvTiers::fetch_remote(const BlockHash& h, const Sha256Digest& salt, uint8_t* out) {
  if (!remote_reader_) return false;
  std::vector<uint8_t>& buf = read_buffer_;
  switch (remote_reader_->get(remote_key(h), format_.record_bytes(), buf)) {
    case RedisStore::Get::Miss:
    case RedisStore::Get::Down:
      return false;
    case RedisStore::Get::WrongSize:
      reject(KvReject::Truncated);
      return false;
    case RedisStore::Get::Hit:
      break;
  }
  if (auto r = format_.check(buf.data(), buf.size(), h, salt, out)) {
    reject(*r);
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_.remote_hits;
  remember_remote_locked(h);
  return true;
}

void KvTiers::remember_remote_locked(const BlockHash& h) {
  if (remote_sent_.size() >= kMaxRemoteSent) remote_sent_.clear();
  remote_sent_.insert(h);
}

void KvTiers::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and everything written
    WriteJob job = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    const std::vector<uint8_t> record = format_.encode(job.hash, job.salt, job.payload.data());
    if (job.to_disk) write_file(job, record);
    if (job.to_remote) write_remote(job, record);
    lock.lock();
    writing_ = false;
    queued_bytes_ -= payload_bytes();
    pending_.erase(job.hash);
    if (queue_.empty()) idle_.notify_all();
  }
}

void KvTiers::write_file(const WriteJob& job, const std::vector<uint8_t>& record) {
  const std::string path = file_of(job.hash);
  // A temporary file left by a crash is removed at the next start.
  if (!write_file_atomically(path, {{record.data(), record.size()}})) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_.rejected[static_cast<int>(KvReject::Io)];
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = disk_.find(job.hash); it != disk_.end()) disk_bytes_ -= it->second.bytes;
  disk_[job.hash] = {record.size(), ++clock_, job.meta ? std::optional<BlockHash>(job.meta->ext) : std::nullopt};
  disk_bytes_ += record.size();
  ++counts_.disk_written;
  if (job.meta) emit(stored_event(*job.meta, pages_.block_size(), "disk"));
  trim_disk_locked();
}

void KvTiers::write_remote(const WriteJob& job, const std::vector<uint8_t>& record) {
  const bool ok = remote_writer_->set_if_absent(remote_key(job.hash), record, opt_.remote_ttl_s);
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) return;  // counted by the store; sent again on a later publish
  ++counts_.remote_written;
  remember_remote_locked(job.hash);
  if (job.meta) emit(stored_event(*job.meta, pages_.block_size(), "remote"));
}

void KvTiers::trim_disk_locked() {
  while (disk_bytes_ > opt_.disk_capacity && !disk_.empty()) {
    auto oldest = disk_.begin();
    for (auto it = disk_.begin(); it != disk_.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    std::error_code ec;
    fs::remove(file_of(oldest->first), ec);
    if (oldest->second.ext) emit(removed_event(*oldest->second.ext, "disk"));
    disk_bytes_ -= oldest->second.bytes;
    disk_.erase(oldest);
  }
}

void KvTiers::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

KvTierStats KvTiers::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvTierStats s = counts_;
  s.host_bytes = host_bytes_;
  s.host_blocks = host_.size();
  s.disk_bytes = disk_bytes_;
  s.disk_blocks = disk_.size();
  if (remote_reader_) {
    s.remote_up = remote_reader_->connected();
    s.remote_failures = remote_reader_->failures() + remote_writer_->failures();
  }
  return s;
}

}  // namespace kvlm
