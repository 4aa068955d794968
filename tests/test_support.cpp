#include "test_support.h"

#include "core/half.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"
#include "model/model.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace kvlm::test {

namespace fs = std::filesystem;

std::string shared_dir() {
  const char* v = std::getenv("KVLM_SHARED");
  return (v && *v) ? v : KVLM_DEFAULT_SHARED;
}

std::string shared_path(const std::string& rel) {
  fs::path p = fs::path(shared_dir()) / rel;
  return fs::exists(p) ? p.string() : "";
}

bool require_shared_env() {
  const char* v = std::getenv("KVLM_REQUIRE_SHARED");
  return v && std::string(v) == "1";
}

std::string fixtures_dir() { return KVLM_FIXTURES; }

const DType kRowQuantTypes[11] = {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,   DType::Q3_K,  DType::Q4_K,
                                  DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4};

std::vector<uint8_t> random_row_quant(DType t, int rows, int in, uint64_t seed, float d_std) {
  // The byte offsets of each layout's f16 scales (ggml-common.h's block_* structs).
  std::vector<int> scales;
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: scales = {0, 2}; break;
    case DType::Q5_0: case DType::IQ4_NL: case DType::IQ4_XS: scales = {0}; break;
    case DType::Q2_K: scales = {80, 82}; break;
    case DType::Q3_K: scales = {108}; break;
    case DType::Q6_K: scales = {208}; break;
    default: break;  // MXFP4: an exponent byte
  }
  std::mt19937_64 rng(seed);
  const size_t block_bytes = dtype_block_bytes(t), blocks = static_cast<size_t>(rows) * in / dtype_block(t);
  std::vector<uint8_t> v(blocks * block_bytes);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  std::normal_distribution<float> nd(0.0f, d_std);
  const int e0 = 128 + static_cast<int>(std::floor(std::log2(d_std)));  // 2^(e - 128) is MXFP4's scale
  for (size_t o = 0; o < v.size(); o += block_bytes) {
    for (int off : scales) {
      const uint16_t d = f32_to_f16(nd(rng));
      std::memcpy(&v[o + off], &d, 2);
    }
    if (t == DType::MXFP4) v[o] = static_cast<uint8_t>(e0 + static_cast<int>(rng() % 4));
  }
  return v;
}

std::string temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("kvlm_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

void write_file(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<float> read_f32(const std::string& path) {
  std::string b = read_file(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

RunResult run_kvlm(const std::vector<std::string>& args) {
  static int counter = 0;
  std::string out = temp_path("run_out_" + std::to_string(counter)), err = temp_path("run_err_" + std::to_string(counter));
  ++counter;
  std::string cmd = std::string("'") + KVLM_BIN + "'";
  for (const std::string& a : args) {
    std::string q;
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " '" + q + "'";
  }
  cmd += " >'" + out + "' 2>'" + err + "' </dev/null";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<int> generated(const Engine& e, int id) {
  const Sequence& s = e.seq(id);
  return std::vector<int>(s.tokens.begin() + s.prompt_len, s.tokens.end());
}

void drain(Engine& e) {
  for (int guard = 0; e.has_work() && guard < 100000; ++guard) e.step();
  ASSERT_FALSE(e.has_work());
}

std::vector<float> all_logits(const Model& m, const std::vector<int>& ids) {
  const int n = static_cast<int>(ids.size());
  ContiguousKvCache kv(m.cfg, n);
  std::vector<float> logits;
  forward(m, kv, ids.data(), n, LogitsFor::All, logits);
  return logits;
}

}  // namespace kvlm::test
