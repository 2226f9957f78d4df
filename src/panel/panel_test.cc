#include "panel/panel.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sovai::panel {
namespace {

constexpr Asset kAssets[] = {
    {"/index.html", "<!doctype html><script type=\"module\" src=\"/assets/index-abc.js\"></script>",
     "\"i1\""},
    {"/assets/index-abc.js", "console.log(1)", "\"j1\""},
    {"/assets/index-abc.css", "body{}", "\"c1\""},
    {"/favicon.svg", "<svg/>", "\"f1\""},
};

struct Answer {
  int status = 0;
  std::string body;
  net::Headers headers;
};

class PanelTest : public ::testing::Test {
 protected:
  Answer Call(std::string method, std::string target, std::vector<net::Headers::Field> headers = {},
              std::span<const Asset> assets = kAssets) {
    PanelHandler handler(assets, {.connect_origins = [](const net::Request& r) {
                           return "http://" + std::string(r.header("Host").value_or("")) + ":9000";
                         }});
    net::Request request;
    request.set_method(std::move(method));
    EXPECT_TRUE(request.SetTarget(target).ok()) << target;
    request.mutable_headers().Add("Host", "panel.example");
    for (auto& [k, v] : headers) request.mutable_headers().Add(k, v);
    net::Response response = handler.Handle(request);
    Answer a{response.status, response.body, response.headers};
    if (response.error_message) a.body = *response.error_message;
    return a;
  }
};

TEST_F(PanelTest, ContentTypeOfExtensions) {
  EXPECT_EQ(ContentTypeOf("/index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(ContentTypeOf("/assets/a-1.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(ContentTypeOf("/assets/a-1.CSS"), "text/css; charset=utf-8");
  EXPECT_EQ(ContentTypeOf("/favicon.svg"), "image/svg+xml");
  EXPECT_EQ(ContentTypeOf("/assets/a.map"), "application/json");
  EXPECT_EQ(ContentTypeOf("/assets/blob"), "application/octet-stream");
  EXPECT_EQ(ContentTypeOf("/dir.d/blob"), "application/octet-stream");
  EXPECT_EQ(ContentTypeOf("/x.exe"), "application/octet-stream");
}

TEST_F(PanelTest, RootServesIndexWithoutCaching) {
  Answer a = Call("GET", "/");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, kAssets[0].data);
  EXPECT_EQ(a.headers.Get("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(a.headers.Get("Cache-Control"), "no-cache");
  EXPECT_EQ(a.headers.Get("ETag"), "\"i1\"");
  EXPECT_EQ(a.headers.Get("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(a.headers.Get("Referrer-Policy"), "no-referrer");
  EXPECT_EQ(Call("GET", "/index.html").body, kAssets[0].data);
}

TEST_F(PanelTest, HashedAssetsAreImmutable) {
  Answer js = Call("GET", "/assets/index-abc.js");
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.body, "console.log(1)");
  EXPECT_EQ(js.headers.Get("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js.headers.Get("Cache-Control"), "public, max-age=31536000, immutable");
  Answer css = Call("HEAD", "/assets/index-abc.css");
  EXPECT_EQ(css.status, 200);
  EXPECT_EQ(css.headers.Get("Content-Type"), "text/css; charset=utf-8");
  // Other files of the build are revalidated.
  Answer icon = Call("GET", "/favicon.svg");
  EXPECT_EQ(icon.status, 200);
  EXPECT_EQ(icon.headers.Get("Content-Type"), "image/svg+xml");
  EXPECT_EQ(icon.headers.Get("Cache-Control"), "no-cache");
}

TEST_F(PanelTest, MissingAssetIsNotIndex) {
  Answer a = Call("GET", "/assets/index-old.js");
  EXPECT_EQ(a.status, 404);
  EXPECT_EQ(a.body, "no route for GET /assets/index-old.js");
  EXPECT_EQ(Call("GET", "/assets").status, 404);
}

TEST_F(PanelTest, PageRoutesServeIndex) {
  for (const char* page : {"/jobs", "/jobs/job_01ABC", "/buckets/my.bucket?prefix=a/b.v2/",
                           "/signin", "/apps-overview", "/v1x"}) {
    Answer a = Call("GET", page);
    EXPECT_EQ(a.status, 200) << page;
    EXPECT_EQ(a.body, kAssets[0].data) << page;
    EXPECT_EQ(a.headers.Get("Cache-Control"), "no-cache") << page;
  }
}

TEST_F(PanelTest, ReservedPrefixesAreNeverThePanel) {
  for (const char* path : {"/v1", "/v1/", "/v1/nope", "/apps/x/v1/models", "/notebooks/nb/lab",
                           "/health", "/metrics", "/internal/x"}) {
    Answer a = Call("GET", path);
    EXPECT_EQ(a.status, 404) << path;
    EXPECT_EQ(a.body, "no route for GET " + std::string(path)) << path;
    EXPECT_FALSE(a.headers.Has("Content-Security-Policy")) << path;
  }
}

TEST_F(PanelTest, OtherMethodsAreUnknownRoutes) {
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    Answer a = Call(method, "/jobs");
    EXPECT_EQ(a.status, 404) << method;
    EXPECT_EQ(a.body, std::string("no route for ") + method + " /jobs");
  }
}

TEST_F(PanelTest, ConditionalRequestsAnswer304) {
  Answer a = Call("GET", "/assets/index-abc.js", {{"If-None-Match", "\"j1\""}});
  EXPECT_EQ(a.status, 304);
  EXPECT_EQ(a.body, "");
  EXPECT_EQ(a.headers.Get("ETag"), "\"j1\"");
  EXPECT_EQ(a.headers.Get("Cache-Control"), "public, max-age=31536000, immutable");
  EXPECT_EQ(Call("GET", "/", {{"If-None-Match", "\"x\", W/\"i1\""}}).status, 304);
  EXPECT_EQ(Call("GET", "/jobs/1", {{"If-None-Match", "*"}}).status, 304);
  EXPECT_EQ(Call("GET", "/", {{"If-None-Match", "\"j1\""}}).status, 200);
  EXPECT_EQ(Call("GET", "/", {{"If-None-Match", ""}}).status, 200);
}

TEST_F(PanelTest, ContentSecurityPolicy) {
  Answer a = Call("GET", "/jobs");
  auto csp = a.headers.Get("Content-Security-Policy");
  ASSERT_TRUE(csp);
  EXPECT_NE(csp->find("default-src 'none'"), std::string::npos);
  EXPECT_NE(csp->find("script-src 'self';"), std::string::npos);
  EXPECT_NE(csp->find("style-src 'self';"), std::string::npos);
  EXPECT_NE(csp->find("connect-src 'self' http://panel.example:9000;"), std::string::npos);
  EXPECT_NE(csp->find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_EQ(csp->find("unsafe"), std::string::npos);
  EXPECT_EQ(PanelCsp("").find("connect-src 'self';") != std::string::npos, true);
}

TEST_F(PanelTest, WithoutIndexPagesAre404) {
  constexpr Asset kOnlyScript[] = {{"/assets/a.js", "1", "\"a\""}};
  EXPECT_EQ(Call("GET", "/", {}, kOnlyScript).status, 404);
  EXPECT_EQ(Call("GET", "/assets/a.js", {}, kOnlyScript).status, 200);
}

TEST(InstallPanelTest, RoutesWinOverThePanel) {
  net::Router router;
  router.Get("/health", [](net::Request&) { return net::Response::Text(200, "ok"); });
  InstallPanel(router, kAssets, {});
  router.Post("/v1/jobs", [](net::Request&) { return net::Response::Text(201, "job"); });

  auto health = router.Find("GET", "/health");
  ASSERT_EQ(health.kind, net::Router::Match::kFound);
  EXPECT_EQ(health.pattern, "/health");
  auto jobs = router.Find("POST", "/v1/jobs");
  ASSERT_EQ(jobs.kind, net::Router::Match::kFound);
  EXPECT_EQ(jobs.pattern, "/v1/jobs");
  // A known path with another method is still 405, not the panel.
  EXPECT_EQ(router.Find("GET", "/v1/jobs").kind, net::Router::Match::kMethodNotAllowed);
  auto page = router.Find("GET", "/jobs/x");
  ASSERT_EQ(page.kind, net::Router::Match::kFound);
  EXPECT_EQ(page.pattern, "");
  net::Request request;
  request.set_method("GET");
  ASSERT_TRUE(request.SetTarget("/jobs/x").ok());
  net::Response response = (*page.handler)(request);
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, kAssets[0].data);
  EXPECT_TRUE(page.options->inline_handler);
}

}  // namespace
}  // namespace sovai::panel
