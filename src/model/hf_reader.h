// HfReader: typed access to a Hugging Face config.json, each error naming the file and the key.
// Families read their keys through it (model/families/*.cpp).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/error.h"

namespace kvlm {

struct HfReader {
  const nlohmann::json& j;
  const std::string& label;
  // Keys a family asked about: the keys that change arithmetic are refused unless the family
  // read them (hf_config.cpp), so a family honours a key by reading it.
  mutable std::set<std::string> read_keys = {};

  bool has(const char* key) const {
    read_keys.insert(key);
    return j.contains(key) && !j[key].is_null();
  }
  int integer(const char* key) const {
    if (!has(key)) fail(label, ": missing config key '", key, "'");
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      fail(label, ": config key '", key, "' must be an integer");
    return v.get<int>();
  }
  int integer_or(const char* key, int fallback) const { return has(key) ? integer(key) : fallback; }
  float number_or(const char* key, float fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_number()) fail(label, ": config key '", key, "' must be a number");
    return j[key].get<float>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) fail(label, ": config key '", key, "' must be true or false");
    return j[key].get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_string()) fail(label, ": config key '", key, "' must be a string");
    return j[key].get<std::string>();
  }
  // The activation key must name one of two spellings of the same function.
  void check_activation(const char* key, const std::string& expect_a, const std::string& expect_b) const {
    std::string act = string_or(key, expect_a);
    if (act != expect_a && act != expect_b)
      fail(label, ": unsupported ", key, " '", act, "' (supported: ", expect_a, ", ", expect_b, ")");
  }
};

}  // namespace kvlm
