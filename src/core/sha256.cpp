#include "core/sha256.h"

#include <openssl/evp.h>

#include "core/error.h"

namespace kvlm {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  KVLM_CHECK(ctx_ && EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1, "SHA-256 init failed");
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

Sha256& Sha256::update(const void* data, size_t n) {
  KVLM_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) == 1, "SHA-256 update failed");
  return *this;
}

Sha256Digest Sha256::digest() {
  Sha256Digest out{};
  unsigned int len = 0;
  KVLM_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &len) == 1 && len == out.size(),
             "SHA-256 final failed");
  return out;
}

Sha256Digest Sha256::of(const void* data, size_t n) { return Sha256().update(data, n).digest(); }

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += {d[p[i] >> 4], d[p[i] & 15]};
  return s;
}

}  // namespace kvlm
