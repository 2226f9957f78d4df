// What openai_api.cc (the cache key) and openai_responses.cc (logprobs) both write into JSON.
#pragma once

#include <charconv>
#include <system_error>

#include "base/check.h"

namespace sovai::serve::internal {

// The shortest decimal that reads back as `f`, as a double, so JSON shows -0.31725305 and not
// the float's binary expansion -0.31725305318832397.
inline double FloatForJson(float f) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);
  SOVAI_CHECK(ec == std::errc());
  double d = 0;
  auto [ptr, ec2] = std::from_chars(buf, end, d);
  SOVAI_CHECK(ec2 == std::errc());
  return d;
}

}  // namespace sovai::serve::internal
