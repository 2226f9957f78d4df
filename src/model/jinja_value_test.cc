// Values (jinja_value.h): Python printing, equality, ordering, json.dumps, conversion from JSON,
// and the depth/weight bookkeeping. Expected strings are CPython 3.11's repr() and json.dumps()
// of the same values.
#include "model/jinja_value.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

namespace sovai::model::jinja {
namespace {

using Json = nlohmann::ordered_json;

Value Str(std::string s) { return Value::String(std::move(s)); }

Value Sample() {
  ValueDict inner;
  inner.Set("c", Value::List({}));
  ValueDict outer;
  outer.Set("b", Value::List({Value::Int(1), Value::Dict(inner)}));
  outer.Set("a", Str("é\"\x01"));
  return Value::Dict(outer);
}

TEST(ValueTest, PrintsLikePython) {
  ValueDict k;
  k.Set("k", Value::None());
  Value v = Value::List({Value::Int(1), Value::Tuple({Value::Int(2)}),
                         Value::Tuple({Value::Int(3), Value::Int(4)}), Value::Dict(k),
                         Value::Bool(true), Str("x"), Value::Float(1.0)});
  EXPECT_EQ(ToPyStr(v), "[1, (2,), (3, 4), {'k': None}, True, 'x', 1.0]");
  EXPECT_EQ(ToPyStr(Str("raw text")), "raw text");
  EXPECT_EQ(ToPyStr(Value::Undefined("x")), "");
  EXPECT_EQ(ToPyRepr(Value::Undefined("x")), "Undefined");
  EXPECT_EQ(ToPyStr(Value::None()), "None");
  EXPECT_EQ(ToPyStr(Value::Float(-0.0)), "-0.0");
  EXPECT_EQ(ToPyStr(Value::Tuple({})), "()");
}

TEST(ValueTest, PrintingABoundedBudgetStops) {
  Value big = Value::List({Str(std::string(100, 'a')), Str(std::string(100, 'b'))});
  std::string out;
  EXPECT_FALSE(AppendPyStr(big, 150, &out));
  out.clear();
  EXPECT_TRUE(AppendPyStr(big, 1000, &out));
  EXPECT_EQ(out.size(), 208u);
  out = "xx";
  EXPECT_FALSE(AppendPyStr(Str("abc"), 4, &out));
}

TEST(ValueTest, NamespacesPrintWithoutFollowingCycles) {
  Value ns = Value::NewNamespace({});
  ns.namespace_attrs().Set("n", Value::Int(1));
  ns.namespace_attrs().Set("self", ns);  // a cycle
  const std::string s = ToPyStr(ns);
  EXPECT_EQ(s.rfind("<Namespace {'n': 1, 'self': <Namespace {'n': 1, ", 0), 0u) << s;
  EXPECT_NE(s.find("<Namespace {...}>"), std::string::npos) << s;
  EXPECT_EQ(ns.depth(), 1);
  EXPECT_EQ(ns.weight(), 1u);
  ns.namespace_attrs() = ValueDict();  // break the cycle (the interpreter does this per render)
}

TEST(ValueTest, EqualityFollowsPython) {
  ValueDict a, b;
  a.Set("a", Value::Int(1));
  b.Set("a", Value::Float(1.0));
  EXPECT_TRUE(Equals(Value::Dict(a), Value::Dict(b)));
  EXPECT_FALSE(Equals(Value::List({Value::Int(1)}), Value::Tuple({Value::Int(1)})));
  EXPECT_TRUE(Equals(Value::Tuple({Value::Int(1)}), Value::Tuple({Value::Int(1)})));
  EXPECT_TRUE(Equals(Value::Int(1), Value::Bool(true)));
  EXPECT_TRUE(Equals(Value::Int(0), Value::Bool(false)));
  EXPECT_FALSE(Equals(Value::Int(2), Value::Bool(true)));
  EXPECT_TRUE(Equals(Value::Undefined("a"), Value::Undefined("b")));
  EXPECT_FALSE(Equals(Value::Undefined("a"), Value::None()));
  EXPECT_FALSE(Equals(Str("1"), Value::Int(1)));
  EXPECT_FALSE(Equals(Value::Float(std::nan("")), Value::Float(std::nan(""))));
  // Dict equality ignores order.
  ValueDict x, y;
  x.Set("p", Value::Int(1));
  x.Set("q", Value::Int(2));
  y.Set("q", Value::Int(2));
  y.Set("p", Value::Int(1));
  EXPECT_TRUE(Equals(Value::Dict(x), Value::Dict(y)));
  // Namespaces compare by identity.
  Value n1 = Value::NewNamespace({});
  EXPECT_TRUE(Equals(n1, n1));
  EXPECT_FALSE(Equals(n1, Value::NewNamespace({})));
}

TEST(ValueTest, OrderingFollowsPython) {
  EXPECT_EQ(Compare(Value::Int(1), Value::Float(1.5)), -1);
  EXPECT_EQ(Compare(Value::Bool(true), Value::Int(1)), 0);
  EXPECT_EQ(Compare(Str("B"), Str("a")), -1);  // code point order
  EXPECT_EQ(Compare(Str("é"), Str("z")), 1);   // U+00E9 > U+007A
  EXPECT_EQ(Compare(Value::List({Value::Int(1), Value::Int(2)}),
                    Value::List({Value::Int(1), Value::Int(3)})),
            -1);
  EXPECT_EQ(Compare(Value::List({Value::Int(1)}), Value::List({Value::Int(1), Value::Int(0)})), -1);
  EXPECT_EQ(Compare(Str("a"), Value::Int(1)), std::nullopt);
  EXPECT_EQ(Compare(Value::List({}), Value::Tuple({})), std::nullopt);
  EXPECT_EQ(Compare(Value::None(), Value::None()), std::nullopt);
  EXPECT_EQ(Compare(Value::List({Str("a")}), Value::List({Value::Int(1)})), std::nullopt);
}

TEST(ValueTest, JsonMatchesPythonJsonDumps) {
  JsonFormat plain;
  EXPECT_EQ(*ToJson(Sample(), plain), "{\"b\": [1, {\"c\": []}], \"a\": \"é\\\"\\u0001\"}");
  JsonFormat indented;
  indented.indent = "  ";
  EXPECT_EQ(
      *ToJson(Sample(), indented),
      "{\n  \"b\": [\n    1,\n    {\n      \"c\": []\n    }\n  ],\n  \"a\": \"é\\\"\\u0001\"\n}");
  JsonFormat ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(*ToJson(Str("é😀"), ascii), "\"\\u00e9\\ud83d\\ude00\"");
  JsonFormat dashes;
  dashes.indent = "--";
  EXPECT_EQ(*ToJson(Value::List({Value::Int(1), Value::Int(2)}), dashes), "[\n--1,\n--2\n]");
  JsonFormat sorted;
  sorted.sort_keys = true;
  sorted.separators.emplace(";", "=");
  ValueDict ba;
  ba.Set("b", Value::Int(1));
  ba.Set("a", Value::Int(2));
  EXPECT_EQ(*ToJson(Value::Dict(ba), sorted), "{\"a\"=2;\"b\"=1}");
  EXPECT_EQ(*ToJson(Value::List({Value::Float(std::nan("")),
                                 Value::Float(std::numeric_limits<double>::infinity()),
                                 Value::Float(-std::numeric_limits<double>::infinity()),
                                 Value::Float(1.5), Value::Int(1000000000000000000)})),
            "[NaN, Infinity, -Infinity, 1.5, 1000000000000000000]");
  EXPECT_EQ(*ToJson(Value::Tuple({Value::Bool(false), Value::None()})), "[false, null]");
  EXPECT_EQ(*ToJson(Str("\x7f\xe2\x80\xa8\t\b\f\r")), "\"\x7f\xe2\x80\xa8\\t\\b\\f\\r\"");
}

TEST(ValueTest, JsonRejectsWhatPythonCannotSerializeAndLongOutput) {
  auto undefined = ToJson(Value::List({Value::Undefined("'x' is undefined")}));
  EXPECT_EQ(undefined.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(undefined.status().message(),
            "Object of type Undefined is not JSON serializable ('x' is undefined)");
  EXPECT_FALSE(ToJson(Value::NewNamespace({})).ok());
  JsonFormat small;
  small.max_bytes = 10;
  auto longer = ToJson(Value::List({Str(std::string(20, 'a'))}), small);
  EXPECT_EQ(longer.status().code(), base::StatusCode::kResourceExhausted);
}

TEST(ValueTest, FromJsonKeepsKeyOrderAndTypes) {
  Json j = Json::parse(
      R"({"z": 1, "a": [true, null, 2.5, "s"], "m": {"y": 1, "b": 2}, "big": 18446744073709551615})");
  auto v = FromJson(j);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(ToPyStr(*v),
            "{'z': 1, 'a': [True, None, 2.5, 's'], 'm': {'y': 1, 'b': 2}, 'big': "
            "1.8446744073709552e+19}");
  EXPECT_EQ(v->depth(), 2);
  // nlohmann::json (sorted keys) is accepted too.
  auto sorted = FromJson(nlohmann::json::parse(R"({"z": 1, "a": 2})"));
  ASSERT_TRUE(sorted.ok());
  EXPECT_EQ(ToPyStr(*sorted), "{'a': 2, 'z': 1}");
  EXPECT_FALSE(FromJson(Json(std::string("\xff"))).ok());
  Json bad_key = Json::object();
  bad_key[std::string("\xc3")] = 1;
  EXPECT_FALSE(FromJson(bad_key).ok());
}

TEST(ValueTest, DepthAndWeightAreTracked) {
  Value s = Str("abcd");
  EXPECT_EQ(s.weight(), 4u);
  EXPECT_EQ(s.depth(), 0);
  Value pair = Value::List({s, s});
  EXPECT_EQ(pair.depth(), 1);
  EXPECT_EQ(pair.weight(), 9u);
  Value nested = Value::List({pair, pair});  // shared items count once per reference
  EXPECT_EQ(nested.depth(), 2);
  EXPECT_EQ(nested.weight(), 19u);
  ValueDict d;
  d.Set("key", pair);
  EXPECT_EQ(Value::Dict(d).weight(), 1u + 3u + 9u);
  Value huge = Str("x");
  for (int i = 0; i < 70; ++i) huge = Value::List({huge, huge});  // saturates instead of wrapping
  EXPECT_EQ(huge.weight(), std::numeric_limits<uint64_t>::max());
}

TEST(ValueTest, DictKeepsOrderAndFindsKeysPastTheIndexThreshold) {
  ValueDict d;
  for (int i = 0; i < 40; ++i) d.Set("k" + std::to_string(i), Value::Int(i));
  d.Set("k3", Value::Int(300));  // replacing keeps the position
  ASSERT_EQ(d.size(), 40u);
  EXPECT_EQ(d.items()[3].first, "k3");
  EXPECT_EQ(d.Find("k3")->int_value(), 300);
  EXPECT_EQ(d.Find("k39")->int_value(), 39);
  EXPECT_EQ(d.Find("nope"), nullptr);
  ValueDict small;
  small.Set("a", Value::Int(1));
  EXPECT_EQ(small.Find("a")->int_value(), 1);
  EXPECT_EQ(small.Find("b"), nullptr);
}

TEST(ValueTest, TruthinessAndTypeNames) {
  EXPECT_FALSE(Truthy(Value::Undefined("")));
  EXPECT_FALSE(Truthy(Value::None()));
  EXPECT_FALSE(Truthy(Value::Int(0)));
  EXPECT_FALSE(Truthy(Value::Float(0.0)));
  EXPECT_FALSE(Truthy(Str("")));
  EXPECT_FALSE(Truthy(Value::List({})));
  EXPECT_FALSE(Truthy(Value::Dict({})));
  EXPECT_TRUE(Truthy(Value::NewNamespace({})));
  EXPECT_TRUE(Truthy(Str(" ")));
  EXPECT_EQ(TypeName(Value::Tuple({})), "tuple");
  EXPECT_EQ(TypeName(Value::None()), "NoneType");
  EXPECT_EQ(TypeName(Value::Undefined("")), "undefined");
}

}  // namespace
}  // namespace sovai::model::jinja
