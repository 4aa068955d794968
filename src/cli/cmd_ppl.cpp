// kvlm ppl: perplexity of a text file over non-overlapping windows.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/error.h"
#include "engine/perplexity.h"

namespace kvlm::cli {

namespace {
struct PplArgs {
  std::string weights;  // "" = as stored in the file
  std::string model, tokenizer, text;
  int ctx = 0;
  long max_tokens = 0;
  bool json = false;
};

int run_ppl(const PplArgs& a) {
  auto model = load_model(a.model, a.weights);
  auto tok = load_tokenizer_for(a.model, a.tokenizer, *model);
  std::vector<int> ids = tok->encode_prompt(read_file(a.text));
  if (a.max_tokens > 0 && static_cast<long>(ids.size()) > a.max_tokens) ids.resize(a.max_tokens);
  int window = a.ctx > 0 ? a.ctx : model->cfg.max_seq_len;
  PerplexityResult r = perplexity(*model, ids, window);
  if (a.json) {
    nlohmann::json j{{"perplexity", r.perplexity}, {"mean_nll", r.mean_nll}, {"total_nll", r.total_nll},
                     {"scored_tokens", r.scored_tokens}, {"windows", r.window_nll.size()}, {"ctx", window},
                     {"tokens", ids.size()}};
    std::puts(j.dump().c_str());
  } else {
    std::printf("perplexity %.6f  (mean NLL %.8f nats, %ld tokens scored, %zu windows of %d)\n", r.perplexity,
                r.mean_nll, r.scored_tokens, r.window_nll.size(), window);
  }
  return 0;
}
}  // namespace

Runner add_ppl(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  CLI::App* sub = app.add_subcommand("ppl", "perplexity over non-overlapping windows");
  sub->add_option("--model", a->model, "llama2.c .bin or Hugging Face folder")->required();
  sub->add_option("--weights", a->weights, "run the matrices as f32, bf16, q8_0 or q4_0 (default: as stored)");
  sub->add_option("--tokenizer", a->tokenizer, "tokenizer file (default: found beside the model)");
  sub->add_option("--text", a->text, "text file")->required();
  sub->add_option("--ctx", a->ctx, "window length (default: the model's context)")->check(CLI::Range(2, 1 << 24));
  sub->add_option("--max-tokens", a->max_tokens, "score only the first N tokens (BOS included)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--json", a->json, "print one JSON object");
  return [a] { return run_ppl(*a); };
}

}  // namespace kvlm::cli
