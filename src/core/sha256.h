// SHA-256 (OpenSSL's), for the prefix-cache chain, the model fingerprint and the checksums of
// KV blocks kept outside the pool. One algorithm everywhere, named where it is stored.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvlm {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(const void* data, size_t n);
  template <class T>
  Sha256& add(const T& v) {  // a plain value's bytes
    return update(&v, sizeof v);
  }
  Sha256& add_string(const std::string& s) {  // length first, so "ab"+"c" differs from "a"+"bc"
    return add(static_cast<uint64_t>(s.size())).update(s.data(), s.size());
  }
  Sha256Digest digest();  // once

  static Sha256Digest of(const void* data, size_t n);
  static Sha256Digest of_string(const std::string& s) { return Sha256().add_string(s).digest(); }  // length-prefixed

 private:
  void* ctx_;
};

std::string hex(const uint8_t* p, size_t n);

}  // namespace kvlm
