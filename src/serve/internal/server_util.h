// Pieces shared by the route handlers of InferenceServer (server.cc, server_pooling.cc).
#pragma once

#include <cstdio>
#include <string>

#include "net/http.h"
#include "serve/openai_api.h"
#include "serve/server.h"

namespace sovai::serve::internal {

// An OpenAI error as an HTTP response (429s with Retry-After).
inline net::Response ErrorResponse(const ApiError& error) {
  net::Response response = net::Response::Json(error.status, SerializeJson(error.ToJson()));
  if (error.status == 429) {
    response.headers.Set("Retry-After", std::to_string(kRetryAfterSeconds));
  }
  return response;
}

inline std::string Hex(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

// What answers a request whose Engine::Submit* failed: 429 for a full queue, 404 for an adapter
// unloaded meanwhile, else the status's OpenAI error.
inline ApiError SubmitError(const base::Status& status, const std::string& model,
                            int64_t max_waiting) {
  if (status.code() == base::StatusCode::kResourceExhausted) {
    return QueueFullError(static_cast<size_t>(max_waiting));
  }
  if (status.code() == base::StatusCode::kNotFound) return ModelNotFoundError(model);
  return ApiErrorFromStatus(status);
}

}  // namespace sovai::serve::internal
