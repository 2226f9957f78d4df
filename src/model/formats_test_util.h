// Helpers shared by the model-format tests (one binary: model_formats_test).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/env.h"
#include "base/status.h"
#include "base/strings.h"

namespace sovai::model::testing {

// A fresh directory under /tmp, deleted with everything in it at the end of the scope.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/sovai_model_test.XXXXXX";
    SOVAI_CHECK(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() { base::Env::Default().DeleteDirRecursive(path_).IgnoreError(); }
  const std::string& path() const { return path_; }
  std::string Join(std::string_view name) const { return base::JoinPath(path_, name); }

 private:
  std::string path_;
};

// `status` has `code` and its message contains every one of `parts`.
inline void ExpectError(const base::Status& status, base::StatusCode code,
                        const std::vector<std::string_view>& parts) {
  EXPECT_EQ(status.code(), code) << status;
  for (std::string_view part : parts) {
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "'" << part << "' not in: " << status.message();
  }
}

}  // namespace sovai::model::testing
