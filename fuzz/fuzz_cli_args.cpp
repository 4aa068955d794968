// libFuzzer target: the CLI's own argument parsers (token id lists, KV capacities and sizes with units) and
// CLI11's parsing of every subcommand's flags, numeric ranges included. Nothing is run: a
// parsed command line only has to end in a value or a clear error.
#include <CLI/CLI.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/common.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w && words.size() < 32;) words.push_back(w);
  for (const std::string& w : words) {
    try {
      (void)kvlm::cli::parse_ids(w);
    } catch (const kvlm::KvlmError&) {
    }
    try {
      (void)kvlm::cli::parse_kv_capacity(w, 1 + size % 100000, 1 + static_cast<int>(size % 64));
    } catch (const kvlm::KvlmError&) {
    }
    try {
      (void)kvlm::cli::parse_bytes(w, "--size");
    } catch (const kvlm::KvlmError&) {
    }
  }
  CLI::App app{"fuzz"};
  app.require_subcommand(1);
  std::vector<kvlm::cli::Runner> keep;  // each runner owns the variables its options write to
  for (auto add : {kvlm::cli::add_generate, kvlm::cli::add_logits, kvlm::cli::add_ppl, kvlm::cli::add_bench,
                   kvlm::cli::add_kv_plan, kvlm::cli::add_batch, kvlm::cli::add_bench_serving, kvlm::cli::add_serve,
                   kvlm::cli::add_quantize})
    keep.push_back(add(app));
  std::vector<std::string> argv(words.rbegin(), words.rend());  // CLI11 takes them reversed
  try {
    app.parse(argv);
  } catch (const CLI::Error&) {
  }
  return 0;
}
