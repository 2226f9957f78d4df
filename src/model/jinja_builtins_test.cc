// The dispatch tables of the builtins: every filter the parser accepts and every method that
// docs/formats/chat-templates.md lists has an implementation to dispatch to, and the methods
// that would change a value are found (so calling them explains the sandbox, not "no attribute").
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "model/jinja.h"
#include "model/jinja_interpreter.h"
#include "model/jinja_parser.h"

namespace sovai::model::jinja {
namespace {

TEST(JinjaBuiltinsTest, EveryKnownFilterHasAnImplementation) {
  EXPECT_FALSE(KnownFilterNames().empty());
  for (std::string_view name : KnownFilterNames())
    EXPECT_TRUE(Interpreter::HasFilter(name)) << name;
  for (std::string_view name : {"groupby", "truncate", "nosuchfilter", ""}) {
    EXPECT_FALSE(Interpreter::HasFilter(name)) << name;
  }
}

TEST(JinjaBuiltinsTest, EveryDocumentedMethodIsFound) {
  const Value text = Value::String("x");
  for (std::string_view name :
       {"strip",     "lstrip",    "rstrip",  "split",   "rsplit",     "splitlines", "startswith",
        "endswith",  "upper",     "lower",   "title",   "capitalize", "swapcase",   "replace",
        "find",      "rfind",     "index",   "rindex",  "count",      "join",       "isdigit",
        "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace",    "islower",    "isupper",
        "zfill",     "center",    "ljust",   "rjust",   "format"}) {
    EXPECT_TRUE(Interpreter::HasMethod(text, name)) << "str." << name;
  }
  const Value dict = Value::Dict({});
  for (std::string_view name : {"get", "items", "keys", "values", "copy", "pop", "popitem",
                                "update", "setdefault", "clear"}) {
    EXPECT_TRUE(Interpreter::HasMethod(dict, name)) << "dict." << name;
  }
  const Value list = Value::List({});
  for (std::string_view name : {"count", "index", "copy", "append", "extend", "insert", "pop",
                                "remove", "reverse", "sort", "clear"}) {
    EXPECT_TRUE(Interpreter::HasMethod(list, name)) << "list." << name;
  }
  EXPECT_FALSE(Interpreter::HasMethod(text, "append"));
  EXPECT_FALSE(Interpreter::HasMethod(dict, "strip"));
  EXPECT_FALSE(Interpreter::HasMethod(list, "get"));
  EXPECT_FALSE(Interpreter::HasMethod(Value::Int(1), "count"));
}

TEST(JinjaBuiltinsTest, MutatingMethodsExplainTheSandbox) {
  for (std::string_view source : {"{{ [1].pop() }}", "{{ {'a': 1}.setdefault('a') }}"}) {
    auto t = Template::Parse(source);
    ASSERT_TRUE(t.ok()) << t.status().message();
    auto out = t->Render(nlohmann::ordered_json::object(), RenderOptions());
    ASSERT_FALSE(out.ok()) << source;
    EXPECT_NE(out.status().message().find("cannot be used: chat templates run in an immutable"),
              std::string::npos)
        << out.status().message();
  }
}

}  // namespace
}  // namespace sovai::model::jinja
