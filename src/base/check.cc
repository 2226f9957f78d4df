#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace sovai::base::internal {

CheckFailure::CheckFailure(const char* condition, const char* file, int line) {
  stream_ << "CHECK failed: " << condition << " at " << file << ":" << line << ": ";
}

CheckFailure::~CheckFailure() {
  std::string text = stream_.str();
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace sovai::base::internal
