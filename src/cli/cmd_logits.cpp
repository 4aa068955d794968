// kvlm logits: raw little-endian f32 logits [n_ids][vocab] for a list of token ids.
#include <cstdio>
#include <fstream>

#include "cli/common.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"

namespace kvlm::cli {

namespace {
struct LogitsArgs : ModelArgs {
  std::string ids, out;
  bool stepwise = false;
};

int run_logits(const LogitsArgs& a) {
  auto model = load_model(a.model, a.weights);
  std::vector<int> ids = parse_ids(a.ids);
  ContiguousKvCache cache(model->cfg, std::min<int>(model->cfg.max_seq_len, std::max<size_t>(ids.size(), 1)));
  std::vector<float> all, row;
  if (a.stepwise) {  // decode path: one token per forward through the cache
    for (int id : ids) {
      forward(*model, cache, &id, 1, LogitsFor::Last, row);
      all.insert(all.end(), row.begin(), row.end());
    }
  } else {  // prefill path: all ids in one forward
    forward(*model, cache, ids.data(), static_cast<int>(ids.size()), LogitsFor::All, all);
  }
  std::ofstream f(a.out, std::ios::binary);
  if (!f) fail(a.out, ": cannot write");
  f.write(reinterpret_cast<const char*>(all.data()), static_cast<std::streamsize>(all.size() * sizeof(float)));
  if (!f) fail(a.out, ": write failed");
  std::fprintf(stderr, "[kvlm] wrote %zu x %d logits to %s\n", ids.size(), model->cfg.vocab_size, a.out.c_str());
  return 0;
}
}  // namespace

Runner add_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* sub = app.add_subcommand("logits", "write raw f32 logits for token ids");
  add_model_options(sub, *a, kModelRequired);
  sub->add_option("--ids", a->ids, "comma-separated token ids")->required();
  sub->add_option("--out", a->out, "output file")->required();
  sub->add_flag("--stepwise", a->stepwise, "feed one token per forward (decode path) instead of one prefill");
  return [a] { return run_logits(*a); };
}

}  // namespace kvlm::cli
