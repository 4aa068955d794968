// Execution contexts (kernels/context.h): two run forward passes at the same time in one process
// and each gives exactly what it gives alone; a context's ISA cap reaches its pool's workers;
// activation scratch is kept between calls; pools fail cleanly and are made safely from threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/forward.h"
#include "kernels/context.h"
#include "kernels/dot.h"
#include "kv/kv_cache.h"
#include "model/synthetic.h"

using namespace kvlm;

namespace {

// A small Llama with Q8_0 matrices: the quantized path uses the context's activation buffer.
std::unique_ptr<Model> small_model() {
  ModelConfig c = llama_shape(2, 128, 256, 4, 2, 32, 256, 256);
  auto m = synthetic_model(c, 7);
  m->convert_weights(DType::Q8_0);
  return m;
}

// Prefill of 96 tokens then 16 decode steps; every logit row of the decode.
std::vector<float> run(Context& ctx, const Model& m) {
  ContiguousKvCache kv(m.cfg, 128);
  std::vector<int> ids(96);
  for (int i = 0; i < 96; ++i) ids[i] = (i * 37 + 11) % m.cfg.vocab_size;
  std::vector<float> logits, all;
  forward(ctx, m, kv, ids.data(), 96, LogitsFor::Last, logits);
  all = logits;
  for (int s = 0; s < 16; ++s) {
    int tok = (s * 13 + 5) % m.cfg.vocab_size;
    forward(ctx, m, kv, &tok, 1, LogitsFor::Last, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace

TEST(Context, TwoContextsComputeAtOnceAndEachMatchesItsRunAlone) {
  auto m = small_model();
  Context a(2), b(2, Isa::Scalar);
  const std::vector<float> alone_a = run(a, *m), alone_b = run(b, *m);
  for (int round = 0; round < 3; ++round) {
    std::vector<float> got_a, got_b;
    std::atomic<int> ready{0};
    std::thread ta([&] {
      ++ready;
      while (ready < 2) std::this_thread::yield();
      got_a = run(a, *m);
    });
    std::thread tb([&] {
      ++ready;
      while (ready < 2) std::this_thread::yield();
      got_b = run(b, *m);
    });
    ta.join();
    tb.join();
    ASSERT_EQ(got_a, alone_a) << "round " << round;  // bit for bit
    ASSERT_EQ(got_b, alone_b) << "round " << round;
  }
  // The scalar context ran the scalar twins: close to, and computed apart from, the SIMD one.
  ASSERT_EQ(alone_a.size(), alone_b.size());
  for (size_t i = 0; i < alone_a.size(); ++i) ASSERT_NEAR(alone_a[i], alone_b[i], 2e-3f) << i;
}

TEST(Context, IsaCapReachesThePoolWorkers) {
  Context scalar(4, Isa::Scalar);
  EXPECT_EQ(scalar.isa(), Isa::Scalar);
  std::mutex mu;
  std::set<std::string> seen;
  {
    IsaScope on(scalar.isa_cap());
    scalar.pool().parallel_for(64, [&](size_t, size_t) {
      std::lock_guard<std::mutex> lock(mu);
      seen.insert(kernel_isa());
    });
  }
  EXPECT_EQ(seen, std::set<std::string>{"scalar"});
  EXPECT_EQ(Context(1).isa(), active_isa());  // no cap: what the CPU and KVLM_ISA allow
}

TEST(Context, ActivationScratchIsKeptBetweenCalls) {
  auto m = small_model();
  Context ctx(1);
  run(ctx, *m);
  const size_t after_first = ctx.scratch_bytes();
  EXPECT_GT(after_first, 0u);
  run(ctx, *m);  // the same batch shapes again: nothing new is allocated
  EXPECT_EQ(ctx.scratch_bytes(), after_first);
}

TEST(Context, PoolsFailCleanlyAndAreMadeSafelyFromThreads) {
  EXPECT_THROW(Context(ThreadPool::kMaxThreads + 1), KvlmError);
  std::vector<std::thread> ts;
  std::vector<ThreadPool*> got(8);
  for (int i = 0; i < 8; ++i) ts.emplace_back([&, i] { got[i] = &Context::this_thread().pool(); });
  for (auto& t : ts) t.join();
  for (ThreadPool* p : got) EXPECT_EQ(p, got[0]);  // one process pool, made once
}

TEST(Context, PoolCarriesAWorkersExceptionToTheCaller) {
  ThreadPool pool(4);
  for (size_t bad : {0u, 63u}) {  // the caller's slice, then a worker's
    std::atomic<int> done{0};
    try {
      pool.parallel_for(64, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i)
          if (i == bad) fail("item ", i, " failed");
        done += static_cast<int>(e - b);
      });
      ADD_FAILURE() << "no exception";
    } catch (const KvlmError& err) {
      EXPECT_NE(std::string(err.what()).find("item " + std::to_string(bad)), std::string::npos) << err.what();
    }
    EXPECT_EQ(done.load(), 64 - 16);  // every other slice ran to its end before the throw
    std::atomic<int> sum{0};
    pool.parallel_for(64, [&](size_t b, size_t e) { sum += static_cast<int>(e - b); });
    EXPECT_EQ(sum.load(), 64);  // and the pool works after it
  }
}
