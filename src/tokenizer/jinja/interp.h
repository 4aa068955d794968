// The interpreter's internals shared by eval.cpp (statements, expressions) and builtins.cpp
// (filters, tests, methods). Not part of the public API: see tokenizer/chat_template.h.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/jinja/ast.h"

namespace kvlm::jinja {

inline constexpr size_t kMaxOutput = 16u << 20;
inline constexpr long kMaxIterations = 1000000;
inline constexpr int kMaxMacroDepth = 64;
// The widest indent `tojson` and `indent` take: a template's indent is a few spaces, and a huge
// one would be allocated on every line before the output's limit could stop it.
inline constexpr int64_t kMaxIndent = 1000;
// Levels of expressions and statements being evaluated at once, macro calls included: each is a
// frame or two of the stack, so this bounds what a render takes of its thread's stack.
inline constexpr int kMaxEvalNesting = 1000;

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  Value* find(const std::string& n) {
    for (Scope* s = this; s; s = s->parent)
      for (auto& [k, v] : s->vars)
        if (k == n) return &v;
    return nullptr;
  }
  void set(const std::string& n, Value v) {
    for (auto& [k, old] : vars)
      if (k == n) {
        old = std::move(v);
        return;
      }
    vars.push_back({n, std::move(v)});
  }
};

enum class Flow { Normal, Break, Continue };

[[noreturn]] inline void err(int line, const std::string& what) { fail("template line ", line, ": ", what); }

class Interp {
 public:
  long iterations = 0;
  int depth = 0;    // macro calls
  int nesting = 0;  // eval and exec(Node) frames

  // Counts a frame of eval or exec for as long as it runs.
  struct Frame {
    Frame(Interp& in, int line) : in_(in) {
      if (++in_.nesting > kMaxEvalNesting) err(line, "the template nests more than " + std::to_string(kMaxEvalNesting) + " levels deep as it runs");
    }
    ~Frame() { --in_.nesting; }
    Interp& in_;
  };

  Flow exec(const Body& body, Scope& sc, std::string& out) {
    for (const auto& n : body) {
      Flow f = exec(*n, sc, out);
      if (f != Flow::Normal) return f;
      if (out.size() > kMaxOutput) err(n->line, "output is over 16 MB");
    }
    return Flow::Normal;
  }

  Value eval(const Expr& e, Scope& sc);

 private:
  Flow exec(const Node& n, Scope& sc, std::string& out);
  Value call(const Expr& e, Scope& sc);
  Value filter(const std::string& name, const Value& v, const Args& a, int line, Scope& sc);
  bool test(const std::string& name, const Value& v, const Args& a, int line);
  Value method(const Value& obj, const std::string& name, const Args& a, int line);
  Args args(const Expr& e, size_t first, Scope& sc) {
    Args a;
    size_t nkw = e.kw.size(), npos = e.kids.size() - first - nkw;
    for (size_t k = 0; k < npos; ++k) a.pos.push_back(eval(*e.kids[first + k], sc));
    for (size_t k = 0; k < nkw; ++k) a.kw.push_back({e.kw[k], eval(*e.kids[first + npos + k], sc)});
    return a;
  }
};

// Python semantics of the operations templates use (eval.cpp).
std::vector<Value> iterate(const Value& v, int line);
Value attribute(const Value& obj, const std::string& key);
Value index(const Value& obj, const Value& key, int line);
bool less(const Value& a, const Value& b, int line);
bool contains(const Value& hay, const Value& needle, int line);
std::string strip(const std::string& s, const std::string& chars, bool left, bool right);
std::string replace_all(std::string s, const std::string& from, const std::string& to);
Value binary(const std::string& op, const Value& a, const Value& b, int line);

}  // namespace kvlm::jinja
