// kvlm: command-line entry point. Each subcommand lives in its own cmd_*.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/common.h"
#include "core/error.h"
#include "core/thread_pool.h"

int main(int argc, char** argv) {
  using namespace kvlm;
  CLI::App app{"kvlm: LLM inference built around the KV cache"};
  app.require_subcommand(1);  // --version alone is still answered (CLI11 handles it first)
  app.fallthrough();  // global options (--threads) may follow the subcommand
  app.set_version_flag("--version", std::string("kvlm ") + KVLM_VERSION);
  int threads = 0;
  app.add_option("--threads", threads, "worker threads (default: physical cores)")->check(CLI::Range(1, 1024));
  std::vector<std::pair<CLI::App*, cli::Runner>> cmds;
  for (auto add : {cli::add_generate, cli::add_logits, cli::add_ppl, cli::add_bench, cli::add_kv_plan, cli::add_batch,
                    cli::add_bench_serving, cli::add_serve, cli::add_quantize}) {
    size_t before = app.get_subcommands([](CLI::App*) { return true; }).size();
    cli::Runner run = add(app);
    cmds.push_back({app.get_subcommands([](CLI::App*) { return true; })[before], run});
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (threads > 0) ThreadPool::set_global_threads(threads);
    for (auto& [sub, run] : cmds)
      if (sub->parsed()) return run();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvlm: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
