#include "base/json.h"

#include <gtest/gtest.h>

namespace sovai::base {
namespace {

using nlohmann::json;

TEST(JsonTest, ParsesValidDocuments) {
  Result<json> j = ParseJson(R"( {"name": "llama", "n": 3, "tags": ["a"], "x": null} )");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["name"], "llama");
  EXPECT_EQ(*ParseJson("42"), 42);
  EXPECT_EQ(*ParseJson("\"caf\xC3\xA9\""), "caf\xC3\xA9");
}

TEST(JsonTest, MalformedJsonIsInvalidArgumentWithPosition) {
  for (std::string_view bad : {"", "{", "{\"a\":}", "[1,2,]", "{\"a\":1} trailing", "tru",
                               "{'a':1}", "\"unterminated", "\"bad utf8 \xFF\"", "01", "NaN"}) {
    Result<json> r = ParseJson(bad);
    ASSERT_FALSE(r.ok()) << "accepted: " << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("invalid JSON at byte"), std::string::npos)
        << r.status().message();
    EXPECT_EQ(r.status().message().find("[json.exception"), std::string::npos);
  }
  EXPECT_NE(ParseJson("[1,2,]").status().message().find("at byte 6"), std::string::npos)
      << ParseJson("[1,2,]").status().message();
}

TEST(JsonTest, DepthLimit) {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_TRUE(ParseJson(nested(64)).ok());
  Result<json> deep = ParseJson(nested(65));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(deep.status().message().find("deeper than 64"), std::string::npos);
  // Objects count too, and a custom limit applies.
  EXPECT_TRUE(ParseJson(R"({"a":{"b":1}})", {.max_depth = 2}).ok());
  EXPECT_FALSE(ParseJson(R"({"a":{"b":[]}})", {.max_depth = 2}).ok());
  EXPECT_TRUE(ParseJson("7", {.max_depth = 0}).ok());
  EXPECT_FALSE(ParseJson("[]", {.max_depth = 0}).ok());
  // A hostile, very deep document is rejected without exhausting the stack.
  EXPECT_FALSE(ParseJson(std::string(1'000'000, '[')).ok());
}

TEST(JsonTest, SizeLimit) {
  Result<json> r = ParseJson("[1, 2, 3]", {.max_bytes = 5});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exceeds the limit of 5 bytes"), std::string::npos);
  EXPECT_TRUE(ParseJson("[1]", {.max_bytes = 3}).ok());
}

TEST(JsonTest, TypedGetters) {
  json obj = *ParseJson(R"({"s":"x","i":-5,"u":18446744073709551615,"d":1.5,"b":true,
                            "o":{},"a":[1],"n":null,"f":3.0})");
  EXPECT_EQ(*GetString(obj, "s"), "x");
  EXPECT_EQ(*GetInt(obj, "i"), -5);
  EXPECT_EQ(*GetUint(obj, "u"), UINT64_MAX);
  EXPECT_EQ(*GetDouble(obj, "d"), 1.5);
  EXPECT_EQ(*GetDouble(obj, "i"), -5.0);
  EXPECT_EQ(*GetBool(obj, "b"), true);
  EXPECT_TRUE((*GetObject(obj, "o"))->is_object());
  EXPECT_EQ((*GetArray(obj, "a"))->size(), 1u);
  EXPECT_EQ(*GetOptionalString(obj, "missing"), std::nullopt);
  EXPECT_EQ(*GetOptionalString(obj, "n"), std::nullopt);
  EXPECT_EQ(*GetOptionalInt(obj, "i"), -5);
  EXPECT_EQ(*GetOptionalBool(obj, "b"), true);
}

TEST(JsonTest, TypedGetterErrorsNameTheField) {
  json obj = *ParseJson(R"({"s":"x","i":-5,"u":18446744073709551615,"f":3.0,"n":null})");
  auto message = [](const Status& s) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  EXPECT_EQ(message(GetString(obj, "i").status()), "field 'i' must be a string, got number");
  EXPECT_EQ(message(GetInt(obj, "s").status()), "field 's' must be an integer, got string");
  EXPECT_EQ(message(GetInt(obj, "f").status()), "field 'f' must be an integer, got number");
  EXPECT_EQ(message(GetInt(obj, "u").status()), "field 'u' is out of the int64 range");
  EXPECT_EQ(message(GetUint(obj, "i").status()), "field 'i' must not be negative");
  EXPECT_EQ(message(GetBool(obj, "s").status()), "field 's' must be a boolean, got string");
  EXPECT_EQ(message(GetString(obj, "name").status()), "missing required field 'name'");
  EXPECT_EQ(message(GetString(obj, "n").status()), "missing required field 'n'");
  EXPECT_EQ(message(GetObject(obj, "s").status()), "field 's' must be an object, got string");
  EXPECT_EQ(message(GetArray(obj, "s").status()), "field 's' must be an array, got string");
  EXPECT_EQ(message(GetOptionalInt(obj, "s").status()), "field 's' must be an integer, got string");
  EXPECT_EQ(message(GetString(json::array(), "name").status()),
            "expected a JSON object with field 'name', got array");
}

TEST(JsonTest, DumpNeverThrows) {
  json j = {{"k", std::string("bad\xFF")}};
  EXPECT_EQ(DumpJson(j), "{\"k\":\"bad\xEF\xBF\xBD\"}");
}

}  // namespace
}  // namespace sovai::base
