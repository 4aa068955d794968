// Values of the Jinja subset: Python's None/bool/int/float/str/list/dict, plus Undefined and
// callables. Lists and dicts are shared (reference semantics, as in Python), which is what lets
// `{% set ns.x = ... %}` change a namespace from inside a loop.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvlm::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, like Python's dict

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* get(size_t i, const char* name) const;  // positional i, else keyword `name`
};

// How deep lists and dicts may nest. Printing, comparing and freeing a value recurse once a level,
// and a template's loop can wrap a list a million times; real conversations nest a few levels.
inline constexpr int kMaxValueDepth = 128;
// The bytes of strings and the slots of lists and dicts one render may make, all told (freed ones
// included): each loop iteration is bounded, but not what it makes, and a million of them could
// double a string or copy a growing list into gigabytes.
inline constexpr size_t kMaxRenderWork = size_t(1) << 28;
void charge_work(size_t bytes);  // throws once this thread's render has made more than kMaxRenderWork
// A render's budget, from its start to its end however it ends (parsing is not counted).
struct RenderBudget {
  RenderBudget();
  ~RenderBudget();
};

struct Value {
  enum class T { Undefined, None, Bool, Int, Float, Str, List, Dict, Func };
  T t = T::Undefined;
  // A list's or dict's nesting as made (0 for the rest), and whether it is or holds a namespace.
  // Namespaces are the only values that change after they are made, and none may hold another
  // (put refuses it): so no value can contain itself, and no value nests past twice the limit.
  int depth = 0;
  bool namespace_ = false, holds_namespace = false;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<std::function<Value(const Args&)>> fn;

  static Value none() { Value v; v.t = T::None; return v; }
  static Value boolean(bool x) { Value v; v.t = T::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.t = T::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.t = T::Float; v.f = x; return v; }
  static Value str(std::string x) { charge_work(x.size()); Value v; v.t = T::Str; v.s = std::move(x); return v; }
  static Value new_list(List l = {});  // throws past kMaxValueDepth
  static Value new_dict(Dict d = {});
  static Value new_namespace(Dict d);  // namespace(...): a dict set through `set ns.x = ...`
  static Value func(std::function<Value(const Args&)> f) {
    Value v; v.t = T::Func; v.fn = std::make_shared<std::function<Value(const Args&)>>(std::move(f)); return v;
  }
  static Value from_json(const nlohmann::json& j);

  bool defined() const { return t != T::Undefined; }
  bool is_number() const { return t == T::Int || t == T::Float || t == T::Bool; }
  double as_double() const { return t == T::Float ? f : t == T::Bool ? (b ? 1 : 0) : static_cast<double>(i); }
  bool truthy() const;
  const Value* find(const std::string& key) const;  // dict item, or null
  void put(const std::string& key, Value v);        // dict item set (insert or replace); throws as new_dict
};

bool equal(const Value& a, const Value& b);
std::string py_str(const Value& v);   // Python str(): what {{ v }} prints
std::string py_repr(const Value& v);  // Python repr()
// Python json.dumps(v, ensure_ascii=False, indent=indent, separators=default), as transformers' tojson.
std::string py_json(const Value& v, int indent = -1, int depth = 0);

}  // namespace kvlm::jinja
