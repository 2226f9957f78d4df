// Named limits of S3's browser form uploads (POST Object, post_form.h and post_policy.h). The
// other objstore limits sit beside the parser they bound (s3_xml.h, iam_policy.h, sigv4.h,
// aws_chunked.h, names.h); each exceeded limit is a clear S3 error, never a 5xx.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sovai::objstore {

// --- multipart/form-data (post_form.h) ------------------------------------------------------
// A boundary is 1..70 characters (RFC 2046 section 5.1.1).
inline constexpr size_t kMaxFormBoundaryBytes = 70;
// The header block of one part (Content-Disposition, Content-Type), blank line included.
inline constexpr size_t kMaxFormPartHeaderBytes = 8 * 1024;
// Bytes before the first boundary (a preamble, which browsers never send).
inline constexpr size_t kMaxFormPreambleBytes = 1024;
// Parts before the file; fields after the file are never read.
inline constexpr size_t kMaxPostFormFields = 64;
// One field's value (the policy is the largest of them).
inline constexpr size_t kMaxPostFieldBytes = 20 * 1024;
// Every field before the file, names and values together: AWS's 20 KB of "pre-data" plus room
// for the policy's base64 (MaxPostPreDataLengthExceededError beyond it).
inline constexpr size_t kMaxPostPreDataBytes = 64 * 1024;
// The multipart parser's window over the body; the file streams through it.
inline constexpr size_t kFormReadBufferBytes = 64 * 1024;

// --- POST policy (post_policy.h) ------------------------------------------------------------
// The decoded policy document (JSON).
inline constexpr size_t kMaxPostPolicyBytes = 16 * 1024;
// Conditions in one policy.
inline constexpr size_t kMaxPostPolicyConditions = 64;

}  // namespace sovai::objstore
