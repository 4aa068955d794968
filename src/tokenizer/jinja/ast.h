// The parsed form of a template: expression trees and statement lists.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace kvlm::jinja {

// How deep a template may nest: expressions (parentheses, operators, chains of filters or
// attributes) and blocks each. Parsing, rendering and freeing a tree recurse once a level, so a
// deeper template would overflow the stack (a 20 KB template of parentheses crashed the
// process); real chat templates nest under 20.
inline constexpr int kMaxNesting = 100;

struct Expr;
using ExprP = std::shared_ptr<Expr>;

struct Expr {
  enum class K { Lit, Var, Attr, Index, Slice, Call, Filter, Test, Not, Neg, Binary, Cond, ListLit, DictLit };
  K k;
  int line = 0;
  Value lit;                    // Lit
  std::string name;             // Var, Attr, Filter, Test; Binary: the operator
  std::vector<ExprP> kids;      // operands; Call/Filter/Test: [callee/subject, positional..., keyword...]
  std::vector<std::string> kw;  // keyword names of the trailing kids
  bool negate = false;          // Test: "is not"
  int depth = 1;                // this tree's height, at most kMaxNesting
};

struct Node;
using Body = std::vector<std::shared_ptr<Node>>;

struct Node {
  enum class K { Text, Out, If, For, Set, SetBlock, Macro, FilterBlock, Break, Continue };
  K k;
  int line = 0;
  std::string text;                         // Text; Set/SetBlock/Macro: the name; Set: ns attribute in attr
  std::string attr;                         // Set: `ns.attr` target
  ExprP e;                                  // Out, Set value, For iterable, FilterBlock filter (a Filter on null)
  std::vector<std::pair<ExprP, Body>> branches;  // If: (condition, body) in order
  Body body, else_body;                     // For, SetBlock, Macro, FilterBlock; If/For else
  std::vector<std::string> targets;         // For loop variables; Macro parameters
  std::vector<ExprP> defaults;              // Macro parameter defaults (null = none)
  ExprP cond;                               // For ... if cond
};

struct Template {
  Body body;
};

// Parses Jinja source with trim_blocks and lstrip_blocks on (transformers' settings).
std::unique_ptr<Template> parse_template(const std::string& source);

}  // namespace kvlm::jinja
