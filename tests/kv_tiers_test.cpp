// KV tiers (kv/kv_tiers.h): a prefix block evicted from the pool to host memory or disk comes
// back with logits bit-identical to a block that never left (f32, int8 and int4 pages), and every
// kind of bad block file is refused by reason and recomputed with the right output.
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "engine/engine.h"
#include "kv/block_pool.h"
#include "kv/kv_tiers.h"
#include "test_support.h"

namespace kvlm {
namespace {

namespace fs = std::filesystem;

constexpr int kBlock = 4;

std::vector<int> prompt(int n, int seed) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 29 + seed * 13 + 3) % 250 + 3);
  return t;
}

// Runs `p` to its first token on `e`; returns the prompt tokens reused and the logits of the
// last prompt position.
std::pair<int, std::vector<float>> run(Engine& e, const std::vector<int>& p, const std::string& salt = "") {
  const int id = e.add({p, 1, {}, false, salt});
  test::drain(e);
  const Sequence& s = e.seq(id);
  EXPECT_EQ(s.state, SeqState::Finished) << s.error;
  auto out = std::make_pair(s.reused_tokens, s.last_logits);
  e.remove(id);
  return out;
}

EngineOptions options(DType dtype, int blocks, KvTierOptions tiers = {}) {
  EngineOptions o;
  o.block_size = kBlock;
  o.num_blocks = blocks;
  o.kv_dtype = dtype;
  o.kv_residual = 8;
  o.tiers = std::move(tiers);
  return o;
}

// The reference: the same prompt twice in a pool big enough to keep its blocks (a pool hit).
std::vector<float> pool_hit_logits(const Model& m, DType dtype, const std::vector<int>& p) {
  Engine ref(m, options(dtype, 64));
  run(ref, p);
  auto [reused, logits] = run(ref, p);
  EXPECT_EQ(reused, static_cast<int>(p.size() - 1) / kBlock * kBlock);
  return logits;
}

// Pushes every cached block of the pool out: other prompts fill it.
void flush_pool(Engine& e) {
  for (int k = 0; k < 3; ++k) run(e, prompt(40, 100 + k));
}

std::string temp_dir(const std::string& name) {
  const std::string d = test::temp_path(name);
  fs::remove_all(d);
  return d;
}

TEST(KvTiers, EvictedBlocksComeBackWithIdenticalLogits) {
  for (const char* fixture : {"llama_tiny", "qwen3_tiny", "mixtral_tiny", "gptoss_tiny", "deepseek3_tiny"})
  for (DType dtype : {DType::F32, DType::F16, DType::Int8, DType::Int4})
    for (const char* tier : {"host", "disk"}) {
      auto m = load_model(test::fixtures_dir() + "/" + fixture);
      if (dtype == DType::Int4 && m->cfg.kv_dim() % 32) continue;  // int4 groups of 32 (qwen3_tiny: 48)
      const std::vector<int> p = prompt(33, 1);  // 8 full blocks + 1 token
      SCOPED_TRACE(std::string(fixture) + ", " + dtype_name(dtype) + " pages, " + tier);
      KvTierOptions t;
      if (tier == std::string("host")) t.host_capacity = size_t{64} << 20;
      if (tier == std::string("disk")) {
        t.disk_dir = temp_dir(std::string("tiers_") + dtype_name(dtype));
        t.disk_capacity = size_t{64} << 20;
      }
      Engine e(*m, options(dtype, 12, t));  // 12 blocks: another prompt evicts all of ours
      const auto first = run(e, p);
      EXPECT_EQ(first.first, 0);
      flush_pool(e);
      ASSERT_EQ(e.tiers() != nullptr, true);
      e.tiers()->flush();
      const auto again = run(e, p);
      EXPECT_EQ(again.first, 32) << "every full block came back from the tier";
      EXPECT_EQ(test::max_abs_diff(again.second, pool_hit_logits(*m, dtype, p)), 0.0f);
      const KvTierStats st = e.tiers()->stats();
      EXPECT_GE(tier == std::string("host") ? st.host_hits : st.disk_hits, 8);
      for (long r : st.rejected) EXPECT_EQ(r, 0);
      // The ledger (--kv-stats, /v1/kv) carries the tiers.
      const KvLedger L = e.ledger();
      EXPECT_EQ(L.to_json()["tiers"][tier]["hits"].get<long>(), tier == std::string("host") ? st.host_hits : st.disk_hits);
      EXPECT_NE(L.to_text().find("tiers    host"), std::string::npos);
    }
}

// A disk tier written by one engine and read by a fresh one (a restart), after `damage` changed
// the files: each bad block is refused for `reason` and recomputed, and the logits are right.
void expect_refused(const std::string& name, KvReject reason, const std::function<void(const std::string& dir)>& damage,
                    DType write_dtype = DType::F32, const std::string& read_salt = "", bool other_model = false) {
  SCOPED_TRACE(name);
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  const std::vector<int> p = prompt(33, 2);
  KvTierOptions t;
  t.disk_dir = temp_dir("refuse_" + name);
  t.disk_capacity = size_t{64} << 20;
  {
    Engine writer(*m, options(write_dtype, 64, t));
    run(writer, p, "");
    writer.tiers()->flush();
  }
  ASSERT_EQ(std::distance(fs::directory_iterator(t.disk_dir), fs::directory_iterator{}), 8);
  damage(t.disk_dir);
  if (other_model) {  // what another weights file would give
    auto f = m->fingerprint();
    f[0] ^= 1;
    m->set_fingerprint(f);
  }  // what another weights file would give
  Engine reader(*m, options(DType::F32, 64, t));
  const auto got = run(reader, p, read_salt);
  EXPECT_LT(got.first, 32) << "a refused block is never adopted";
  const KvTierStats st = reader.tiers()->stats();
  EXPECT_GE(st.rejected[static_cast<int>(reason)], 1) << kv_reject_name(reason);
  long others = 0;
  for (int r = 0; r < kKvRejectReasons; ++r) others += r == static_cast<int>(reason) ? 0 : st.rejected[r];
  EXPECT_EQ(others, 0);
  // The output is what a run that never saw a tier computes.
  Engine fresh(*m, options(DType::F32, 64));
  EXPECT_EQ(test::max_abs_diff(got.second, run(fresh, p, read_salt).second), 0.0f);
}

std::string first_block_file(const std::string& dir, const std::string& salt = "") {
  const std::vector<int> p = prompt(33, 2);
  const BlockHash h = chain_block_hash(nullptr, salt, p.data(), kBlock);
  return dir + "/" + hex(h.data(), h.size()) + ".kvb";
}

TEST(KvTiers, FlippedByteIsRefused) {
  expect_refused("flipped", KvReject::Checksum, [](const std::string& dir) {
    const std::string f = first_block_file(dir);
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(fs::file_size(f)) - 5);
    char c;
    io.read(&c, 1);
    c ^= 0x10;
    io.seekp(static_cast<std::streamoff>(fs::file_size(f)) - 5);
    io.write(&c, 1);
  });
}

TEST(KvTiers, TruncatedFileIsRefused) {
  expect_refused("truncated", KvReject::Truncated,
                 [](const std::string& dir) { fs::resize_file(first_block_file(dir), fs::file_size(first_block_file(dir)) / 2); });
}

TEST(KvTiers, AnotherModelsBlocksAreRefused) {
  expect_refused("model", KvReject::Model, [](const std::string&) {}, DType::F32, "", true);
}

TEST(KvTiers, AnotherCodecsBlocksAreRefused) {
  expect_refused("codec", KvReject::Codec, [](const std::string&) {}, DType::BF16);
}

TEST(KvTiers, AnotherTenantsBlocksAreRefused) {
  // Tenant "b" finds a file under its own chained hash that tenant "" wrote (copied into place).
  expect_refused("tenant", KvReject::Tenant, [](const std::string& dir) {
    fs::copy_file(first_block_file(dir), first_block_file(dir, "b"));
  }, DType::F32, "b");
}

// Bounded: the host tier and the disk tier never hold more than their capacities.
TEST(KvTiers, CapacitiesBoundWhatIsKept) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  KvTierOptions t;
  const size_t block = KvPages::block_bytes(m->cfg, kBlock, DType::F32);
  t.host_capacity = 3 * block;
  t.disk_dir = temp_dir("tiers_bounded");
  t.disk_capacity = 5 * (block + 256);
  Engine e(*m, options(DType::F32, 12, t));
  for (int k = 0; k < 6; ++k) run(e, prompt(40, k));
  e.tiers()->flush();
  const KvTierStats st = e.tiers()->stats();
  EXPECT_LE(st.host_bytes, t.host_capacity);
  EXPECT_GT(st.host_blocks, 0u);
  EXPECT_LE(st.disk_bytes, t.disk_capacity);
  EXPECT_GT(st.disk_blocks, 0u);
  size_t on_disk = 0;
  for (const auto& f : fs::directory_iterator(t.disk_dir)) on_disk += fs::file_size(f.path());
  EXPECT_EQ(on_disk, st.disk_bytes);
  KvTierOptions no_cap;
  no_cap.disk_dir = temp_dir("no_cap");
  EXPECT_THROW(Engine bad(*m, options(DType::F32, 12, no_cap)), KvlmError);
}

}  // namespace
}  // namespace kvlm
