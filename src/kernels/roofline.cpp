#include "kernels/roofline.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace kvlm {

double measure_triad_gbps(int reps) {
  const size_t n = 32u << 20;  // 3 arrays x 128 MB
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  ThreadPool& pool = ThreadPool::global();
  // First touch by the same threads that run the triad.
  pool.parallel_for(n, [&](size_t s, size_t e) { std::fill(a.data() + s, a.data() + e, 0.0f); });
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(n, [&](size_t s, size_t e) {
      const float k = 3.0f;
      for (size_t i = s; i < e; ++i) a[i] = b[i] + k * c[i];
    });
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 12.0 * n / secs / 1e9);
  }
  volatile float sink = a[n / 2];
  (void)sink;
  return best;
}

double host_steal_seconds() {
  std::ifstream f("/proc/stat");
  std::string line, cpu;
  if (!std::getline(f, line)) return -1;
  // "cpu  user nice system idle iowait irq softirq steal ...", in clock ticks
  std::istringstream in(line);
  unsigned long long v[8] = {};
  in >> cpu;
  for (auto& x : v) in >> x;
  const long hz = sysconf(_SC_CLK_TCK);
  if (!in || cpu != "cpu" || hz <= 0) return -1;
  return static_cast<double>(v[7]) / hz;
}

}  // namespace kvlm
