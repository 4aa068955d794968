// ThreadPool::parallel_for_stealing: every item runs once whatever the thread count, cuts and
// piece size; a thread done with its own slice takes the last items of a slower one, and each
// thread's items stay runs of neighbours; exceptions reach the caller; bad cuts are refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

using namespace kvlm;

TEST(ThreadPoolStealing, EveryItemRunsOnceWhateverTheThreadsCutsAndPieces) {
  for (int threads : {1, 2, 3, 4})
    for (size_t n : {1u, 2u, 7u, 64u, 1000u})
      for (size_t grain : {1u, 3u, 64u})
        for (int cut_kind = 0; cut_kind < 3; ++cut_kind) {
          ThreadPool pool(threads);
          std::vector<size_t> cuts;  // 0: the pool's own slices; 1: all on the last thread; 2: all on the first
          if (cut_kind > 0) {
            cuts.assign(threads + 1, cut_kind == 1 ? 0 : n);
            cuts[0] = 0, cuts[threads] = n;
          }
          std::vector<std::atomic<int>> runs(n);
          pool.parallel_for_stealing(n, grain, [&](size_t b, size_t e) {
            ASSERT_LT(b, e);
            ASSERT_LE(e, n);
            if (threads > 1) {
              ASSERT_LE(e - b, grain);
            }
            for (size_t i = b; i < e; ++i) runs[i]++;
          }, cuts);
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(runs[i].load(), 1) << threads << " threads, n " << n << ", grain " << grain << ", cuts " << cut_kind << ", item " << i;
        }
}

TEST(ThreadPoolStealing, AThreadDoneEarlyTakesTheLastItemsOfASlowOne) {
  ThreadPool pool(2);
  const size_t n = 64;
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mu;
  std::vector<size_t> by_caller, by_worker;
  std::atomic<bool> stolen{false};
  pool.parallel_for_stealing(n, 1, [&](size_t b, size_t e) {
    const bool on_caller = std::this_thread::get_id() == caller;
    for (size_t i = b; i < e; ++i) {
      if (on_caller && i == 0) {  // the caller is held up on its first item until the worker steals (at most 10 s)
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!stolen.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!on_caller && i < n / 2) stolen = true;
      std::lock_guard<std::mutex> lock(mu);
      (on_caller ? by_caller : by_worker).push_back(i);
    }
  }, {0, n / 2, n});
  ASSERT_TRUE(stolen.load()) << "the worker finished its half and took none of the caller's";
  ASSERT_EQ(by_caller.size() + by_worker.size(), n);
  // The caller ran its first items in order; the worker its own half in order, then the caller's
  // last items from the back: [0, k) and [k, 32) + [32, 64), each a run of neighbours.
  for (size_t x = 0; x < by_caller.size(); ++x) EXPECT_EQ(by_caller[x], x);
  const size_t k = by_caller.size();
  ASSERT_LT(k, n / 2);
  for (size_t x = 0; x < n / 2; ++x) EXPECT_EQ(by_worker[x], n / 2 + x);
  for (size_t x = n / 2; x < by_worker.size(); ++x) EXPECT_EQ(by_worker[x], n / 2 - 1 - (x - n / 2));
  EXPECT_EQ(by_worker.back(), k);
}

TEST(ThreadPoolStealing, AnItemsExceptionReachesTheCallerAndThePoolGoesOn) {
  ThreadPool pool(3);
  for (size_t bad : {0u, 40u, 99u}) {
    try {
      pool.parallel_for_stealing(100, 4, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i)
          if (i == bad) fail("item ", i, " failed");
      });
      ADD_FAILURE() << "no exception";
    } catch (const KvlmError& err) {
      EXPECT_NE(std::string(err.what()).find("item " + std::to_string(bad)), std::string::npos) << err.what();
    }
    std::atomic<int> sum{0};
    pool.parallel_for_stealing(100, 4, [&](size_t b, size_t e) { sum += static_cast<int>(e - b); });
    EXPECT_EQ(sum.load(), 100);
  }
}

TEST(ThreadPoolStealing, CutsThatDoNotSplitTheItemsAreRefused) {
  ThreadPool pool(2);
  auto noop = [](size_t, size_t) {};
  EXPECT_THROW(pool.parallel_for_stealing(10, 1, noop, {0, 10}), InternalError);         // one bound short
  EXPECT_THROW(pool.parallel_for_stealing(10, 1, noop, {0, 6, 5}), InternalError);       // ends short of n
  EXPECT_THROW(pool.parallel_for_stealing(10, 1, noop, {0, 7, 3, 10}), InternalError);   // one too many
  EXPECT_THROW(pool.parallel_for_stealing(10, 1, noop, {1, 5, 10}), InternalError);      // starts past 0
  EXPECT_THROW(pool.parallel_for_stealing(10, 1, noop, {0, 11, 10}), InternalError);     // descending
}
