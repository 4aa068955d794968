// Error type for everything a user can get wrong: bad files, bad flags, bad requests.
// Library code throws KvlmError with context (file, tensor, value); the CLI prints one line.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kvlm {

class KvlmError : public std::runtime_error {
 public:
  explicit KvlmError(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

// fail("file.bin: tensor ", name, " is truncated") builds and throws the message.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  throw KvlmError(os.str());
}

// Checked multiply for sizes read from files: overflow is an error, not a wrap.
inline uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& what) {
  if (a != 0 && b > UINT64_MAX / a) fail(what, ": size overflows 64 bits");
  return a * b;
}

}  // namespace kvlm
