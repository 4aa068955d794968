// Lexing and parsing of the Jinja subset. Whitespace control follows Jinja with trim_blocks and
// lstrip_blocks: "{%-"/"-%}" strip all whitespace on that side; a block or comment tag alone on
// its line loses the line's leading spaces and the newline after it.
#include <algorithm>
#include <set>

#include "core/error.h"
#include "tokenizer/jinja/ast.h"

namespace kvlm::jinja {

namespace {

struct Segment {
  enum K { Text, Var, Block } k;
  std::string s;
  int line;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::vector<Segment> segments(const std::string& src) {
  std::vector<Segment> out;
  size_t pos = 0;
  int line = 1;
  bool trim_next_newline = false, strip_next = false;
  auto count_lines = [&](size_t a, size_t b) {
    for (size_t k = a; k < b; ++k) line += src[k] == '\n';
  };
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && is_space(text[k])) ++k;
      text.erase(0, k);
    } else if (trim_next_newline) {
      if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
      else if (!text.empty() && text[0] == '\n') text.erase(0, 1);
    }
    strip_next = trim_next_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Text, text, line});
      break;
    }
    const char kind = src[open + 1];
    const bool minus_left = open + 2 < src.size() && src[open + 2] == '-';
    const bool plus_left = open + 2 < src.size() && src[open + 2] == '+';
    if (minus_left) {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && !plus_left) {  // lstrip_blocks: spaces before a tag alone on its line
      size_t k = open;
      while (k > pos && (src[k - 1] == ' ' || src[k - 1] == '\t')) --k;
      if (k == 0 || src[k - 1] == '\n') text.erase(text.size() - std::min(text.size(), open - k));
    }
    if (!text.empty()) out.push_back({Segment::Text, text, line});
    count_lines(pos, open);
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    // The tag ends at the first close outside a string literal ("{{ '}}' }}" is one tag).
    size_t end = std::string::npos;
    if (kind == '#') {
      end = src.find(close, open + 2);
    } else {
      char quote = 0;
      for (size_t k = open + 2; k + 1 < src.size(); ++k) {
        if (quote) {
          if (src[k] == '\\') ++k;
          else if (src[k] == quote) quote = 0;
        } else if (src[k] == '\'' || src[k] == '"') {
          quote = src[k];
        } else if (src.compare(k, 2, close) == 0) {
          end = k;
          break;
        }
      }
    }
    if (end == std::string::npos) fail("template line ", line, ": unclosed tag");
    size_t inner_b = open + 2 + (minus_left || plus_left ? 1 : 0), inner_e = end;
    const bool minus_right = end > inner_b && src[end - 1] == '-';
    const bool plus_right = end > inner_b && src[end - 1] == '+';
    if (minus_right || plus_right) --inner_e;
    std::string inner = src.substr(inner_b, inner_e - inner_b);
    if (kind == '{') out.push_back({Segment::Var, inner, line});
    else if (kind == '%') out.push_back({Segment::Block, inner, line});
    count_lines(open, end + 2);
    pos = end + 2;
    if (minus_right) strip_next = true;
    else if (kind != '{' && !plus_right) trim_next_newline = true;  // trim_blocks
  }
  return out;
}

struct Tok {
  enum K { Name, Int, Float, Str, Op, End } k;
  std::string s;
  double f = 0;
  int64_t i = 0;
};

std::vector<Tok> tokenize(const std::string& s, int line) {
  std::vector<Tok> out;
  size_t p = 0;
  while (p < s.size()) {
    char c = s[p];
    if (is_space(c)) {
      ++p;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = p;
      while (p < s.size() && (std::isalnum(static_cast<unsigned char>(s[p])) || s[p] == '_')) ++p;
      out.push_back({Tok::Name, s.substr(b, p - b)});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t b = p;
      while (p < s.size() && (std::isdigit(static_cast<unsigned char>(s[p])) || s[p] == '_')) ++p;
      bool is_float = p + 1 < s.size() && s[p] == '.' && std::isdigit(static_cast<unsigned char>(s[p + 1]));
      if (is_float) {
        ++p;
        while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) ++p;
      }
      if (p < s.size() && (s[p] == 'e' || s[p] == 'E')) {  // exponent: 1e-05, 2.5E3
        size_t q = p + 1;
        if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
        if (q < s.size() && std::isdigit(static_cast<unsigned char>(s[q]))) {
          is_float = true;
          p = q;
          while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) ++p;
        }
      }
      std::string num = s.substr(b, p - b);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      Tok t{is_float ? Tok::Float : Tok::Int, num};
      if (is_float) t.f = std::stod(num);
      else {
        try {
          t.i = std::stoll(num);
        } catch (...) {
          fail("template line ", line, ": number ", num, " is out of range");
        }
      }
      out.push_back(t);
    } else if (c == '\'' || c == '"') {
      std::string v;
      ++p;
      while (p < s.size() && s[p] != c) {
        if (s[p] == '\\' && p + 1 < s.size()) {
          char e = s[++p];
          v += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          v += s[p];
        }
        ++p;
      }
      if (p >= s.size()) fail("template line ", line, ": unterminated string");
      ++p;
      out.push_back({Tok::Str, v});
    } else {
      static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".", ",", ":",
                                  "|", "~", "+", "-", "*", "/", "%", "<", ">", "="};
      bool found = false;
      for (const char* op : ops) {
        size_t n = std::char_traits<char>::length(op);
        if (s.compare(p, n, op) == 0) {
          out.push_back({Tok::Op, op});
          p += n;
          found = true;
          break;
        }
      }
      if (!found) fail("template line ", line, ": unexpected character '", std::string(1, c), "'");
    }
  }
  out.push_back({Tok::End, ""});
  return out;
}

const std::set<std::string> kFilters = {"trim", "tojson", "length", "count", "items", "safe", "indent", "join",
                                        "string", "replace", "list", "selectattr", "rejectattr", "select", "reject",
                                        "map", "unique", "default", "d", "lower", "upper", "title", "capitalize",
                                        "first", "last", "abs", "int", "float", "reverse", "sort", "e", "escape",
                                        "dictsort", "sum", "min", "max", "wordcount", "center", "round"};
const std::set<std::string> kTests = {"defined", "undefined", "none", "string", "mapping", "iterable", "sequence",
                                      "number", "integer", "float", "boolean", "true", "false", "odd", "even",
                                      "divisibleby", "equalto", "eq", "ne", "lt", "gt", "le", "ge", "in", "callable"};

class ExprParser {
 public:
  ExprParser(std::vector<Tok> toks, int line) : t_(std::move(toks)), line_(line) {}

  ExprP expression() { return cond(); }
  ExprP expression_without_if() { return or_(); }  // a for loop's iterable: "if" starts its filter
  bool at_end() const { return t_[p_].k == Tok::End; }
  bool peek_name(const char* n) const { return t_[p_].k == Tok::Name && t_[p_].s == n; }
  bool peek_op(const char* o) const { return t_[p_].k == Tok::Op && t_[p_].s == o; }
  std::string name() {
    if (t_[p_].k != Tok::Name) err("expected a name");
    return t_[p_++].s;
  }
  void expect_op(const char* o) {
    if (!peek_op(o)) err(std::string("expected '") + o + "'");
    ++p_;
  }
  bool accept_op(const char* o) {
    if (!peek_op(o)) return false;
    ++p_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!peek_name(n)) return false;
    ++p_;
    return true;
  }
  [[noreturn]] void err(const std::string& what) const {
    fail("template line ", line_, ": ", what, " near '", t_[p_].s, "'");
  }
  void done() {
    if (!at_end()) err("unexpected text");
  }

 private:
  ExprP node(Expr::K k, std::vector<ExprP> kids = {}, std::string name = "") {
    auto e = std::make_shared<Expr>();
    e->k = k;
    e->line = line_;
    e->name = std::move(name);
    for (ExprP& kid : kids) add_kid(e, std::move(kid));
    return e;
  }
  // Every operand joins its tree here, so that no tree grows past kMaxNesting (a left-leaning
  // chain such as 1+1+1... nests without the parser recursing).
  void add_kid(const ExprP& e, ExprP kid) {
    if (kid) e->depth = std::max(e->depth, kid->depth + 1);
    if (e->depth > kMaxNesting) err("the expression nests more than " + std::to_string(kMaxNesting) + " deep");
    e->kids.push_back(std::move(kid));
  }
  // Counts the parser's own recursion (an expression inside another, `not not`, `+ +`,
  // `a ** b ** c`, `x if c else y if ...`): parentheses build no deeper tree.
  struct Nest {
    explicit Nest(ExprParser& p) : p_(p) {
      if (++p_.nesting_ > kMaxNesting) p_.err("the expression nests more than " + std::to_string(kMaxNesting) + " deep");
    }
    ~Nest() { --p_.nesting_; }
    ExprParser& p_;
  };
  ExprP cond() {
    Nest nest(*this);
    ExprP a = or_();
    if (accept_name("if")) {
      ExprP c = or_();
      ExprP b = accept_name("else") ? cond() : node(Expr::K::Lit);
      return node(Expr::K::Cond, {c, a, b});
    }
    return a;
  }
  ExprP or_() {
    ExprP a = and_();
    while (accept_name("or")) a = node(Expr::K::Binary, {a, and_()}, "or");
    return a;
  }
  ExprP and_() {
    ExprP a = not_();
    while (accept_name("and")) a = node(Expr::K::Binary, {a, not_()}, "and");
    return a;
  }
  ExprP not_() {
    if (accept_name("not")) {
      Nest nest(*this);
      return node(Expr::K::Not, {not_()});
    }
    return compare();
  }
  ExprP compare() {
    ExprP a = concat();
    for (;;) {
      static const char* ops[] = {"==", "!=", "<=", ">=", "<", ">"};
      bool matched = false;
      for (const char* op : ops)
        if (accept_op(op)) {
          a = node(Expr::K::Binary, {a, concat()}, op);
          matched = true;
          break;
        }
      if (matched) continue;
      if (accept_name("in")) {
        a = node(Expr::K::Binary, {a, concat()}, "in");
      } else if (peek_name("not") && t_[p_ + 1].k == Tok::Name && t_[p_ + 1].s == "in") {
        p_ += 2;
        a = node(Expr::K::Not, {node(Expr::K::Binary, {a, concat()}, "in")});
      } else {
        return a;
      }
    }
  }
  ExprP concat() {
    ExprP a = add();
    while (accept_op("~")) a = node(Expr::K::Binary, {a, add()}, "~");
    return a;
  }
  ExprP add() {
    ExprP a = mul();
    for (;;) {
      if (accept_op("+")) a = node(Expr::K::Binary, {a, mul()}, "+");
      else if (accept_op("-")) a = node(Expr::K::Binary, {a, mul()}, "-");
      else return a;
    }
  }
  ExprP mul() {
    ExprP a = unary();
    for (;;) {
      if (accept_op("*")) a = node(Expr::K::Binary, {a, unary()}, "*");
      else if (accept_op("//")) a = node(Expr::K::Binary, {a, unary()}, "//");
      else if (accept_op("/")) a = node(Expr::K::Binary, {a, unary()}, "/");
      else if (accept_op("%")) a = node(Expr::K::Binary, {a, unary()}, "%");
      else return a;
    }
  }
  ExprP unary() {
    if (accept_op("-")) return filtered(node(Expr::K::Neg, {unary_operand()}));
    if (accept_op("+")) {
      Nest nest(*this);
      return unary();
    }
    ExprP a = filtered(postfix(primary()));
    if (accept_op("**")) {
      Nest nest(*this);
      a = node(Expr::K::Binary, {a, unary()}, "**");
    }
    return a;
  }
  ExprP unary_operand() { return postfix(primary()); }
  void call_args(ExprP e) {
    if (accept_op(")")) return;
    for (;;) {
      if (t_[p_].k == Tok::Name && t_[p_ + 1].k == Tok::Op && t_[p_ + 1].s == "=") {
        e->kw.push_back(t_[p_].s);
        p_ += 2;
        add_kid(e, expression());
      } else {
        if (!e->kw.empty()) err("a positional argument follows a keyword argument");
        add_kid(e, expression());
      }
      if (accept_op(")")) return;
      expect_op(",");
    }
  }
  ExprP filtered(ExprP a) {
    for (;;) {
      if (accept_op("|")) {
        std::string f = name();
        if (!kFilters.count(f)) err("unsupported filter '" + f + "'");
        ExprP e = node(Expr::K::Filter, {a}, f);
        if (accept_op("(")) call_args(e);
        a = e;
      } else if (accept_name("is")) {
        bool neg = accept_name("not");
        std::string test = name();
        if (!kTests.count(test)) err("unsupported test '" + test + "'");
        ExprP e = node(Expr::K::Test, {a}, test);
        e->negate = neg;
        if (accept_op("(")) call_args(e);
        else if (t_[p_].k == Tok::Str || t_[p_].k == Tok::Int || t_[p_].k == Tok::Float) add_kid(e, primary());
        a = e;
      } else {
        return a;
      }
    }
  }
  ExprP postfix(ExprP a) {
    for (;;) {
      if (accept_op(".")) {
        a = node(Expr::K::Attr, {a}, name());
      } else if (accept_op("[")) {
        ExprP lo, hi, step;
        bool slice = false;
        if (!peek_op(":")) lo = expression();
        if (accept_op(":")) {
          slice = true;
          if (!peek_op("]") && !peek_op(":")) hi = expression();
          if (accept_op(":") && !peek_op("]")) step = expression();
        }
        expect_op("]");
        a = slice ? node(Expr::K::Slice, {a, lo, hi, step}) : node(Expr::K::Index, {a, lo});
      } else if (accept_op("(")) {
        ExprP e = node(Expr::K::Call, {a});
        call_args(e);
        a = e;
      } else {
        return a;
      }
    }
  }
  ExprP primary() {
    const Tok& t = t_[p_];
    if (t.k == Tok::Str) {
      ++p_;
      std::string s = t.s;
      while (t_[p_].k == Tok::Str) s += t_[p_++].s;  // adjacent literals concatenate
      ExprP e = node(Expr::K::Lit);
      e->lit = Value::str(s);
      return e;
    }
    if (t.k == Tok::Int || t.k == Tok::Float) {
      ++p_;
      ExprP e = node(Expr::K::Lit);
      e->lit = t.k == Tok::Int ? Value::integer(t.i) : Value::number(t.f);
      return e;
    }
    if (t.k == Tok::Name) {
      ++p_;
      ExprP e = node(Expr::K::Lit);
      if (t.s == "true" || t.s == "True") e->lit = Value::boolean(true);
      else if (t.s == "false" || t.s == "False") e->lit = Value::boolean(false);
      else if (t.s == "none" || t.s == "None") e->lit = Value::none();
      else return node(Expr::K::Var, {}, t.s);
      return e;
    }
    if (accept_op("(")) {
      ExprP a = expression();
      if (accept_op(",")) {  // a tuple: treated as a list
        ExprP l = node(Expr::K::ListLit, {a});
        while (!peek_op(")")) {
          add_kid(l, expression());
          if (!accept_op(",")) break;
        }
        expect_op(")");
        return l;
      }
      expect_op(")");
      return a;
    }
    if (accept_op("[")) {
      ExprP l = node(Expr::K::ListLit);
      while (!peek_op("]")) {
        add_kid(l, expression());
        if (!accept_op(",")) break;
      }
      expect_op("]");
      return l;
    }
    if (accept_op("{")) {
      ExprP d = node(Expr::K::DictLit);
      while (!peek_op("}")) {
        add_kid(d, expression());
        expect_op(":");
        add_kid(d, expression());
        if (!accept_op(",")) break;
      }
      expect_op("}");
      return d;
    }
    err("expected an expression");
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
  int line_;
  int nesting_ = 0;
};

class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : s_(std::move(segs)) {}

  // Parses statements until a block tag named in `stop`; returns which one ended it.
  std::string body(Body& out, const std::set<std::string>& stop) {
    if (++depth_ > kMaxNesting) fail("template line ", s_[i_ - 1].line, ": blocks nest more than ", kMaxNesting, " deep");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    while (i_ < s_.size()) {
      const Segment& seg = s_[i_];
      if (seg.k == Segment::Text) {
        auto n = make(Node::K::Text, seg.line);
        n->text = seg.s;
        out.push_back(n);
        ++i_;
        continue;
      }
      ExprParser ep(tokenize(seg.s, seg.line), seg.line);
      if (seg.k == Segment::Var) {
        auto n = make(Node::K::Out, seg.line);
        n->e = ep.expression();
        ep.done();
        out.push_back(n);
        ++i_;
        continue;
      }
      std::string tag = ep.name();
      if (stop.count(tag)) return tag;  // the caller consumes it
      ++i_;
      out.push_back(statement(tag, ep, seg.line));
    }
    if (!stop.empty()) fail("template: missing {% ", *stop.rbegin(), " %}");
    return "";
  }

 private:
  std::shared_ptr<Node> make(Node::K k, int line) {
    auto n = std::make_shared<Node>();
    n->k = k;
    n->line = line;
    return n;
  }
  ExprParser tag_parser() { return ExprParser(tokenize(s_[i_].s, s_[i_].line), s_[i_].line); }

  std::shared_ptr<Node> statement(const std::string& tag, ExprParser& ep, int line) {
    if (tag == "if") {
      auto n = make(Node::K::If, line);
      ExprP c = ep.expression();
      ep.done();
      for (;;) {
        Body b;
        std::string end = body(b, {"elif", "else", "endif"});
        n->branches.push_back({c, b});
        ExprParser t = tag_parser();
        t.name();
        ++i_;
        if (end == "elif") {
          c = t.expression();
          t.done();
          continue;
        }
        if (end == "else") {
          t.done();
          body(n->else_body, {"endif"});
          ++i_;
        }
        return n;
      }
    }
    if (tag == "for") {
      auto n = make(Node::K::For, line);
      n->targets.push_back(ep.name());
      while (ep.accept_op(",")) n->targets.push_back(ep.name());
      if (!ep.accept_name("in")) ep.err("expected 'in'");
      n->e = ep.expression_without_if();
      if (ep.accept_name("if")) n->cond = ep.expression();
      if (ep.accept_name("recursive")) ep.err("recursive loops are not supported");
      ep.done();
      std::string end = body(n->body, {"else", "endfor"});
      ++i_;
      if (end == "else") {
        body(n->else_body, {"endfor"});
        ++i_;
      }
      return n;
    }
    if (tag == "set") {
      std::string target = ep.name();
      std::string attr;
      if (ep.accept_op(".")) attr = ep.name();
      if (ep.accept_op("=")) {
        auto n = make(Node::K::Set, line);
        n->text = target;
        n->attr = attr;
        n->e = ep.expression();
        ep.done();
        return n;
      }
      if (!attr.empty()) ep.err("a block set cannot target an attribute");
      ep.done();
      auto n = make(Node::K::SetBlock, line);
      n->text = target;
      body(n->body, {"endset"});
      ++i_;
      return n;
    }
    if (tag == "macro") {
      auto n = make(Node::K::Macro, line);
      n->text = ep.name();
      ep.expect_op("(");
      while (!ep.accept_op(")")) {
        n->targets.push_back(ep.name());
        n->defaults.push_back(ep.accept_op("=") ? ep.expression() : nullptr);
        if (!ep.accept_op(",")) {
          ep.expect_op(")");
          break;
        }
      }
      ep.done();
      body(n->body, {"endmacro"});
      ++i_;
      return n;
    }
    if (tag == "filter") {
      auto n = make(Node::K::FilterBlock, line);
      std::string f = ep.name();
      auto e = std::make_shared<Expr>();
      e->k = Expr::K::Filter;
      e->name = f;
      e->kids.push_back(nullptr);
      if (ep.accept_op("(")) {
        while (!ep.accept_op(")")) {
          e->kids.push_back(ep.expression());
          if (!ep.accept_op(",")) {
            ep.expect_op(")");
            break;
          }
        }
      }
      ep.done();
      n->e = e;
      body(n->body, {"endfilter"});
      ++i_;
      return n;
    }
    if (tag == "generation") {  // transformers' assistant-mask marker: renders its body as is
      auto n = make(Node::K::If, line);
      auto t = std::make_shared<Expr>();
      t->k = Expr::K::Lit;
      t->lit = Value::boolean(true);
      Body b;
      body(b, {"endgeneration"});
      ++i_;
      n->branches.push_back({t, b});
      return n;
    }
    if (tag == "break" || tag == "continue") {
      ep.done();
      return make(tag == "break" ? Node::K::Break : Node::K::Continue, line);
    }
    fail("template line ", line, ": unsupported tag '", tag, "'");
  }

  std::vector<Segment> s_;
  size_t i_ = 0;
  int depth_ = 0;  // blocks open (body's recursion)
};

}  // namespace

std::unique_ptr<Template> parse_template(const std::string& source) {
  if (source.size() > (1u << 20)) fail("chat template is over 1 MB");
  auto t = std::make_unique<Template>();
  Parser p(segments(source));
  p.body(t->body, {});
  return t;
}

}  // namespace kvlm::jinja
