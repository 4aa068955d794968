// Filters, tests and methods of the Jinja subset, with Python's results for the values
// templates pass them (str methods, dict.get/items, selectattr/map/join/tojson/indent, ...).
#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/interp.h"

namespace kvlm::jinja {

Value Interp::method(const Value& obj, const std::string& name, const Args& a, int line) {
  auto arg_str = [&](size_t k, const char* n, const std::string& dflt) {
    const Value* v = a.get(k, n);
    if (!v || v->t == Value::T::None) return dflt;
    if (v->t != Value::T::Str) err(line, name + "() needs a string argument");
    return v->s;
  };
  if (obj.t == Value::T::Dict) {
    if (name == "get") {
      const Value* k = a.get(0, "key");
      if (!k || k->t != Value::T::Str) return Value::none();
      const Value* v = obj.find(k->s);
      if (v) return *v;
      const Value* d = a.get(1, "default");
      return d ? *d : Value::none();
    }
    if (name == "items") {
      List l;
      for (auto& [k, v] : *obj.dict) l.push_back(Value::new_list({Value::str(k), v}));
      return Value::new_list(std::move(l));
    }
    if (name == "keys" || name == "values") {
      List l;
      for (auto& [k, v] : *obj.dict) l.push_back(name == "keys" ? Value::str(k) : v);
      return Value::new_list(std::move(l));
    }
  }
  if (obj.t == Value::T::Str) {
    const std::string& s = obj.s;
    if (name == "startswith" || name == "endswith") {
      std::string x = arg_str(0, "prefix", "");
      bool r = name == "startswith" ? s.rfind(x, 0) == 0 : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      return Value::boolean(r);
    }
    if (name == "strip") return Value::str(strip(s, arg_str(0, "chars", ""), true, true));
    if (name == "lstrip") return Value::str(strip(s, arg_str(0, "chars", ""), true, false));
    if (name == "rstrip") return Value::str(strip(s, arg_str(0, "chars", ""), false, true));
    if (name == "upper" || name == "lower") {
      std::string r = s;
      for (char& c : r) c = name == "upper" ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return Value::str(r);
    }
    if (name == "replace") return Value::str(replace_all(s, arg_str(0, "old", ""), arg_str(1, "new", "")));
    if (name == "split") {
      std::string sep = arg_str(0, "sep", "");
      List parts;
      if (sep.empty()) {
        std::string cur;
        for (char c : s) {
          if (std::isspace(static_cast<unsigned char>(c))) {
            if (!cur.empty()) parts.push_back(Value::str(cur));
            cur.clear();
          } else {
            cur += c;
          }
        }
        if (!cur.empty()) parts.push_back(Value::str(cur));
      } else {
        size_t p = 0, f;
        while ((f = s.find(sep, p)) != std::string::npos) {
          parts.push_back(Value::str(s.substr(p, f - p)));
          p = f + sep.size();
        }
        parts.push_back(Value::str(s.substr(p)));
      }
      return Value::new_list(std::move(parts));
    }
  }
  err(line, "unsupported method '" + name + "' on " + (obj.defined() ? py_repr(obj) : std::string("an undefined value")));
}

bool Interp::test(const std::string& name, const Value& v, const Args& a, int line) {
  using T = Value::T;
  if (name == "defined") return v.defined();
  if (name == "undefined") return !v.defined();
  if (name == "none") return v.t == T::None;
  if (name == "string") return v.t == T::Str;
  if (name == "mapping") return v.t == T::Dict;
  if (name == "iterable") return v.t == T::List || v.t == T::Dict || v.t == T::Str;
  if (name == "sequence") return v.t == T::List || v.t == T::Str || v.t == T::Dict;
  if (name == "number") return v.t == T::Int || v.t == T::Float;
  if (name == "integer") return v.t == T::Int;
  if (name == "float") return v.t == T::Float;
  if (name == "boolean") return v.t == T::Bool;
  if (name == "true") return v.t == T::Bool && v.b;
  if (name == "false") return v.t == T::Bool && !v.b;
  if (name == "callable") return v.t == T::Func;
  if (name == "odd" || name == "even") {
    if (v.t != T::Int) err(line, "odd/even need an integer");
    return (v.i % 2 != 0) == (name == "odd");
  }
  const Value* x = a.get(0, "value");
  if (!x) err(line, "test '" + name + "' needs an argument");
  if (name == "divisibleby") return x->t == T::Int && x->i != 0 && v.t == T::Int && v.i % x->i == 0;
  if (name == "equalto" || name == "eq") return equal(v, *x);
  if (name == "ne") return !equal(v, *x);
  if (name == "lt") return less(v, *x, line);
  if (name == "gt") return less(*x, v, line);
  if (name == "le") return !less(*x, v, line);
  if (name == "ge") return !less(v, *x, line);
  if (name == "in") return contains(*x, v, line);
  err(line, "unsupported test '" + name + "'");
}

Value Interp::filter(const std::string& name, const Value& v, const Args& a, int line, Scope& sc) {
  using T = Value::T;
  auto str_arg = [&](size_t k, const char* n, const std::string& dflt) {
    const Value* x = a.get(k, n);
    return x ? py_str(*x) : dflt;
  };
  if (name == "safe" || name == "e" || name == "escape") return v;  // no autoescaping: text stays text
  if (name == "string") return Value::str(py_str(v));
  if (name == "trim") return Value::str(strip(py_str(v), str_arg(0, "chars", ""), true, true));
  if (name == "lower" || name == "upper") return method(Value::str(py_str(v)), name, {}, line);
  if (name == "capitalize" || name == "title") {
    std::string s = py_str(v);
    bool start = true;
    for (size_t k = 0; k < s.size(); ++k) {
      unsigned char c = static_cast<unsigned char>(s[k]);
      bool alpha = std::isalpha(c) != 0;
      if (name == "capitalize") s[k] = static_cast<char>(k == 0 ? std::toupper(c) : std::tolower(c));
      else s[k] = static_cast<char>(start && alpha ? std::toupper(c) : alpha ? std::tolower(c) : c);
      start = !alpha;
    }
    return Value::str(s);
  }
  if (name == "replace") return Value::str(replace_all(py_str(v), str_arg(0, "old", ""), str_arg(1, "new", "")));
  if (name == "length" || name == "count") {
    if (v.t == T::Str) {
      int64_t n = 0;
      for (unsigned char c : v.s) n += (c & 0xC0) != 0x80;
      return Value::integer(n);
    }
    return Value::integer(static_cast<int64_t>(iterate(v, line).size()));
  }
  if (name == "tojson") {
    const Value* ind = a.get(0, "indent");
    // Python indents by max(indent, 0) spaces a level; more than kMaxIndent is refused, not allocated.
    if (ind && ind->t == T::Int && ind->i > kMaxIndent) err(line, "tojson indent over " + std::to_string(kMaxIndent));
    return Value::str(py_json(v, ind && ind->t == T::Int ? static_cast<int>(std::max<int64_t>(ind->i, 0)) : -1));
  }
  if (name == "items") return method(v.t == T::Dict ? v : Value::new_dict(), "items", {}, line);
  if (name == "list") return Value::new_list(iterate(v, line));
  if (name == "first" || name == "last") {
    std::vector<Value> l = iterate(v, line);
    if (l.empty()) return Value();
    return name == "first" ? l.front() : l.back();
  }
  if (name == "reverse") {
    if (v.t == T::Str) return Value::str(std::string(v.s.rbegin(), v.s.rend()));
    std::vector<Value> l = iterate(v, line);
    std::reverse(l.begin(), l.end());
    return Value::new_list(std::move(l));
  }
  if (name == "join") {
    std::string sep = str_arg(0, "d", ""), out;
    const Value* attr = a.get(1, "attribute");
    bool first = true;
    for (const Value& x : iterate(v, line)) {
      std::string item = py_str(attr ? attribute(x, py_str(*attr)) : x);
      charge_work(sep.size() + item.size());
      out += (first ? "" : sep) + item;
      first = false;
    }
    return Value::str(out);
  }
  if (name == "default" || name == "d") {
    const Value* dflt = a.get(0, "default_value");
    const Value* boolean = a.get(1, "boolean");
    bool use = !v.defined() || (boolean && boolean->truthy() && !v.truthy());
    return use ? (dflt ? *dflt : Value::str("")) : v;
  }
  if (name == "indent") {
    const Value* w = a.get(0, "width");
    const Value* first = a.get(1, "first");
    const Value* blank = a.get(2, "blank");
    if (w && w->t == T::Int && w->i > kMaxIndent) err(line, "indent width over " + std::to_string(kMaxIndent));
    // ' ' * width, as Jinja makes it: none for a negative width.
    std::string pad = w && w->t == T::Str ? w->s : std::string(w && w->t == T::Int ? static_cast<size_t>(std::max<int64_t>(w->i, 0)) : 4, ' ');
    std::string s = py_str(v), out;
    size_t p = 0;
    bool first_line = true;
    while (p <= s.size()) {
      size_t nl = s.find('\n', p);
      std::string ln = s.substr(p, nl == std::string::npos ? std::string::npos : nl - p);
      bool indent = first_line ? (first && first->truthy()) : (!ln.empty() || (blank && blank->truthy()));
      charge_work(pad.size() + ln.size());
      out += (indent ? pad : "") + ln;
      if (nl == std::string::npos) break;
      out += "\n";
      p = nl + 1;
      first_line = false;
    }
    return Value::str(out);
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    const bool by_attr = name == "selectattr" || name == "rejectattr", keep = name == "selectattr" || name == "select";
    size_t k = 0;
    std::string attr = by_attr ? str_arg(k++, "attribute", "") : "";
    const Value* t = a.get(k++, "test");
    List out;
    for (const Value& x : iterate(v, line)) {
      Value subject = by_attr ? attribute(x, attr) : x;
      bool r;
      if (!t) {
        r = subject.truthy();
      } else {
        Args rest;
        for (size_t j = k; j < a.pos.size(); ++j) rest.pos.push_back(a.pos[j]);
        r = test(py_str(*t), subject, rest, line);
      }
      if (r == keep) out.push_back(x);
    }
    return Value::new_list(std::move(out));
  }
  if (name == "map") {
    const Value* attr = a.get(99, "attribute");
    List out;
    for (const Value& x : iterate(v, line)) {
      if (attr) {
        Value got = attribute(x, py_str(*attr));
        const Value* d = a.get(99, "default");
        out.push_back(!got.defined() && d ? *d : got);
      } else if (!a.pos.empty()) {
        Args rest;
        for (size_t j = 1; j < a.pos.size(); ++j) rest.pos.push_back(a.pos[j]);
        out.push_back(filter(py_str(a.pos[0]), x, rest, line, sc));
      } else {
        err(line, "map needs a filter name or attribute=");
      }
    }
    return Value::new_list(std::move(out));
  }
  if (name == "unique") {
    List out;
    for (const Value& x : iterate(v, line))
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); })) out.push_back(x);
    return Value::new_list(std::move(out));
  }
  if (name == "abs") return v.t == T::Int ? Value::integer(std::llabs(v.i)) : Value::number(std::fabs(v.as_double()));
  if (name == "int") {
    if (v.t == T::Str) {
      try {
        return Value::integer(std::stoll(v.s));
      } catch (...) {
        return Value::integer(0);
      }
    }
    if (!v.is_number()) return Value::integer(0);
    if (v.t != T::Float) return Value::integer(v.t == T::Bool ? v.b : v.i);
    // In range (and not NaN) before the conversion, which is undefined outside int64.
    if (!(std::fabs(v.f) < 9223372036854775808.0)) err(line, "int() of " + py_repr(v) + " is out of range");
    return Value::integer(static_cast<int64_t>(v.f));
  }
  if (name == "float") {
    if (v.t == T::Str) {
      try {
        return Value::number(std::stod(v.s));
      } catch (...) {
        return Value::number(0);
      }
    }
    return Value::number(v.is_number() ? v.as_double() : 0);
  }
  if (name == "sort" || name == "min" || name == "max" || name == "sum") {
    std::vector<Value> l = iterate(v, line);
    if (name == "sum") {
      Value acc = Value::integer(0);
      for (const Value& x : l) acc = binary("+", acc, x, line);
      return acc;
    }
    std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) { return less(x, y, line); });
    if (name == "sort") return Value::new_list(std::move(l));
    if (l.empty()) return Value();
    return name == "min" ? l.front() : l.back();
  }
  err(line, "unsupported filter '" + name + "'");
}

}  // namespace kvlm::jinja
