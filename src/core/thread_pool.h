// A fixed pool of worker threads running one parallel_for at a time.
// Work is split into contiguous, near-equal ranges: kernels partition output rows, so each
// thread streams its own slice of the weights (what decode speed depends on). Decode issues
// dozens of small parallel_for calls per token, so idle workers spin briefly before sleeping:
// waking a sleeping thread costs tens of microseconds.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
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
  void shutdown();  // stops and joins every started worker; safe to call twice

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::mutex caller_mu_;  // one parallel_for at a time when several threads share the pool
  std::condition_variable wake_cv_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0;
  Isa job_isa_ = Isa::Avx512;  // the submitting thread's ISA cap, applied by the workers
  std::exception_ptr job_error_;  // the first exception a worker's slice threw
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvlm
