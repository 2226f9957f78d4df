// The S3 front end: turns HTTP requests into Store operations, with S3's addressing (path-style
// and virtual-hosted-style), authentication (sigv4.h), authorization (bucket owners, bucket
// policies, public-read), XML bodies (s3_xml.h), checksums, conditional requests and CORS.
// docs/api/s3.md lists every operation and its status.
//
//   S3Api api(store, {.region = "eu-west-1", .domain = "s3.localhost"});
//   net::Router router;
//   api.Install(router);
//   net::ServerOptions options;
//   options.error_renderer = S3Api::RenderServerError;  // S3 XML for the server's own errors
//
// Thread-safety: Handle() is called concurrently from the server's worker threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/env.h"
#include "net/http.h"
#include "objstore/lifecycle.h"
#include "objstore/sigv4.h"
#include "objstore/store.h"

namespace sovai::objstore {

struct S3ApiOptions {
  // The region the server answers for (SigV4 scopes and LocationConstraint must name it).
  std::string region = "eu-west-1";
  // Virtual-hosted-style base domain: "<bucket>.<domain>" in Host selects the bucket. Empty
  // disables virtual hosting (path-style only).
  std::string domain;
  // Users whose requests may do anything on any bucket (the bootstrap admin).
  std::vector<std::string> admin_users;
  // The user id an e-mail address names, for ACL grants by e-mail (emailAddress=...); unset or
  // nullopt: UnresolvableGrantByEmailAddress.
  std::function<std::optional<std::string>(std::string_view email)> user_by_email;
  base::Env* env = nullptr;  // clock; nullptr = Env::Default()
  // The length of a lifecycle "day" for x-amz-expiration (LifecycleSweeperOptions::day_micros).
  int64_t lifecycle_day_micros = kDayMicros;
};

struct S3ApiStats {
  std::atomic<uint64_t> auth_failures{0};
  std::atomic<uint64_t> access_denied{0};
  std::atomic<uint64_t> bytes_stored{0};
  std::atomic<uint64_t> bytes_served{0};
  // Authenticated requests by payload mode (index: PayloadMode).
  std::atomic<uint64_t> payload_modes[5] = {};
};

// "unsigned", "signed-sha256", "streaming-signed", "streaming-signed-trailer",
// "streaming-unsigned-trailer" for the PayloadMode with that index.
const char* PayloadModeName(int mode);

class S3Api {
 public:
  S3Api(Store& store, S3ApiOptions options);

  // Sets the router's fallback to Handle() (every path is S3's), with S3's body limits.
  void Install(net::Router& router);
  net::Response Handle(net::Request& req);

  // Whether a request reads one object (GET or HEAD of `/bucket/key`, ListParts aside): a few
  // point reads of the WAL database that never wait on the writer, run on the I/O thread
  // (net::RouteOptions::inline_if). Listings and every write run on a worker.
  static bool IsPointRead(const net::Request& req);

  // For ServerOptions::error_renderer: the server's own errors (bad request line, body limit,
  // 404 without a route...) as S3 XML.
  static void RenderServerError(const net::Request* req, net::Response& res);

  const S3ApiStats& stats() const { return stats_; }

 private:
  class Call;
  Store& store_;
  S3ApiOptions opts_;
  S3ApiStats stats_;
};

}  // namespace sovai::objstore
