// Helpers shared by the tests: locating ../shared (skip loudly, or fail under
// KVLM_REQUIRE_SHARED=1), temp files, running the kvlm binary, comparing floats.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"

// The kvlm binary the CLI tests run; an engine-only build (KVLM_ENGINE_ONLY) has none.
#ifndef KVLM_BIN
#define KVLM_BIN "/nonexistent/kvlm (an engine-only build has no CLI)"
#endif

// 1 under AddressSanitizer: gcc defines __SANITIZE_ADDRESS__, clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define KVLM_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVLM_TEST_ASAN 1
#endif
#endif
#ifndef KVLM_TEST_ASAN
#define KVLM_TEST_ASAN 0
#endif

namespace kvlm {
class Engine;
struct Model;
}

namespace kvlm::test {

std::string shared_dir();
// Full path of a file under shared/, or "" when shared/ is missing.
std::string shared_path(const std::string& rel);
bool require_shared_env();
std::string fixtures_dir();

// Skips the test naming what was not checked, or fails it when KVLM_REQUIRE_SHARED=1.
#define KVLM_NEED_SHARED(rel, what)                                                                   \
  do {                                                                                                \
    if (::kvlm::test::shared_path(rel).empty()) {                                                     \
      if (::kvlm::test::require_shared_env())                                                         \
        FAIL() << "KVLM_REQUIRE_SHARED=1 but " << ::kvlm::test::shared_dir() << "/" << rel            \
               << " is missing; not checked: " << what;                                               \
      GTEST_SKIP() << "SKIPPED: " << ::kvlm::test::shared_dir() << "/" << rel                         \
                   << " is missing; NOT CHECKED: " << what;                                           \
    }                                                                                                 \
  } while (0)

// The row-quant types (kernels/row_dot.h), and random rows of one: any bytes are valid blocks once
// their f16 scales are sane numbers (these are drawn from N(0, d_std)); MXFP4's exponents put its
// scale between d_std / 2 and 4 d_std.
extern const DType kRowQuantTypes[11];
std::vector<uint8_t> random_row_quant(DType t, int rows, int in, uint64_t seed, float d_std = 0.01f);

std::string temp_path(const std::string& name);
void write_file(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);
std::vector<float> read_f32(const std::string& path);

struct RunResult {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs the built kvlm binary with the given arguments (shell-quoted here).
RunResult run_kvlm(const std::vector<std::string>& args);

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);
// n standard-normal floats from a seeded generator.
std::vector<float> randn(size_t n, uint64_t seed);

// Logits [ids.size()][vocab] at every position of ids, from an empty cache, in one batch.
std::vector<float> all_logits(const Model& m, const std::vector<int>& ids);

// The tokens a sequence of the engine generated (after its prompt).
std::vector<int> generated(const Engine& e, int id);
// Steps the engine until it has no work left (fails the test if it never gets there).
void drain(Engine& e);

}  // namespace kvlm::test
