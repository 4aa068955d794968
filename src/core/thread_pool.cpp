#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "core/cpu.h"
#include "core/error.h"

namespace kvlm {

namespace {
std::pair<size_t, size_t> slice(size_t n, int parts, int i) {
  size_t base = n / parts, extra = n % parts;
  size_t b = i * base + std::min<size_t>(i, extra);
  return {b, b + base + (static_cast<size_t>(i) < extra ? 1 : 0)};
}
std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex& global_mu() {
  static std::mutex mu;
  return mu;
}
thread_local ThreadPool* t_scoped = nullptr;
// A stealing job's unclaimed range [front, back) of one slice, as one word (ThreadPool::Share).
uint64_t pack_range(uint64_t front, uint64_t back) { return back << 32 | front; }
std::pair<uint64_t, uint64_t> unpack_range(uint64_t r) { return {r & 0xFFFFFFFFu, r >> 32}; }
constexpr int kSpinIterations = 20000;  // roughly 50-100 microseconds of pause instructions
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  if (n_threads_ > kMaxThreads) fail("thread count ", n_threads_, " is above the limit of ", kMaxThreads);
  shares_ = std::make_unique<Share[]>(n_threads_);
  try {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
  } catch (const std::exception& e) {
    // The destructor does not run for a half-built object: stop and join what started here.
    const size_t started = workers_.size();
    shutdown();
    fail("cannot start ", n_threads_ - 1, " worker threads (", started, " started, then: ", e.what(),
         "); use fewer threads or raise the process/thread limit");
  }
}

ThreadPool::~ThreadPool() { shutdown(); }

void ThreadPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && ++spins < kSpinIterations) cpu_relax();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_cv_.wait(lock, [&] { return generation_.load() != seen; });
    }
    if (stop_) return;
    seen = generation_.load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> lock(mu_);
      t_isa_cap = job_isa_;
    }
    run_share(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

bool ThreadPool::claim(int slot, bool front, size_t& b, size_t& e) {
  std::atomic<uint64_t>& range = shares_[slot].range;
  uint64_t r = range.load(std::memory_order_relaxed);
  for (;;) {
    const auto [f, back] = unpack_range(r);
    if (f >= back) return false;
    const uint64_t take = std::min<uint64_t>(job_grain_, back - f);
    const uint64_t next = front ? pack_range(f + take, back) : pack_range(f, back - take);
    if (range.compare_exchange_weak(r, next, std::memory_order_acq_rel, std::memory_order_relaxed)) {
      b = front ? f : back - take, e = front ? f + take : back;
      return true;
    }
  }
}

void ThreadPool::run_share(int index) {
  const std::function<void(size_t, size_t)>& fn = *job_;
  try {
    if (job_grain_ == 0) {
      auto [b, e] = slice(job_n_, n_threads_, index);
      if (b < e) fn(b, e);
      return;
    }
    size_t b, e;
    while (claim(index, true, b, e)) fn(b, e);
    for (;;) {  // then pieces from the back of the slice with the most left
      int victim = -1;
      uint64_t most = 0;
      for (int t = 0; t < n_threads_; ++t) {
        const auto [f, back] = unpack_range(shares_[t].range.load(std::memory_order_relaxed));
        if (back > f && back - f > most) most = back - f, victim = t;
      }
      if (victim < 0) return;
      if (claim(victim, false, b, e)) fn(b, e);
    }
  } catch (...) {  // carried to the caller, which rethrows it once every thread is done
    std::lock_guard<std::mutex> lock(mu_);
    if (!job_error_) job_error_ = std::current_exception();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn) { launch(n, fn, 0, {}); }

void ThreadPool::parallel_for_stealing(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn,
                                       const std::vector<size_t>& cuts) {
  if (!cuts.empty()) {
    KVLM_CHECK(cuts.size() == static_cast<size_t>(n_threads_) + 1 && cuts.front() == 0 && cuts.back() == n &&
                   std::is_sorted(cuts.begin(), cuts.end()),
               "parallel_for_stealing: the cuts must be one more than the threads, ascending from 0 to n");
  }
  // Ranges are packed in 32 bits each: a larger job is cut as parallel_for cuts it.
  launch(n, fn, n >> 32 ? 0 : std::max<size_t>(grain, 1), cuts);
}

void ThreadPool::launch(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain, const std::vector<size_t>& cuts) {
  if (n == 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> caller(caller_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_grain_ = grain;
    job_isa_ = t_isa_cap;
    for (int t = 0; grain > 0 && t < n_threads_; ++t) {
      const auto [b, e] = cuts.empty() ? slice(n, n_threads_, t) : std::pair{cuts[t], cuts[t + 1]};
      shares_[t].range.store(pack_range(b, e), std::memory_order_relaxed);
    }
    pending_.store(n_threads_ - 1, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_cv_.notify_all();
  // The caller's share may throw too (run_share keeps the first exception); either way every
  // worker must be done with `fn` (which the caller's frame owns) before this returns or unwinds.
  run_share(0);
  // Spin briefly, then yield: when threads outnumber free cores (two contexts computing at once
  // on two cores) a pure spin would keep the workers it waits for off the CPU.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins)
    if (spins < kSpinIterations)
      cpu_relax();
    else
      std::this_thread::yield();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = job_error_;
    job_error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

int ThreadPool::default_threads() {
  // KVLM_THREADS overrides the count (as OMP_NUM_THREADS does elsewhere): CI runs the aarch64
  // tests single-threaded under qemu-user, whose thread creation hangs in this sandbox.
  if (const char* env = std::getenv("KVLM_THREADS"); env && *env) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (*end || n < 1 || n > kMaxThreads) fail("KVLM_THREADS='", env, "' must be a thread count in 1..", kMaxThreads);
    return static_cast<int>(n);
  }
  // Physical cores: distinct (physical id, core id) pairs; SMT siblings share FMA units.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys = "0";
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string val = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "physical id") phys = val;
    if (key == "core id") cores.insert({phys, val});
  }
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  int n = cores.empty() ? hw : static_cast<int>(cores.size());
  return n < 1 ? 1 : n;
}

ThreadPool& ThreadPool::global() {
  if (t_scoped) return *t_scoped;
  std::lock_guard<std::mutex> lock(global_mu());
  auto& slot = global_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(default_threads());
  return *slot;
}

void ThreadPool::set_global_threads(int n) {
  auto pool = std::make_unique<ThreadPool>(n);
  std::lock_guard<std::mutex> lock(global_mu());
  global_slot() = std::move(pool);
}

ThreadPool::Scope::Scope(ThreadPool* pool) : prev_(t_scoped) { t_scoped = pool; }
ThreadPool::Scope::~Scope() { t_scoped = prev_; }

}  // namespace kvlm
