// docs/api/openapi.yaml must describe exactly the routes the REST API registers.
//
// No YAML library is installed, and the file is ours, so the test reads only the `paths:` section
// and requires it in one simple block shape (2-space indentation):
//
//   paths:
//     /v1/users/{id}:          <- indent 2: a path, "/..." followed by ':' and nothing else
//       parameters:            <- indent 4: a path-item field (parameters, summary, description)
//         - ...                <- indent 6 and deeper: contents, skipped
//       get:                   <- indent 4: an operation
//         ...
//
// Anything else inside `paths:` (tabs, odd indentation, flow style, unknown path-item fields,
// duplicates, a path without operations) fails the test with the line number, so the parser
// never silently misreads the file.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/strings.h"
#include "control/rest_api.h"
#include "net/http.h"

namespace sovai::control {
namespace {

struct Operation {
  std::string method;  // upper case, as the router has it
  std::string path;
  friend auto operator<=>(const Operation&, const Operation&) = default;
};

// Returns the (method, path) pairs of the `paths:` section, or an error naming the line.
base::Result<std::set<Operation>> ParseOpenApiPaths(std::string_view text) {
  static const std::set<std::string, std::less<>> kMethods = {"get",   "put",  "post",    "delete",
                                                              "patch", "head", "options", "trace"};
  static const std::set<std::string, std::less<>> kPathItemFields = {"parameters", "summary",
                                                                     "description"};
  std::set<Operation> out;
  std::set<std::string> paths;
  std::vector<std::string_view> lines = base::Split(text, '\n');
  bool in_paths = false;
  bool seen_paths = false;
  bool seen_version = false;
  std::string current_path;
  int current_ops = 0;
  auto fail = [](size_t line_index, const std::string& why) {
    return base::InvalidArgumentError("openapi.yaml line " + std::to_string(line_index + 1) + ": " +
                                      why);
  };
  auto finish_path = [&](size_t line_index) -> base::Status {
    if (!current_path.empty() && current_ops == 0) {
      return fail(line_index, "path " + current_path + " has no operations");
    }
    return base::Status();
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string_view trimmed = base::Trim(line);
    if (trimmed.empty() || trimmed.front() == '#') continue;
    if (line.find('\t') != std::string_view::npos) return fail(i, "tab character");
    const size_t indent = line.find_first_not_of(' ');
    if (indent == 0) {
      if (in_paths) {
        SOVAI_RETURN_IF_ERROR(finish_path(i));
        in_paths = false;
      }
      if (line.starts_with("openapi:")) {
        seen_version = base::Trim(line.substr(8)).starts_with("3.1");
        if (!seen_version) return fail(i, "expected 'openapi: 3.1.x'");
      }
      if (line == "paths:") {
        if (seen_paths) return fail(i, "a second 'paths:' section");
        in_paths = seen_paths = true;
      } else if (line.starts_with("paths")) {
        return fail(i, "write the section as a block: 'paths:' alone on its line");
      }
      continue;
    }
    if (!in_paths) continue;
    if (indent % 2 != 0) return fail(i, "odd indentation (use 2 spaces)");
    if (indent == 2) {
      SOVAI_RETURN_IF_ERROR(finish_path(i));
      if (!trimmed.starts_with("/") || !trimmed.ends_with(":")) {
        return fail(i, "expected a path key like '  /v1/users/{id}:'");
      }
      std::string path(trimmed.substr(0, trimmed.size() - 1));
      if (path.find_first_of(" :\"'[]#") != std::string::npos) {
        return fail(i, "a path key must be a bare '/...' followed by ':'");
      }
      if (!paths.insert(path).second) return fail(i, "duplicate path " + path);
      current_path = path;
      current_ops = 0;
      continue;
    }
    if (indent == 4) {
      if (current_path.empty()) return fail(i, "a field outside any path");
      size_t colon = trimmed.find(':');
      if (colon == std::string_view::npos) return fail(i, "expected 'key:'");
      std::string key(trimmed.substr(0, colon));
      std::string_view rest = base::Trim(trimmed.substr(colon + 1));
      if (kMethods.count(key)) {
        if (!rest.empty()) return fail(i, "operation '" + key + "' must be a block, not inline");
        std::string method = base::AsciiToUpper(key);
        if (!out.insert({method, current_path}).second) {
          return fail(i, "duplicate operation " + method + " " + current_path);
        }
        ++current_ops;
      } else if (kPathItemFields.count(key)) {
        // Contents (indented deeper) are skipped.
      } else {
        return fail(i, "unknown path-item field '" + key +
                           "' (the test's parser knows operations and " +
                           "parameters/summary/description)");
      }
      continue;
    }
    // Deeper lines belong to an operation or a path-item field.
    if (current_path.empty()) return fail(i, "content outside any path");
  }
  if (in_paths) SOVAI_RETURN_IF_ERROR(finish_path(lines.size()));
  if (!seen_version) return base::InvalidArgumentError("openapi.yaml lacks 'openapi: 3.1.x'");
  if (!seen_paths) return base::InvalidArgumentError("openapi.yaml has no 'paths:' section");
  return out;
}

std::set<Operation> Registered() {
  std::set<Operation> out;
  for (const RouteSpec& r : RestRoutes()) {
    EXPECT_TRUE(out.insert({std::string(r.method), std::string(r.pattern)}).second)
        << r.method << " " << r.pattern;
  }
  return out;
}

std::string Describe(const std::set<Operation>& ops) {
  std::string s;
  for (const Operation& op : ops) s += "  " + op.method + " " + op.path + "\n";
  return s;
}

TEST(OpenApiTest, DocumentsExactlyTheRegisteredRoutes) {
  auto text = base::Env::Default().ReadFile(SOVAI_OPENAPI_YAML);
  ASSERT_TRUE(text.ok()) << text.status();
  auto documented = ParseOpenApiPaths(*text);
  ASSERT_TRUE(documented.ok()) << documented.status();
  std::set<Operation> registered = Registered();

  std::set<Operation> missing;  // registered, not documented
  std::set<Operation> extra;    // documented, not registered
  std::set_difference(registered.begin(), registered.end(), documented->begin(), documented->end(),
                      std::inserter(missing, missing.end()));
  std::set_difference(documented->begin(), documented->end(), registered.begin(), registered.end(),
                      std::inserter(extra, extra.end()));
  EXPECT_TRUE(missing.empty()) << "routes missing from docs/api/openapi.yaml:\n"
                               << Describe(missing);
  EXPECT_TRUE(extra.empty()) << "operations in docs/api/openapi.yaml that no route serves:\n"
                             << Describe(extra);
}

TEST(OpenApiTest, RestRoutesIsWhatTheRouterGets) {
  char tmpl[] = "/tmp/sovai-openapi-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  {
    auto control = ControlPlane::Open(dir);
    ASSERT_TRUE(control.ok()) << control.status();
    net::Router router;
    ASSERT_TRUE(RegisterRestApi(router, **control).ok());
    std::vector<RouteSpec> routes = RestRoutes();
    ASSERT_EQ(router.route_count(), static_cast<int>(routes.size()));
    for (int i = 0; i < router.route_count(); ++i) {
      auto [pattern, method] = router.route_key(i);
      EXPECT_EQ(method, routes[i].method);
      EXPECT_EQ(pattern, routes[i].pattern);
    }
  }
  base::Env::Default().DeleteDirRecursive(dir).IgnoreError();
}

// The parser fails loudly on shapes it does not understand.
TEST(OpenApiTest, ParserRejectsShapesItDoesNotUnderstand) {
  const std::string head = "openapi: 3.1.0\npaths:\n";
  EXPECT_TRUE(ParseOpenApiPaths(head + "  /v1/a:\n    get:\n      summary: x\n").ok());
  auto good = ParseOpenApiPaths(head + "  /v1/a/{id}:\n    parameters:\n      - $ref: x\n" +
                                "    get:\n      summary: x\n    delete:\n      summary: y\n" +
                                "components:\n  schemas: {}\n");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->size(), 2u);
  EXPECT_TRUE(good->count({"DELETE", "/v1/a/{id}"}));

  for (const std::string& bad : {
           head + "  /v1/a: {get: {}}\n",                                   // flow style
           head + "  /v1/a:\n    get: {}\n",                                // inline operation
           head + "   /v1/a:\n    get:\n",                                  // odd indentation
           head + "  /v1/a:\n\tget:\n",                                     // tab
           head + "  /v1/a:\n    x-thing:\n      y: 1\n",                   // unknown field
           head + "  /v1/a:\n    get:\n      a: 1\n  /v1/a:\n    post:\n",  // duplicate path
           head + "  /v1/a:\n    get:\n    get:\n",                         // duplicate method
           head + "  /v1/a:\n  /v1/b:\n    get:\n",                      // path without operations
           head + "  v1/a:\n    get:\n",                                 // not a path
           head + "    get:\n",                                          // operation outside a path
           std::string("openapi: 3.0.3\npaths:\n  /v1/a:\n    get:\n"),  // wrong version
           std::string("openapi: 3.1.0\npaths: {}\n"),                   // flow paths
           std::string("openapi: 3.1.0\n"),                              // no paths
       }) {
    EXPECT_FALSE(ParseOpenApiPaths(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace sovai::control
