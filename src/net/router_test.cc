#include <gtest/gtest.h>

#include "net/client.h"
#include "net/http.h"

namespace sovai::net {
namespace {

Handler Named(std::string name) {
  return [name](Request&) { return Response::Text(200, name); };
}

std::string CallMatched(const Router::Match& m) {
  Request req;
  return m.handler ? (*m.handler)(req).body : "";
}

TEST(RouterTest, LiteralParamsAndCatchAll) {
  Router r;
  r.Get("/v1/jobs", Named("list"));
  r.Get("/v1/jobs/{id}", Named("get"));
  r.Get("/v1/jobs/{id}/logs", Named("logs"));
  r.Get("/v1/jobs/special", Named("special"));
  r.Put("/{bucket}/{key...}", Named("put-object"));

  auto m = r.Find("GET", "/v1/jobs");
  EXPECT_EQ(m.kind, Router::Match::kFound);
  EXPECT_EQ(CallMatched(m), "list");
  EXPECT_EQ(m.pattern, "/v1/jobs");

  m = r.Find("GET", "/v1/jobs/j-42");
  EXPECT_EQ(CallMatched(m), "get");
  ASSERT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.params[0].first, "id");
  EXPECT_EQ(m.params[0].second, "j-42");

  m = r.Find("GET", "/v1/jobs/a%20b/logs");
  EXPECT_EQ(CallMatched(m), "logs");
  EXPECT_EQ(m.params[0].second, "a b");

  EXPECT_EQ(CallMatched(r.Find("GET", "/v1/jobs/special")), "special");  // literal wins

  m = r.Find("PUT", "/bucket/dir/sub/file%2Fwith%20slash.txt");
  EXPECT_EQ(CallMatched(m), "put-object");
  ASSERT_EQ(m.params.size(), 2u);
  EXPECT_EQ(m.params[0].second, "bucket");
  EXPECT_EQ(m.params[1].first, "key");
  EXPECT_EQ(m.params[1].second, "dir/sub/file/with slash.txt");

  m = r.Find("PUT", "/bucket");  // catch-all may be empty
  EXPECT_EQ(m.kind, Router::Match::kFound);
  EXPECT_EQ(m.params[1].second, "");
}

TEST(RouterTest, NotFoundVsMethodNotAllowed) {
  Router r;
  r.Get("/v1/jobs/{id}", Named("get"));
  r.Delete("/v1/jobs/{id}", Named("delete"));
  EXPECT_EQ(r.Find("GET", "/v1/nothing").kind, Router::Match::kNotFound);
  EXPECT_EQ(r.Find("GET", "/v1/jobs/").kind, Router::Match::kNotFound);  // empty segment
  EXPECT_EQ(r.Find("GET", "/v1/jobs/x/y").kind, Router::Match::kNotFound);
  auto m = r.Find("POST", "/v1/jobs/x");
  EXPECT_EQ(m.kind, Router::Match::kMethodNotAllowed);
  EXPECT_EQ(m.allow, "DELETE, GET, HEAD");
  EXPECT_EQ(CallMatched(r.Find("HEAD", "/v1/jobs/x")), "get");  // HEAD served by GET
}

TEST(RouterTest, SpecificityTiesAndHead) {
  Router r;
  r.Get("/{a}/x", Named("first"));
  r.Get("/{b}/x", Named("second"));
  r.Add("HEAD", "/obj/{any...}", Named("head-route"));
  r.Get("/obj/x", Named("get-route"));
  // Equally specific: the first registered wins.
  EXPECT_EQ(CallMatched(r.Find("GET", "/q/x")), "first");
  // A HEAD route wins over a more specific GET route; GET serves HEAD only without one.
  EXPECT_EQ(CallMatched(r.Find("HEAD", "/obj/x")), "head-route");
  EXPECT_EQ(CallMatched(r.Find("HEAD", "/q/x")), "first");
  // Literal segments compare decoded.
  EXPECT_EQ(CallMatched(r.Find("GET", "/o%62j/x")), "get-route");
  // A bad escape matches no literal, and a parameter that cannot be decoded matches nothing.
  EXPECT_EQ(r.Find("GET", "/o%zzj/x").kind, Router::Match::kNotFound);
}

TEST(RouterTest, LongPaths) {
  // More segments than the router splits without allocating.
  Router r;
  std::string pattern;
  std::string path;
  for (int i = 0; i < 20; ++i) {
    pattern += "/s" + std::to_string(i);
    path += "/s" + std::to_string(i);
  }
  r.Get(pattern + "/{id}", Named("param"));
  r.Get("/s0/{rest...}", Named("catch-all"));
  Router::Match m = r.Find("GET", path + "/x%20y");
  EXPECT_EQ(CallMatched(m), "param");
  ASSERT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.params[0].second, "x y");
  m = r.Find("GET", path + "/x/y");
  EXPECT_EQ(CallMatched(m), "catch-all");
  ASSERT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.params[0].second, path.substr(4) + "/x/y");
  EXPECT_EQ(r.Find("PUT", path + "/x").kind, Router::Match::kMethodNotAllowed);
}

TEST(RouterTest, Fallback) {
  Router r;
  r.Get("/health", Named("health"));
  r.SetFallback(Named("s3"));
  auto m = r.Find("PATCH", "/anything/else");
  EXPECT_EQ(m.kind, Router::Match::kFound);
  EXPECT_EQ(m.pattern, "");
  EXPECT_EQ(CallMatched(m), "s3");
  EXPECT_EQ(m.route_index, r.route_count());
  EXPECT_EQ(CallMatched(r.Find("GET", "/bad%zzescape")), "s3");
}

TEST(RouterTest, BadEscapeInParamIsNotFound) {
  Router r;
  r.Get("/v1/jobs/{id}", Named("get"));
  EXPECT_EQ(r.Find("GET", "/v1/jobs/%zz").kind, Router::Match::kNotFound);
}

TEST(RouterDeathTest, DuplicateAndMalformedPatterns) {
  Router r;
  r.Get("/a/{id}", Named("a"));
  EXPECT_DEATH(r.Get("/a/{id}", Named("b")), "duplicate route");
  EXPECT_DEATH(r.Get("/a/{rest...}/b", Named("b")), "catch-all must be the last");
  EXPECT_DEATH(r.Get("no-slash", Named("b")), "must start with");
  EXPECT_DEATH(r.Get("/a/x{id}", Named("b")), "braces");
}

TEST(PercentTest, DecodeEncode) {
  EXPECT_EQ(*PercentDecode("a%20b%2Fc"), "a b/c");
  EXPECT_EQ(*PercentDecode("a+b", true), "a b");
  EXPECT_EQ(*PercentDecode("a+b", false), "a+b");
  EXPECT_FALSE(PercentDecode("%zz").ok());
  EXPECT_FALSE(PercentDecode("%4").ok());
  EXPECT_FALSE(PercentDecode("abc%").ok());
  EXPECT_EQ(PercentEncode("a b/c~"), "a%20b%2Fc~");
  EXPECT_EQ(PercentEncode("a b/c", true), "a%20b/c");
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  EXPECT_EQ(*PercentDecode(PercentEncode(all)), all);
}

TEST(RequestTest, TargetAndQuery) {
  Request req;
  ASSERT_TRUE(req.SetTarget("/b/k%20ey?x=1&y&z=a%2Bb+c&x=2").ok());
  EXPECT_EQ(req.raw_path(), "/b/k%20ey");
  EXPECT_EQ(req.raw_query(), "x=1&y&z=a%2Bb+c&x=2");
  EXPECT_EQ(req.path(), "/b/k ey");
  EXPECT_EQ(*req.query("x"), "1");
  EXPECT_EQ(*req.query("y"), "");
  EXPECT_EQ(*req.query("z"), "a+b c");
  EXPECT_FALSE(req.query("w").has_value());
  EXPECT_EQ(req.query_params().size(), 4u);
  EXPECT_FALSE(req.SetTarget("http://example.com/").ok());
  EXPECT_FALSE(req.SetTarget("/a%00b").ok());
  EXPECT_FALSE(req.SetTarget("/a?x=%zz").ok());
}

TEST(RequestTest, ClearKeepsOnlyTheConnection) {
  Request req;
  req.set_remote_address("10.0.0.1:5000");
  req.set_is_tls(true);
  req.set_method("PUT");
  req.set_version(10);
  ASSERT_TRUE(req.SetTarget("/a/b?x=1").ok());
  req.mutable_headers().Add("Host", "h");
  req.set_content_length(5);
  req.set_chunked(true);
  req.set_route("/a/{id}", {{"id", "b"}});
  req.Clear();
  EXPECT_EQ(req.method(), "");
  EXPECT_EQ(req.target(), "");
  EXPECT_EQ(req.raw_path(), "");
  EXPECT_EQ(req.path(), "");
  EXPECT_TRUE(req.query_params().empty());
  EXPECT_TRUE(req.params().empty());
  EXPECT_EQ(req.route_pattern(), "");
  EXPECT_TRUE(req.headers().empty());
  EXPECT_EQ(req.version(), 11);
  EXPECT_FALSE(req.content_length().has_value());
  EXPECT_FALSE(req.chunked());
  EXPECT_EQ(req.remote_address(), "10.0.0.1:5000");
  EXPECT_TRUE(req.is_tls());
}

TEST(HeadersTest, CaseInsensitive) {
  Headers h;
  h.Add("Content-Type", "a");
  h.Add("x-amz-meta", "1");
  h.Add("X-Amz-Meta", "2");
  EXPECT_EQ(*h.Get("content-type"), "a");
  EXPECT_EQ(h.GetAll("X-AMZ-META").size(), 2u);
  h.Set("x-amz-meta", "3");
  EXPECT_EQ(h.GetAll("x-amz-meta").size(), 1u);
  h.Remove("CONTENT-TYPE");
  EXPECT_FALSE(h.Has("content-type"));
}

TEST(RangeTest, Parse) {
  auto r = ParseRange("bytes=0-99", 1000);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->offset, 0u);
  EXPECT_EQ((*r)->length, 100u);
  r = ParseRange("bytes=900-", 1000);
  EXPECT_EQ((*r)->offset, 900u);
  EXPECT_EQ((*r)->length, 100u);
  r = ParseRange("bytes=-10", 1000);
  EXPECT_EQ((*r)->offset, 990u);
  EXPECT_EQ((*r)->length, 10u);
  r = ParseRange("bytes=990-5000", 1000);
  EXPECT_EQ((*r)->length, 10u);
  EXPECT_EQ(ParseRange("bytes=1000-", 1000).status().code(), base::StatusCode::kOutOfRange);
  EXPECT_EQ(ParseRange("bytes=-0", 1000).status().code(), base::StatusCode::kOutOfRange);
  EXPECT_FALSE(ParseRange("items=0-1", 1000)->has_value());
  EXPECT_FALSE(ParseRange("bytes=5-1", 1000)->has_value());
  EXPECT_FALSE(ParseRange("bytes=0-1,5-6", 1000)->has_value());
  EXPECT_FALSE(ParseRange("bytes=x-1", 1000)->has_value());
}

TEST(SseParserTest, EventsAcrossPieces) {
  std::vector<SseEvent> events;
  SseParser p([&](const SseEvent& e) {
    events.push_back(e);
    return true;
  });
  std::string stream =
      ": keepalive\n\nevent: log\nid: 7\ndata: line1\ndata: line2\n\ndata:x\r\n\r\n";
  for (char c : stream) ASSERT_TRUE(p.Feed(std::string_view(&c, 1)));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].event, "log");
  EXPECT_EQ(events[0].id, "7");
  EXPECT_EQ(events[0].data, "line1\nline2");
  EXPECT_EQ(events[1].data, "x");
  EXPECT_EQ(events[1].id, "7");  // last event id persists
}

TEST(StatusMapTest, Codes) {
  EXPECT_EQ(HttpStatusFromCode(base::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFromCode(base::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFromCode(base::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpReasonPhrase(431), "Request Header Fields Too Large");
  auto opts = ClientOptionsFromUrl("https://example.com:8443/x");
  ASSERT_TRUE(opts.ok());
  EXPECT_EQ(opts->host, "example.com");
  EXPECT_EQ(opts->port, 8443);
  EXPECT_TRUE(opts->tls);
  EXPECT_EQ(ClientOptionsFromUrl("http://[::1]:9000")->host, "::1");
  EXPECT_FALSE(ClientOptionsFromUrl("ftp://x").ok());
}

}  // namespace
}  // namespace sovai::net
