// Block events (kv/block_events.h): the CBOR and the external hashes byte for byte against cbor2 +
// hashlib (the expected values below were computed with them, as vLLM defines its hashes), the
// pool's changes as events with their parents and tokens, and block records refused by reason.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/sha256.h"
#include "kv/block_events.h"
#include "kv/block_record.h"
#include "kv/kv_tiers.h"
#include "kv/paged_cache.h"
#include "kv/redis_store.h"
#include "model/synthetic.h"

namespace kvlm {
namespace {

std::string hex_of(const std::vector<uint8_t>& v) { return hex(v.data(), v.size()); }
std::string hex_of(const BlockHash& h) { return hex(h.data(), h.size()); }

TEST(Cbor, CanonicalEncodingMatchesCbor2) {
  CborWriter w;
  w.array(10);
  for (uint64_t v : {0ull, 23ull, 24ull, 255ull, 256ull, 65535ull, 65536ull, 4294967295ull, 4294967296ull,
                     18446744073709551615ull})
    w.uint(v);
  // cbor2.dumps([0, 23, 24, 255, 256, 65535, 65536, 2**32-1, 2**32, 2**64-1], canonical=True)
  EXPECT_EQ(hex_of(w.data()), "8a0017181818ff19010019ffff1a000100001affffffff1b00000001000000001bffffffffffffffff");
  CborWriter m;
  const uint8_t b[2] = {1, 2};
  m.array(4).bytes(b, 2).text("ab").null().array(0);
  EXPECT_EQ(hex_of(m.data()), "84420102626162f680");  // [b"\x01\x02", "ab", None, []]
}

std::vector<int> range(int from, int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

TEST(ExternalHash, Sha256CborChainsAsVllmDoes) {
  const std::vector<int> t1 = range(1, 16), t2 = range(100, 16);
  const BlockHash internal{};  // ignored by the CBOR schemes
  ExternalHasher h(PrefixHashScheme::Sha256Cbor, "0");
  EXPECT_EQ(hex_of(h.none_hash()), "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e");
  const BlockHash b1 = h.block(nullptr, "", t1.data(), 16, internal);
  const BlockHash b2 = h.block(&b1, "", t2.data(), 16, internal);
  EXPECT_EQ(hex_of(b1), "202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332ea");
  EXPECT_EQ(hex_of(b2), "833589f469f64bc3e0fa3d2a2813aa829d57300da6ca4086ef9066ccf79a9232");
  // A tenant's first block carries its salt as extra keys (vLLM's cache_salt); later ones chain.
  EXPECT_EQ(hex_of(h.block(nullptr, "tenant-x", t1.data(), 16, internal)),
            "fd335720376be3a3ad56c2eeee701b181c902f58f7759bfedb4ae35a5ff436e7");
  EXPECT_EQ(h.block(&b1, "tenant-x", t2.data(), 16, internal), b2);

  ExternalHasher h64(PrefixHashScheme::Sha256Cbor64, "0");
  EXPECT_TRUE(h64.as_int());
  const BlockHash i1 = h64.block(nullptr, "", t1.data(), 16, internal);
  const BlockHash i2 = h64.block(&i1, "", t2.data(), 16, internal);
  EXPECT_EQ(low64(i1), 6090100016636780107ull);
  EXPECT_EQ(low64(i2), 3866467999704059874ull);

  ExternalHasher salted(PrefixHashScheme::Salted, "0");
  BlockHash in;
  in.fill(7);
  EXPECT_EQ(salted.block(nullptr, "x", t1.data(), 16, in), in);
  EXPECT_THROW(parse_prefix_hash("md5"), KvlmError);
}

struct Recorder : BlockEventSink {
  std::vector<BlockEvent> got;
  void emit(BlockEvent e) override { got.push_back(std::move(e)); }
};

ModelConfig tiny() { return llama_shape(2, 8, 16, 2, 1, 4, 32, 64); }

TEST(BlockEvents, PoolPublishesAndEvictsWithParentsAndTokens) {
  const ModelConfig cfg = tiny();
  KvPages pages(cfg, 4, 4);
  BlockPool pool(pages);
  Recorder rec;
  PoolEventForwarder fwd(rec, 4);
  pool.add_listener(&fwd);
  ExternalHasher hasher(PrefixHashScheme::Sha256Cbor, "0");
  const std::vector<int> tokens = range(3, 9);  // two full blocks and one token
  {
    PagedKvOptions o{16, ""};
    o.hasher = &hasher;
    PagedKvCache kv(pages, pool, o);
    kv.prepare(0, 9);
    kv.set_length(9);
    kv.publish(tokens);
  }
  ASSERT_EQ(rec.got.size(), 2u);
  const BlockHash b1 = hasher.block(nullptr, "", tokens.data(), 4, BlockHash{});
  const BlockHash b2 = hasher.block(&b1, "", tokens.data() + 4, 4, BlockHash{});
  EXPECT_EQ(rec.got[0].kind, BlockEvent::Kind::Stored);
  EXPECT_EQ(rec.got[0].hashes, std::vector<BlockHash>{b1});
  EXPECT_FALSE(rec.got[0].has_parent);
  EXPECT_EQ(rec.got[0].tokens, range(3, 4));
  EXPECT_EQ(rec.got[0].medium, "pool");
  EXPECT_EQ(rec.got[1].hashes, std::vector<BlockHash>{b2});
  EXPECT_TRUE(rec.got[1].has_parent);
  EXPECT_EQ(rec.got[1].parent, b1);
  EXPECT_EQ(rec.got[1].block_size, 4);
  // A second sequence adopts the cached prefix: no new events. Taking every block for other
  // rows evicts the two cached ones: one removal each.
  {
    PagedKvOptions o{16, ""};
    o.hasher = &hasher;
    PagedKvCache kv(pages, pool, o);
    EXPECT_EQ(kv.adopt_prefix(tokens), 8);
  }
  EXPECT_EQ(rec.got.size(), 2u);
  std::vector<int> taken;
  while (pool.num_free() > 0) taken.push_back(pool.allocate());
  ASSERT_EQ(rec.got.size(), 4u);
  std::vector<BlockHash> removed;
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(rec.got[i].kind, BlockEvent::Kind::Removed);
    EXPECT_EQ(rec.got[i].medium, "pool");
    removed.push_back(rec.got[i].hashes.at(0));
  }
  EXPECT_TRUE((removed == std::vector<BlockHash>{b1, b2}) || (removed == std::vector<BlockHash>{b2, b1}));
  for (int b : taken) pool.release(b);
  pool.check_invariants();
}

TEST(BlockEvents, TiersAnnounceWhatEntersAndLeavesThem) {
  const ModelConfig cfg = tiny();
  KvPages pages(cfg, 4, 4);
  BlockPool pool(pages);
  Recorder rec;
  KvTierOptions topt;
  topt.host_capacity = 16 * pages.bytes_per_block();
  Sha256Digest model{};
  KvTiers tiers(pages, model, topt);
  tiers.set_event_sink(&rec);
  PoolEventForwarder fwd(rec, 4);
  pool.add_listener(&tiers);
  pool.add_listener(&fwd);
  ExternalHasher hasher(PrefixHashScheme::Sha256Cbor64, "0");
  const std::vector<int> tokens = range(5, 9);
  PagedKvOptions o{16, "t"};
  o.hasher = &hasher;
  o.tiers = &tiers;
  {
    PagedKvCache kv(pages, pool, o);
    kv.prepare(0, 9);
    kv.set_length(9);
    kv.publish(tokens);
  }
  std::vector<int> taken;
  while (pool.num_free() > 0) taken.push_back(pool.allocate());  // both cached blocks go to host memory
  auto count = [&](BlockEvent::Kind k, const char* medium) {
    int n = 0;
    for (const BlockEvent& e : rec.got) n += e.kind == k && e.medium == medium;
    return n;
  };
  EXPECT_EQ(count(BlockEvent::Kind::Stored, "pool"), 2);
  EXPECT_EQ(count(BlockEvent::Kind::Removed, "pool"), 2);
  EXPECT_EQ(count(BlockEvent::Kind::Stored, "host"), 2);
  for (int b : taken) pool.release(b);
  {
    PagedKvCache kv(pages, pool, o);  // back from host memory: it leaves that tier, enters the pool
    EXPECT_EQ(kv.adopt_prefix(tokens), 8);
  }
  EXPECT_EQ(count(BlockEvent::Kind::Removed, "host"), 2);
  EXPECT_EQ(count(BlockEvent::Kind::Stored, "pool"), 4);
  for (const BlockEvent& e : rec.got)
    if (e.kind == BlockEvent::Kind::Stored) {
      EXPECT_EQ(e.tokens.size(), 4u);
    }
  pool.clear_listeners();
}

TEST(BlockRecord, EveryMismatchIsRefusedByItsReason) {
  const ModelConfig cfg = tiny();
  KvPages pages(cfg, 4, 2);
  Sha256Digest model{}, other{};
  model.fill(1);
  other.fill(2);
  BlockRecordFormat fmt(pages, model);
  std::vector<uint8_t> payload(fmt.payload_bytes());
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  BlockHash h{};
  h.fill(3);
  const Sha256Digest salt = Sha256::of_string("tenant-a");
  const std::vector<uint8_t> rec = fmt.encode(h, salt, payload.data());
  ASSERT_EQ(rec.size(), fmt.record_bytes());
  std::vector<uint8_t> out(fmt.payload_bytes());
  EXPECT_FALSE(fmt.check(rec.data(), rec.size(), h, salt, out.data()));
  EXPECT_EQ(out, payload);
  auto reason = [&](std::vector<uint8_t> r, const BlockRecordFormat& f, const BlockHash& hh, const Sha256Digest& s) {
    auto got = f.check(r.data(), r.size(), hh, s, out.data());
    return got ? std::string(kv_reject_name(*got)) : std::string("accepted");
  };
  BlockHash other_hash = h;
  other_hash[5] ^= 1;
  EXPECT_EQ(reason(rec, fmt, other_hash, salt), "hash");
  EXPECT_EQ(reason(rec, fmt, h, Sha256::of_string("tenant-b")), "tenant");
  EXPECT_EQ(reason(rec, BlockRecordFormat(pages, other), h, salt), "model");
  KvPages int8(cfg, 4, 2, DType::Int8);
  EXPECT_EQ(reason(rec, BlockRecordFormat(int8, model), h, salt), "codec");
  std::vector<uint8_t> flipped = rec;
  flipped.back() ^= 0x40;
  EXPECT_EQ(reason(flipped, fmt, h, salt), "checksum");
  EXPECT_EQ(reason(std::vector<uint8_t>(rec.begin(), rec.end() - 1), fmt, h, salt), "truncated");
  std::vector<uint8_t> longer = rec;
  longer.push_back(0);
  EXPECT_EQ(reason(longer, fmt, h, salt), "truncated");
  EXPECT_EQ(reason(std::vector<uint8_t>(rec.begin(), rec.begin() + 100), fmt, h, salt), "truncated");
  std::vector<uint8_t> magic = rec;
  magic[0] = 'X';
  EXPECT_EQ(reason(magic, fmt, h, salt), "io");
}

TEST(RedisUrl, ParsedOrRefusedClearly) {
  RedisAddress a = parse_redis_url("redis://10.0.0.5:7000");
  EXPECT_EQ(a.host, "10.0.0.5");
  EXPECT_EQ(a.port, 7000);
  a = parse_redis_url("redis://:secret@cache/3");
  EXPECT_EQ(a.host, "cache");
  EXPECT_EQ(a.port, 6379);
  EXPECT_EQ(a.password, "secret");
  EXPECT_EQ(a.db, 3);
  for (const char* bad : {"http://x:1", "redis://", "redis://h:0", "redis://h:70000", "redis://h:12x", "redis://h/x"})
    EXPECT_THROW(parse_redis_url(bad), KvlmError) << bad;
}

}  // namespace
}  // namespace kvlm
