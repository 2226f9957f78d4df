// The CLI's client of the REST API (/v1, docs/api/openapi.yaml): JSON requests with the bearer
// token, errors turned into Statuses whose message is what the user should read.
//
//   SOVAI_ASSIGN_OR_RETURN(auto api, ApiClient::Create(config.url, config.token));
//   SOVAI_ASSIGN_OR_RETURN(nlohmann::json me, api->Get("/v1/whoami"));
//
// Errors. A non-2xx answer becomes a Status whose code follows the HTTP status (400
// InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 404 NotFound, 409 AlreadyExists or
// FailedPrecondition, 429 ResourceExhausted, 503 Unavailable, 504 DeadlineExceeded, other 5xx
// Internal) and whose message is the problem's `detail` followed by one line per `errors[]`
// entry that the detail does not already say ("\n  volumes[1]: ..."); see ProblemToStatus. A server
// that cannot be reached is Unavailable naming the URL. Requests are not retried (a POST must not
// run twice).
//
// Thread-safety: not thread-safe (one connection, reused); one client per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "net/client.h"

namespace sovai::cli::client {

// The Status for an HTTP error answer: see the header comment. `body` is the response body
// (problem+json, or anything else, which is shown cut to kMaxShownErrorBodyBytes).
// The /v1 detail is written to be read alone, so it often holds the field errors already (a
// spec's "volumes[0]: ...; image: ...", a one-field problem's message): an `errors[]` entry is
// printed only when the detail does not say it, and a message that starts with its own field
// name ("volumes[0]: bucket ...") does not get the name twice.
base::Status ProblemToStatus(int http_status, std::string_view body);

// A page of a list route and all pages of one, following `next_cursor`.
struct ListResult {
  std::vector<nlohmann::json> items;
  bool truncated = false;  // more items exist beyond `limit`
  // The cursor of the next page after the last item (set when truncated and the server gave
  // one): what the API's own page object holds, for `-o json`.
  std::optional<std::string> next_cursor;

  // The API's page object: {"items": [...], "next_cursor": "..." or null}.
  nlohmann::json ToJson() const;
};

class ApiClient {
 public:
  // InvalidArgument for a malformed URL; an empty token is allowed (for tests of 401).
  static base::Result<std::unique_ptr<ApiClient>> Create(std::string url, std::string token,
                                                         net::ClientOptions base = {});

  // `path` is the origin-form target ("/v1/jobs?limit=5"), already percent-encoded. A 2xx
  // answer's JSON body (null for an empty body, e.g. 204).
  base::Result<nlohmann::json> Get(std::string_view path);
  base::Result<nlohmann::json> Post(std::string_view path, const nlohmann::json& body);
  base::Result<nlohmann::json> Patch(std::string_view path, const nlohmann::json& body);
  base::Result<nlohmann::json> Delete(std::string_view path);

  // Every item of a list route (`path` may carry a query; limit and cursor are added), up to
  // `limit` items, following next_cursor.
  base::Result<ListResult> List(std::string_view path, int64_t limit);

  // GET with the body as raw bytes: streamed to `sink` when given, else buffered in `body`. The
  // HTTP status is known only once the body has been read, so a sink also receives the body of an
  // error answer (which GetRaw then returns as a Status): a streaming caller must only act on
  // bytes it can parse (log records), and print nothing else.
  struct RawResponse {
    int status = 0;
    net::Headers headers;
    std::string body;
  };
  base::Result<RawResponse> GetRaw(std::string_view path, const net::BodySink& sink = nullptr);

  // Changes the read timeout (a followed log is quiet for long stretches).
  void SetReadTimeout(std::chrono::milliseconds timeout);

  const std::string& url() const { return url_; }

 private:
  ApiClient(std::string url, std::string token, net::ClientOptions options);
  base::Result<nlohmann::json> Call(std::string_view method, std::string_view path,
                                    const nlohmann::json* body);
  net::ClientRequest NewRequest(std::string_view method, std::string_view path) const;
  base::Status TransportError(const base::Status& status) const;

  std::string url_;
  std::string token_;
  net::ClientOptions options_;
  std::unique_ptr<net::HttpClient> http_;
};

// Appends `name=value` (value percent-encoded) to a path with or without a query.
std::string AddQuery(std::string path, std::string_view name, std::string_view value);

}  // namespace sovai::cli::client
