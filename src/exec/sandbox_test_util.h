// Test support for tests that start real sandboxes: whether this host can run them.
#pragma once

#include <cstdlib>
#include <string>

#include "base/status.h"

namespace sovai::exec::testing {

// Why a test should skip after Sandbox::Create answered `created`, or "" to go on. Only a host
// that cannot run bwrap (NotFound, FailedPrecondition) is a reason to skip, and not even that when
// SOVAI_REQUIRE_SANDBOX is set; any other error is the test's to fail on.
inline std::string SandboxSkipReason(const base::Status& created) {
  const bool host_problem = created.code() == base::StatusCode::kNotFound ||
                            created.code() == base::StatusCode::kFailedPrecondition;
  if (!host_problem || std::getenv("SOVAI_REQUIRE_SANDBOX") != nullptr) return "";
  return "bubblewrap sandbox unavailable on this host: " + created.ToString();
}

}  // namespace sovai::exec::testing
