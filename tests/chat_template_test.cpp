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
