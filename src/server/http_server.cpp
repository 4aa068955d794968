#include "server/http_server.h"

#include <httplib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <random>

#include "core/error.h"
#include "core/sha256.h"
#include "server/connection_pool.h"
#include "tokenizer/text_stream.h"

namespace kvlm::server {

extern const char* const kChatPage;  // generated from chat_page.html by cmake/embed_text.cmake

using nlohmann::json;

namespace {

constexpr int kHttpNice = 10;  // CFS weight about a tenth of a nice-0 compute thread
constexpr int kListenBacklog = 4096;  // the kernel caps it at net.core.somaxconn

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(e.to_json()), "application/json");
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return std::string(prefix) + buf;
}

// Holds one of the server's preprocessing slots (parse, render, tokenize) for a scope.
class PrepGate {
 public:
  explicit PrepGate(std::counting_semaphore<>& s) : s_(s) { s_.acquire(); }
  ~PrepGate() { s_.release(); }
  PrepGate(const PrepGate&) = delete;
  PrepGate& operator=(const PrepGate&) = delete;

 private:
  std::counting_semaphore<>& s_;
};

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Follows one job: turns the engine's tokens into text deltas per choice (stop strings held back
// and cut), and tells the engine to stop a choice whose stop string matched.
class Responder {
 public:
  Responder(std::shared_ptr<Job> job, const GenerationRequest& req, const Tokenizer& tok, EngineLoop& loop,
            int prompt_tokens, int prev_token, std::string model, Metrics* metrics, double timeout_s)
      : job_(std::move(job)), req_(req), tok_(tok), loop_(loop), prompt_tokens_(prompt_tokens), model_(std::move(model)),
        id_(random_id(req.chat ? "chatcmpl-" : "cmpl-")), created_(unix_now()), metrics_(metrics),
        start_ms_(steady_ms()), deadline_ms_(start_ms_ + 1000.0 * timeout_s) {
    for (int c = 0; c < req.n; ++c) {
      streams_.emplace_back(tok, prev_token, req.stop);
      consumed_.push_back(0);
      text_.emplace_back();
      done_.push_back(false);
      reasons_.emplace_back();
      lp_.emplace_back();
    }
  }

  struct Delta {
    int choice;
    std::string text;
    std::vector<TokenLogprob> logprobs;
    std::string finish_reason;  // set on the choice's last delta
  };

  // Waits up to `wait` for news; returns the deltas since the last call. `finished` when every
  // choice has ended.
  std::vector<Delta> poll(std::chrono::milliseconds wait, bool& finished) {
    std::vector<Delta> out;
    std::vector<std::vector<int>> fresh(req_.n);
    std::vector<std::vector<TokenLogprob>> fresh_lp(req_.n);
    std::vector<bool> ended(req_.n);
    std::vector<std::string> reason(req_.n);
    {
      std::unique_lock<std::mutex> lock(job_->mu);
      auto news = [&] {
        for (int c = 0; c < req_.n; ++c)
          if (!done_[c] && (job_->choices[c].tokens.size() > consumed_[c] || job_->choices[c].finished)) return true;
        return false;
      };
      job_->cv.wait_for(lock, wait, news);
      error_ = job_->error;
      cached_tokens_ = job_->cached_tokens;
      snapshot_error_ = job_->snapshot_error;
      for (int c = 0; c < req_.n; ++c) {
        const ChoiceState& ch = job_->choices[c];
        fresh[c].assign(ch.tokens.begin() + consumed_[c], ch.tokens.end());
        if (!ch.logprobs.empty()) fresh_lp[c].assign(ch.logprobs.begin() + consumed_[c], ch.logprobs.end());
        consumed_[c] = ch.tokens.size();
        ended[c] = ch.finished;
        reason[c] = ch.finish_reason;
      }
    }
    bool poke = false;
    const bool timed_out = steady_ms() > deadline_ms_;
    for (int c = 0; c < req_.n; ++c) {
      if (done_[c]) continue;
      if (timed_out && !ended[c]) {  // --request-timeout: the choice ends here, as if at max_tokens
        std::lock_guard<std::mutex> lock(job_->mu);
        job_->choices[c].cancel = true;
        poke = true;
        ended[c] = true;
        reason[c] = "length";
      }
      Delta d{c, "", {}, ""};
      for (size_t i = 0; i < fresh[c].size() && !streams_[c].stopped(); ++i) {
        d.text += streams_[c].push(fresh[c][i]);
        ++completion_tokens_;
        if (i < fresh_lp[c].size()) d.logprobs.push_back(fresh_lp[c][i]);
      }
      if (streams_[c].stopped()) {  // a stop string: this choice ends here, whatever the engine does
        std::lock_guard<std::mutex> lock(job_->mu);
        job_->choices[c].cancel = true;
        poke = true;
        ended[c] = true;
        reason[c] = "stop";
      }
      if (ended[c]) {
        d.text += streams_[c].flush();
        d.finish_reason = reason[c] == "error" || reason[c] == "cancelled" ? "stop" : reason[c];
        done_[c] = true;
        reasons_[c] = d.finish_reason;
      }
      text_[c] += d.text;
      for (auto& l : d.logprobs) lp_[c].push_back(l);
      if (!d.text.empty() || !d.finish_reason.empty() || !d.logprobs.empty()) out.push_back(std::move(d));
    }
    if (poke) loop_.poke();
    finished = true;
    for (bool d : done_) finished = finished && d;
    if (finished && !reported_) report();
    return out;
  }

  // Request-level metrics, once, when every choice has ended.
  void report() {
    reported_ = true;
    if (!metrics_ || !error_.empty()) return;
    double first = -1;
    std::vector<double> gaps;
    {
      std::lock_guard<std::mutex> lock(job_->mu);
      for (const ChoiceState& ch : job_->choices) {
        if (!ch.token_ms.empty() && (first < 0 || ch.token_ms[0] < first)) first = ch.token_ms[0];
        for (size_t k = 1; k < ch.token_ms.size(); ++k) gaps.push_back((ch.token_ms[k] - ch.token_ms[k - 1]) / 1000.0);
      }
    }
    metrics_->request_finished(reasons_.empty() ? "stop" : reasons_[0], (steady_ms() - start_ms_) / 1000.0,
                               first < 0 ? -1 : (first - start_ms_) / 1000.0, gaps);
  }

  void cancel() {
    {
      std::lock_guard<std::mutex> lock(job_->mu);
      job_->cancelled = true;
    }
    loop_.poke();
  }

  json usage() const {
    return {{"prompt_tokens", prompt_tokens_},
            {"completion_tokens", completion_tokens_},
            {"total_tokens", prompt_tokens_ + completion_tokens_},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
  }
  // kvlm's extension: why a kv_load snapshot was refused (the prompt was computed instead) or a
  // kv_save was not written; absent when all went well.
  const std::string& snapshot_error() const { return snapshot_error_; }

  json logprobs_json(const std::vector<TokenLogprob>& lps) const {
    if (!req_.logprobs) return nullptr;
    auto piece = [&](int t) { return tok_.decode(-2, t); };
    if (req_.chat) {
      json content = json::array();
      for (const TokenLogprob& l : lps) {
        json top = json::array();
        for (auto& [t, lp] : l.top) top.push_back({{"token", piece(t)}, {"logprob", lp}});
        content.push_back({{"token", piece(l.token)}, {"logprob", l.logprob}, {"top_logprobs", top}});
      }
      return {{"content", content}};
    }
    json tokens = json::array(), token_lps = json::array(), tops = json::array();
    for (const TokenLogprob& l : lps) {
      tokens.push_back(piece(l.token));
      token_lps.push_back(l.logprob);
      json top = json::object();
      for (auto& [t, lp] : l.top) top[piece(t)] = lp;
      tops.push_back(top);
    }
    return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}};
  }

  json chunk(const Delta& d, bool first) const {
    json choice = {{"index", d.choice}, {"logprobs", logprobs_json(d.logprobs)},
                   {"finish_reason", d.finish_reason.empty() ? json(nullptr) : json(d.finish_reason)}};
    if (req_.chat) {
      json delta = json::object();
      if (first) delta["role"] = "assistant";
      if (!d.text.empty() || first) delta["content"] = d.text;
      choice["delta"] = delta;
    } else {
      choice["text"] = d.text;
    }
    return {{"id", id_}, {"object", req_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
            {"model", model_}, {"choices", json::array({choice})}};
  }

  json usage_chunk() const {
    return {{"id", id_}, {"object", req_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
            {"model", model_}, {"choices", json::array()}, {"usage", usage()}};
  }

  json whole() const {
    json choices = json::array();
    for (int c = 0; c < req_.n; ++c) {
      json ch = {{"index", c}, {"logprobs", logprobs_json(lp_[c])}, {"finish_reason", reasons_[c]}};
      if (req_.chat)
        ch["message"] = {{"role", "assistant"}, {"content", text_[c]}};
      else
        ch["text"] = text_[c];
      choices.push_back(ch);
    }
    json out = {{"id", id_}, {"object", req_.chat ? "chat.completion" : "text_completion"}, {"created", created_},
                {"model", model_}, {"choices", choices}, {"usage", usage()}};
    if (!snapshot_error_.empty()) {  // the reason, without the server's file path
      const size_t at = snapshot_error_.find(".kvs: ");
      out["kv_snapshot_error"] = at == std::string::npos ? snapshot_error_ : snapshot_error_.substr(at + 6);
    }
    return out;
  }

  const std::string& error() const { return error_; }

 private:
  std::shared_ptr<Job> job_;
  GenerationRequest req_;
  const Tokenizer& tok_;
  EngineLoop& loop_;
  int prompt_tokens_;
  std::string model_, id_;
  int64_t created_;
  std::vector<TextStream> streams_;
  std::vector<size_t> consumed_;
  std::vector<std::string> text_;
  std::vector<bool> done_;
  std::vector<std::string> reasons_;
  std::vector<std::vector<TokenLogprob>> lp_;
  std::string error_;
  int completion_tokens_ = 0, cached_tokens_ = 0;
  std::string snapshot_error_;
  Metrics* metrics_;
  double start_ms_, deadline_ms_;
  bool reported_ = false;
};

}  // namespace

HttpServer::HttpServer(ServerOptions opt)
    : opt_(std::move(opt)), http_(std::make_unique<httplib::Server>()),
      prep_gate_(std::max<unsigned>(2, std::thread::hardware_concurrency())) {
  pool_ = std::make_shared<ConnectionPool>(opt_.http_threads, opt_.max_pending_connections);
  http_->new_task_queue = [pool = pool_] { return new PoolHandle(pool); };
  http_->set_payload_max_length(opt_.max_body_bytes);
  http_->set_read_timeout(opt_.io_timeout_s, 0);  // a slow client cannot hold a thread forever
  http_->set_write_timeout(opt_.io_timeout_s, 0);
  http_->set_keep_alive_timeout(5);
  // SO_REUSEADDR (a restart binds at once over TIME_WAIT), but not httplib's default SO_REUSEPORT,
  // which lets a second server bind the same port and silently take half the connections.
  http_->set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  int port = opt_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(opt_.host);
  } else if (!http_->bind_to_port(opt_.host, port)) {
    port = -1;
  }
  if (port < 0) fail("cannot listen on ", opt_.host, ":", opt_.port, " (in use, or not an address of this machine)");
  // httplib 0.11 listens with a backlog of 5: a burst of connections overflows it and the kernel
  // resets some (SYN cookies). Listening again on the bound socket raises the backlog.
  if (listen_fd_ >= 0) ::listen(listen_fd_, kListenBacklog);
  return port;
}

std::optional<std::string> HttpServer::tenant(const std::string& authorization) const {
  if (opt_.api_keys.empty()) return std::string();
  const std::string prefix = "Bearer ";
  std::string given = authorization.rfind(prefix, 0) == 0 ? authorization.substr(prefix.size()) : "";
  // Every key is compared in full, in constant time, whatever matched: timing tells nothing.
  int found = -1;
  for (size_t k = 0; k < opt_.api_keys.size(); ++k) {
    const std::string& key = opt_.api_keys[k];
    unsigned char diff = static_cast<unsigned char>(given.size() != key.size());
    for (size_t i = 0; i < key.size(); ++i)
      diff |= static_cast<unsigned char>(key[i] ^ (i < given.size() ? given[i] : 0));
    if (diff == 0 && found < 0) found = static_cast<int>(k);
  }
  if (found < 0) return std::nullopt;
  // The engine's salt: prefixes are shared within a tenant only. Derived from the key itself, not
  // its place in the list, so replicas sharing a Redis tier agree on it whatever order their keys
  // are given in (and the salt, which names snapshot files, does not reveal the key).
  const Sha256Digest d = Sha256::of_string("kvlm-tenant:" + opt_.api_keys[found]);
  return "tenant-" + hex(d.data(), 8);
}

void HttpServer::set_backend(const Backend& b) {
  backend_ = b;
  ready_.store(true, std::memory_order_release);
}

void HttpServer::listen() { http_->listen_after_bind(); }
void HttpServer::stop() {
  // A stop that comes before listen() has started (a model that failed to load at once) would
  // be lost, and listen() would then run forever: wait for it to run first (bounded).
  for (int i = 0; i < 5000 && !http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  pool_->release_backpressure();  // an accept loop paused by a full queue must see the stop
  http_->stop();
}

bool HttpServer::admit(const httplib::Request& req, httplib::Response& res) {
  // Connections beyond the HTTP threads and their waiting room are refused at once. Probes and
  // metrics are still answered, so an overloaded server is not taken for dead.
  if (ConnectionPool::overflow_thread() && req.path != "/health" && req.path != "/metrics") {
    if (backend_.metrics) backend_.metrics->rejected("overloaded");
    send_error(res, ApiError{503, "the server is overloaded (every HTTP thread is busy); retry shortly", "server_error", "",
                             "overloaded"});
    res.set_header("Retry-After", "1");
    res.set_header("Connection", "close");
    return false;
  }
  // /health stays open (probes); /metrics too unless --metrics-need-key; the rest need a key.
  const bool open = req.path == "/health" || (req.path == "/metrics" && !opt_.metrics_need_key) ||
                    (req.path == "/" && req.method == "GET");
  if (!open && !tenant(req.get_header_value("Authorization"))) {
    if (backend_.metrics) backend_.metrics->rejected("unauthorized");
    send_error(res, ApiError{401, "missing or invalid API key (send Authorization: Bearer KEY)", "invalid_request_error",
                             "", "invalid_api_key"});
    res.set_header("WWW-Authenticate", "Bearer");
    return false;
  }
  return true;
}

void HttpServer::routes() {
  httplib::Server& s = *http_;
  // HTTP threads parse, tokenize, render templates and write JSON at a lower priority than the
  // engine's compute threads: on a machine with as many cores as compute threads, request
  // traffic then takes the cores only when decode does not (see docs/benchmarks.md, serving).
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    static thread_local bool lowered = [] {
      setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kHttpNice);
      return true;
    }();
    (void)lowered;
    // A request with a body (POST) is checked by its handler, after httplib has read the body
    // (bounded by --max-body): closing a socket with unread bytes makes TCP reset it, and the
    // client would lose the error. The others are checked here.
    if (req.method != "POST" && !admit(req, res)) return httplib::Server::HandlerResponse::Handled;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors of the HTTP layer itself (body too large, unknown route) in OpenAI's shape too.
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, res.status == 413 ? "the request body is over the size limit" :
                           res.status == 404 ? "no such route" : "request failed",
               res.status == 404 ? "not_found_error" : "invalid_request_error", "", ""};
    res.set_content(dump(e.to_json()), "application/json");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    ApiError e{500, "internal error", "server_error", "", ""};
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& a) {
      e = a;
    } catch (const std::exception& x) {
      e.message = std::string("internal error: ") + x.what();
    }
    send_error(res, e);
  });
  auto ready = [this](httplib::Response& res) {
    if (ready_.load(std::memory_order_acquire)) return true;
    send_error(res, ApiError{503, "the model is still loading", "server_error", "", "model_loading"});
    return false;
  };

  // The chat page (src/server/chat_page.html, compiled in). Open like /health: it holds no data,
  // and asks for a key itself when the server has keys.
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'");
    res.set_content(kChatPage, "text/html; charset=utf-8");
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    bool ok = ready_.load(std::memory_order_acquire);
    res.status = ok ? 200 : 503;
    res.set_content(ok ? R"({"status":"ok"})" : R"({"status":"loading"})", "application/json");
  });

  s.Get("/v1/models", [this, ready](const httplib::Request&, httplib::Response& res) {
    if (!ready(res)) return;
    json m = {{"id", opt_.model_name}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "kvlm"},
              {"max_model_len", backend_.context}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });

  // What SGLang's router asks a worker at registration (sglang's /model_info and /server_info;
  // the get_ names are their older spelling).
  auto model_info = [this, ready](const httplib::Request&, httplib::Response& res) {
    if (!ready(res)) return;
    res.set_content(dump({{"model_path", opt_.model_name}, {"tokenizer_path", nullptr}, {"is_generation", true},
                          {"served_model_name", opt_.model_name}, {"has_image_understanding", false},
                          {"has_audio_understanding", false}}),
                    "application/json");
  };
  auto server_info = [this, ready](const httplib::Request&, httplib::Response& res) {
    if (!ready(res)) return;
    res.set_content(dump({{"model_path", opt_.model_name}, {"served_model_name", opt_.model_name},
                          {"context_length", backend_.context}, {"version", KVLM_VERSION}, {"engine", "kvlm"},
                          {"kv", backend_.loop->status()}}),
                    "application/json");
  };
  s.Get("/model_info", model_info);
  s.Get("/get_model_info", model_info);
  s.Get("/server_info", server_info);
  s.Get("/get_server_info", server_info);

  s.Get("/metrics", [this, ready](const httplib::Request&, httplib::Response& res) {
    if (!ready(res)) return;
    res.set_content(backend_.metrics ? backend_.metrics->render() : "", "text/plain; version=0.0.4; charset=utf-8");
  });

  // The engine's state: queue, pool blocks and the KV ledger (tests read it to see blocks return).
  s.Get("/v1/kv", [this, ready](const httplib::Request&, httplib::Response& res) {
    if (!ready(res)) return;
    res.set_content(dump(backend_.loop->status()), "application/json");
  });

  s.Post("/tokenize", [this, ready](const httplib::Request& req, httplib::Response& res) {
    if (!admit(req, res) || !ready(res)) return;
    json j = parse_body(req.body);
    if (!j.contains("content") || !j["content"].is_string()) throw ApiError{400, "'content' must be a string", "invalid_request_error", "content", ""};
    bool special = j.value("add_special", false);
    std::string text = j["content"].get<std::string>();
    std::vector<int> ids = special ? backend_.tokenizer->encode_prompt(text) : backend_.tokenizer->encode(text);
    json out = {{"tokens", ids}};
    if (j.value("with_pieces", false)) {
      json pieces = json::array();
      for (int id : ids) pieces.push_back({{"id", id}, {"piece", backend_.tokenizer->decode(-2, id)}});
      out["tokens"] = pieces;
    }
    res.set_content(dump(out), "application/json");
  });

  s.Post("/detokenize", [this, ready](const httplib::Request& req, httplib::Response& res) {
    if (!admit(req, res) || !ready(res)) return;
    json j = parse_body(req.body);
    if (!j.contains("tokens") || !j["tokens"].is_array()) throw ApiError{400, "'tokens' must be a list of token ids", "invalid_request_error", "tokens", ""};
    std::vector<int> ids;
    for (const json& t : j["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= backend_.tokenizer->vocab_size())
        throw ApiError{400, "token id " + t.dump() + " is outside the vocabulary", "invalid_request_error", "tokens", ""};
      ids.push_back(t.get<int>());
    }
    res.set_content(dump({{"content", backend_.tokenizer->decode_all(ids)}}), "application/json");
  });

  auto render_chat = [this](const json& messages, bool add_generation_prompt) {
    if (!backend_.chat_template)
      throw ApiError{400, "this model has no chat template; use /v1/completions, or start the server with --chat-template FILE",
                     "invalid_request_error", "messages", "no_chat_template"};
    const Tokenizer& t = *backend_.tokenizer;
    std::string bos = t.bos_id >= 0 ? t.decode(-2, t.bos_id) : "", eos = t.eos_id >= 0 ? t.decode(-2, t.eos_id) : "";
    try {
      return backend_.chat_template->render(messages, add_generation_prompt, bos, eos);
    } catch (const KvlmError& e) {
      throw ApiError{400, std::string("chat template: ") + e.what(), "invalid_request_error", "messages", ""};
    }
  };

  s.Post("/apply-template", [this, ready, render_chat](const httplib::Request& req, httplib::Response& res) {
    if (!admit(req, res) || !ready(res)) return;
    GenerationRequest r = parse_generation_request(req.body, true, opt_.limits);
    res.set_content(dump({{"prompt", render_chat(r.raw_messages, true)}}), "application/json");
  });

  auto generate = [this, ready, render_chat](const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!admit(req, res) || !ready(res)) return;
    GenerationRequest r = parse_generation_request(req.body, chat, opt_.limits);
    if (!r.model.empty() && r.model != opt_.model_name)
      throw ApiError{404, "the model '" + r.model + "' does not exist (this server serves '" + opt_.model_name + "')",
                     "invalid_request_error", "model", "model_not_found"};
    const Tokenizer& tok = *backend_.tokenizer;
    const int vocab = backend_.model->cfg.vocab_size, ctx = backend_.context;
    // A text too long to fit whatever its tokens is refused before tokenizing it: tokenizing a
    // megabyte costs tens of megabytes and seconds, and a flood of such requests is an attack.
    const bool server_limit = opt_.max_prompt_tokens > 0 && opt_.max_prompt_tokens < ctx - 1;
    const int token_limit = server_limit ? opt_.max_prompt_tokens : ctx - 1;
    auto refuse_oversized = [&](const std::string& text) {
      const size_t at_least = (text.size() + tok.max_token_bytes() - 1) / tok.max_token_bytes();
      if (at_least > static_cast<size_t>(token_limit))
        throw ApiError{400, "the prompt has at least " + std::to_string(at_least) + " tokens (" + std::to_string(text.size()) +
                                " bytes); " + (server_limit ? "this server takes" : "this model's context leaves room for") +
                                " at most " + std::to_string(token_limit),
                       "invalid_request_error", chat ? "messages" : "prompt",
                       server_limit ? "prompt_too_long" : "context_length_exceeded"};
    };
    std::vector<int> prompt;
    {
      PrepGate gate(prep_gate_);  // bounded parallel tokenizing (memory and cores)
      if (chat) {
        // The template writes BOS itself where the model wants one; specials in it become ids.
        std::string text = render_chat(r.raw_messages, true);
        refuse_oversized(text);
        prompt = tok.encode_with_specials(text);
      } else if (r.prompt_is_ids) {
        prompt = r.prompt_ids;
      } else {
        refuse_oversized(r.prompt_text);
        prompt = tok.encode_prompt(r.prompt_text);
      }
    }
    if (prompt.empty()) throw ApiError{400, "the prompt is empty", "invalid_request_error", chat ? "messages" : "prompt", ""};
    for (int id : prompt)
      if (id < 0 || id >= vocab)
        throw ApiError{400, "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab),
                       "invalid_request_error", "prompt", ""};
    const int plen = static_cast<int>(prompt.size());
    if (plen >= ctx)
      throw ApiError{400, "the prompt has " + std::to_string(plen) + " tokens; this model's context is " + std::to_string(ctx) +
                              " tokens, which leaves no room to generate", "invalid_request_error", chat ? "messages" : "prompt",
                     "context_length_exceeded"};
    if (opt_.max_prompt_tokens > 0 && plen > opt_.max_prompt_tokens)
      throw ApiError{400, "the prompt has " + std::to_string(plen) + " tokens; this server takes at most " +
                              std::to_string(opt_.max_prompt_tokens), "invalid_request_error", chat ? "messages" : "prompt",
                     "prompt_too_long"};
    if (opt_.max_tokens_cap > 0 && r.max_tokens > opt_.max_tokens_cap)
      throw ApiError{400, "max_tokens " + std::to_string(r.max_tokens) + " is above this server's cap of " +
                              std::to_string(opt_.max_tokens_cap), "invalid_request_error", "max_tokens", ""};
    if (r.max_tokens > 0 && plen + r.max_tokens > ctx)
      throw ApiError{400, "the prompt (" + std::to_string(plen) + " tokens) plus max_tokens (" + std::to_string(r.max_tokens) +
                              ") exceed this model's context of " + std::to_string(ctx) + " tokens",
                     "invalid_request_error", "max_tokens", "context_length_exceeded"};
    auto job = std::make_shared<Job>();
    job->n = r.n;
    job->want_logprobs = r.logprobs;
    job->top_logprobs = r.top_logprobs;
    SeqParams& p = job->params;
    p.prompt = prompt;
    p.max_new_tokens = r.max_tokens > 0 ? r.max_tokens : ctx - plen;
    if (opt_.max_tokens_cap > 0) p.max_new_tokens = std::min(p.max_new_tokens, opt_.max_tokens_cap);
    if (auto t = tenant(req.get_header_value("Authorization"))) p.salt = *t;
    p.stop_at_eos = !r.ignore_eos;
    if (!r.kv_load.empty() || !r.kv_save.empty()) {
      if (opt_.kv_snapshot_dir.empty())
        throw ApiError{400, "kv_load and kv_save need the server to run with --kv-snapshot-dir", "invalid_request_error",
                       r.kv_load.empty() ? "kv_save" : "kv_load", ""};
      if (r.n > 1) throw ApiError{400, "kv_load and kv_save take one sequence (n = 1)", "invalid_request_error", "n", ""};
      // The tenant's salt is in the snapshot and checked on restore; ids live per tenant too.
      const std::string prefix = opt_.kv_snapshot_dir + "/" + (p.salt.empty() ? "open" : p.salt) + "-";
      if (!r.kv_load.empty()) p.kv_load = prefix + r.kv_load + ".kvs";
      if (!r.kv_save.empty()) p.kv_save = prefix + r.kv_save + ".kvs";
    }
    static std::atomic<uint64_t> seed_counter{std::random_device{}()};
    p.sampling = {r.temperature, r.top_k, r.top_p, r.seed ? *r.seed : seed_counter.fetch_add(0x9E3779B97F4A7C15ull),
                  tok.vocab_size()};
    for (const auto& [id, bias] : r.logit_bias)
      if (id >= tok.vocab_size())
        throw ApiError{400, "logit_bias token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(tok.vocab_size()),
                       "invalid_request_error", "logit_bias", ""};
    p.sampling.logit_bias = r.logit_bias;
    p.sampling.presence_penalty = r.presence_penalty, p.sampling.frequency_penalty = r.frequency_penalty;
    p.sampling.repetition_penalty = r.repetition_penalty, p.sampling.min_p = r.min_p;
    // Backpressure: a bounded number of accepted requests; beyond it, 429 and a hint when to retry.
    if (in_flight_.fetch_add(1) >= opt_.max_queue) {
      in_flight_.fetch_sub(1);
      if (backend_.metrics) backend_.metrics->rejected("queue_full");
      res.set_header("Retry-After", "1");
      throw ApiError{429, "the server is at its limit of " + std::to_string(opt_.max_queue) + " requests; retry shortly",
                     "rate_limit_error", "", "queue_full"};
    }
    struct Release {  // gives the slot back when the last holder of the response goes away
      explicit Release(std::atomic<int>* counter) : n(counter) {}
      Release(const Release&) = delete;
      Release& operator=(const Release&) = delete;
      ~Release() { n->fetch_sub(1); }
      std::atomic<int>* n;
    };
    auto slot = std::make_shared<Release>(&in_flight_);
    backend_.loop->submit(job);
    auto resp = std::make_shared<Responder>(job, r, tok, *backend_.loop, plen, prompt.back(), opt_.model_name,
                                            backend_.metrics, opt_.request_timeout_s);
    if (r.stream) {
      auto first = std::make_shared<std::vector<bool>>(r.n, true);
      bool usage = r.include_usage;
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", [resp, first, usage, slot](size_t, httplib::DataSink& sink) {
        bool finished = false;
        auto deltas = resp->poll(std::chrono::milliseconds(1000), finished);
        auto send = [&](const json& j) {
          std::string line = "data: " + dump(j) + "\n\n";
          return sink.write(line.data(), line.size());
        };
        if (!resp->error().empty() && finished) {
          ApiError e{500, resp->error(), "server_error", "", ""};
          send(e.to_json());
        }
        for (const auto& d : deltas) {
          if (!send(resp->chunk(d, (*first)[d.choice]))) {
            resp->cancel();  // the client went away
            return false;
          }
          (*first)[d.choice] = false;
        }
        if (deltas.empty() && !finished) {
          static const char kBeat[] = ": keep-alive\n\n";  // an SSE comment: how a vanished client is noticed
          if (!sink.write(kBeat, sizeof kBeat - 1)) {
            resp->cancel();
            return false;
          }
        }
        if (finished) {
          if (usage) send(resp->usage_chunk());
          static const char kDone[] = "data: [DONE]\n\n";
          sink.write(kDone, sizeof kDone - 1);
          sink.done();
        }
        return true;
      }, [resp](bool success) {
        if (!success) resp->cancel();
      });
      return;
    }
    // Whole response. Wait for the first token first, so that a failure at admission gets its
    // own status code; after that, leading whitespace (valid JSON) is written while waiting, so
    // a client that disconnected is noticed (the write fails) and its sequence cancelled.
    bool finished = false;
    bool started = false;
    while (!started) {
      resp->poll(std::chrono::milliseconds(200), finished);
      std::lock_guard<std::mutex> lock(job->mu);
      started = job->started || finished;
    }
    if (finished && !resp->error().empty()) {
      send_error(res, ApiError{400, resp->error(), "invalid_request_error", "", ""});
      return;
    }
    res.set_chunked_content_provider("application/json", [resp, finished, slot](size_t, httplib::DataSink& sink) mutable {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (!finished && std::chrono::steady_clock::now() < deadline) resp->poll(std::chrono::milliseconds(250), finished);
      if (!finished) {
        if (!sink.write(" ", 1)) {
          resp->cancel();
          return false;
        }
        return true;
      }
      std::string body = resp->error().empty() ? dump(resp->whole())
                                               : dump(ApiError{500, resp->error(), "server_error", "", ""}.to_json());
      sink.write(body.data(), body.size());
      sink.done();
      return true;
    }, [resp](bool success) {
      if (!success) resp->cancel();
    });
  };
  s.Post("/v1/completions", [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, false); });
  s.Post("/v1/chat/completions", [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, true); });
}

}  // namespace kvlm::server
