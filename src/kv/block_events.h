// Block events: what a router or an indexer outside kvlm needs to know about the prefix blocks a
// replica holds, in vLLM's vocabulary (BlockStored, BlockRemoved, AllBlocksCleared), and the
// external block hash those events carry.
//
// The pool keys prefixes by a salted SHA-256 chain of our own (chain_block_hash): it isolates
// tenants and is never shown outside. An external indexer must compute the same keys from token
// ids alone, so events carry a second chain, chosen by --prefix-hash:
//   - sha256_cbor:        SHA-256 over canonical CBOR [parent digest (bytes), [tokens], extra],
//                         as vLLM's sha256_cbor; events carry the 32-byte digest;
//   - sha256_cbor_64bit:  the same over [parent (uint), [tokens], extra], where every hash is the
//                         low 64 bits of its digest, as vLLM's sha256_cbor_64bit; events carry ints;
//   - salted (default):   the internal hash itself, as bytes (reproducible only with the salt).
// The first block's parent is SHA-256 over CBOR of the seed string (vLLM's NONE_HASH with
// PYTHONHASHSEED set to it). `extra` is null, or [tenant] on the first block of a tenant's
// sequence (vLLM puts its cache_salt there), so tenants never share external keys either.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kv/block_pool.h"

namespace kvlm {

enum class PrefixHashScheme { Salted, Sha256Cbor, Sha256Cbor64 };
PrefixHashScheme parse_prefix_hash(const std::string& name);  // throws on an unknown name
const char* prefix_hash_name(PrefixHashScheme s);

// Canonical CBOR (RFC 8949 section 4.2: shortest lengths, definite arrays) of the few types the
// hash input has. Written here, not taken from a library: the hash input must be byte-exact, and
// five encodings are easier to check against cbor2 than a general encoder's options.
class CborWriter {
 public:
  CborWriter& uint(uint64_t v) { return head(0, v); }
  CborWriter& bytes(const uint8_t* p, size_t n);
  CborWriter& text(const std::string& s);
  CborWriter& array(size_t n) { return head(4, n); }  // followed by n items
  CborWriter& null() {
    out_.push_back(0xf6);
    return *this;
  }
  const std::vector<uint8_t>& data() const { return out_; }

 private:
  CborWriter& head(int major, uint64_t v);
  std::vector<uint8_t> out_;
};

// The low 64 bits of a digest (its last 8 bytes, big-endian), as vLLM's int block hashes.
uint64_t low64(const BlockHash& h);

class ExternalHasher {
 public:
  ExternalHasher(PrefixHashScheme scheme, const std::string& seed);
  PrefixHashScheme scheme() const { return scheme_; }
  bool as_int() const { return scheme_ == PrefixHashScheme::Sha256Cbor64; }
  // Block i's external hash: `parent` is block i-1's (null for the first block), `internal` its
  // salted chain hash (the salted scheme returns it as is).
  BlockHash block(const BlockHash* parent, const std::string& salt, const int* tokens, int n,
                  const BlockHash& internal) const;
  const BlockHash& none_hash() const { return none_; }

 private:
  PrefixHashScheme scheme_;
  BlockHash none_;
};

// One event, as vLLM's: hashes are external ones; `medium` names where the blocks are:
// "pool" (the paged pool), "host", "disk" or "remote" (the tiers below it).
struct BlockEvent {
  enum class Kind { Stored, Removed, Cleared } kind = Kind::Stored;
  std::vector<BlockHash> hashes;
  bool has_parent = false;
  BlockHash parent{};
  std::vector<int> tokens;  // Stored: the blocks' token ids, in order
  int block_size = 0;
  std::string medium;
};

// Where events go (the server's ZMQ publisher). emit() is called from the engine's thread and
// the disk writer's, so it must be thread-safe and must not block on the network.
class BlockEventSink {
 public:
  virtual ~BlockEventSink() = default;
  virtual void emit(BlockEvent e) = 0;
};

// Turns the pool's hash index changes into events of medium "pool".
class PoolEventForwarder : public BlockPool::Listener {
 public:
  PoolEventForwarder(BlockEventSink& sink, int block_size) : sink_(sink), block_size_(block_size) {}
  void published(int block, const BlockHash& h, const std::string& salt, const BlockMeta* meta) override;
  void evicted(int block, const BlockHash& h, const std::string& salt, const BlockMeta* meta) override;
  void unpublished(int block, const BlockMeta* meta) override;

 private:
  BlockEventSink& sink_;
  int block_size_;
};

// The events for one block's meta.
BlockEvent stored_event(const BlockMeta& m, int block_size, const char* medium);
BlockEvent removed_event(const BlockHash& ext, const char* medium);

}  // namespace kvlm
