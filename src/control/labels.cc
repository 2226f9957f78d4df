#include "control/labels.h"

#include <cctype>
#include <string>

namespace sovai::control {
namespace {

constexpr size_t kMaxLabelBytes = 63;

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

}  // namespace

base::Status ValidateLabel(std::string_view key, std::string_view value) {
  if (key.empty() || key.size() > kMaxLabelBytes || !IsAlnum(key[0])) {
    return base::InvalidArgumentError(
        "label key '" + std::string(key) +
        "' must be 1 to 63 characters starting with a letter or digit");
  }
  for (char c : key) {
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-' && c != '/') {
      return base::InvalidArgumentError("label key '" + std::string(key) +
                                        "' may only hold letters, digits and . _ - /");
    }
  }
  if (value.size() > kMaxLabelBytes) {
    return base::InvalidArgumentError("label value of '" + std::string(key) +
                                      "' is longer than 63 characters");
  }
  for (char c : value) {
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-') {
      return base::InvalidArgumentError("label value '" + std::string(value) +
                                        "' may only hold letters, digits and . _ -");
    }
  }
  return base::Status();
}

bool IsEnvName(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!IsAlnum(c) && c != '_') return false;
  }
  return true;
}

}  // namespace sovai::control
