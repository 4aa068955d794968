#include "kv/block_record.h"

#include <cstring>

namespace kvlm {

namespace {
constexpr char kMagic[8] = {'K', 'V', 'L', 'M', 'B', 'L', 'K', '1'};
constexpr char kAlgo[8] = {'s', 'h', 'a', '2', '5', '6', 0, 0};  // the payload checksum's algorithm
constexpr uint32_t kVersion = 1;
}  // namespace

const char* kv_reject_name(KvReject r) {
  static const char* names[kKvRejectReasons] = {"checksum", "truncated", "model", "codec", "tenant", "hash", "io"};
  return names[static_cast<int>(r)];
}

BlockRecordFormat::BlockRecordFormat(const KvPages& pages, const Sha256Digest& model)
    : model_(model),
      dtype_(static_cast<uint32_t>(pages.dtype())),
      block_size_(static_cast<uint32_t>(pages.block_size())),
      kv_dim_(static_cast<uint32_t>(pages.kv_dim())),
      n_layers_(static_cast<uint32_t>(pages.n_layers())),
      payload_bytes_(pages.bytes_per_block()) {}

BlockRecordHeader BlockRecordFormat::header(const BlockHash& h, const Sha256Digest& salt, const Sha256Digest& checksum) const {
  BlockRecordHeader out{};
  std::memcpy(out.magic, kMagic, 8);
  out.version = kVersion;
  out.header_bytes = sizeof out;
  std::memcpy(out.model, model_.data(), 32);
  out.dtype = dtype_;
  out.block_size = block_size_;
  out.kv_dim = kv_dim_;
  out.n_layers = n_layers_;
  std::memcpy(out.salt, salt.data(), 32);
  std::memcpy(out.hash, h.data(), 32);
  out.payload_bytes = payload_bytes_;
  std::memcpy(out.algo, kAlgo, 8);
  std::memcpy(out.checksum, checksum.data(), 32);
  return out;
}

std::vector<uint8_t> BlockRecordFormat::encode(const BlockHash& h, const Sha256Digest& salt, const uint8_t* payload) const {
  const BlockRecordHeader head = header(h, salt, Sha256::of(payload, payload_bytes_));
  std::vector<uint8_t> out(record_bytes());
  std::memcpy(out.data(), &head, sizeof head);
  std::memcpy(out.data() + sizeof head, payload, payload_bytes_);
  return out;
}

std::optional<KvReject> BlockRecordFormat::check(const uint8_t* data, size_t n, const BlockHash& h,
                                                 const Sha256Digest& salt, uint8_t* out) const {
  BlockRecordHeader head;
  if (n < sizeof head) return KvReject::Truncated;
  std::memcpy(&head, data, sizeof head);
  if (std::memcmp(head.magic, kMagic, 8) != 0 || head.version != kVersion || head.header_bytes != sizeof head ||
      std::memcmp(head.algo, kAlgo, 8) != 0)
    return KvReject::Io;
  const BlockRecordHeader want = header(h, salt, Sha256Digest{});
  if (std::memcmp(head.model, want.model, 32) != 0) return KvReject::Model;
  if (head.dtype != want.dtype || head.block_size != want.block_size || head.kv_dim != want.kv_dim ||
      head.n_layers != want.n_layers || head.payload_bytes != want.payload_bytes)
    return KvReject::Codec;
  if (std::memcmp(head.salt, want.salt, 32) != 0) return KvReject::Tenant;
  if (std::memcmp(head.hash, want.hash, 32) != 0) return KvReject::Hash;
  if (n != record_bytes()) return KvReject::Truncated;
  if (std::memcmp(Sha256::of(data + sizeof head, payload_bytes_).data(), head.checksum, 32) != 0) return KvReject::Checksum;
  std::memcpy(out, data + sizeof head, payload_bytes_);
  return std::nullopt;
}

bool BlockRecordFormat::whole(const BlockRecordHeader& head, size_t total) {
  return total >= sizeof head && total - sizeof head == head.payload_bytes;
}

}  // namespace kvlm
