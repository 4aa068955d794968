// The interpreter: statements write to one output string; expressions evaluate to Values with
// Python's semantics for the operations templates use. Work is bounded: output size, loop
// iterations and macro depth all have limits, so a template cannot run away.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/interp.h"

namespace kvlm::jinja {

std::vector<Value> iterate(const Value& v, int line) {
  switch (v.t) {
    case Value::T::List: return *v.list;
    case Value::T::Dict: {
      std::vector<Value> keys;
      for (auto& [k, x] : *v.dict) keys.push_back(Value::str(k));
      return keys;
    }
    case Value::T::Str: {
      std::vector<Value> chars;
      for (size_t i = 0; i < v.s.size();) {  // by UTF-8 character
        size_t n = 1;
        unsigned char c = static_cast<unsigned char>(v.s[i]);
        if (c >= 0xF0) n = 4;
        else if (c >= 0xE0) n = 3;
        else if (c >= 0xC0) n = 2;
        chars.push_back(Value::str(v.s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    case Value::T::Undefined:
    case Value::T::None: return {};
    default: err(line, "cannot iterate over " + py_repr(v));
  }
}

Value attribute(const Value& obj, const std::string& key) {
  if (const Value* v = obj.find(key)) return *v;
  return Value();
}

Value index(const Value& obj, const Value& key, int line) {
  if (obj.t == Value::T::Dict) {
    if (key.t != Value::T::Str) return Value();
    return attribute(obj, key.s);
  }
  if ((obj.t == Value::T::List || obj.t == Value::T::Str) && (key.t == Value::T::Int || key.t == Value::T::Bool)) {
    int64_t n = obj.t == Value::T::List ? static_cast<int64_t>(obj.list->size()) : static_cast<int64_t>(obj.s.size());
    int64_t k = key.t == Value::T::Bool ? key.b : key.i;
    if (k < 0) k += n;
    if (k < 0 || k >= n) return Value();
    return obj.t == Value::T::List ? (*obj.list)[k] : Value::str(obj.s.substr(k, 1));
  }
  if (obj.t == Value::T::Undefined || obj.t == Value::T::None) return Value();
  err(line, "cannot index " + py_repr(obj) + " with " + py_repr(key));
}

bool less(const Value& a, const Value& b, int line) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.t == Value::T::Str && b.t == Value::T::Str) return a.s < b.s;
  err(line, "cannot compare " + py_repr(a) + " and " + py_repr(b));
}

bool contains(const Value& hay, const Value& needle, int line) {
  if (hay.t == Value::T::Str) {
    if (needle.t != Value::T::Str) err(line, "'in <string>' needs a string");
    return hay.s.find(needle.s) != std::string::npos;
  }
  if (hay.t == Value::T::List) {
    for (const Value& v : *hay.list)
      if (equal(v, needle)) return true;
    return false;
  }
  if (hay.t == Value::T::Dict) return needle.t == Value::T::Str && hay.find(needle.s);
  if (hay.t == Value::T::Undefined || hay.t == Value::T::None) err(line, "'in' on an undefined value");
  err(line, "'in' needs a string, list or mapping");
}

std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  auto is_strip = [&](char c) { return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0 : chars.find(c) != std::string::npos; };
  if (left)
    while (b < e && is_strip(s[b])) ++b;
  if (right)
    while (e > b && is_strip(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t p = 0, f;
  while ((f = s.find(from, p)) != std::string::npos) {
    charge_work(f - p + to.size());
    out += s.substr(p, f - p) + to;
    p = f + from.size();
  }
  return out + s.substr(p);
}

namespace {
// Python's int arithmetic on ints and bools, exact in 64 bits (through doubles, sums past 2^53
// came out wrong, and out-of-range conversions were undefined); where Python's unbounded ints
// would leave int64, an error.
Value int_binary(const std::string& op, const Value& a, const Value& b, int line) {
  const int64_t x = a.t == Value::T::Bool ? a.b : a.i, y = b.t == Value::T::Bool ? b.b : b.i;
  int64_t r = 0;
  auto overflow = [&]() -> Value { err(line, "integer overflow in '" + op + "'"); };
  if (op == "+") return __builtin_add_overflow(x, y, &r) ? overflow() : Value::integer(r);
  if (op == "-") return __builtin_sub_overflow(x, y, &r) ? overflow() : Value::integer(r);
  if (op == "*") return __builtin_mul_overflow(x, y, &r) ? overflow() : Value::integer(r);
  if (y == 0 && (op == "/" || op == "//" || op == "%")) err(line, "division by zero");
  if (op == "/") return Value::number(static_cast<double>(x) / static_cast<double>(y));
  if (op == "//" || op == "%") {  // floor division, the remainder taking the divisor's sign
    if (x == INT64_MIN && y == -1) return op == "%" ? Value::integer(0) : overflow();
    int64_t q = x / y, m = x % y;
    if (m != 0 && (m < 0) != (y < 0)) --q, m += y;
    return Value::integer(op == "//" ? q : m);
  }
  if (op == "**") {
    if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
    int64_t result = 1, base = x;
    for (int64_t e = y; e > 0;) {  // at most 63 squarings
      if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return overflow();
      e >>= 1;
      if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow();
    }
    return Value::integer(result);
  }
  err(line, "unknown operator " + op);
}
}  // namespace

Value binary(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "==") return Value::boolean(equal(a, b));
  if (op == "!=") return Value::boolean(!equal(a, b));
  if (op == "<") return Value::boolean(less(a, b, line));
  if (op == ">") return Value::boolean(less(b, a, line));
  if (op == "<=") return Value::boolean(!less(b, a, line));
  if (op == ">=") return Value::boolean(!less(a, b, line));
  if (op == "in") return Value::boolean(contains(b, a, line));
  if (op == "~") return Value::str(py_str(a) + py_str(b));
  if (op == "+") {
    if (a.t == Value::T::Str && b.t == Value::T::Str) return Value::str(a.s + b.s);
    if (a.t == Value::T::List && b.t == Value::T::List) {
      charge_work((a.list->size() + b.list->size()) * sizeof(Value));  // before the copy
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Value::new_list(std::move(l));
    }
  }
  if (op == "*" && a.t == Value::T::Str && b.t == Value::T::Int) {
    if (a.s.empty() || b.i <= 0) return Value::str("");  // and no loop of b.i empty appends
    if (b.i > static_cast<int64_t>(kMaxOutput / a.s.size())) err(line, "string repetition too large");
    std::string s;
    for (int64_t k = 0; k < b.i; ++k) s += a.s;
    return Value::str(s);
  }
  if (!a.is_number() || !b.is_number()) err(line, "unsupported operands for '" + op + "': " + py_repr(a) + ", " + py_repr(b));
  if (a.t != Value::T::Float && b.t != Value::T::Float) return int_binary(op, a, b, line);
  const double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (y == 0 && (op == "/" || op == "//" || op == "%")) err(line, "division by zero");
  if (op == "/") return Value::number(x / y);
  if (op == "//") return Value::number(std::floor(x / y));
  if (op == "%") return Value::number(x - y * std::floor(x / y));
  if (op == "**") return Value::number(std::pow(x, y));
  err(line, "unknown operator " + op);
}


Value Interp::eval(const Expr& e, Scope& sc) {
  Frame frame(*this, e.line);
  switch (e.k) {
    case Expr::K::Lit: return e.lit;
    case Expr::K::Var: {
      Value* v = sc.find(e.name);
      return v ? *v : Value();
    }
    case Expr::K::Attr: {
      Value obj = eval(*e.kids[0], sc);
      return attribute(obj, e.name);
    }
    case Expr::K::Index: return index(eval(*e.kids[0], sc), eval(*e.kids[1], sc), e.line);
    case Expr::K::Slice: {
      Value obj = eval(*e.kids[0], sc);
      int64_t n = obj.t == Value::T::List ? static_cast<int64_t>(obj.list->size()) : obj.t == Value::T::Str ? static_cast<int64_t>(obj.s.size()) : -1;
      if (n < 0) err(e.line, "cannot slice " + py_repr(obj));
      int64_t step = 1;
      if (e.kids[3]) {
        Value sv = eval(*e.kids[3], sc);
        if (sv.t == Value::T::Int) step = sv.i;
        else if (sv.t != Value::T::None) err(e.line, "slice step must be an integer");
      }
      if (step == 0) err(e.line, "slice step cannot be zero");
      // Python's slice rules: negative bounds count from the end, then clamp.
      auto bound = [&](size_t k, int64_t dflt) {
        if (!e.kids[k]) return dflt;
        Value v = eval(*e.kids[k], sc);
        if (v.t == Value::T::None) return dflt;
        if (v.t != Value::T::Int) err(e.line, "slice bounds must be integers");
        int64_t x = v.i < 0 ? v.i + n : v.i;
        return step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
      };
      int64_t lo = bound(1, step > 0 ? 0 : n - 1), hi = bound(2, step > 0 ? n : -1);
      List l;
      std::string s;
      for (__int128 k = lo; step > 0 ? k < hi : k > hi; k += step) {  // 128 bits: k + step can pass int64
        if (obj.t == Value::T::List) l.push_back((*obj.list)[k]);
        else s += obj.s[k];
      }
      return obj.t == Value::T::List ? Value::new_list(std::move(l)) : Value::str(s);
    }
    case Expr::K::Call: return call(e, sc);
    case Expr::K::Filter: {
      Value v = eval(*e.kids[0], sc);
      return filter(e.name, v, args(e, 1, sc), e.line, sc);
    }
    case Expr::K::Test: {
      Value v;
      // `x is defined` must not fail on x's own undefinedness.
      v = eval(*e.kids[0], sc);
      bool r = test(e.name, v, args(e, 1, sc), e.line);
      return Value::boolean(e.negate ? !r : r);
    }
    case Expr::K::Not: return Value::boolean(!eval(*e.kids[0], sc).truthy());
    case Expr::K::Neg: {
      Value v = eval(*e.kids[0], sc);
      if (v.t == Value::T::Int) {
        if (v.i == INT64_MIN) err(e.line, "integer overflow in '-'");
        return Value::integer(-v.i);
      }
      if (v.t == Value::T::Float) return Value::number(-v.f);
      err(e.line, "cannot negate " + py_repr(v));
    }
    case Expr::K::Binary: {
      if (e.name == "and") {
        Value a = eval(*e.kids[0], sc);
        return a.truthy() ? eval(*e.kids[1], sc) : a;
      }
      if (e.name == "or") {
        Value a = eval(*e.kids[0], sc);
        return a.truthy() ? a : eval(*e.kids[1], sc);
      }
      return binary(e.name, eval(*e.kids[0], sc), eval(*e.kids[1], sc), e.line);
    }
    case Expr::K::Cond: return eval(*e.kids[0], sc).truthy() ? eval(*e.kids[1], sc) : eval(*e.kids[2], sc);
    case Expr::K::ListLit: {
      List l;
      for (const auto& k : e.kids) l.push_back(eval(*k, sc));
      return Value::new_list(std::move(l));
    }
    case Expr::K::DictLit: {
      Value d = Value::new_dict();
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
        Value key = eval(*e.kids[k], sc);
        if (key.t != Value::T::Str) err(e.line, "dict keys must be strings");
        d.put(key.s, eval(*e.kids[k + 1], sc));
      }
      return d;
    }
  }
  return Value();
}

Value Interp::call(const Expr& e, Scope& sc) {
  const Expr& callee = *e.kids[0];
  Args a = args(e, 1, sc);
  if (callee.k == Expr::K::Attr) {  // obj.method(...)
    Value obj = eval(*callee.kids[0], sc);
    if (obj.t != Value::T::Dict || !obj.find(callee.name) || obj.find(callee.name)->t != Value::T::Func)
      return method(obj, callee.name, a, e.line);
  }
  Value f = eval(callee, sc);
  if (f.t != Value::T::Func) err(e.line, "'" + (callee.k == Expr::K::Var ? callee.name : std::string("value")) + "' is not callable");
  return (*f.fn)(a);
}

Flow Interp::exec(const Node& n, Scope& sc, std::string& out) {
  Frame frame(*this, n.line);
  switch (n.k) {
    case Node::K::Text: out += n.text; return Flow::Normal;
    case Node::K::Out: out += py_str(eval(*n.e, sc)); return Flow::Normal;
    case Node::K::If:
      for (const auto& [c, body] : n.branches)
        if (eval(*c, sc).truthy()) return exec(body, sc, out);
      return exec(n.else_body, sc, out);
    case Node::K::For: {
      std::vector<Value> items = iterate(eval(*n.e, sc), n.line);
      std::vector<Value> kept;
      Scope body_scope{&sc, {}};
      for (const Value& it : items) {  // `for x in y if cond`: filtered before the loop counts
        if (n.cond) {
          body_scope.vars.clear();
          if (n.targets.size() == 1) body_scope.set(n.targets[0], it);
          if (!eval(*n.cond, body_scope).truthy()) continue;
        }
        kept.push_back(it);
      }
      if (kept.empty()) return exec(n.else_body, sc, out);
      const int64_t len = static_cast<int64_t>(kept.size());
      for (int64_t k = 0; k < len; ++k) {
        if (++iterations > kMaxIterations) err(n.line, "too many loop iterations");
        Scope s{&sc, {}};
        const Value& it = kept[k];
        if (n.targets.size() == 1) {
          s.set(n.targets[0], it);
        } else {
          std::vector<Value> parts = iterate(it, n.line);
          if (parts.size() != n.targets.size()) err(n.line, "cannot unpack " + py_repr(it));
          for (size_t t = 0; t < parts.size(); ++t) s.set(n.targets[t], parts[t]);
        }
        Value loop = Value::new_dict();
        loop.put("index", Value::integer(k + 1));
        loop.put("index0", Value::integer(k));
        loop.put("revindex", Value::integer(len - k));
        loop.put("revindex0", Value::integer(len - k - 1));
        loop.put("first", Value::boolean(k == 0));
        loop.put("last", Value::boolean(k == len - 1));
        loop.put("length", Value::integer(len));
        loop.put("previtem", k > 0 ? kept[k - 1] : Value());
        loop.put("nextitem", k + 1 < len ? kept[k + 1] : Value());
        s.set("loop", loop);
        Flow f = exec(n.body, s, out);
        if (f == Flow::Break) break;
      }
      return Flow::Normal;
    }
    case Node::K::Set: {
      Value v = eval(*n.e, sc);
      if (n.attr.empty()) {
        sc.set(n.text, v);
      } else {
        Value* ns = sc.find(n.text);
        // As Jinja: only a namespace takes attributes (the one kind of value that changes).
        if (!ns || ns->t != Value::T::Dict || !ns->namespace_) err(n.line, "'" + n.text + "' is not a namespace");
        ns->put(n.attr, v);
      }
      return Flow::Normal;
    }
    case Node::K::SetBlock: {
      std::string s;
      exec(n.body, sc, s);
      sc.set(n.text, Value::str(s));
      return Flow::Normal;
    }
    case Node::K::Macro: {
      const Node* def = &n;
      Scope* home = &sc;
      sc.set(n.text, Value::func([this, def, home](const Args& a) {
        if (++depth > kMaxMacroDepth) err(def->line, "macros nest too deeply");
        Scope s{home, {}};
        for (size_t k = 0; k < def->targets.size(); ++k) {
          const Value* v = a.get(k, def->targets[k].c_str());
          s.set(def->targets[k], v ? *v : def->defaults[k] ? eval(*def->defaults[k], *home) : Value());
        }
        std::string out;
        exec(def->body, s, out);
        --depth;
        return Value::str(out);
      }));
      return Flow::Normal;
    }
    case Node::K::FilterBlock: {
      std::string s;
      exec(n.body, sc, s);
      Args a;
      for (size_t k = 1; k < n.e->kids.size(); ++k) a.pos.push_back(eval(*n.e->kids[k], sc));
      out += py_str(filter(n.e->name, Value::str(s), a, n.line, sc));
      return Flow::Normal;
    }
    case Node::K::Break: return Flow::Break;
    case Node::K::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

}  // namespace kvlm::jinja

namespace kvlm {

ChatTemplate::ChatTemplate(const std::string& source) : tpl_(jinja::parse_template(source)) {}
ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token, const nlohmann::json& extra) const {
  using jinja::Value;
  jinja::RenderBudget budget;  // counts from here, the conversation's values included
  jinja::Scope globals;
  globals.set("messages", Value::from_json(messages));
  globals.set("add_generation_prompt", Value::boolean(add_generation_prompt));
  globals.set("bos_token", Value::str(bos_token));
  globals.set("eos_token", Value::str(eos_token));
  for (auto it = extra.begin(); it != extra.end(); ++it) globals.set(it.key(), Value::from_json(it.value()));
  globals.set("raise_exception", Value::func([](const jinja::Args& a) -> Value {
    fail("the template refused the conversation: ", a.pos.empty() ? std::string("(no message)") : jinja::py_str(a.pos[0]));
  }));
  globals.set("strftime_now", Value::func([](const jinja::Args& a) {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[256];
    std::string fmt = a.pos.empty() ? "%Y-%m-%d" : jinja::py_str(a.pos[0]);
    size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value::str(std::string(buf, n));
  }));
  globals.set("namespace", Value::func([](const jinja::Args& a) {
    jinja::Dict d(a.kw.begin(), a.kw.end());
    return Value::new_namespace(std::move(d));
  }));
  globals.set("range", Value::func([](const jinja::Args& a) {
    int64_t lo = 0, hi = 0, step = 1;
    if (a.pos.size() == 1) hi = a.pos[0].i;
    if (a.pos.size() >= 2) lo = a.pos[0].i, hi = a.pos[1].i;
    if (a.pos.size() >= 3) step = a.pos[2].i;
    if (step == 0) fail("range() step must not be zero");
    // In 128 bits: hi - lo, and the step past the last value, can overflow 64.
    const __int128 span = static_cast<__int128>(hi) - lo;
    const __int128 count = step > 0 ? (span > 0 ? (span + step - 1) / step : 0) : (span < 0 ? (span + step + 1) / step : 0);
    if (count > 1000000) fail("range() too large");
    jinja::List l;
    for (__int128 k = 0; k < count; ++k) l.push_back(Value::integer(static_cast<int64_t>(lo + k * step)));
    return Value::new_list(std::move(l));
  }));
  jinja::Interp in;
  std::string out;
  in.exec(tpl_->body, globals, out);
  return out;
}

}  // namespace kvlm
