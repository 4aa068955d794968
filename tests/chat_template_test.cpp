// kvlm's Jinja interpreter against transformers' own rendering (Python jinja2 with
// apply_chat_template's settings) of twelve real chat templates: every rendering must be
// identical, and every conversation a template refuses must be refused (tests/fixtures/
// chat_templates.json, made by tools/make_chat_template_fixtures.py).
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/chat_template.h"

namespace kvlm {
namespace {

using nlohmann::json;

TEST(ChatTemplates, RenderLikeTransformers) {
  KVLM_NEED_SHARED("chat-templates/README.md", "chat templates of twelve real models");
  json cases = json::parse(test::read_file(test::fixtures_dir() + "/chat_templates.json"));
  ASSERT_GE(cases.size(), 100u);
  std::map<std::string, std::unique_ptr<ChatTemplate>> parsed;
  int same = 0, refused = 0;
  for (const json& c : cases) {
    std::string name = c["template"];
    if (!parsed.count(name)) {
      try {
        parsed[name] = std::make_unique<ChatTemplate>(test::read_file(test::shared_path("chat-templates/" + name)));
      } catch (const KvlmError& e) {
        ADD_FAILURE() << name << " does not parse: " << e.what();
        parsed[name] = nullptr;
      }
    }
    if (!parsed[name]) continue;
    std::string label = name + " / " + c["conversation"].get<std::string>() +
                        (c["add_generation_prompt"].get<bool>() ? " + generation prompt" : "");
    try {
      std::string got = parsed[name]->render(c["messages"], c["add_generation_prompt"], c["bos_token"], c["eos_token"],
                                             c["extra"]);
      if (c["expected"].is_null()) {
        ADD_FAILURE() << label << ": rendered, but jinja2 refused (" << c["error"] << ")";
      } else {
        EXPECT_EQ(got, c["expected"].get<std::string>()) << label;
        same += got == c["expected"].get<std::string>();
      }
    } catch (const KvlmError& e) {
      if (c["expected"].is_null())
        ++refused;
      else
        ADD_FAILURE() << label << ": " << e.what();
    }
  }
  std::printf("[ measured ] %d renderings identical to transformers, %d refusals matched\n", same, refused);
}

TEST(ChatTemplates, UnsupportedConstructsFailAtParse) {
  for (const char* bad : {"{% raw %}x{% endraw %}", "{{ x | nosuchfilter }}", "{% for x in y recursive %}{% endfor %}",
                          "{% if x %}", "{{ x is nosuchtest }}", "{% include 'a' %}"})
    EXPECT_THROW(ChatTemplate{bad}, KvlmError) << bad;
}

TEST(ChatTemplates, WorkIsBounded) {
  ChatTemplate loop("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(10) %}x{% endfor %}{% endfor %}{% endfor %}");
  EXPECT_THROW(loop.render(json::array(), true, "", ""), KvlmError);
  ChatTemplate rec("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_THROW(rec.render(json::array(), true, "", ""), KvlmError);
  ChatTemplate big("{{ 'x' * 100000000 }}");
  EXPECT_THROW(big.render(json::array(), true, "", ""), KvlmError);
  // Each of these stays under the loop and output limits step by step, but what the steps make
  // would reach gigabytes (or take minutes): the render's budget of values made stops them.
  for (const char* heavy : {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
                            "{% set ns = namespace(l=[1]) %}{% for i in range(1000000) %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l | length }}",
                            "{% set s = 'x' * 10000000 %}{{ [s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s] | length }}{{ [s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s] }}",
                            "{{ ('\n' * 8000000) | indent(1000, true, true) | length }}",
                            "{{ ('a' * 1000000) | replace('a', 'x' * 1000) | length }}",
                            "{% set s = 'x' * 10000000 %}{{ [s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s] | join(',') | length }}"}) {
    ChatTemplate t(heavy);
    EXPECT_THROW(t.render(json::array(), true, "", ""), KvlmError) << heavy;
  }
}

// Parsing, rendering and freeing a template recurse once a level: every way of nesting is
// refused past its limit with an error (each of these crashed the process at 10,000 or 100,000
// levels), and 99 levels still render.
TEST(ChatTemplates, DeepNestingIsAnErrorNotACrash) {
  auto nested = [](const std::string& kind, int n) {
    auto rep = [](const std::string& x, int k) {
      std::string r;
      for (int i = 0; i < k; ++i) r += x;
      return r;
    };
    if (kind == "parens") return "{{ " + rep("(", n) + "1" + rep(")", n) + " }}";
    if (kind == "lists") return "{{ " + rep("[", n) + rep("]", n) + " }}";
    if (kind == "not") return "{{ " + rep("not ", n) + "1 }}";
    if (kind == "plus") return "{{ 1" + rep("+1", n) + " }}";
    if (kind == "power") return "{{ 1" + rep("**1", n) + " }}";
    if (kind == "filters") return "{{ 1" + rep("|string", n) + " }}";
    if (kind == "attributes") return "{{ x" + rep(".a", n) + " }}";
    if (kind == "calls") return "{{ x" + rep("()", n) + " }}";
    if (kind == "else") return "{{ 1" + rep(" if false else 1", n) + " }}";
    return rep("{% if true %}", n) + "x" + rep("{% endif %}", n);  // blocks
  };
  for (const char* kind : {"parens", "lists", "not", "plus", "power", "filters", "attributes", "calls", "else", "blocks"}) {
    for (int n : {10000, 60000}) {
      try {
        ChatTemplate t(nested(kind, n));
        ADD_FAILURE() << kind << " x " << n << " parsed";
      } catch (const KvlmError& e) {
        EXPECT_TRUE(std::string(e.what()).find("nest") != std::string::npos || std::string(e.what()).find("over 1 MB") != std::string::npos)
            << kind << ": " << e.what();
      }
    }
    ChatTemplate ok(nested(kind, 99));
    if (std::string(kind) != "calls") {
      EXPECT_NO_THROW(ok.render(json::array(), true, "", "")) << kind;
    }
  }
  // A macro that calls itself inside 98 blocks and a deep expression: the run's own nesting
  // (expressions, statements and calls together) is bounded before the stack is.
  std::string body = "f(k + 1)";
  for (int i = 0; i < 90; ++i) body = "(" + body + " ~ '')";
  std::string deep = "{% macro f(k) %}";
  for (int i = 0; i < 98; ++i) deep += "{% if true %}";
  deep += "{{ k < 63 and " + body + " }}";
  for (int i = 0; i < 98; ++i) deep += "{% endif %}";
  ChatTemplate t(deep + "{% endmacro %}{{ f(0) }}");
  EXPECT_THROW(t.render(json::array(), true, "", ""), KvlmError);
}

// Values a template builds: a loop that wraps a list in a list a million times, and a namespace
// set to hold itself, made values that crashed printing (recursion without end or past the
// stack). Lists and dicts nest at most kMaxValueDepth, only namespaces take attributes (as in
// Jinja), and a namespace holds no namespace, so no value contains itself.
TEST(ChatTemplates, ValuesNestBoundedAndNeverHoldThemselves) {
  for (const char* bad : {"{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
                          "{% set ns = namespace(a=1) %}{% set ns.b = ns %}{{ ns }}",
                          "{% set ns = namespace(a=1) %}{% set ns.b = [{'k': ns}] %}{{ ns == ns.b }}",
                          "{% set ns = namespace(a=namespace(b=1)) %}{{ ns }}",
                          "{% set d = {'a': 1} %}{% set d.a = 2 %}{{ d }}"}) {
    ChatTemplate t(bad);
    EXPECT_THROW(t.render(json::array(), true, "", ""), KvlmError) << bad;
  }
  ChatTemplate ok("{% set ns = namespace(x=[]) %}{% for i in range(100) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | length }}|"
                  "{% set n2 = namespace(a=1) %}{% set l = [n2] %}{% set n2.a = 5 %}{{ l[0].a }}");
  EXPECT_EQ(ok.render(json::array(), true, "", ""), "1|5");
}

// Integers as Python has them, exact in int64 (sums past 2^53 went through doubles and came out
// wrong), and an error, not undefined behaviour, where Python's would leave int64; widths and
// repetitions that would allocate without bound are refused.
TEST(ChatTemplates, IntegersAtTheEndsOfInt64) {
  ChatTemplate t(
      "{{ -9223372036854775807 + 3 }}|{{ 7 // -2 }}|{{ 7 % -2 }}|{{ -7 // 2 }}|{{ -7 % 2 }}|{{ 2 ** 62 }}|{{ 2 ** -1 }}|"
      "{{ (-9223372036854775807 - 1) % -1 }}|{{ true + 1 }}|"
      "{{ range(9223372036854775806, 9223372036854775807, 10) | list }}|{{ range(-9223372036854775807, -9223372036854775804) | length }}|"
      "{{ range(5, 0, -2) | list }}|{{ range(3, 3) | list }}|{{ 'abc'[::9223372036854775807] }}|{{ 'abc'[::-9223372036854775807] }}|"
      "{{ '' * 1000000000000000000 }}|{{ 'a\nb' | indent(-3) }}|{{ [1] | tojson(indent=-5) }}");
  EXPECT_EQ(t.render(json::array(), true, "", ""),
            "-9223372036854775804|-4|-1|-4|1|4611686018427387904|0.5|0|2|[9223372036854775806]|3|[5, 3, 1]|[]|a|c||a\nb|[\n1\n]");
  for (const char* bad : {"{{ 9223372036854775807 + 1 }}", "{{ -(-9223372036854775807 - 1) }}", "{{ (-9223372036854775807 - 1) // -1 }}",
                          "{{ 2 ** 63 }}", "{{ 3 * 4611686018427387904 }}", "{{ range(-9223372036854775807, 9223372036854775807) | length }}",
                          "{{ range(0, 5, 0) | list }}", "{{ 'ab' * 9223372036854775807 }}", "{{ [1] | tojson(indent=100000000000) }}",
                          "{{ 'a' | indent(99999999999) }}", "{{ 1e300 | int }}"}) {
    ChatTemplate b(bad);
    EXPECT_THROW(b.render(json::array(), true, "", ""), KvlmError) << bad;
  }
}

TEST(ChatTemplates, PythonSemanticsOfValues) {
  ChatTemplate t(
      "{{ [1, 'a', none, true] }}|{{ {'k': 1.5} | tojson }}|{{ 'abc'[::-1] }}|{{ [1,2,3][-2:] }}|"
      "{{ 'a b  c'.split() | length }}|{{ 7 // 2 }}|{{ 0.1 + 0.2 }}|{{ 1e-05 }}|{{ 'x' ~ 3 }}|"
      "{% set ns = namespace(n=0) %}{% for i in [1,2,3] if i > 1 %}{% set ns.n = ns.n + loop.index %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(t.render(json::array(), true, "", ""),
            "[1, 'a', None, True]|{\"k\": 1.5}|cba|[2, 3]|3|3|0.30000000000000004|1e-05|x3|3");
}

}  // namespace
}  // namespace kvlm
