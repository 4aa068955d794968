// ConnectionPool: cpp-httplib's task queue for kvlm serve, with the queue bounded.
//
// httplib hands every accepted connection to a task queue; its own ThreadPool queues without
// limit, so a flood would pile up sockets and memory. Here a connection that finds the workers
// busy and `max_waiting` connections already waiting goes to a small overflow pool instead, whose
// threads are marked (overflow_thread()) so the server answers 503 with Retry-After at once
// without reading the body. When the overflow pool is full too, accepting pauses (the kernel's
// listen backlog holds the rest): TCP backpressure, never an unbounded queue.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace kvlm::server {

class ConnectionPool : public httplib::TaskQueue {
 public:
  ConnectionPool(int workers, int max_waiting, int overflow_workers = 2, int max_overflow_waiting = 64);
  ~ConnectionPool() override;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;
  // Lets a paused accept loop go on (server stop); queues then take connections without limit.
  void release_backpressure();

  // True on an overflow thread: the request is to be answered 503 at once.
  static bool overflow_thread();

 private:
  struct Lane {
    std::deque<std::function<void()>> jobs;
    std::vector<std::thread> threads;
    int idle = 0;
    size_t max_waiting = 0;
  };
  void work(Lane& lane, bool overflow);

  std::mutex mu_;
  std::condition_variable work_cv_, space_cv_;
  Lane main_, overflow_;
  bool shutdown_ = false, unbounded_ = false;
};

// What httplib owns and deletes after listen(): forwards to a pool the server owns, so that
// stop() can release the accept loop without racing that deletion.
class PoolHandle : public httplib::TaskQueue {
 public:
  explicit PoolHandle(std::shared_ptr<ConnectionPool> p) : p_(std::move(p)) {}
  void enqueue(std::function<void()> fn) override { p_->enqueue(std::move(fn)); }
  void shutdown() override { p_->shutdown(); }

 private:
  std::shared_ptr<ConnectionPool> p_;
};

}  // namespace kvlm::server
