// The model fingerprint keys shared KV (tiers, snapshots, a Redis tier shared by replicas) by
// content: two copies of a model under other names and times agree, a changed weight does not.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/model.h"
#include "test_support.h"

namespace kvlm {
namespace {

namespace fs = std::filesystem;

std::string copy_of(const std::string& from, const std::string& name) {
  const std::string to = test::temp_path(name);
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

TEST(ModelFingerprint, CopiesAgreeAndAChangedWeightDoesNot) {
  for (const char* source : {"llama_tiny/model-F32.gguf", "llama_tiny"}) {
    SCOPED_TRACE(source);
    const std::string original = test::fixtures_dir() + "/" + source;
    const std::string a = copy_of(original, "fp_copy_a"), b = copy_of(original, "fp_other_name_b");
    // Another name, another time: a replica's own copy.
    fs::last_write_time(b, fs::last_write_time(a) - std::chrono::hours(24 * 30));
    const auto fa = load_model(a)->fingerprint(), fb = load_model(b)->fingerprint();
    EXPECT_EQ(fa, fb);
    EXPECT_EQ(load_model(original)->fingerprint(), fa);
    // One byte near the end of the weights, changed in place (size and name kept).
    const std::string c = copy_of(original, "fp_changed");
    const std::string file = fs::is_directory(c) ? c + "/model.safetensors" : c;
    {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(-8, std::ios::end);
      char byte = 0;
      f.read(&byte, 1);
      byte ^= 0x10;
      f.seekp(-8, std::ios::end);
      f.write(&byte, 1);
    }
    EXPECT_NE(load_model(c)->fingerprint(), fa);
  }
}

TEST(ModelFingerprint, TheRunTypeOfTheMatricesCounts) {
  const std::string path = test::fixtures_dir() + "/llama_tiny/model-F32.gguf";
  EXPECT_NE(load_model(path)->fingerprint(), load_model(path, "q8_0")->fingerprint());
  EXPECT_EQ(load_model(path, "q8_0")->fingerprint(), load_model(path, "q8_0")->fingerprint());
}

}  // namespace
}  // namespace kvlm
