// kvlm serve's HTTP side: OpenAI-compatible routes on cpp-httplib. Handlers parse, tokenize and
// validate on their own threads, hand a Job to the EngineLoop, and turn what it produces into
// JSON or Server-Sent Events; they never call the engine.
#pragma once
#include <atomic>
#include <optional>
#include <semaphore>
#include <vector>
#include <memory>
#include <string>

#include "server/api_request.h"
#include "server/engine_loop.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace kvlm::server {

class ConnectionPool;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model_name = "kvlm";
  size_t max_body_bytes = 4 << 20;
  int http_threads = 8;
  int max_pending_connections = 64;  // waiting for an HTTP thread; beyond: 503 + Retry-After
  Limits limits;
  // Each API key is a tenant: requests need "Authorization: Bearer KEY" (none = open), and the
  // prefix cache never shares blocks between tenants (a shared prefix leaks through timing).
  std::vector<std::string> api_keys;
  bool metrics_need_key = false;
  int max_queue = 256;             // requests accepted and not finished; beyond: 429 + Retry-After
  int max_prompt_tokens = 0;       // 0 = the context
  int max_tokens_cap = 0;          // 0 = the context
  double request_timeout_s = 600;  // a request still generating then ends with finish_reason "length"
  int io_timeout_s = 30;           // reading a request's headers and body, writing a response
  std::string kv_snapshot_dir;     // where kv_save / kv_load conversation snapshots live; "" = off
};

// What the handlers serve once the model is loaded (the server answers /health with 503 before).
struct Backend {
  const Model* model = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: the chat endpoint answers 400
  EngineLoop* loop = nullptr;
  Metrics* metrics = nullptr;
  int context = 0;
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions opt);
  ~HttpServer();
  // Binds; returns the port (the one asked for, or the one the OS chose for port 0). Throws.
  int bind();
  void set_backend(const Backend& b);  // makes the server ready
  void listen();                       // blocks until stop()
  void stop();

 private:
  void routes();
  // Overload (503) and API-key (401) checks; false after writing the error.
  bool admit(const httplib::Request& req, httplib::Response& res);
  // "" without API keys; else a salt naming the request's tenant, or nullopt for a bad key.
  std::optional<std::string> tenant(const std::string& authorization) const;

  ServerOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  std::shared_ptr<ConnectionPool> pool_;
  int listen_fd_ = -1;
  std::atomic<int> in_flight_{0};
  // Requests tokenizing at once, at most one per core: the peak memory of a flood of long prompts
  // is then bounded by cores, not by HTTP threads.
  std::counting_semaphore<> prep_gate_;
  Backend backend_;
  std::atomic<bool> ready_{false};
};

}  // namespace kvlm::server
