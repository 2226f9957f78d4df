#include "objstore/names.h"

#include <array>

#include "base/strings.h"

namespace sovai::objstore {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Four dot-separated groups of 1..3 digits: "192.168.5.4" (the value is not checked; S3 refuses
// "999.1.1.1" too).
bool LooksLikeIpv4(std::string_view s) {
  std::vector<std::string_view> groups = base::Split(s, '.');
  if (groups.size() != 4) return false;
  for (std::string_view g : groups) {
    if (g.empty() || g.size() > 3) return false;
    for (char c : g) {
      if (!IsDigit(c)) return false;
    }
  }
  return true;
}

S3Error BadBucketName(std::string_view name, const std::string& rule) {
  return S3Error(S3Code::kInvalidBucketName, "The specified bucket is not valid: " + rule + ".")
      .With("BucketName", std::string(name));
}

}  // namespace

S3Status ValidateBucketName(std::string_view name) {
  if (name.size() < kMinBucketNameBytes || name.size() > kMaxBucketNameBytes) {
    return BadBucketName(name,
                         "bucket names must be between 3 and 63 characters long, this one is " +
                             std::to_string(name.size()));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (!IsLowerAlnum(c) && c != '.' && c != '-') {
      return BadBucketName(name,
                           "bucket names may contain only lowercase letters, digits, '.' and "
                           "'-' (found a disallowed character at offset " +
                               std::to_string(i) + ")");
    }
  }
  if (!IsLowerAlnum(name.front()) || !IsLowerAlnum(name.back())) {
    return BadBucketName(name, "bucket names must begin and end with a lowercase letter or digit");
  }
  if (name.find("..") != std::string_view::npos) {
    return BadBucketName(name, "bucket names must not contain two adjacent periods");
  }
  if (LooksLikeIpv4(name)) {
    return BadBucketName(name, "bucket names must not be formatted as an IP address");
  }
  static constexpr std::array<std::string_view, 3> kReservedPrefixes = {"xn--", "sthree-",
                                                                        "amzn-s3-demo-"};
  for (std::string_view prefix : kReservedPrefixes) {
    if (name.starts_with(prefix)) {
      return BadBucketName(name, "the prefix \"" + std::string(prefix) + "\" is reserved");
    }
  }
  static constexpr std::array<std::string_view, 5> kReservedSuffixes = {
      "-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"};
  for (std::string_view suffix : kReservedSuffixes) {
    if (name.ends_with(suffix)) {
      return BadBucketName(name, "the suffix \"" + std::string(suffix) + "\" is reserved");
    }
  }
  return std::nullopt;
}

S3Status ValidateObjectKey(std::string_view key) {
  if (key.empty()) {
    return S3Error(S3Code::kInvalidArgument, "The object key must not be empty.");
  }
  if (key.size() > kMaxObjectKeyBytes) {
    return S3Error(S3Code::kKeyTooLongError, "Your key is too long: it is " +
                                                 std::to_string(key.size()) +
                                                 " bytes, the limit is 1024 bytes of UTF-8.")
        .With("Size", std::to_string(key.size()))
        .With("MaxSizeAllowed", std::to_string(kMaxObjectKeyBytes));
  }
  size_t pos = 0;
  while (pos < key.size()) {
    size_t start = pos;
    int32_t cp = NextUtf8CodePoint(key, &pos);
    if (cp < 0) {
      return S3Error(S3Code::kInvalidArgument,
                     "The object key is not valid UTF-8 (invalid byte sequence at offset " +
                         std::to_string(start) + "); percent-encode the key's UTF-8 bytes.");
    }
    if (cp == 0) {
      return S3Error(S3Code::kInvalidArgument,
                     "The object key must not contain a NUL character "
                     "(found at offset " +
                         std::to_string(start) + ").");
    }
  }
  return std::nullopt;
}

S3Status ValidateUserMetadata(const std::vector<std::pair<std::string, std::string>>& metadata) {
  static constexpr std::string_view kPrefix = "x-amz-meta-";
  size_t total_bytes = 0;
  for (const auto& [name, value] : metadata) {
    size_t name_bytes = name.size();
    if (name.size() >= kPrefix.size() &&
        base::EqualsIgnoreCase(std::string_view(name).substr(0, kPrefix.size()), kPrefix)) {
      name_bytes -= kPrefix.size();
    }
    total_bytes += name_bytes + value.size();
  }
  if (total_bytes > kMaxUserMetadataBytes) {
    return S3Error(S3Code::kMetadataTooLarge,
                   "Your metadata headers exceed the maximum allowed metadata size: the "
                   "x-amz-meta-* names and values add up to " +
                       std::to_string(total_bytes) + " bytes, the limit is 2048 bytes.")
        .With("Size", std::to_string(total_bytes))
        .With("MaxSizeAllowed", std::to_string(kMaxUserMetadataBytes));
  }
  return std::nullopt;
}

}  // namespace sovai::objstore
