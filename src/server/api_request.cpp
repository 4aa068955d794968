#include "server/api_request.h"

#include <algorithm>
#include <cctype>

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "core/utf8.h"

namespace kvlm::server {

using nlohmann::json;

json ApiError::to_json() const {
  // Messages quote the client's own bytes (a key name, a parse error's context): made valid
  // UTF-8 here, so the error itself can always be written as JSON.
  return {{"error",
           {{"message", utf8_sanitize(message)},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(utf8_sanitize(param))},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError{400, message, "invalid_request_error", param, ""};
}

// Parameters accepted only at their neutral value: what the client sent must equal `neutral`
// (null is always neutral).
struct Neutral {
  const char* name;
  json neutral;
};
const Neutral kNeutral[] = {
    {"echo", false},         {"best_of", 1},            {"suffix", nullptr},
    {"parallel_tool_calls", true}, {"tools", json::array()}, {"tool_choice", "none"},
    {"response_format", {{"type", "text"}}},            {"service_tier", "auto"},     {"store", false},
    {"metadata", json::object()},  {"modalities", {"text"}}, {"prediction", nullptr}, {"audio", nullptr},
    {"reasoning_effort", nullptr}, {"functions", json::array()}, {"function_call", "none"},
    {"web_search_options", nullptr},
    // SGLang's own fields, which sglang-router adds to every request at these values.
    {"no_stop_trim", false}, {"skip_special_tokens", true}, {"return_hidden_states", false},
    {"continue_final_message", false},
};
// Accepted whatever their value: they do not change what is generated.
// separate_reasoning / stream_reasoning (SGLang's, added by sglang-router): kvlm runs no reasoning
// parser, so there is no reasoning text to separate or stream either way.
const std::set<std::string> kIgnoredFreely = {"user", "model", "stream_options", "n", "stream", "separate_reasoning",
                                              "stream_reasoning"};

bool is_neutral(const json& v, const json& neutral) {
  if (v.is_null() || v == neutral) return true;
  if (v.is_number() && neutral.is_number()) return v.get<double>() == neutral.get<double>();
  return false;
}

double number(const json& j, const char* key, double lo, double hi) {
  const json& v = j[key];
  if (!v.is_number()) bad(key, std::string("'") + key + "' must be a number");
  double d = v.get<double>();
  if (!(d >= lo && d <= hi)) bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return d;
}

int64_t integer(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j[key];
  if (!v.is_number_integer()) bad(key, std::string("'") + key + "' must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad(key, std::string("'") + key + "' is out of range");
  int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return i;
}

bool boolean(const json& j, const char* key) {
  if (!j[key].is_boolean()) bad(key, std::string("'") + key + "' must be true or false");
  return j[key].get<bool>();
}

std::string content_text(const json& c, size_t i) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (c.is_array()) {  // [{"type": "text", "text": "..."}]: text parts only
    std::string s;
    for (const json& part : c) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
        bad("messages", "messages[" + std::to_string(i) + "].content: only text parts are supported");
      s += part["text"].get<std::string>();
    }
    return s;
  }
  bad("messages", "messages[" + std::to_string(i) + "].content must be a string or a list of text parts");
}

}  // namespace

json parse_body(const std::string& body) {
  json j;
  try {
    j = parse_json_strict(body, "request body", 64);
  } catch (const KvlmError& e) {
    bad("", e.what());
  }
  if (!j.is_object()) bad("", "the request body must be a JSON object");
  return j;
}

GenerationRequest parse_generation_request(const std::string& body, bool chat, const Limits& limits) {
  json j = parse_body(body);
  GenerationRequest r;
  r.chat = chat;
  std::set<std::string> known = {"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n",
                                 "stream", "stream_options", "logprobs", "user", "ignore_eos", "kv_load", "kv_save",
                                 "logit_bias", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_p"};
  known.insert(chat ? "messages" : "prompt");
  if (chat) {
    known.insert("max_completion_tokens");
    known.insert("top_logprobs");
  }
  for (const Neutral& p : kNeutral) known.insert(p.name);
  known.insert(kIgnoredFreely.begin(), kIgnoredFreely.end());
  for (auto& [key, v] : j.items()) {
    if (!known.count(key))
      bad(key, "unknown parameter '" + key + "'" + (chat ? "" : " for /v1/completions"));
    for (const Neutral& p : kNeutral)
      if (key == p.name && !is_neutral(v, p.neutral))
        bad(key, "'" + key + "' is not supported by kvlm except at its neutral value " + p.neutral.dump());
  }
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) bad("model", "'model' must be a string");
    r.model = j["model"].get<std::string>();
  }
  if (chat) {
    if (!j.contains("messages") || !j["messages"].is_array()) bad("messages", "'messages' must be a list of messages");
    if (j["messages"].empty()) bad("messages", "'messages' must not be empty");
    r.raw_messages = j["messages"];
    for (size_t i = 0; i < j["messages"].size(); ++i) {
      const json& m = j["messages"][i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        bad("messages", "messages[" + std::to_string(i) + "] needs a string 'role'");
      std::string role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool")
        bad("messages", "messages[" + std::to_string(i) + "].role '" + role + "' is not one of system, user, assistant, developer, tool");
      r.messages.push_back({role, content_text(m.contains("content") ? m["content"] : json(nullptr), i)});
      r.raw_messages[i]["content"] = r.messages.back().content;
    }
  } else {
    if (!j.contains("prompt")) bad("prompt", "'prompt' is required");
    const json& p = j["prompt"];
    if (p.is_string()) {
      r.prompt_text = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt_text = p[0].get<std::string>();
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      r.prompt_is_ids = true;
      for (const json& t : p) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          bad("prompt", "'prompt' token ids must be non-negative integers");
        r.prompt_ids.push_back(t.get<int>());
      }
    } else if (p.is_array() && p.size() == 1 && p[0].is_array()) {
      r.prompt_is_ids = true;
      for (const json& t : p[0]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          bad("prompt", "'prompt' token ids must be non-negative integers");
        r.prompt_ids.push_back(t.get<int>());
      }
    } else {
      bad("prompt", "'prompt' must be a string, a list of token ids, or a one-element list of either "
                    "(several prompts in one request are not supported)");
    }
  }
  const char* max_key = chat && j.contains("max_completion_tokens") && !j["max_completion_tokens"].is_null()
                            ? "max_completion_tokens" : "max_tokens";
  if (j.contains(max_key) && !j[max_key].is_null()) r.max_tokens = static_cast<int>(integer(j, max_key, 1, 1 << 24));
  if (j.contains("temperature") && !j["temperature"].is_null()) r.temperature = static_cast<float>(number(j, "temperature", 0, 2));
  if (j.contains("top_p") && !j["top_p"].is_null()) r.top_p = static_cast<float>(number(j, "top_p", 0, 1));
  if (r.top_p == 0.0f) r.top_p = 1e-6f;  // "only the most likely token": the smallest nucleus
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    int64_t k = integer(j, "top_k", -1, 1 << 24);
    r.top_k = k < 0 ? 0 : static_cast<int>(k);
  }
  if (j.contains("seed") && !j["seed"].is_null()) r.seed = static_cast<uint64_t>(integer(j, "seed", INT64_MIN, INT64_MAX));
  // The penalties and min_p at OpenAI's and vLLM's ranges (engine/sampler.h says what each does).
  if (j.contains("presence_penalty") && !j["presence_penalty"].is_null())
    r.presence_penalty = static_cast<float>(number(j, "presence_penalty", -2, 2));
  if (j.contains("frequency_penalty") && !j["frequency_penalty"].is_null())
    r.frequency_penalty = static_cast<float>(number(j, "frequency_penalty", -2, 2));
  if (j.contains("repetition_penalty") && !j["repetition_penalty"].is_null()) {
    r.repetition_penalty = static_cast<float>(number(j, "repetition_penalty", 0, 2));
    if (r.repetition_penalty <= 0.0f) bad("repetition_penalty", "'repetition_penalty' must be greater than 0");
  }
  if (j.contains("min_p") && !j["min_p"].is_null()) r.min_p = static_cast<float>(number(j, "min_p", 0, 1));
  if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
    const json& lb = j["logit_bias"];
    if (!lb.is_object()) bad("logit_bias", "'logit_bias' must be an object of token ids to biases");
    if (lb.size() > static_cast<size_t>(limits.max_logit_bias))
      bad("logit_bias", "'logit_bias' takes at most " + std::to_string(limits.max_logit_bias) + " tokens");
    for (auto& [key, v] : lb.items()) {
      // Keys are token ids in decimal (the vocabulary is checked where the tokenizer is known).
      const bool digits = !key.empty() && key.size() <= 9 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits) bad("logit_bias", "'logit_bias' keys must be token ids, got '" + key.substr(0, 32) + "'");
      if (!v.is_number() || !(v.get<double>() >= -100 && v.get<double>() <= 100))
        bad("logit_bias", "'logit_bias' values must be numbers from -100 to 100 (token " + key + ")");
      r.logit_bias.push_back({std::stoi(key), static_cast<float>(v.get<double>())});
    }
  }
  if (j.contains("n") && !j["n"].is_null()) r.n = static_cast<int>(integer(j, "n", 1, limits.max_n));
  if (j.contains("stream") && !j["stream"].is_null()) r.stream = boolean(j, "stream");
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) r.ignore_eos = boolean(j, "ignore_eos");
  for (const char* key : {"kv_load", "kv_save"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_string()) bad(key, std::string("'") + key + "' must be a conversation id string");
    const std::string id = j[key].get<std::string>();
    const bool ok = !id.empty() && id.size() <= 64 &&
                    std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
    if (!ok) bad(key, std::string("'") + key + "' must be 1 to 64 of A-Z, a-z, 0-9, '_' and '-'");
    (std::string(key) == "kv_load" ? r.kv_load : r.kv_save) = id;
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const json& so = j["stream_options"];
    if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
    for (auto& [k, v] : so.items()) {
      if (k != "include_usage" && k != "continuous_usage_stats") bad("stream_options", "unknown stream option '" + k + "'");
      if (!v.is_boolean()) bad("stream_options", "stream_options." + k + " must be true or false");
      if (k == "continuous_usage_stats" && v.get<bool>()) bad("stream_options", "continuous_usage_stats is not supported");
    }
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with stream: true");
    r.include_usage = so.value("include_usage", false);
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const json& x : s) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of strings");
    }
    if (static_cast<int>(r.stop.size()) > limits.max_stop) bad("stop", "'stop' takes at most " + std::to_string(limits.max_stop) + " strings");
    for (const std::string& x : r.stop)
      if (x.size() > limits.max_stop_bytes) bad("stop", "a stop string is longer than " + std::to_string(limits.max_stop_bytes) + " bytes");
  }
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    if (chat) {
      r.logprobs = boolean(j, "logprobs");
    } else {  // completions: an integer count of alternatives (0..5 in OpenAI's API)
      r.top_logprobs = static_cast<int>(integer(j, "logprobs", 0, limits.max_top_logprobs));
      r.logprobs = true;
    }
  }
  if (chat && j.contains("top_logprobs") && !j["top_logprobs"].is_null()) {
    r.top_logprobs = static_cast<int>(integer(j, "top_logprobs", 0, limits.max_top_logprobs));
    if (!r.logprobs) bad("top_logprobs", "'top_logprobs' needs logprobs: true");
  }
  return r;
}

}  // namespace kvlm::server
