// Named limits and defaults of the gateway (src/gateway). Each can be overridden per call in
// ProxyOptions.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sovai::gateway {

// A request body is read whole before it is forwarded, so that it can be sent again to another
// replica; larger bodies are answered 413. Chat requests with long contexts stay far below it.
inline constexpr uint64_t kDefaultMaxRequestBodyBytes = 16 * 1024 * 1024;
// Tries per request, on distinct replicas, while no byte of the response has arrived.
inline constexpr int kDefaultMaxAttempts = 2;
// Response bytes read from the replica but not yet written to the client. When the client reads
// slower than the replica writes, the gateway stops reading from the replica at this point, so
// TCP backpressure reaches the replica.
inline constexpr size_t kDefaultMaxQueuedResponseBytes = 1024 * 1024;
// A replica that does not accept the connection in this time counts as down (and is retried).
inline constexpr std::chrono::milliseconds kDefaultUpstreamConnectTimeout{5'000};
// Longest silence from a replica (waiting for the head or between body pieces). Long, because a
// replica may think for a while before its first token (a long prompt's prefill, a queue).
inline constexpr std::chrono::milliseconds kDefaultUpstreamReadTimeout{300'000};

}  // namespace sovai::gateway
