// Reading a log route of the API — `GET /v1/jobs/{id}/logs` or `GET /v1/apps/{app}/logs`, both in
// the job-log format (docs/formats/job-log.md) — and printing it through a LogPrinter, once or
// following it. Shared by `job logs`, `job run --follow` and `app logs`.
//
//   LogStreamOptions options{.path = "/v1/jobs/job_1/logs", .follow = true,
//                            .ended = [&] { ... whether the job has ended ... }};
//   SOVAI_RETURN_IF_ERROR(StreamLog(ctx, api, options));
//
// Thread-safety: one call at a time per ApiClient.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "cli/client/api_client.h"
#include "cli/client/commands.h"

namespace sovai::cli::client {

struct LogStreamOptions {
  // The log route, percent-encoded; it may carry a query ("...?replica=job_1"): `offset` and
  // `follow` are appended.
  std::string path;
  // The byte offset to start at (a record boundary).
  uint64_t offset = 0;
  // Print whole records instead of their text (LogPrinterOptions).
  bool timestamps = false;
  // Keep reading until `ended` says the log's writer has ended, instead of one read to the end.
  bool follow = false;
  // With `follow`: asked each time a stream ends; true once no record can be added any more (the
  // job has ended). Its error ends StreamLog with that error.
  std::function<base::Result<bool>()> ended;
};

// Reads the log from `offset` and prints it to ctx.console. Without `follow`, reads until nothing
// new comes (one read returns at most the server's chunk). With `follow`, streams with
// `follow=true` and, when the stream breaks, reconnects from the last whole record printed (so
// nothing is printed twice or lost) after kLogReconnectDelay, giving up after
// kMaxLogReconnectFailures transient failures (Unavailable, DeadlineExceeded) in a row; when the
// stream ends normally it asks `ended` and, once true, reads the rest and returns. Errors: the
// API's (a 404 for an unknown job or app, a 400 for an offset past the end), or `ended`'s.
base::Status StreamLog(CommandContext& ctx, ApiClient& api, const LogStreamOptions& options);

}  // namespace sovai::cli::client
