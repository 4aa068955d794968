// A KV block as it travels below the pool (a disk file, a Redis value): a fixed header that says
// whose block it is, then the payload as the pages store it. Little-endian, no padding.
// A record is used only if every field matches what the reader expects, in this order, each
// failure named by its own reason: the format, the model fingerprint, the codec and block shape,
// the tenant salt, the chained hash, the length, and the payload's SHA-256.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/sha256.h"
#include "kv/block_pool.h"
#include "kv/kv_pages.h"

namespace kvlm {

// Why a stored block was refused.
enum class KvReject { Checksum, Truncated, Model, Codec, Tenant, Hash, Io };
constexpr int kKvRejectReasons = 7;
const char* kv_reject_name(KvReject r);  // "checksum", "truncated", "model", "codec", "tenant", "hash", "io"

struct BlockRecordHeader {
  char magic[8];
  uint32_t version, header_bytes;
  uint8_t model[32];
  uint32_t dtype, block_size, kv_dim, n_layers;
  uint8_t salt[32], hash[32];
  uint64_t payload_bytes;
  char algo[8];
  uint8_t checksum[32];
};
static_assert(sizeof(BlockRecordHeader) == 176, "the block record header has no padding");

// What a reader expects of every record: this model, these pages' codec and shape.
class BlockRecordFormat {
 public:
  BlockRecordFormat(const KvPages& pages, const Sha256Digest& model);
  size_t payload_bytes() const { return payload_bytes_; }
  size_t record_bytes() const { return sizeof(BlockRecordHeader) + payload_bytes_; }
  BlockRecordHeader header(const BlockHash& h, const Sha256Digest& salt, const Sha256Digest& checksum) const;
  // Header + payload, checksummed.
  std::vector<uint8_t> encode(const BlockHash& h, const Sha256Digest& salt, const uint8_t* payload) const;
  // Checks `n` bytes read back (at most record_bytes() + 1, so a longer one shows) against the
  // block (h, salt) and copies the payload to `out`; nullopt when it is accepted.
  std::optional<KvReject> check(const uint8_t* data, size_t n, const BlockHash& h, const Sha256Digest& salt,
                                uint8_t* out) const;
  // Whether a header announces as many payload bytes as `total` holds (a whole record).
  static bool whole(const BlockRecordHeader& head, size_t total);

 private:
  Sha256Digest model_;
  uint32_t dtype_, block_size_, kv_dim_, n_layers_;
  size_t payload_bytes_;
};

}  // namespace kvlm
