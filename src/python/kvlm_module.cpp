// kvlm._kvlm: the Python extension (nanobind). A thin layer over the engine: it converts
// arguments, releases the GIL around compute, and turns kvlm's errors into kvlm.KvlmError.
// The Pythonic surface (docstrings, dataclasses, iterators) is python/kvlm/__init__.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/bench_report.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/json.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/generator.h"
#include "kv/kv_cache.h"
#include "kv/kv_pages.h"
#include "model/synthetic.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/text_stream.h"

namespace nb = nanobind;
using nlohmann::json;

namespace kvlm::python {

namespace {

struct Sampling {
  int max_new_tokens = 128;
  float temperature = 0, top_p = 1;
  int top_k = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop;
};

void check_sampling(const Sampling& s, int vocab) {
  if (s.max_new_tokens < 0) fail("max_new_tokens must be >= 0, got ", s.max_new_tokens);
  if (!(s.temperature >= 0) || s.temperature > 100) fail("temperature must be in [0, 100], got ", s.temperature);
  if (!(s.top_p > 0) || s.top_p > 1) fail("top_p must be in (0, 1], got ", s.top_p);
  if (s.top_k < 0 || s.top_k > vocab) fail("top_k must be in [0, ", vocab, "], got ", s.top_k);
  for (const std::string& x : s.stop)
    if (x.empty()) fail("a stop string is empty");
}

json result_json(const std::vector<int>& ids, const std::string& text, const char* finish, double ttft_ms,
                 double tpot_ms, size_t prompt_tokens, size_t kv_bytes) {
  return {{"text", text},         {"ids", ids},         {"finish_reason", finish},
          {"ttft_ms", ttft_ms},   {"tpot_ms", tpot_ms}, {"prompt_tokens", prompt_tokens},
          {"kv_cache_bytes", kv_bytes}};
}

// The text of a generation, or nothing for a model without a tokenizer (ids only).
class TextOut {
 public:
  TextOut(const Tokenizer* tok, int prev, const std::vector<std::string>& stops) {
    if (tok) ts_ = std::make_unique<TextStream>(*tok, prev, stops);
    else if (!stops.empty()) fail("stop strings need a tokenizer, and this model has none");
  }
  std::string push(int token) { return ts_ ? ts_->push(token) : ""; }
  std::string flush() { return ts_ ? ts_->flush() : ""; }
  bool stopped() const { return ts_ && ts_->stopped(); }

 private:
  std::unique_ptr<TextStream> ts_;
};

nb::object to_python(const json& j) {  // through Python's json: one well-tested conversion
  // Imported per call (a dict lookup in sys.modules): a static object would be released after
  // the interpreter has finalized.
  return nb::module_::import_("json").attr("loads")(j.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace

// One model, its tokenizer and chat template, and a thread pool of its own.
class LLM {
 public:
  LLM(const std::string& path, const std::string& tokenizer, const std::string& weights, const std::string& kv_dtype,
      int kv_residual, int kv_capacity, int threads, int context, const std::string& chat_template,
      const std::string& preset, uint64_t seed)
      : kv_residual_(kv_residual), kv_capacity_(kv_capacity) {
    cli::check_kv_dtype_name(kv_dtype);  // before the (slow) model load
    if (threads < 0 || threads > ThreadPool::kMaxThreads) fail("threads must be in [0, ", ThreadPool::kMaxThreads, "]");
    if (kv_residual < 0) fail("kv_residual must be >= 0");
    if (kv_capacity < 0) fail("kv_capacity must be >= 0 (tokens; 0 = as needed)");
    if (context < 0) fail("context must be >= 0");
    pool_ = std::make_unique<ThreadPool>(threads > 0 ? threads : ThreadPool::default_threads());
    ThreadPool::Scope scope(pool_.get());
    if (!preset.empty()) {  // a built-in shape with synthetic weights (the bench's models)
      preset_ = true;
      std::string name;
      model_ = cli::model_or_preset("", preset, weights, seed, name, /*quiet=*/true);
      if (!tokenizer.empty()) tok_ = cli::load_tokenizer_for("", tokenizer, *model_);
      else no_tokenizer_ = "a preset has none unless tokenizer= names one";
    } else {
      model_ = load_model(path, weights);
      // No tokenizer beside the model is fine for id-level work (logits); text calls then fail
      // with the reason. A tokenizer named explicitly must load.
      try {
        tok_ = cli::load_tokenizer_for(path, tokenizer, *model_);
      } catch (const KvlmError& e) {
        if (!tokenizer.empty()) throw;
        no_tokenizer_ = e.what();
      }
    }
    kv_dtype_ = cli::kv_dtype_for(kv_dtype, *model_);
    context_ = context > 0 ? std::min(context, model_->cfg.max_seq_len) : model_->cfg.max_seq_len;
    std::string src = !chat_template.empty()                     ? chat_template
                      : tok_ && !tok_->chat_template.empty() ? tok_->chat_template
                                                             : find_chat_template(path);
    if (!src.empty()) template_ = std::make_unique<ChatTemplate>(src);
  }

  std::vector<int> tokenize(const std::string& text, bool add_bos, bool specials) const {
    std::vector<int> ids = specials ? tok().encode_with_specials(text) : tok().encode(text);
    if (add_bos && tok().add_bos && tok().bos_id >= 0 && (ids.empty() || ids[0] != tok().bos_id))
      ids.insert(ids.begin(), tok().bos_id);
    return ids;
  }

  std::string detokenize(const std::vector<int>& ids) const {
    check_ids(ids, false);
    return tok().decode_all(ids);
  }

  std::string apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                  const std::string& extra_json) const {
    if (!template_) fail("this model has no chat template; pass chat_template= when loading it");
    json messages = parse_json_strict(messages_json, "messages");
    json extra = parse_json_strict(extra_json, "template variables");
    const Tokenizer& t = tok();
    std::string bos = t.bos_id >= 0 ? t.decode(-2, t.bos_id) : "", eos = t.eos_id >= 0 ? t.decode(-2, t.eos_id) : "";
    return template_->render(messages, add_generation_prompt, bos, eos, extra);
  }

  // Greedy or sampled generation of one prompt, to the end (stop strings cut it short).
  json generate(const std::vector<int>& prompt, const Sampling& s, bool use_cache) {
    ThreadPool::Scope scope(pool_.get());
    auto g = start(prompt, s, use_cache);
    TextOut text(tok_.get(), prompt.back(), s.stop);
    std::string out;
    int token;
    while (g->next(token)) {
      out += text.push(token);
      if (text.stopped()) break;
    }
    out += text.flush();
    return finish(*g, prompt, text, out);
  }

  // Generation checks the prompt (empty, ids outside the vocabulary, longer than the context).
  std::unique_ptr<Generation> start(const std::vector<int>& prompt, const Sampling& s, bool use_cache) {
    check_sampling(s, model_->cfg.vocab_size);
    GenerateOptions opt;
    opt.max_new_tokens = s.max_new_tokens;
    opt.sampling = {s.temperature, s.top_k, s.top_p, s.seed, vocab_limit()};
    opt.use_kv_cache = use_cache;
    opt.stop_at_eos = !s.ignore_eos;
    opt.context = context_;
    opt.kv_dtype = kv_dtype_;
    opt.kv_residual = kv_residual_;
    return std::make_unique<Generation>(*model_, prompt, opt);
  }

  json finish(const Generation& g, const std::vector<int>& prompt, const TextOut& text, const std::string& out) {
    const GenerateResult& r = g.result();
    const char* reason = text.stopped() ? "stop" : finish_reason_name(r.finish);
    std::lock_guard<std::mutex> lock(ledger_mu_);
    last_ledger_ = {{"layout", "contiguous"}, {"kv_dtype", dtype_name(kv_dtype_)}, {"bytes", r.kv_cache_bytes},
                    {"tokens", prompt.size() + r.generated.size()}};
    return result_json(r.generated, out, reason, r.ttft_ms, r.tpot_ms(), prompt.size(), r.kv_cache_bytes);
  }

  // Many prompts through the batched engine over one paged pool (prefix sharing included).
  std::vector<json> batch(const std::vector<std::vector<int>>& prompts, const Sampling& s, int max_seqs) {
    ThreadPool::Scope scope(pool_.get());
    if (prompts.empty()) return {};
    check_sampling(s, model_->cfg.vocab_size);
    if (max_seqs < 0) fail("max_seqs must be >= 0");
    int need = 0;
    for (const auto& p : prompts) {
      check_ids(p, true);
      if (static_cast<int>(p.size()) >= context_)
        fail("a prompt of ", p.size(), " tokens leaves no room to generate in the context of ", context_);
      need += std::min<int>(context_, static_cast<int>(p.size()) + s.max_new_tokens);
    }
    EngineOptions eo;
    eo.context = context_;
    eo.kv_dtype = kv_dtype_;
    eo.kv_residual = kv_residual_;
    eo.max_seqs = max_seqs;
    // The pool: kv_capacity tokens if given, else room for every prompt at once (sized by need),
    // at least one full sequence so any single prompt fits.
    const int tokens = kv_capacity_ > 0 ? kv_capacity_ : std::max(need, context_);
    eo.num_blocks = (tokens + eo.block_size - 1) / eo.block_size;
    Engine e(*model_, eo);
    std::vector<int> ids;
    std::vector<TextOut> texts;
    std::vector<std::string> out(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      SeqParams p{prompts[i], s.max_new_tokens, {s.temperature, s.top_k, s.top_p, s.seed + i, vocab_limit()},
                  !s.ignore_eos, ""};
      if (p.max_new_tokens == 0) p.max_new_tokens = 1;  // the engine always makes one token; cut below
      ids.push_back(e.add(p));
      texts.emplace_back(tok_.get(), prompts[i].back(), s.stop);
    }
    std::map<int, size_t> index;
    for (size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
    std::vector<double> first_ms(prompts.size(), -1), last_ms(prompts.size(), 0);
    std::vector<int> counts(prompts.size(), 0);
    const auto t0 = std::chrono::steady_clock::now();
    json peak_ledger;
    size_t peak = 0;
    while (e.has_work()) {
      auto events = e.step();
      const double now = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      KvLedger L = e.ledger();
      if (L.private_bytes + L.shared_bytes >= peak) {
        peak = L.private_bytes + L.shared_bytes;
        peak_ledger = L.to_json();
      }
      for (const StepEvent& ev : events) {
        const size_t i = index.at(ev.seq);
        if (ev.token < 0) fail(e.seq(ev.seq).error);
        if (s.max_new_tokens == 0 || texts[i].stopped()) continue;
        if (first_ms[i] < 0) first_ms[i] = now;
        last_ms[i] = now;
        ++counts[i];
        out[i] += texts[i].push(ev.token);
        if (texts[i].stopped()) e.cancel(ev.seq);
      }
    }
    {
      std::lock_guard<std::mutex> lock(ledger_mu_);
      last_ledger_ = peak_ledger;
      last_ledger_["layout"] = "paged";
    }
    std::vector<json> results;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Sequence& q = e.seq(ids[i]);
      std::vector<int> gen(q.tokens.begin() + q.prompt_len, q.tokens.end());
      if (s.max_new_tokens == 0) gen.clear();
      if (static_cast<int>(gen.size()) > counts[i] && texts[i].stopped()) gen.resize(counts[i]);
      out[i] += texts[i].flush();
      bool eos = !gen.empty() && !s.ignore_eos && (gen.back() == model_->cfg.eos_id || gen.back() == model_->cfg.bos_id);
      const char* reason = texts[i].stopped() || eos ? "stop" : "length";
      double tpot = counts[i] > 1 ? (last_ms[i] - first_ms[i]) / (counts[i] - 1) : 0;
      results.push_back(result_json(gen, out[i], reason, std::max(0.0, first_ms[i]), tpot, prompts[i].size(), 0));
      results.back()["cached_tokens"] = q.reused_tokens;
    }
    return results;
  }

  // Logits [n, vocab] for ids, one prefill from an empty cache (the CLI's `kvlm logits`).
  std::vector<float> logits(const std::vector<int>& ids) {
    ThreadPool::Scope scope(pool_.get());
    check_ids(ids, true);
    if (static_cast<int>(ids.size()) > context_) fail(ids.size(), " ids are more than the context of ", context_);
    ContiguousKvCache cache(model_->cfg, static_cast<int>(ids.size()));
    std::vector<float> all;
    forward(*model_, cache, ids.data(), static_cast<int>(ids.size()), LogitsFor::All, all);
    return all;
  }

  json info() const {
    const ModelConfig& c = model_->cfg;
    return {{"arch", c.arch}, {"layers", c.n_layers}, {"dim", c.dim}, {"heads", c.n_heads}, {"kv_heads", c.n_kv_heads},
            {"head_dim", c.head_dim}, {"vocab", c.vocab_size}, {"context", context_}, {"bos_id", c.bos_id},
            {"eos_id", c.eos_id}, {"weight_bytes", model_->weight_bytes()}, {"threads", pool_->size()},
            {"kv_dtype", dtype_name(kv_dtype_)}, {"kv_bytes_per_token", KvPages::block_bytes(c, 1, kv_dtype_)},
            {"has_chat_template", template_ != nullptr}, {"has_tokenizer", tok_ != nullptr},
            {"preset_prompt_ids", preset_ ? json(preset_prompt_ids(c)) : json(nullptr)}};
  }

  json last_ledger() const {  // a copy: another thread may be finishing a call on this object
    std::lock_guard<std::mutex> lock(ledger_mu_);
    return last_ledger_;
  }
  const Tokenizer* tokenizer() const { return tok_.get(); }
  // Sampling never picks ids the tokenizer cannot decode (models pad their vocabulary).
  int vocab_limit() const { return tok_ ? tok_->vocab_size() : model_->cfg.vocab_size; }
  const Tokenizer& tok() const {
    if (!tok_) fail("this model has no tokenizer (", no_tokenizer_, "); pass tokenizer=, or use token ids and logits()");
    return *tok_;
  }
  int vocab() const { return model_->cfg.vocab_size; }
  ThreadPool* pool() { return pool_.get(); }

 private:
  void check_ids(const std::vector<int>& ids, bool nonempty) const {
    if (nonempty && ids.empty()) fail("the prompt is empty");
    for (int id : ids)
      if (id < 0 || id >= model_->cfg.vocab_size)
        fail("token id ", id, " is outside the vocabulary of ", model_->cfg.vocab_size);
  }

  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> template_;
  DType kv_dtype_ = DType::F32;  // "auto" resolved by the model's matrices
  int kv_residual_, kv_capacity_, context_ = 0;
  mutable std::mutex ledger_mu_;
  json last_ledger_ = json::object();
  std::string no_tokenizer_;  // why there is no tokenizer, when there is none
  bool preset_ = false;
};

// A generation driven from Python, a token at a time (llm.stream()).
class Stream {
 public:
  Stream(LLM& llm, std::vector<int> prompt, const Sampling& s, bool use_cache)
      : llm_(llm), prompt_(std::move(prompt)), text_(nullptr) {
    ThreadPool::Scope scope(llm.pool());
    g_ = llm.start(prompt_, s, use_cache);
    text_ = std::make_unique<TextOut>(llm.tokenizer(), prompt_.back(), s.stop);
  }
  // The next piece of text and its token id; nullopt at the end. Text may be "" for a token
  // whose bytes are held back (an incomplete UTF-8 character, a possible stop string).
  std::optional<std::pair<std::string, int>> next() {
    if (ended_) return std::nullopt;
    int token;
    {
      ThreadPool::Scope scope(llm_.pool());
      if (!text_->stopped() && g_->next(token)) {
        std::string piece = text_->push(token);
        if (!text_->stopped() || !piece.empty()) {
          out_ += piece;
          return std::make_pair(piece, token);
        }
      }
    }
    ended_ = true;
    std::string tail = text_->flush();
    out_ += tail;
    result_ = llm_.finish(*g_, prompt_, *text_, out_);
    if (!tail.empty()) return std::make_pair(tail, -1);
    return std::nullopt;
  }
  const json& result() const { return result_; }
  bool ended() const { return ended_; }

 private:
  LLM& llm_;
  std::vector<int> prompt_;
  std::unique_ptr<Generation> g_;
  std::unique_ptr<TextOut> text_;
  std::string out_;
  json result_;
  bool ended_ = false;
};

// kvlm.bench(**kwargs): the arguments of `kvlm bench`, by their Python names.
json run_bench_json(const json& a) {
  cli::BenchArgs b;
  b.quiet = true;
  int threads = 0;
  for (auto& [k, v] : a.items()) {
    if (k == "preset") b.preset = v.get<std::string>();
    else if (k == "model") b.model = v.get<std::string>();
    else if (k == "tokenizer") b.tokenizer = v.get<std::string>();
    else if (k == "weights") b.weights = v.get<std::string>();
    else if (k == "prompt") b.prompt = v.get<std::string>();
    else if (k == "prompt_ids") {
      std::string ids;
      for (int id : v.get<std::vector<int>>()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
      b.prompt_ids = ids;
    } else if (k == "prompt_tokens") b.prompt_tokens = v.get<int>();
    else if (k == "new_tokens") b.new_tokens = v.get<std::vector<int>>();
    else if (k == "runs") b.runs = v.get<int>();
    else if (k == "warmup") b.warmup = v.get<int>();
    else if (k == "seed") b.seed = v.get<uint64_t>();
    else if (k == "cache_on_only") b.cache_on_only = v.get<bool>();
    else if (k == "kv_dtype") b.kv_dtype = v.get<std::string>();
    else if (k == "kv_residual") b.kv_residual = v.get<int>();
    else if (k == "decode_at") b.decode_at = v.get<std::vector<int>>();
    else if (k == "kv_dtypes") b.kv_dtypes = v.get<std::vector<std::string>>();
    else if (k == "decode_steps") b.decode_steps = v.get<int>();
    else if (k == "roofline") b.no_roofline = !v.get<bool>();
    else if (k == "threads") threads = v.get<int>();
    else fail("bench() got an unknown argument '", k, "'");
  }
  if (!b.model.empty() && a.contains("preset")) fail("preset and model exclude each other");
  if (threads < 0 || threads > ThreadPool::kMaxThreads) fail("threads must be in [0, ", ThreadPool::kMaxThreads, "]");
  ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
  ThreadPool::Scope scope(&pool);
  return cli::bench_report(b);
}

json run_bench(const std::string& args_json) {
  try {
    return run_bench_json(parse_json_strict(args_json, "bench arguments"));
  } catch (const json::exception& e) {  // a value of the wrong type
    fail("bench(): ", e.what());
  }
}

}  // namespace kvlm::python

using namespace kvlm;
using namespace kvlm::python;

namespace {
Sampling sampling(int max_new_tokens, float temperature, float top_p, int top_k, uint64_t seed, bool ignore_eos,
                  std::vector<std::string> stop) {
  return {max_new_tokens, temperature, top_p, top_k, seed, ignore_eos, std::move(stop)};
}
}  // namespace

NB_MODULE(_kvlm, m) {
  m.doc() = "kvlm's C++ core; use the kvlm package, not this module.";
  m.attr("__version__") = KVLM_VERSION;
  // Every kvlm error (bad file, bad argument, out-of-range id) arrives as kvlm.KvlmError.
  static nb::exception<KvlmError> error(m, "KvlmError", PyExc_RuntimeError);

  nb::class_<LLM>(m, "_LLM")
      .def("__init__",
           [](LLM* self, const std::string& path, const std::string& tokenizer, const std::string& weights,
              const std::string& kv_dtype, int kv_residual, int kv_capacity, int threads, int context,
              const std::string& chat_template, const std::string& preset, uint64_t seed) {
             nb::gil_scoped_release release;
             new (self) LLM(path, tokenizer, weights, kv_dtype, kv_residual, kv_capacity, threads, context, chat_template,
                            preset, seed);
           })
      .def("tokenize",
           [](const LLM& l, const std::string& text, bool add_bos, bool specials) {
             nb::gil_scoped_release release;
             return l.tokenize(text, add_bos, specials);
           })
      .def("detokenize", [](const LLM& l, const std::vector<int>& ids) { return l.detokenize(ids); })
      .def("apply_chat_template",
           [](const LLM& l, const std::string& messages_json, bool add_generation_prompt, const std::string& extra_json) {
             return l.apply_chat_template(messages_json, add_generation_prompt, extra_json);
           })
      .def("generate",
           [](LLM& l, const std::vector<int>& prompt, int max_new_tokens, float temperature, float top_p, int top_k,
              uint64_t seed, bool ignore_eos, std::vector<std::string> stop, bool use_cache) {
             json r;
             {
               nb::gil_scoped_release release;
               r = l.generate(prompt, sampling(max_new_tokens, temperature, top_p, top_k, seed, ignore_eos, std::move(stop)),
                              use_cache);
             }
             return to_python(r);
           })
      .def("batch",
           [](LLM& l, const std::vector<std::vector<int>>& prompts, int max_new_tokens, float temperature, float top_p,
              int top_k, uint64_t seed, bool ignore_eos, std::vector<std::string> stop, int max_seqs) {
             std::vector<json> r;
             {
               nb::gil_scoped_release release;
               r = l.batch(prompts, sampling(max_new_tokens, temperature, top_p, top_k, seed, ignore_eos, std::move(stop)),
                           max_seqs);
             }
             return to_python(json(r));
           })
      .def("logits",
           [](LLM& l, const std::vector<int>& ids) {
             auto* v = new std::vector<float>();
             try {
               nb::gil_scoped_release release;
               *v = l.logits(ids);
             } catch (...) {
               delete v;
               throw;
             }
             // The array takes the vector's memory over: no copy.
             nb::capsule owner(v, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
             return nb::ndarray<nb::numpy, float, nb::ndim<2>>(v->data(), {ids.size(), static_cast<size_t>(l.vocab())},
                                                              owner);
           })
      .def("kv_stats", [](const LLM& l) { return to_python(l.last_ledger()); })
      .def("info", [](const LLM& l) { return to_python(l.info()); });

  nb::class_<Stream>(m, "_Stream")
      .def("__init__",
           [](Stream* self, LLM& l, const std::vector<int>& prompt, int max_new_tokens, float temperature, float top_p,
              int top_k, uint64_t seed, bool ignore_eos, std::vector<std::string> stop, bool use_cache) {
             new (self) Stream(l, prompt,
                               sampling(max_new_tokens, temperature, top_p, top_k, seed, ignore_eos, std::move(stop)),
                               use_cache);
           },
           nb::keep_alive<1, 2>())  // the stream keeps its LLM alive
      .def("next",
           [](Stream& s) {
             nb::gil_scoped_release release;
             return s.next();
           })
      .def("result", [](const Stream& s) { return to_python(s.result()); });

  m.def("bench", [](const std::string& args_json) {
    json r;
    {
      nb::gil_scoped_release release;
      r = run_bench(args_json);
    }
    return to_python(r);
  });
}
