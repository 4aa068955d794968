// Small helpers over environment variables and paths shared by CLI, tests and benches.
#pragma once
#include <cstdlib>
#include <string>

namespace kvlm {

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

}  // namespace kvlm
