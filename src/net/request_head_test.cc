// The socket-free request parsing path (the one the fuzzer drives).
#include "net/internal/request_head.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace sovai::net::internal {
namespace {

TEST(RequestHeadTest, ParsesHead) {
  Request req;
  auto r = ParseRequestHead(
      "GET /v1/jobs/a%20b?limit=5 HTTP/1.1\r\nHost: x\r\nX-Test: 1\r\n\r\nrest", {}, req);
  ASSERT_TRUE(r.error.ok()) << r.error.message;
  EXPECT_EQ(req.method(), "GET");
  EXPECT_EQ(req.path(), "/v1/jobs/a b");
  EXPECT_EQ(*req.query("limit"), "5");
  EXPECT_EQ(*req.header("x-test"), "1");
  EXPECT_EQ(req.version(), 11);
  EXPECT_EQ(r.head_bytes, 59u);
}

TEST(RequestHeadTest, MalformedRequestLineIs400) {
  Request req;
  EXPECT_EQ(ParseRequestHead("GARBAGE\r\n\r\n", {}, req).error.status, 400);
  Request req2;
  EXPECT_EQ(ParseRequestHead("GET /x HTTP/1.1\r\nBad Header\r\n\r\n", {}, req2).error.status, 400);
  Request req3;
  EXPECT_EQ(ParseRequestHead("GET x HTTP/1.1\r\n\r\n", {}, req3).error.status, 400);
  Request req4;
  int status = ParseRequestHead("GET /x HTTP/1.2\r\n\r\n", {}, req4).error.status;
  EXPECT_TRUE(status == 400 || status == 505) << status;
}

TEST(RequestHeadTest, HeaderLimits) {
  HeadLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_header_count = 5;
  std::string big = "GET / HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n";
  Request req;
  EXPECT_EQ(ParseRequestHead(big, limits, req).error.status, 431);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 6; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  many += "\r\n";
  Request req2;
  EXPECT_EQ(ParseRequestHead(many, limits, req2).error.status, 431);
  limits.max_target_bytes = 10;
  Request req3;
  EXPECT_EQ(ParseRequestHead("GET /0123456789abc HTTP/1.1\r\n\r\n", limits, req3).error.status,
            414);
}

TEST(RequestHeadTest, BodiesAndLimits) {
  Request req;
  auto r = ParseRequest("PUT /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", {}, 100, req);
  ASSERT_TRUE(r.error.ok()) << r.error.message;
  EXPECT_EQ(r.body, "hello");
  EXPECT_EQ(*req.content_length(), 5u);

  Request req2;
  r = ParseRequest(
      "PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
      {}, 100, req2);
  ASSERT_TRUE(r.error.ok()) << r.error.message;
  EXPECT_EQ(r.body, "hello world");
  EXPECT_TRUE(req2.chunked());

  Request req3;
  r = ParseRequest(
      "PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
      {}, 8, req3);
  EXPECT_EQ(r.error.status, 413);
  Request req4;
  r = ParseRequest("PUT /x HTTP/1.1\r\nContent-Length: 500\r\n\r\nhello", {}, 100, req4);
  EXPECT_EQ(r.error.status, 413);
  Request req5;
  r = ParseRequest("PUT /x HTTP/1.1\r\nContent-Length: 50\r\n\r\nhello", {}, 100, req5);
  EXPECT_EQ(r.error.status, 400);  // cut short
  Request req6;
  r = ParseRequest("PUT /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nhello", {}, 100, req6);
  EXPECT_EQ(r.error.status, 400);
}

TEST(RequestHeadTest, BodiesLargerThanOneBuffer) {
  // The parser copies body bytes into the caller's buffer and stops when it is full; a body of
  // many buffers comes through whole, framed by length or by chunks.
  std::string body(10'000, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 26);
  Request req;
  auto r = ParseRequest(
      "PUT /x HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body, {},
      1 << 20, req);
  ASSERT_TRUE(r.error.ok()) << r.error.message;
  EXPECT_EQ(r.body, body);
  std::string chunked = "PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (size_t off = 0; off < body.size(); off += 3000) {
    std::string piece = body.substr(off, 3000);
    char size[16];
    std::snprintf(size, sizeof size, "%zx", piece.size());
    chunked += std::string(size) + "\r\n" + piece + "\r\n";
  }
  chunked += "0\r\n\r\n";
  Request req2;
  r = ParseRequest(chunked, {}, 1 << 20, req2);
  ASSERT_TRUE(r.error.ok()) << r.error.message;
  EXPECT_EQ(r.body, body);
}

TEST(RequestHeadTest, ParserFillsTheRequestAndChecksInOrder) {
  HeadLimits limits;
  limits.max_header_count = 2;
  limits.max_target_bytes = 8;
  // Too many fields and a bad target: the field count is reported first.
  Request req;
  EXPECT_EQ(
      ParseRequestHead("GET x HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", limits, req).error.status,
      431);
  // OPTIONS * is served as "/".
  Request req2;
  auto r = ParseRequestHead("OPTIONS * HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", limits, req2);
  ASSERT_TRUE(r.error.ok()) << r.error.message;
  EXPECT_EQ(req2.raw_path(), "/");
  EXPECT_EQ(req2.version(), 10);
  EXPECT_EQ(*req2.header("connection"), "keep-alive");
  EXPECT_FALSE(req2.has_body());
}

}  // namespace
}  // namespace sovai::net::internal
