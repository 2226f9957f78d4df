// The rules for job labels and environment names, shared by the control plane (which enforces
// them) and the CLI (which checks flags before sending anything). Depends on `base` only.
#pragma once

#include <string_view>

#include "base/status.h"

namespace sovai::control {

// Label keys are 1..63 characters of [A-Za-z0-9._/-] starting with a letter or digit; values
// 0..63 characters of [A-Za-z0-9._-]. InvalidArgument saying which rule is broken.
base::Status ValidateLabel(std::string_view key, std::string_view value);

// An environment variable name: letters, digits and '_', not starting with a digit.
bool IsEnvName(std::string_view name);

}  // namespace sovai::control
