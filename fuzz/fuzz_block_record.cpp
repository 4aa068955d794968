// libFuzzer target: block records read back from disk or Redis (kv/block_record.h), which another
// process (or replica) wrote. The input is laid over a valid record (XOR) and decides its length;
// the check must never read out of bounds, and must accept only the record as written. The input
// is also tried as a --kv-remote address.
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/block_record.h"
#include "kv/redis_store.h"
#include "model/synthetic.h"

namespace {

struct Fixture {
  kvlm::ModelConfig cfg;
  std::unique_ptr<kvlm::KvPages> pages;
  std::unique_ptr<kvlm::BlockRecordFormat> fmt;
  kvlm::BlockHash hash{};
  kvlm::Sha256Digest salt{};
  std::vector<uint8_t> record;
  Fixture() {
    cfg = kvlm::llama_shape(2, 8, 16, 2, 1, 4, 16, 16);
    pages = std::make_unique<kvlm::KvPages>(cfg, 2, 1, kvlm::DType::Int8);
    kvlm::Sha256Digest model{};
    model.fill(9);
    fmt = std::make_unique<kvlm::BlockRecordFormat>(*pages, model);
    hash.fill(5);
    salt = kvlm::Sha256::of_string("tenant");
    std::vector<uint8_t> payload(fmt->payload_bytes());
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 31);
    record = fmt->encode(hash, salt, payload.data());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture f;
  std::vector<uint8_t> r = f.record;
  if (size > 0) r.resize(size % (2 * f.record.size() + 2));
  for (size_t i = 0; i < size && i < r.size(); ++i) r[i] ^= data[i];
  std::vector<uint8_t> out(f.fmt->payload_bytes());
  const bool accepted = !f.fmt->check(r.data(), r.size(), f.hash, f.salt, out.data());
  if (accepted && r != f.record) __builtin_trap();  // a changed record was taken
  try {
    kvlm::parse_redis_url(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const kvlm::KvlmError&) {
  }
  return 0;
}
