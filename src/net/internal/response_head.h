// Private: the status line and header fields of a server response, serialized straight into a
// string the server reuses per connection (instead of building a beast::http::response and its
// serializer for every response). Socket-free, so unit tests compare it with Beast's serializer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "net/http.h"

namespace sovai::net::internal {

// How a response body is delimited; decides the Content-Length / Transfer-Encoding fields.
enum class BodyFraming {
  kLength,         // "Content-Length: <content_length>"; the handler's own field is replaced
  kHandlerLength,  // the handler's Content-Length is kept (HEAD answered without the body)
  kChunked,        // "Transfer-Encoding: chunked"
  kNone,           // neither: 1xx/204/304, or a body that ends when the connection closes
};

// Appends the status line, the header fields and the empty line of a response to `out`. The
// bytes are those Beast's serializer wrote for the same message, which is what the server sent
// before it serialized heads itself:
//   * reason phrase: HttpReasonPhrase(status), else Beast's (obsolete) one;
//   * the handler's fields in order, with repeated names kept together where the name first
//     appears and values trimmed of spaces and tabs; dropped: Transfer-Encoding and Connection
//     always, Content-Length unless kHandlerLength, Server when `server_name` is not empty;
//   * then "Server: <server_name>", the framing field, and Connection: the first handler
//     Connection value without its close/keep-alive tokens, plus "close" for HTTP/1.1 that is
//     not kept alive or "keep-alive" for HTTP/1.0 that is (omitted when that leaves it empty).
// `version` is 10 or 11 and `status` in [100, 999] (SOVAI_CHECK).
void AppendResponseHead(int version, int status, const Headers& headers,
                        std::string_view server_name, BodyFraming framing, uint64_t content_length,
                        bool keep_alive, std::string& out);

}  // namespace sovai::net::internal
