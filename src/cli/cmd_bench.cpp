#include "cli/common.h"
namespace kvlm::cli {
Runner add_bench(CLI::App& app) {
  app.add_subcommand("bench", "KV cache on/off benchmark");
  return [] { return 0; };
}
}  // namespace kvlm::cli
