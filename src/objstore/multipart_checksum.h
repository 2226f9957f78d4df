// The checksum of a multipart object from its parts' checksums, as S3 makes it
// (docs/api/s3.md, "Checksums of multipart uploads"):
// * COMPOSITE: the algorithm over the concatenated raw part checksums, base64, "-N" appended
//   (CRC32, CRC32C, SHA1, SHA256);
// * FULL_OBJECT: the CRC of the whole object, combined from the parts' CRCs and sizes without
//   reading the data again (CRC32, CRC32C, CRC64NVME).
//
//   Checksums c = MultipartChecksum("CRC32C", "FULL_OBJECT", {{size1, sums1}, {size2, sums2}});
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "objstore/s3_error.h"
#include "objstore/store.h"

namespace sovai::objstore {

struct MultipartPartChecksum {
  uint64_t size = 0;
  Checksums checksums;
};

// The object's checksums (one algorithm, `type` set), or empty ones when a part lacks that
// algorithm's value or the pair is not one S3 allows (CheckMultipartChecksumType).
Checksums MultipartChecksum(std::string_view algorithm, std::string_view type,
                            const std::vector<MultipartPartChecksum>& parts);

// The checksum type of CreateMultipartUpload's x-amz-checksum-algorithm and
// x-amz-checksum-type headers (either may be empty): the default for the algorithm when no type
// is given (COMPOSITE; FULL_OBJECT for CRC64NVME), "" without an algorithm. InvalidRequest for
// a type without an algorithm, an unknown type, FULL_OBJECT with SHA1/SHA256 or COMPOSITE with
// CRC64NVME, as S3 answers.
S3Result<std::string> CheckMultipartChecksumType(std::string_view algorithm, std::string_view type);

}  // namespace sovai::objstore
