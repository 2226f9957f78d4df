// Names and sizes a client chooses: bucket names, object keys, user metadata. Each validator
// returns nullopt for a valid input, else the S3Error the client should see, its message saying
// which rule was broken.
//
//   SOVAI_S3_RETURN_IF_ERROR(ValidateBucketName(bucket));
//   SOVAI_S3_RETURN_IF_ERROR(ValidateObjectKey(key));
//
// Also the UTF-8 primitives that the XML layer and the tag rules share.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/utf8.h"
#include "objstore/s3_error.h"

namespace sovai::objstore {

// --- Limits -------------------------------------------------------------------------------------
inline constexpr size_t kMinBucketNameBytes = 3;
inline constexpr size_t kMaxBucketNameBytes = 63;
// Object keys are measured in bytes of their UTF-8 encoding.
inline constexpr size_t kMaxObjectKeyBytes = 1024;
// Sum over x-amz-meta-* headers of name (without the prefix) + value, in bytes.
inline constexpr size_t kMaxUserMetadataBytes = 2 * 1024;

// AWS's rules for general purpose bucket names: 3..63 bytes of [a-z0-9.-], starting and ending
// with a letter or digit, no "..", not an IPv4 address, none of the reserved prefixes (xn--,
// sthree-, amzn-s3-demo-) or suffixes (-s3alias, --ol-s3, .mrap, --x-s3, --table-s3).
// Errors: InvalidBucketName naming the rule (and a BucketName detail).
S3Status ValidateBucketName(std::string_view name);

// 1..1024 bytes of valid UTF-8 without NUL. Other control characters are valid, as on S3 (the XML
// writer escapes or replaces them; clients should list with encoding-type=url).
// Errors: KeyTooLongError for more than 1024 bytes; InvalidArgument for an empty key, invalid
// UTF-8 (naming the byte offset) or a NUL byte.
S3Status ValidateObjectKey(std::string_view key);

// `metadata`: one (name, value) per x-amz-meta-* header; the name with or without the
// "x-amz-meta-" prefix (the prefix is not counted). Errors: MetadataTooLarge when the names and
// values add up to more than kMaxUserMetadataBytes, with the size found.
S3Status ValidateUserMetadata(const std::vector<std::pair<std::string, std::string>>& metadata);

// --- UTF-8 --------------------------------------------------------------------------------------
// base/utf8.h's, named here for the S3 code: NextUtf8CodePoint (-1 for an invalid sequence, then
// one byte on), IsValidUtf8, Utf8Length (code points; invalid bytes count one each).
using base::IsValidUtf8;
using base::NextUtf8CodePoint;
using base::Utf8Length;

}  // namespace sovai::objstore
