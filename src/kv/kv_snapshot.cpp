#include "kv/kv_snapshot.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/write_file.h"

namespace kvlm {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'L', 'M', 'S', 'N', 'P', '1'};
constexpr char kAlgo[8] = {'s', 'h', 'a', '2', '5', '6', 0, 0};
constexpr uint32_t kVersion = 1;

// The fixed header, in file order.
struct Header {
  char magic[8];
  uint32_t version, header_bytes;
  uint8_t model[32];
  uint32_t dtype, block_size, kv_dim, n_layers, residual, reserved;
  uint8_t salt[32];
  int64_t length, hot_from;
  uint64_t n_tokens, body_bytes;
  char algo[8];
  uint8_t checksum[32];
};
static_assert(sizeof(Header) == 8 + 8 + 32 + 24 + 32 + 16 + 16 + 8 + 32, "the header has no padding");

uint64_t body_bytes(const PagedKvCache& c, uint64_t n_tokens, int64_t length) {
  const KvPages& p = c.pages();
  const uint64_t blocks = (static_cast<uint64_t>(length) + p.block_size() - 1) / p.block_size();
  const uint64_t ring = 2ull * p.n_layers() * c.residual() * p.kv_dim() * sizeof(float);
  return n_tokens * sizeof(int32_t) + blocks * p.bytes_per_block() + ring;
}

void fill_shape(Header& h, const PagedKvCache& c) {
  h.dtype = static_cast<uint32_t>(c.pages().dtype());
  h.block_size = static_cast<uint32_t>(c.pages().block_size());
  h.kv_dim = static_cast<uint32_t>(c.pages().kv_dim());
  h.n_layers = static_cast<uint32_t>(c.pages().n_layers());
  h.residual = static_cast<uint32_t>(c.residual());
}

// Reads the whole file and checks what needs no run to compare with: its structure and the body's
// checksum (which covers the tokens). Returns the header and the body.
std::pair<Header, std::vector<uint8_t>> read_checked(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot open the KV snapshot");
  Header h;
  if (!f.read(reinterpret_cast<char*>(&h), sizeof h)) fail(path, ": truncated KV snapshot (no whole header)");
  if (std::memcmp(h.magic, kMagic, 8) != 0) fail(path, ": not a kvlm KV snapshot");
  if (h.version != kVersion || h.header_bytes != sizeof h || std::memcmp(h.algo, kAlgo, 8) != 0)
    fail(path, ": KV snapshot version ", h.version, " is not supported");
  if (h.length < 1 || h.n_tokens < static_cast<uint64_t>(h.length) || h.n_tokens > (uint64_t{1} << 24) ||
      h.hot_from < 0 || h.hot_from > h.length || h.body_bytes > (uint64_t{1} << 40))
    fail(path, ": KV snapshot with inconsistent lengths");
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) != sizeof h + h.body_bytes) fail(path, ": truncated KV snapshot");
  std::vector<uint8_t> body(h.body_bytes);
  if (!f.read(reinterpret_cast<char*>(body.data()), static_cast<std::streamsize>(body.size())))
    fail(path, ": truncated KV snapshot");
  if (std::memcmp(Sha256::of(body.data(), body.size()).data(), h.checksum, 32) != 0)
    fail(path, ": damaged KV snapshot (SHA-256 checksum mismatch)");
  return {h, std::move(body)};
}

// What the run must match: the model, the codec and block shape, the tenant.
void check_identity(const std::string& path, const Header& h, const PagedKvCache& c, const Sha256Digest& model,
                    const std::string& salt) {
  if (std::memcmp(h.model, model.data(), 32) != 0) fail(path, ": KV snapshot of another model (fingerprints differ)");
  Header want{};
  fill_shape(want, c);
  if (h.dtype != want.dtype || h.block_size != want.block_size || h.kv_dim != want.kv_dim || h.n_layers != want.n_layers ||
      h.residual != want.residual)
    fail(path, ": KV snapshot of another KV codec or shape (", is_dtype(h.dtype) ? dtype_name(static_cast<DType>(h.dtype)) : "?",
         " pages, blocks of ", h.block_size, ", residual ", h.residual, "; this run: ", dtype_name(c.pages().dtype()),
         ", ", want.block_size, ", ", want.residual, ")");
  const Sha256Digest s = Sha256::of_string(salt);
  if (std::memcmp(h.salt, s.data(), 32) != 0) fail(path, ": KV snapshot of another tenant");
  if (h.body_bytes != body_bytes(c, h.n_tokens, h.length)) fail(path, ": KV snapshot with inconsistent lengths");
}

}  // namespace

void save_kv_snapshot(const PagedKvCache& c, const std::vector<int>& tokens, const Sha256Digest& model,
                      const std::string& salt, const std::string& path) {
  if (!c.can_snapshot()) fail("a sequence whose sliding window or sinks dropped rows cannot be saved");
  if (c.length() < 1 || static_cast<int>(tokens.size()) < c.length()) fail("nothing to save: the sequence has no KV");
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.header_bytes = sizeof h;
  std::memcpy(h.model, model.data(), 32);
  fill_shape(h, c);
  const Sha256Digest s = Sha256::of_string(salt);
  std::memcpy(h.salt, s.data(), 32);
  h.length = c.length();
  h.hot_from = c.hot_from();
  h.n_tokens = tokens.size();
  h.body_bytes = body_bytes(c, h.n_tokens, h.length);
  std::memcpy(h.algo, kAlgo, 8);
  std::vector<uint8_t> body;
  body.reserve(h.body_bytes);
  for (int t : tokens) {
    const int32_t v = t;
    body.insert(body.end(), reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 4);
  }
  const KvPages& p = c.pages();
  std::vector<uint8_t> block(p.bytes_per_block());
  const int blocks = (c.length() + p.block_size() - 1) / p.block_size();
  for (int i = 0; i < blocks; ++i) {
    p.read_block(c.block_table()[i], block.data());
    body.insert(body.end(), block.begin(), block.end());
  }
  for (int l = 0; c.residual() > 0 && l < p.n_layers(); ++l)
    for (bool value : {false, true}) {
      const std::vector<float>& r = c.ring(l, value);
      body.insert(body.end(), reinterpret_cast<const uint8_t*>(r.data()), reinterpret_cast<const uint8_t*>(r.data() + r.size()));
    }
  KVLM_CHECK(body.size() == h.body_bytes, "snapshot body is ", body.size(), " bytes, expected ", h.body_bytes);
  const Sha256Digest sum = Sha256::of(body.data(), body.size());
  std::memcpy(h.checksum, sum.data(), 32);
  // The file at `path` is the old snapshot or the new one, never half of one.
  if (!write_file_atomically(path, {{&h, sizeof h}, {body.data(), body.size()}}))
    fail(path, ": cannot write the KV snapshot");
}

std::vector<int> kv_snapshot_tokens(const std::string& path) {
  auto [h, body] = read_checked(path);
  std::vector<int> tokens(h.n_tokens);
  std::memcpy(tokens.data(), body.data(), h.n_tokens * sizeof(int32_t));
  return tokens;
}

int restore_kv_snapshot(PagedKvCache& c, const std::vector<int>& tokens, const Sha256Digest& model,
                        const std::string& salt, const std::string& path) {
  auto [h, body] = read_checked(path);
  check_identity(path, h, c, model, salt);
  const int32_t* saved = reinterpret_cast<const int32_t*>(body.data());
  // The longest common prefix with KV, leaving the last token to compute (its logits start the run).
  int n = 0;
  const int most = std::min<int>(static_cast<int>(h.length), static_cast<int>(tokens.size()) - 1);
  while (n < most && saved[n] == tokens[n]) ++n;
  if (n == 0) return 0;
  const uint8_t* payloads = body.data() + h.n_tokens * sizeof(int32_t);
  const size_t blocks = (static_cast<size_t>(h.length) + h.block_size - 1) / h.block_size;
  // A shorter restore cannot use the ring (its slots hold later positions): pages only then.
  std::vector<float> ring;
  if (c.residual() > 0 && n == h.length) {
    ring.resize(2ull * h.n_layers * h.residual * h.kv_dim);
    std::memcpy(ring.data(), payloads + blocks * c.pages().bytes_per_block(), ring.size() * sizeof(float));
  }
  c.restore_rows(n, payloads, ring.empty() ? nullptr : ring.data(), static_cast<int>(h.hot_from));
  return n;
}

}  // namespace kvlm
