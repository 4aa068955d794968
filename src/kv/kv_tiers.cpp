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

// A block file: this header, then the payload. Little-endian, fixed size, no padding.
constexpr char kMagic[8] = {'K', 'V', 'L', 'M', 'B', 'L', 'K', '1'};
constexpr char kAlgo[8] = {'s', 'h', 'a', '2', '5', '6', 0, 0};  // the payload checksum's algorithm
constexpr uint32_t kVersion = 1;
// Writes queued beyond this are dropped (counted), never waited for: decode does not block on disk.
constexpr size_t kMaxQueuedBytes = size_t{256} << 20;

}  // namespace

struct KvTiers::FileHeader {
  char magic[8];
  uint32_t version, header_bytes;
  uint8_t model[32];
  uint32_t dtype, block_size, kv_dim, n_layers;
  uint8_t salt[32], hash[32];
  uint64_t payload_bytes;
  char algo[8];
  uint8_t checksum[32];
};
static_assert(sizeof(KvTiers::FileHeader) == 176, "the block file header has no padding");

namespace {

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
  KvTiers::FileHeader h;
  std::ifstream f(path, std::ios::binary);
  if (bytes < sizeof h || !f.read(reinterpret_cast<char*>(&h), sizeof h)) return false;
  return bytes == sizeof h + h.payload_bytes;
}

}  // namespace

const char* kv_reject_name(KvReject r) {
  static const char* names[kKvRejectReasons] = {"checksum", "truncated", "model", "codec", "tenant", "hash", "io"};
  return names[static_cast<int>(r)];
}

nlohmann::json KvTierStats::to_json() const {
  nlohmann::json rej;
  for (int i = 0; i < kKvRejectReasons; ++i) rej[kv_reject_name(static_cast<KvReject>(i))] = rejected[i];
  return {{"host", {{"bytes", host_bytes}, {"blocks", host_blocks}, {"hits", host_hits}, {"stored", host_stored}}},
          {"disk", {{"bytes", disk_bytes}, {"blocks", disk_blocks}, {"hits", disk_hits}, {"written", disk_written},
                    {"dropped", disk_dropped}}},
          {"misses", misses},
          {"rejected", rej}};
}

KvTiers::KvTiers(const KvPages& pages, const Sha256Digest& model, KvTierOptions opt)
    : pages_(pages), model_(model), opt_(std::move(opt)), payload_bytes_(pages.bytes_per_block()) {
  if (opt_.disk_dir.empty()) return;
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
      disk_[h] = {bytes, 0};
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

KvTiers::FileHeader KvTiers::header(const BlockHash& h, const Sha256Digest& salt, const Sha256Digest& checksum) const {
  FileHeader out{};
  std::memcpy(out.magic, kMagic, 8);
  out.version = kVersion;
  out.header_bytes = sizeof out;
  std::memcpy(out.model, model_.data(), 32);
  out.dtype = static_cast<uint32_t>(pages_.dtype());
  out.block_size = static_cast<uint32_t>(pages_.block_size());
  out.kv_dim = static_cast<uint32_t>(pages_.kv_dim());
  out.n_layers = static_cast<uint32_t>(pages_.n_layers());
  std::memcpy(out.salt, salt.data(), 32);
  std::memcpy(out.hash, h.data(), 32);
  out.payload_bytes = payload_bytes_;
  std::memcpy(out.algo, kAlgo, 8);
  std::memcpy(out.checksum, checksum.data(), 32);
  return out;
}

void KvTiers::reject(KvReject r) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_.rejected[static_cast<int>(r)];
}

void KvTiers::published(int block, const BlockHash& h, const std::string& salt) {
  if (opt_.disk_dir.empty()) return;
  DiskJob job{h, Sha256::of_string(salt), std::vector<uint8_t>(payload_bytes_)};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = disk_.find(h); it != disk_.end()) {
      it->second.used = ++clock_;  // already there (an earlier run, or a block brought back)
      return;
    }
    if (pending_.count(h)) return;
    if (queued_bytes_ + payload_bytes_ > kMaxQueuedBytes) {
      ++counts_.disk_dropped;
      return;
    }
    pending_[h] = true;
    queued_bytes_ += payload_bytes_;
  }
  pages_.read_block(block, job.payload.data());  // now: the block may be rewritten once released
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void KvTiers::evicted(int block, const BlockHash& h, const std::string& salt) {
  if (opt_.host_capacity < payload_bytes_) return;
  if (auto it = host_.find(h); it != host_.end()) {  // already here: only fresher
    host_lru_.splice(host_lru_.begin(), host_lru_, it->second.lru);
    return;
  }
  while (host_bytes_ + payload_bytes_ > opt_.host_capacity && !host_lru_.empty()) {
    host_.erase(host_lru_.back());  // the disk tier, if any, has it already (written on publish)
    host_lru_.pop_back();
    host_bytes_ -= payload_bytes_;
  }
  HostEntry e;
  e.payload.resize(payload_bytes_);
  pages_.read_block(block, e.payload.data());
  e.salt = Sha256::of_string(salt);
  e.checksum = Sha256::of(e.payload.data(), e.payload.size());
  host_lru_.push_front(h);
  e.lru = host_lru_.begin();
  host_.emplace(h, std::move(e));
  host_bytes_ += payload_bytes_;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_.host_stored;
}

bool KvTiers::fetch(const BlockHash& h, const std::string& salt, uint8_t* out) {
  const Sha256Digest s = Sha256::of_string(salt);
  if (fetch_host(h, s, out)) return true;
  if (fetch_disk(h, s, out)) return true;
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
    std::memcpy(out, e.payload.data(), payload_bytes_);
  }
  // Back in the pool (or refused): either way it leaves this tier.
  host_lru_.erase(e.lru);
  host_.erase(it);
  host_bytes_ -= payload_bytes_;
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
  auto refuse = [&](KvReject r, bool remove_file) {
    reject(r);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = disk_.find(h); it != disk_.end()) {
      disk_bytes_ -= it->second.bytes;
      disk_.erase(it);  // never tried again; a fresh copy is written on the next publish
    }
    std::error_code ec;
    if (remove_file) fs::remove(path, ec);
    return false;
  };
  std::ifstream f(path, std::ios::binary);
  if (!f) return refuse(KvReject::Io, false);
  FileHeader head;
  if (!f.read(reinterpret_cast<char*>(&head), sizeof head)) return refuse(KvReject::Truncated, true);
  if (std::memcmp(head.magic, kMagic, 8) != 0 || head.version != kVersion || head.header_bytes != sizeof head ||
      std::memcmp(head.algo, kAlgo, 8) != 0)
    return refuse(KvReject::Io, true);
  // Checked in this order, so each test's damage is named by its own reason.
  const FileHeader want = header(h, salt, Sha256Digest{});
  if (std::memcmp(head.model, want.model, 32) != 0) return refuse(KvReject::Model, false);
  if (head.dtype != want.dtype || head.block_size != want.block_size || head.kv_dim != want.kv_dim ||
      head.n_layers != want.n_layers || head.payload_bytes != want.payload_bytes)
    return refuse(KvReject::Codec, false);
  if (std::memcmp(head.salt, want.salt, 32) != 0) return refuse(KvReject::Tenant, false);
  if (std::memcmp(head.hash, want.hash, 32) != 0) return refuse(KvReject::Hash, false);
  if (!f.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(payload_bytes_)) || f.peek() != EOF)
    return refuse(KvReject::Truncated, true);
  if (std::memcmp(Sha256::of(out, payload_bytes_).data(), head.checksum, 32) != 0) return refuse(KvReject::Checksum, true);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = disk_.find(h); it != disk_.end()) it->second.used = ++clock_;
  ++counts_.disk_hits;
  return true;
}

void KvTiers::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and everything written
    DiskJob job = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    write_file(job);
    lock.lock();
    writing_ = false;
    queued_bytes_ -= payload_bytes_;
    pending_.erase(job.hash);
    if (queue_.empty()) idle_.notify_all();
  }
}

void KvTiers::write_file(const DiskJob& job) {
  const FileHeader head = header(job.hash, job.salt, Sha256::of(job.payload.data(), job.payload.size()));
  const std::string path = file_of(job.hash);
  // A temporary file left by a crash is removed at the next start.
  if (!write_file_atomically(path, {{&head, sizeof head}, {job.payload.data(), job.payload.size()}})) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_.rejected[static_cast<int>(KvReject::Io)];
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const size_t bytes = sizeof head + job.payload.size();
  if (auto it = disk_.find(job.hash); it != disk_.end()) disk_bytes_ -= it->second.bytes;
  disk_[job.hash] = {bytes, ++clock_};
  disk_bytes_ += bytes;
  ++counts_.disk_written;
  trim_disk_locked();
}

void KvTiers::trim_disk_locked() {
  while (disk_bytes_ > opt_.disk_capacity && !disk_.empty()) {
    auto oldest = disk_.begin();
    for (auto it = disk_.begin(); it != disk_.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    std::error_code ec;
    fs::remove(file_of(oldest->first), ec);
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
  return s;
}

}  // namespace kvlm
