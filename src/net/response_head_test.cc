// The server's response heads against Beast's serializer (what the server sent before it
// serialized heads itself): the same fields, order, framing and Connection tokens, byte for byte.
#include "net/internal/response_head.h"

#include <gtest/gtest.h>

#include "net/internal/beast.h"

namespace sovai::net::internal {
namespace {

// The head Beast's serializer writes for a response built the way the server used to build it.
std::string BeastHead(int version, int status, const Headers& headers, std::string_view server,
                      BodyFraming framing, uint64_t length, bool keep_alive) {
  http::response<http::empty_body> msg;
  msg.version(version);
  msg.result(static_cast<unsigned>(status));
  if (auto reason = HttpReasonPhrase(status); !reason.empty()) {
    msg.reason(beast::string_view(reason.data(), reason.size()));
  }
  for (const auto& [k, v] : headers) msg.insert(k, v);
  if (!server.empty())
    msg.set(http::field::server, beast::string_view(server.data(), server.size()));
  if (framing != BodyFraming::kHandlerLength) msg.erase(http::field::content_length);
  msg.erase(http::field::transfer_encoding);
  if (framing == BodyFraming::kLength) msg.content_length(length);
  if (framing == BodyFraming::kChunked) msg.chunked(true);
  msg.keep_alive(keep_alive);
  http::response_serializer<http::empty_body> sr(msg);
  std::string out;
  boost::system::error_code ec;
  while (!sr.is_header_done()) {
    sr.next(ec, [&](boost::system::error_code&, const auto& buffers) {
      for (auto b : beast::buffers_range_ref(buffers)) {
        out.append(static_cast<const char*>(b.data()), b.size());
      }
      sr.consume(beast::buffer_bytes(buffers));
    });
    if (ec) break;
  }
  return out;
}

std::string OurHead(int version, int status, const Headers& headers, std::string_view server,
                    BodyFraming framing, uint64_t length, bool keep_alive) {
  std::string out = "leftover";  // appends
  AppendResponseHead(version, status, headers, server, framing, length, keep_alive, out);
  return out.substr(8);
}

Headers Make(std::initializer_list<std::pair<const char*, const char*>> fields) {
  Headers h;
  for (auto [k, v] : fields) h.Add(k, v);
  return h;
}

TEST(ResponseHeadTest, TypicalResponse) {
  Headers h = Make({{"Content-Type", "text/plain; charset=utf-8"}});
  EXPECT_EQ(OurHead(11, 200, h, "sovai", BodyFraming::kLength, 13, true),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nServer: sovai\r\n"
            "Content-Length: 13\r\n\r\n");
  EXPECT_EQ(OurHead(10, 404, h, "", BodyFraming::kLength, 0, false),
            "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 0\r\n\r\n");
}

TEST(ResponseHeadTest, MatchesBeastEverywhere) {
  const std::vector<Headers> header_sets = {
      {},
      Make({{"Content-Type", "text/plain"}}),
      Make({{"A", "1"}, {"B", "2"}, {"a", "3"}, {"X-Spaced", "  v \t"}}),
      Make({{"Content-Length", "12345"}, {"ETag", "\"x\""}}),
      Make({{"Server", "theirs"}, {"Transfer-Encoding", "gzip"}, {"Content-Length", "5"}}),
      Make({{"Connection", "close"}}),
      Make({{"Connection", "keep-alive"}}),
      Make({{"Connection", "Upgrade"}, {"Upgrade", "h2c"}}),
      Make({{"Connection", "keep-alive, Upgrade"}, {"connection", "close"}}),
      Make({{"Connection", " close , foo "}}),
      Make({{"Set-Cookie", "a=1"}, {"X", "y"}, {"set-cookie", "b=2"}, {"Set-Cookie", "c=3"}}),
  };
  const int statuses[] = {100, 200, 204, 206, 299, 304, 404, 413, 431, 500, 599, 999};
  const BodyFraming framings[] = {BodyFraming::kLength, BodyFraming::kHandlerLength,
                                  BodyFraming::kChunked, BodyFraming::kNone};
  int cases = 0;
  for (const Headers& h : header_sets) {
    for (int status : statuses) {
      for (int version : {10, 11}) {
        for (bool keep_alive : {false, true}) {
          for (std::string_view server : {"", "sovai"}) {
            for (BodyFraming framing : framings) {
              EXPECT_EQ(OurHead(version, status, h, server, framing, 42, keep_alive),
                        BeastHead(version, status, h, server, framing, 42, keep_alive))
                  << "status " << status << " version " << version << " keep_alive " << keep_alive
                  << " server '" << server << "' framing " << static_cast<int>(framing);
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 11 * 12 * 2 * 2 * 2 * 4);
}

}  // namespace
}  // namespace sovai::net::internal
