// The version of this build, from the top-level CMake project() and, when built from a git
// checkout, the commit.
#pragma once

namespace sovai::cli {

// "0.1.0"
const char* Version();
// "0.1.0 (commit 0a2b564, built with GNU 12.2.0)"
const char* VersionDetails();

}  // namespace sovai::cli
