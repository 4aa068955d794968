// Engine behaviour the server relies on: a bad sequence fails alone (before any step touches
// the others), prompts admitted together compute their shared prefix once, --max-seqs caps the
// running batch, and NaN logits fail one sequence only.
#include "engine/engine.h"
#include "engine/generator.h"
#include "model/model.h"
#include "test_support.h"

namespace kvlm {
namespace {

using test::drain;
using test::generated;

std::vector<int> alone(const Model& m, const std::vector<int>& prompt, int n) {
  GenerateOptions opt;
  opt.max_new_tokens = n;
  opt.stop_at_eos = false;
  return generate(m, prompt, opt).generated;
}

TEST(EngineServing, OutOfRangeIdsFailOnlyTheirSequence) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  Engine e(*m, {4, 64, true, 4096, 0});
  std::vector<int> good = {1, 5, 9, 12}, bad = {1, 5, 100000}, negative = {3, -2};
  int a = e.add({good, 6, {}, false, ""});
  int b = e.add({bad, 6, {}, false, ""});
  int c = e.add({negative, 6, {}, false, ""});
  int d = e.add({good, 6, {}, false, ""});
  EXPECT_EQ(e.seq(b).state, SeqState::Failed);  // refused at add(), before any step
  EXPECT_NE(e.seq(b).error.find("outside the vocabulary"), std::string::npos) << e.seq(b).error;
  EXPECT_EQ(e.seq(c).state, SeqState::Failed);
  drain(e);  // every later step succeeds
  EXPECT_EQ(generated(e, a), alone(*m, good, 6));
  EXPECT_EQ(generated(e, d), alone(*m, good, 6));
}

TEST(EngineServing, PromptsAdmittedTogetherShareTheirPrefix) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  std::vector<int> prefix;
  for (int i = 0; i < 39; ++i) prefix.push_back(1 + (i * 7) % 200);
  std::vector<std::vector<int>> prompts;
  for (int k = 0; k < 4; ++k) {
    prompts.push_back(prefix);
    prompts.back().push_back(200 + k);
  }
  for (bool cache : {true, false}) {
    Engine e(*m, {16, 64, cache, 4096, 0});
    std::vector<int> ids;
    for (auto& p : prompts) ids.push_back(e.add({p, 5, {}, false, ""}));
    drain(e);
    if (cache) {
      // 2 whole blocks of 16 are shared: the first prompt computes them, the other three reuse.
      EXPECT_EQ(e.stats().reused_tokens, 3 * 32);
      EXPECT_GE(e.stats().deferred_admissions, 1);
    } else {
      EXPECT_EQ(e.stats().reused_tokens, 0);
    }
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(generated(e, ids[i]), alone(*m, prompts[i], 5)) << i;
  }
}

TEST(EngineServing, MaxSeqsCapsTheRunningBatch) {
  auto m = load_model(test::fixtures_dir() + "/gpt2_tiny");
  EngineOptions o{16, 64, true, 4096, 0};
  o.max_seqs = 2;
  Engine e(*m, o);
  std::vector<int> ids;
  for (int k = 0; k < 5; ++k) ids.push_back(e.add({{1 + k, 2, 3}, 8, {}, false, ""}));
  int max_running = 0;
  while (e.has_work()) {
    e.step();
    int running = 0;
    for (int id : ids) running += e.seq(id).state == SeqState::Running;
    max_running = std::max(max_running, running);
  }
  EXPECT_EQ(max_running, 2);
  for (int id : ids) EXPECT_EQ(e.seq(id).state, SeqState::Finished);
}

}  // namespace
}  // namespace kvlm
