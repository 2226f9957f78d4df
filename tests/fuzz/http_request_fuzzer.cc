// libFuzzer target for the request parsing path of src/net: Beast's parser configured with our
// limits, Request construction (target, path, query, percent-decoding), router matching, Range
// parsing, response heads, percent-coding round trips, and the SSE parser. No sockets, no
// coroutines.
//
// Build: cmake -DSOVAI_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 ...
//        ninja http_request_fuzzer && ./http_request_fuzzer corpus_dir
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/client.h"
#include "net/http.h"
#include "net/internal/request_head.h"
#include "net/internal/response_head.h"

namespace {

using sovai::net::Request;
using sovai::net::Response;
using sovai::net::Router;

const Router& TheRouter() {
  static const Router* router = [] {
    auto* r = new Router();  // lives for the process, like a server's router
    auto h = [](Request&) { return Response(); };
    r->Get("/health", h);
    r->Get("/v1/jobs", h);
    r->Post("/v1/jobs", h);
    r->Get("/v1/jobs/{id}", h);
    r->Delete("/v1/jobs/{id}", h);
    r->Get("/v1/jobs/{id}/logs", h);
    r->Put("/{bucket}/{key...}", h);
    r->Get("/{bucket}/{key...}", h);
    return r;
  }();
  return *router;
}

void Exercise(Request& req) {
  Router::Match m = TheRouter().Find(req.method(), req.raw_path());
  if (m.kind == Router::Match::kFound) req.set_route(m.pattern, std::move(m.params));
  (void)req.param("id");
  (void)req.query("x");
  if (auto range = req.header("Range")) {
    for (uint64_t size : {uint64_t{0}, uint64_t{1}, uint64_t{1000}, ~uint64_t{0}}) {
      auto r = sovai::net::ParseRange(*range, size);
      if (r.ok() && r->has_value()) {
        SOVAI_CHECK_LE((*r)->length, size);
        SOVAI_CHECK_LE((*r)->offset, size - (*r)->length);
        SOVAI_CHECK_GT((*r)->length, 0u);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  sovai::net::internal::HeadLimits limits;
  limits.max_header_bytes = 4096;
  limits.max_header_count = 32;
  limits.max_target_bytes = 1024;

  Request head;
  auto parsed = sovai::net::internal::ParseRequestHead(input, limits, head);
  if (parsed.error.ok()) {
    SOVAI_CHECK_LE(parsed.head_bytes, size);
    SOVAI_CHECK(!head.raw_path().empty() && head.raw_path().front() == '/');
    Exercise(head);
    // The request's fields as a response's (the server's head serializer on arbitrary fields,
    // Connection tokens included).
    std::string out;
    sovai::net::internal::AppendResponseHead(head.version(), 200, head.headers(), "sovai",
                                             sovai::net::internal::BodyFraming::kLength, size,
                                             size % 2 == 0, out);
    SOVAI_CHECK(out.size() >= 4 && out.compare(out.size() - 4, 4, "\r\n\r\n") == 0);
  } else {
    SOVAI_CHECK(parsed.error.status >= 400 && parsed.error.status <= 505);
  }

  Request full;
  auto whole = sovai::net::internal::ParseRequest(input, limits, /*max_body_bytes=*/1024, full);
  if (whole.error.ok()) {
    SOVAI_CHECK_LE(whole.body.size(), 1024u);
    Exercise(full);
  }

  // Percent-coding round trip and the decoder on raw bytes.
  std::string encoded = sovai::net::PercentEncode(input.substr(0, 256));
  auto decoded = sovai::net::PercentDecode(encoded);
  SOVAI_CHECK(decoded.ok() && *decoded == input.substr(0, 256));
  (void)sovai::net::PercentDecode(input.substr(0, 256), true);

  sovai::net::SseParser sse([](const sovai::net::SseEvent&) { return true; });
  sse.Feed(input);
  return 0;
}
