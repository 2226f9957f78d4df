#include "cli/version.h"

namespace sovai::cli {

const char* Version() { return SOVAI_VERSION; }

const char* VersionDetails() {
  return SOVAI_VERSION " (commit " SOVAI_GIT_COMMIT ", built with " SOVAI_COMPILER ")";
}

}  // namespace sovai::cli
