// Snapshots (kv/kv_snapshot.h): a sequence saved when it finishes and restored into a fresh
// engine generates exactly what an uninterrupted run generates (f32, int8 and int4 pages, with and
// without the f32 ring); a prompt restores its longest common prefix; and a damaged, truncated,
// another model's, another codec's or another tenant's snapshot is refused with its reason and
// the prompt is computed instead, with the right output.
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/engine.h"
#include "kv/kv_snapshot.h"
#include "test_support.h"

namespace kvlm {
namespace {

namespace fs = std::filesystem;

std::vector<int> prompt_ids(int n) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 31 + 7) % 250 + 3);
  return t;
}

EngineOptions options(DType dtype, int residual) {
  EngineOptions o;
  o.block_size = 4;
  o.num_blocks = 64;
  o.kv_dtype = dtype;
  o.kv_residual = residual;
  return o;
}

// Runs one sequence to its end; returns it (tokens, reused count, snapshot error).
Sequence run(const Model& m, const EngineOptions& eo, SeqParams p) {
  Engine e(m, eo);
  const int id = e.add(std::move(p));
  test::drain(e);
  const Sequence& s = e.seq(id);
  Sequence out;
  out.tokens = s.tokens;
  out.prompt_len = s.prompt_len;
  out.state = s.state;
  out.error = s.error;
  out.reused_tokens = s.reused_tokens;
  out.snapshot_error = s.snapshot_error;
  out.last_logits = s.last_logits;
  return out;
}

SeqParams params(std::vector<int> prompt, int n, std::string load = "", std::string save = "", std::string salt = "") {
  SeqParams p;
  p.prompt = std::move(prompt);
  p.max_new_tokens = n;
  p.stop_at_eos = false;
  p.salt = std::move(salt);
  p.kv_load = std::move(load);
  p.kv_save = std::move(save);
  return p;
}

// Also for a latent-attention model, whose pages hold one row per position (no V side).
TEST(KvSnapshot, RestoreThenGenerateEqualsAnUninterruptedRun) {
  for (const char* fixture : {"llama_tiny", "deepseek3_tiny"}) {
    auto m = load_model(test::fixtures_dir() + "/" + fixture);
    const std::vector<int> p = prompt_ids(13);
    for (DType dtype : {DType::F32, DType::F16, DType::Int8, DType::Int4})
      for (int residual : {0, 8}) {
        SCOPED_TRACE(std::string(fixture) + " " + dtype_name(dtype) + " residual " + std::to_string(residual));
        const std::string file =
            test::temp_path(std::string("snap_") + fixture + dtype_name(dtype) + std::to_string(residual));
        const EngineOptions eo = options(dtype, residual);
        const Sequence first = run(*m, eo, params(p, 20, "", file));
        ASSERT_EQ(first.snapshot_error, "");
        const std::vector<int> saved = kv_snapshot_tokens(file);
        EXPECT_EQ(saved, first.tokens);
        const Sequence cont = run(*m, eo, params(saved, 20, file));
        ASSERT_EQ(cont.snapshot_error, "");
        EXPECT_EQ(cont.reused_tokens, static_cast<int>(saved.size()) - 1) << "every position with KV restored";
        const Sequence whole = run(*m, eo, params(p, 40));
        EXPECT_EQ(cont.tokens, whole.tokens);  // the 33 tokens of `saved` and the 20 after them
        EXPECT_EQ(test::max_abs_diff(cont.last_logits, whole.last_logits), 0.0f) << "the same arithmetic, bit for bit";
      }
  }
}

TEST(KvSnapshot, APromptRestoresItsLongestCommonPrefix) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  const std::string file = test::temp_path("snap_prefix");
  const EngineOptions eo = options(DType::F32, 0);
  run(*m, eo, params(prompt_ids(13), 5, "", file));
  std::vector<int> p = prompt_ids(13);
  p.push_back(250);  // diverges from what was generated after the prompt
  p.push_back(251);
  const Sequence got = run(*m, eo, params(p, 6, file));
  EXPECT_EQ(got.snapshot_error, "");
  EXPECT_EQ(got.reused_tokens, 13);
  EXPECT_EQ(got.tokens, run(*m, eo, params(p, 6)).tokens);
}

// A bad snapshot is refused for its reason; with a prompt, the run computes it instead.
void expect_refused(const std::string& name, const std::string& reason,
                    const std::function<void(const std::string&)>& damage, DType save_dtype = DType::F32,
                    const std::string& load_salt = "", bool other_model = false) {
  SCOPED_TRACE(name);
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  const std::string file = test::temp_path("snap_bad_" + name);
  const std::vector<int> p = prompt_ids(13);
  run(*m, options(save_dtype, 0), params(p, 5, "", file));
  damage(file);
  if (other_model) {
    auto f = m->fingerprint();
    f[3] ^= 1;
    m->set_fingerprint(f);
  }
  const EngineOptions eo = options(DType::F32, 0);
  const Sequence got = run(*m, eo, params(p, 8, file, "", load_salt));
  EXPECT_NE(got.snapshot_error.find(reason), std::string::npos) << got.snapshot_error;
  EXPECT_EQ(got.reused_tokens, 0);
  EXPECT_EQ(got.state, SeqState::Finished);
  EXPECT_EQ(got.tokens, run(*m, eo, params(p, 8, "", "", load_salt)).tokens);
}

TEST(KvSnapshot, FlippedByteIsRefused) {
  expect_refused("flipped", "checksum", [](const std::string& f) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(fs::file_size(f)) - 3);
    io.put('\x7f');
  });
  EXPECT_THROW(kv_snapshot_tokens(test::temp_path("snap_bad_flipped")), KvlmError);  // nothing to continue from
}

TEST(KvSnapshot, TruncatedFileIsRefused) {
  expect_refused("truncated", "truncated", [](const std::string& f) { fs::resize_file(f, fs::file_size(f) - 100); });
}

TEST(KvSnapshot, AnotherModelsSnapshotIsRefused) {
  expect_refused(
      "model", "another model", [](const std::string&) {}, DType::F32, "", true);
}

TEST(KvSnapshot, AnotherCodecsSnapshotIsRefused) {
  expect_refused(
      "codec", "another KV codec", [](const std::string&) {}, DType::Int8);
}

TEST(KvSnapshot, AnotherTenantsSnapshotIsRefused) {
  expect_refused(
      "tenant", "another tenant", [](const std::string&) {}, DType::F32, "someone else");
}

// The CLI: --kv-save, then --kv-load without a prompt continues exactly.
TEST(KvSnapshot, GenerateSavesAndContinues) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "kvlm generate --kv-save / --kv-load on stories260K");
  const std::string dir = test::shared_path("models/stories260K");
  const std::string file = test::temp_path("snap_cli");
  std::vector<std::string> base = {
      "generate",   "--model", dir + "/stories260K.bin", "--tokenizer", dir + "/tok512.bin", "--ignore-eos", "--json",
      "--kv-dtype", "int8",    "--kv-residual",          "16"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    auto r = test::run_kvlm(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out.empty() ? "{}" : r.out);
  };
  auto first = with({"--prompt", "Once upon a time", "--max-new-tokens", "40", "--kv-save", file});
  auto cont = with({"--kv-load", file, "--max-new-tokens", "30"});
  auto whole = with({"--prompt", "Once upon a time", "--max-new-tokens", "70"});
  ASSERT_EQ(whole["generated_ids"].size(), 70u);
  std::vector<int> tail(whole["generated_ids"].begin() + 40, whole["generated_ids"].end());
  EXPECT_EQ(cont["generated_ids"].get<std::vector<int>>(), tail);
  EXPECT_EQ(cont["kv_snapshot"]["restored_tokens"], first["prompt_ids"].size() + 39);
}

}  // namespace
}  // namespace kvlm
