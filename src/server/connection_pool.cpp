#include "server/connection_pool.h"

#include <algorithm>

#include "core/error.h"

namespace kvlm::server {

namespace {
thread_local bool t_overflow = false;
}

bool ConnectionPool::overflow_thread() { return t_overflow; }

ConnectionPool::ConnectionPool(int workers, int max_waiting, int overflow_workers, int max_overflow_waiting) {
  main_.max_waiting = static_cast<size_t>(std::max(0, max_waiting));
  overflow_.max_waiting = static_cast<size_t>(std::max(0, max_overflow_waiting));
  try {
    for (int i = 0; i < workers; ++i) main_.threads.emplace_back([this] { work(main_, false); });
    for (int i = 0; i < overflow_workers; ++i) overflow_.threads.emplace_back([this] { work(overflow_, true); });
  } catch (const std::system_error& e) {
    shutdown();  // joins the threads that did start
    fail("could not start ", workers + overflow_workers, " HTTP threads: ", e.what());
  }
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // A worker is free, or the wait is short enough: the connection is served normally.
    if (unbounded_ || main_.idle > static_cast<int>(main_.jobs.size()) || main_.jobs.size() < main_.max_waiting) {
      main_.jobs.push_back(std::move(fn));
      break;
    }
    if (overflow_.jobs.size() < overflow_.max_waiting) {  // refused quickly with a 503
      overflow_.jobs.push_back(std::move(fn));
      break;
    }
    space_cv_.wait(lock);  // both full: stop accepting until a connection leaves a queue
  }
  lock.unlock();
  work_cv_.notify_all();
}

void ConnectionPool::release_backpressure() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    unbounded_ = true;
  }
  space_cv_.notify_all();
}

void ConnectionPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = unbounded_ = true;
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  for (Lane* lane : {&main_, &overflow_})
    for (std::thread& t : lane->threads)
      if (t.joinable()) t.join();
}

void ConnectionPool::work(Lane& lane, bool overflow) {
  t_overflow = overflow;
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++lane.idle;
      work_cv_.wait(lock, [&] { return !lane.jobs.empty() || shutdown_; });
      --lane.idle;
      if (lane.jobs.empty()) return;  // shut down, and every queued connection was served
      fn = std::move(lane.jobs.front());
      lane.jobs.pop_front();
    }
    space_cv_.notify_one();
    fn();  // serves the connection until it closes, then closes the socket
  }
}

}  // namespace kvlm::server
