#include "cli/client/log_stream.h"

#include <chrono>

#include "cli/client/limits.h"
#include "cli/client/log_printer.h"

namespace sovai::cli::client {

using base::Status;

Status StreamLog(CommandContext& ctx, ApiClient& api, const LogStreamOptions& options) {
  LogPrinter printer(ctx.console, {.timestamps = options.timestamps});
  auto target = [&](bool stream) {
    std::string path =
        AddQuery(options.path, "offset", std::to_string(options.offset + printer.consumed_bytes()));
    return AddQuery(std::move(path), "follow", stream ? "true" : "false");
  };
  const int64_t reconnect_delay_micros =
      std::chrono::duration_cast<std::chrono::microseconds>(kLogReconnectDelay).count();
  // One read returns at most the server's chunk (a few MiB): read until nothing new comes.
  auto read_to_end = [&]() -> Status {
    for (;;) {
      const uint64_t before = printer.consumed_bytes();
      SOVAI_ASSIGN_OR_RETURN(auto raw, api.GetRaw(target(false)));
      printer.Feed(raw.body);
      printer.Reset();  // a partial record (none is expected) is read again next time
      if (printer.consumed_bytes() == before) return Status();
    }
  };
  if (!options.follow) {
    Status read = read_to_end();
    printer.Finish();
    return read;
  }
  api.SetReadTimeout(kLogFollowReadTimeout);
  int failures = 0;
  for (;;) {
    const uint64_t before = printer.consumed_bytes();
    auto raw = api.GetRaw(target(true), [&](std::string_view piece) {
      printer.Feed(piece);
      return Status();
    });
    if (printer.consumed_bytes() > before) failures = 0;
    if (!raw.ok()) {
      const base::StatusCode code = raw.status().code();
      const bool transient =
          code == base::StatusCode::kUnavailable || code == base::StatusCode::kDeadlineExceeded;
      if (!transient || ++failures > kMaxLogReconnectFailures) {
        printer.Finish();
        return raw.status();
      }
      printer.Reset();
      ctx.env.SleepForMicros(reconnect_delay_micros);
      continue;
    }
    // The stream ended: the server ends it once the writer has ended and its log is read; a
    // server that does not follow ends it at once, and this loop then polls.
    printer.Reset();
    auto ended = options.ended ? options.ended() : base::Result<bool>(true);
    if (!ended.ok()) {
      printer.Finish();
      return ended.status();
    }
    if (*ended) {
      // Whatever was written between the last read and the end.
      Status read = read_to_end();
      printer.Finish();
      return read;
    }
    ctx.env.SleepForMicros(reconnect_delay_micros);
  }
}

}  // namespace sovai::cli::client
