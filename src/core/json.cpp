#include "core/json.h"

#include <set>
#include <vector>

#include "core/error.h"

namespace kvlm {

nlohmann::json parse_json_strict(const char* begin, const char* end, const std::string& label, int max_depth) {
  using nlohmann::json;
  // Cheap pre-scan: the parser's callback sees depth only after it has descended, and nlohmann
  // builds nested values recursively in places, so refuse deep input before parsing at all.
  int depth = 0;
  bool in_string = false;
  for (const char* p = begin; p < end; ++p) {
    const char ch = *p;
    if (in_string) {
      if (ch == '\\') ++p;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth) fail(label, ": JSON nests deeper than ", max_depth, " levels");
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  // One set of seen keys per open object; arrays push an empty placeholder to keep levels aligned.
  std::vector<std::set<std::string>> keys;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start: keys.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.empty() && !keys.back().insert(k).second) fail(label, ": JSON object names key '", k, "' twice");
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return json::parse(begin, end, cb, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    fail(label, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace kvlm
