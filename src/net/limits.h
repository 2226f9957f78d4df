// Named limits and defaults of the HTTP server and client (src/net). Every one of them can be
// overridden per server (ServerOptions), per route (RouteOptions) or per client (ClientOptions).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sovai::net {

// --- Server: request head -------------------------------------------------------------------
// Request line + all header lines, in bytes. Exceeding it answers 431.
inline constexpr size_t kDefaultMaxHeaderBytes = 16 * 1024;
// Number of header fields. Exceeding it answers 431.
inline constexpr size_t kDefaultMaxHeaderCount = 100;
// Longest request-target (path + query) accepted, in bytes; longer answers 414.
inline constexpr size_t kDefaultMaxTargetBytes = 8 * 1024;

// --- Server: request body -------------------------------------------------------------------
// Per-route body limit (RouteOptions::max_body_bytes). Exceeding it answers 413.
inline constexpr uint64_t kDefaultMaxBodyBytes = 1 * 1024 * 1024;
// Hard ceiling for any route: an S3 single PUT is 5 GiB of object, plus its aws-chunked framing.
inline constexpr uint64_t kMaxBodyBytesCeiling = uint64_t{6} * 1024 * 1024 * 1024;
// Size of one read/write chunk handed between the socket and a handler, in bytes.
inline constexpr size_t kStreamChunkBytes = 256 * 1024;
// A streaming body is dropped when it arrives slower than this on average (after the first
// read_timeout of grace): it stops 1-byte-per-second clients from pinning a connection forever.
inline constexpr uint64_t kDefaultMinBodyBytesPerS = 1024;

// --- Server: time ---------------------------------------------------------------------------
// The whole request head must arrive within this time after its first byte is awaited.
inline constexpr std::chrono::milliseconds kDefaultHeaderTimeout{30'000};
// A body read or a response write that makes no progress for this long drops the connection.
inline constexpr std::chrono::milliseconds kDefaultReadTimeout{60'000};
inline constexpr std::chrono::milliseconds kDefaultWriteTimeout{60'000};
// A keep-alive connection waiting for its next request is closed after this long.
inline constexpr std::chrono::milliseconds kDefaultIdleTimeout{60'000};
// Shutdown(): how long in-flight requests may run before their connections are closed.
inline constexpr std::chrono::milliseconds kDefaultShutdownGrace{10'000};

// --- Server: concurrency --------------------------------------------------------------------
// Open connections; the next one is answered 503 and closed.
inline constexpr size_t kDefaultMaxConnections = 10'000;
// Threads that run the socket I/O (0 = hardware concurrency, at least 1).
inline constexpr int kDefaultIoThreads = 0;
// Worker threads that run blocking handlers and streaming writers; the pool grows on demand
// up to this many, and requests queue beyond it.
inline constexpr int kDefaultMaxWorkerThreads = 256;

// --- Client ---------------------------------------------------------------------------------
inline constexpr std::chrono::milliseconds kDefaultConnectTimeout{10'000};
inline constexpr std::chrono::milliseconds kDefaultClientReadTimeout{60'000};
// A response body buffered into a string (HttpClient::Send without a sink).
inline constexpr uint64_t kDefaultClientMaxBodyBytes = 64 * 1024 * 1024;
inline constexpr size_t kDefaultClientMaxHeaderBytes = 64 * 1024;
// How long the client waits for "100 Continue" before sending the body anyway.
inline constexpr std::chrono::milliseconds kDefaultExpectContinueWait{1'000};

}  // namespace sovai::net
