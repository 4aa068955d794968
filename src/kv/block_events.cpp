#include "kv/block_events.h"

#include "core/error.h"
#include "core/sha256.h"

namespace kvlm {

PrefixHashScheme parse_prefix_hash(const std::string& name) {
  if (name == "salted") return PrefixHashScheme::Salted;
  if (name == "sha256_cbor") return PrefixHashScheme::Sha256Cbor;
  if (name == "sha256_cbor_64bit") return PrefixHashScheme::Sha256Cbor64;
  fail("unknown --prefix-hash '", name, "' (salted, sha256_cbor or sha256_cbor_64bit)");
}

const char* prefix_hash_name(PrefixHashScheme s) {
  switch (s) {
    case PrefixHashScheme::Salted: return "salted";
    case PrefixHashScheme::Sha256Cbor: return "sha256_cbor";
    case PrefixHashScheme::Sha256Cbor64: return "sha256_cbor_64bit";
  }
  return "?";
}

CborWriter& CborWriter::head(int major, uint64_t v) {
  const uint8_t m = static_cast<uint8_t>(major << 5);
  auto be = [&](int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  if (v < 24) {
    out_.push_back(static_cast<uint8_t>(m | v));
  } else if (v <= 0xff) {
    out_.push_back(m | 24);
    be(1);
  } else if (v <= 0xffff) {
    out_.push_back(m | 25);
    be(2);
  } else if (v <= 0xffffffffu) {
    out_.push_back(m | 26);
    be(4);
  } else {
    out_.push_back(m | 27);
    be(8);
  }
  return *this;
}

CborWriter& CborWriter::bytes(const uint8_t* p, size_t n) {
  head(2, n);
  out_.insert(out_.end(), p, p + n);
  return *this;
}

CborWriter& CborWriter::text(const std::string& s) {
  head(3, s.size());
  out_.insert(out_.end(), s.begin(), s.end());
  return *this;
}

uint64_t low64(const BlockHash& h) {
  uint64_t v = 0;
  for (int i = 24; i < 32; ++i) v = (v << 8) | h[i];
  return v;
}

ExternalHasher::ExternalHasher(PrefixHashScheme scheme, const std::string& seed) : scheme_(scheme) {
  CborWriter w;
  w.text(seed);
  none_ = Sha256::of(w.data().data(), w.data().size());
}

BlockHash ExternalHasher::block(const BlockHash* parent, const std::string& salt, const int* tokens, int n,
                                const BlockHash& internal) const {
  if (scheme_ == PrefixHashScheme::Salted) return internal;
  const BlockHash& p = parent ? *parent : none_;
  CborWriter w;
  w.array(3);
  if (scheme_ == PrefixHashScheme::Sha256Cbor64)
    w.uint(low64(p));
  else
    w.bytes(p.data(), p.size());
  w.array(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) w.uint(static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])));  // ids are >= 0
  if (!parent && !salt.empty())
    w.array(1).text(salt);
  else
    w.null();
  return Sha256::of(w.data().data(), w.data().size());
}

BlockEvent stored_event(const BlockMeta& m, int block_size, const char* medium) {
  BlockEvent e;
  e.kind = BlockEvent::Kind::Stored;
  e.hashes = {m.ext};
  e.has_parent = m.has_parent;
  e.parent = m.parent_ext;
  e.tokens = m.tokens;
  e.block_size = block_size;
  e.medium = medium;
  return e;
}

BlockEvent removed_event(const BlockHash& ext, const char* medium) {
  BlockEvent e;
  e.kind = BlockEvent::Kind::Removed;
  e.hashes = {ext};
  e.medium = medium;
  return e;
}

void PoolEventForwarder::published(int, const BlockHash&, const std::string&, const BlockMeta* meta) {
  if (meta) sink_.emit(stored_event(*meta, block_size_, "pool"));
}

void PoolEventForwarder::evicted(int, const BlockHash&, const std::string&, const BlockMeta* meta) {
  if (meta) sink_.emit(removed_event(meta->ext, "pool"));
}

void PoolEventForwarder::unpublished(int, const BlockMeta* meta) {
  if (meta) sink_.emit(removed_event(meta->ext, "pool"));
}

}  // namespace kvlm
