// A fixed pool of worker threads running one parallel_for at a time.
// Work is split into contiguous, near-equal ranges: kernels partition output rows, so each
// thread streams its own slice of the weights (what decode speed depends on); with
// parallel_for_stealing a thread done early then takes pieces from the end of another's. Decode issues
// dozens of small parallel_for calls per token, so idle workers spin briefly before sleeping:
// waking a sleeping thread costs tens of microseconds.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cpu.h"

namespace kvlm {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  static constexpr int kMaxThreads = 1024;
  int size() const { return n_threads_; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n); the caller thread takes part. If a
  // slice throws, the first exception is rethrown on the caller after every slice has ended.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn);
  // The same, for work a slowed thread would hold up: thread i starts on [cuts[i], cuts[i + 1])
  // (near-equal slices where cuts is empty; else size() + 1 ascending bounds from 0 to n) and calls
  // fn on at most `grain` items at a time from its front; a thread done with its own slice takes
  // pieces from the back of the slice with the most left. Each thread still reads runs of
  // neighbouring items (a shared counter interleaved them, and the prefetchers lost the runs).
  // On this project's VMs one of two threads often ran a fifth to a third slower for seconds.
  void parallel_for_stealing(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn,
                             const std::vector<size_t>& cuts = {});

  // The pool kernels use: this thread's scoped pool if one is set (below), else the process-wide
  // pool, sized by set_global_threads (default: physical cores). Creating it is thread-safe;
  // set_global_threads must not run while another thread computes.
  static ThreadPool& global();
  static void set_global_threads(int n);
  // Physical cores, or KVLM_THREADS when set.
  static int default_threads();

  // Makes `pool` what global() returns on this thread for the scope's life. The Python package
  // gives each LLM object its own pool this way, so two can compute at once in one process.
  class Scope {
   public:
    explicit Scope(ThreadPool* pool);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ThreadPool* prev_;
  };

 private:
  void worker(int index);
  // Runs the current job's slice `index` (stealing jobs: its pieces, then others' from their
  // backs); the first exception lands in job_error_.
  void run_share(int index);
  bool claim(int slot, bool front, size_t& b, size_t& e);
  void launch(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain, const std::vector<size_t>& cuts);
  void shutdown();  // stops and joins every started worker; safe to call twice

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::mutex caller_mu_;  // one parallel_for at a time when several threads share the pool
  std::condition_variable wake_cv_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0;
  Isa job_isa_ = kTopIsa;  // the submitting thread's ISA cap, applied by the workers
  std::exception_ptr job_error_;  // the first exception a worker's slice threw
  size_t job_grain_ = 0;          // 0: one fixed slice per thread; else a stealing job's piece size
  // A stealing job's unclaimed items per thread, [front, back) packed as back << 32 | front; one
  // cache line each, as the owner and the thieves write them.
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
  };
  std::unique_ptr<Share[]> shares_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvlm
