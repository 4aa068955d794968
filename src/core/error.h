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

// A broken invariant of kvlm itself: a bug, never the user's doing. Kept apart from KvlmError
// so that callers (and tests) can tell "bad input" from "kvlm is wrong"; it names file:line.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& msg) : std::logic_error(msg) {}
};

template <typename... Args>
[[noreturn]] void internal_error(const char* file, int line, const char* cond, const Args&... args) {
  std::ostringstream os;
  os << "internal error at " << file << ":" << line << ": " << cond;
  if constexpr (sizeof...(args) > 0) {
    os << ": ";
    detail::append(os, args...);
  }
  throw InternalError(os.str());
}

// KVLM_CHECK(cond, "context ", value): throws InternalError with file:line when cond is false.
#define KVLM_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) ::kvlm::internal_error(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

// Checked multiply for sizes read from files: overflow is an error, not a wrap.
inline uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& what) {
  if (a != 0 && b > UINT64_MAX / a) fail(what, ": size overflows 64 bits");
  return a * b;
}

}  // namespace kvlm
