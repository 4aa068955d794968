// OpenAI-compatible request bodies, parsed and validated before anything reaches the engine.
// A parameter kvlm does not implement is a 400 that names it, never silently ignored; one sent at
// its neutral value (echo: false, presence_penalty: 0, logit_bias: {}, user, ...) is accepted,
// because real clients and routers send those by default.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvlm::server {

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" = null
  std::string code;   // "" = null
  nlohmann::json to_json() const;
};

struct ChatMessage {
  std::string role, content;
};

struct GenerationRequest {
  bool chat = false;
  std::string model;
  std::string prompt_text;       // completions: text prompt (tokenized by the server)
  std::vector<int> prompt_ids;   // completions: pre-tokenized prompt
  bool prompt_is_ids = false;
  std::vector<ChatMessage> messages;  // chat
  nlohmann::json raw_messages;        // chat: as sent, for the template
  int max_tokens = -1;           // -1 = up to the context
  float temperature = 1.0f, top_p = 1.0f;
  int top_k = 0;
  std::optional<uint64_t> seed;
  std::vector<std::pair<int, float>> logit_bias;  // token id, bias
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f, min_p = 0.0f;
  std::vector<std::string> stop;
  int n = 1;
  bool stream = false, include_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;          // chat: per-token alternatives; completions: `logprobs: k`
  bool ignore_eos = false;
  // kvlm's snapshots of a conversation (kv/kv_snapshot.h), by id ([A-Za-z0-9_-]{1,64}): restore
  // the KV saved under kv_load for the prompt's longest common prefix, save this sequence's KV
  // under kv_save when it finishes. Needs `kvlm serve --kv-snapshot-dir`.
  std::string kv_load, kv_save;
};

struct Limits {
  int max_n = 16;
  int max_stop = 4;
  int max_top_logprobs = 20;
  size_t max_stop_bytes = 256;
  int max_logit_bias = 1024;
};

// Parses a /v1/completions (chat = false) or /v1/chat/completions body. Throws ApiError.
GenerationRequest parse_generation_request(const std::string& body, bool chat, const Limits& limits);
// Any JSON body (tokenize, detokenize, apply-template): strict parse, object required.
nlohmann::json parse_body(const std::string& body);

}  // namespace kvlm::server
