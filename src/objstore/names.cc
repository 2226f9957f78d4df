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

int32_t NextUtf8CodePoint(std::string_view s, size_t* pos) {
  SOVAI_CHECK_LT(*pos, s.size());
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  uint8_t b0 = byte(*pos);
  if (b0 < 0x80) {
    ++*pos;
    return b0;
  }
  size_t len;
  int32_t cp;
  int32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++*pos;  // a continuation byte or 0xF8..0xFF
    return -1;
  }
  if (s.size() - *pos < len) {
    ++*pos;
    return -1;
  }
  for (size_t i = 1; i < len; ++i) {
    uint8_t b = byte(*pos + i);
    if ((b & 0xC0) != 0x80) {
      ++*pos;
      return -1;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++*pos;
    return -1;
  }
  *pos += len;
  return cp;
}

bool IsValidUtf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (NextUtf8CodePoint(s, &pos) < 0) return false;
  }
  return true;
}

size_t Utf8Length(std::string_view s) {
  size_t pos = 0;
  size_t n = 0;
  while (pos < s.size()) {
    (void)NextUtf8CodePoint(s, &pos);
    ++n;
  }
  return n;
}

}  // namespace sovai::objstore
