#include "test_support.h"

#include "engine/engine.h"

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

}  // namespace kvlm::test
