#include "tokenizer/jinja/value.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace kvlm::jinja {

const Value* Args::get(size_t idx, const char* name) const {
  if (idx < pos.size()) return &pos[idx];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

Value Value::from_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return none();
    case nlohmann::json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_float: return number(j.get<double>());
    case nlohmann::json::value_t::string: return str(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return new_list(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.push_back({it.key(), from_json(it.value())});
      return new_dict(std::move(d));
    }
    default: return Value();
  }
}

bool Value::truthy() const {
  switch (t) {
    case T::Undefined:
    case T::None: return false;
    case T::Bool: return b;
    case T::Int: return i != 0;
    case T::Float: return f != 0;
    case T::Str: return !s.empty();
    case T::List: return !list->empty();
    case T::Dict: return !dict->empty();
    case T::Func: return true;
  }
  return false;
}

const Value* Value::find(const std::string& key) const {
  if (t != T::Dict) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

namespace {
thread_local size_t work_done = 0;
thread_local bool rendering = false;
}  // namespace

void charge_work(size_t bytes) {
  if (!rendering) return;
  work_done += bytes;
  if (work_done > kMaxRenderWork) fail("the template made more than ", kMaxRenderWork >> 20, " MB of values as it ran");
}
RenderBudget::RenderBudget() { work_done = 0, rendering = true; }
RenderBudget::~RenderBudget() { work_done = 0, rendering = false; }

namespace {
// One more level over an element: the container's depth and namespace flag, checked.
void take(Value& c, const Value& e) {
  if (c.namespace_ && e.holds_namespace) fail("a namespace cannot hold a namespace (nor a list or dict that holds one)");
  if (e.depth + 1 > c.depth) c.depth = e.depth + 1;
  if (c.depth > kMaxValueDepth) fail("a template's value nests more than ", kMaxValueDepth, " lists or dicts deep");
  c.holds_namespace = c.holds_namespace || e.holds_namespace;
}
}  // namespace

Value Value::new_list(List l) {
  Value v;
  v.t = T::List;
  v.depth = 1;
  charge_work(l.size() * sizeof(Value));
  for (const Value& e : l) take(v, e);
  v.list = std::make_shared<List>(std::move(l));
  return v;
}

Value Value::new_dict(Dict d) {
  Value v;
  v.t = T::Dict;
  v.depth = 1;
  charge_work(d.size() * sizeof(d[0]));
  for (const auto& kv : d) take(v, kv.second);
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::new_namespace(Dict d) {
  Value v = new_dict();
  v.namespace_ = v.holds_namespace = true;
  for (auto& [k, x] : d) v.put(k, std::move(x));
  return v;
}

void Value::put(const std::string& key, Value v) {
  take(*this, v);
  charge_work(sizeof((*dict)[0]));
  for (auto& [k, old] : *dict)
    if (k == key) {
      old = std::move(v);
      return;
    }
  dict->push_back({key, std::move(v)});
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.t != b.t) return (a.t == Value::T::None || a.t == Value::T::Undefined) && (b.t == Value::T::None || b.t == Value::T::Undefined) && a.t == b.t;
  switch (a.t) {
    case Value::T::Str: return a.s == b.s;
    case Value::T::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::T::Dict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* o = b.find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    case Value::T::Func: return a.fn == b.fn;
    default: return true;
  }
}

namespace {

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {  // the shortest digits that read back exactly
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  // buf holds d.ddde±XX; lay it out as Python's repr does (positional for 1e-4 <= |x| < 1e16).
  std::string m(buf);
  size_t e = m.find('e');
  int exp = std::atoi(m.c_str() + e + 1);
  std::string digits;
  bool neg = m[0] == '-';
  for (size_t k = neg ? 1 : 0; k < e; ++k)
    if (m[k] != '.') digits += m[k];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exp - 1), '0');
    return out + digits;
  }
  const size_t whole = static_cast<size_t>(exp) + 1;
  if (digits.size() <= whole) {
    out += digits;
    out.append(whole - digits.size(), '0');
    return out + ".0";
  }
  return out + digits.substr(0, whole) + "." + digits.substr(whole);
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

std::string repr_string(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  return out + q;
}

}  // namespace

std::string py_repr(const Value& v) {
  switch (v.t) {
    case Value::T::Str: return repr_string(v.s);
    case Value::T::List: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        std::string item = py_repr((*v.list)[k]);
        charge_work(item.size());  // a list of one long string a million times
        out += (k ? ", " : "") + item;
      }
      return out + "]";
    }
    case Value::T::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : *v.dict) {
        std::string item = py_repr(x);
        charge_work(item.size());
        out += (first ? "" : ", ") + repr_string(k) + ": " + item;
        first = false;
      }
      return out + "}";
    }
    default: return py_str(v);
  }
}

std::string py_str(const Value& v) {
  switch (v.t) {
    case Value::T::Undefined: return "";
    case Value::T::None: return "None";
    case Value::T::Bool: return v.b ? "True" : "False";
    case Value::T::Int: return std::to_string(v.i);
    case Value::T::Float: return float_repr(v.f);
    case Value::T::Str: return v.s;
    case Value::T::Func: return "<function>";
    default: return py_repr(v);
  }
}

std::string py_json(const Value& v, int indent, int depth) {
  if (depth > 256) fail("tojson: value nests too deeply");
  std::string out;
  const bool pretty = indent >= 0;
  auto newline = [&](int d) {
    if (!pretty) return;
    out += '\n';
    charge_work(static_cast<size_t>(indent) * static_cast<size_t>(d));
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  switch (v.t) {
    case Value::T::Undefined:
    case Value::T::None: return "null";
    case Value::T::Bool: return v.b ? "true" : "false";
    case Value::T::Int: return std::to_string(v.i);
    case Value::T::Float: return std::isfinite(v.f) ? float_repr(v.f) : std::isnan(v.f) ? "NaN" : v.f > 0 ? "Infinity" : "-Infinity";
    case Value::T::Str: json_string(out, v.s); return out;
    case Value::T::Func: fail("tojson: a function is not JSON");
    case Value::T::List:
      if (v.list->empty()) return "[]";
      out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += pretty ? "," : ", ";
        newline(depth + 1);
        out += py_json((*v.list)[k], indent, depth + 1);
      }
      newline(depth);
      return out + "]";
    case Value::T::Dict: {
      if (v.dict->empty()) return "{}";
      out += "{";
      bool first = true;
      for (const auto& [k, x] : *v.dict) {
        if (!first) out += pretty ? "," : ", ";
        first = false;
        newline(depth + 1);
        json_string(out, k);
        out += ": " + py_json(x, indent, depth + 1);
      }
      newline(depth);
      return out + "}";
    }
  }
  return "null";
}

}  // namespace kvlm::jinja
