// Checksums of multipart objects (see multipart_checksum.h).
#include "objstore/multipart_checksum.h"

#include "base/crc.h"
#include "base/crypto.h"
#include "base/strings.h"

namespace sovai::objstore {

namespace {

std::string Checksums::*MemberOf(std::string_view algorithm) {
  if (algorithm == "CRC32") return &Checksums::crc32;
  if (algorithm == "CRC32C") return &Checksums::crc32c;
  if (algorithm == "CRC64NVME") return &Checksums::crc64nvme;
  if (algorithm == "SHA1") return &Checksums::sha1;
  if (algorithm == "SHA256") return &Checksums::sha256;
  return nullptr;
}

// A big-endian CRC value as S3 sends it (decoded base64), as an integer.
uint64_t FromBigEndian(std::string_view raw) {
  uint64_t v = 0;
  for (unsigned char c : raw) v = (v << 8) | c;
  return v;
}

}  // namespace

Checksums MultipartChecksum(std::string_view algorithm, std::string_view type,
                            const std::vector<MultipartPartChecksum>& parts) {
  Checksums out;
  std::string Checksums::*member = MemberOf(algorithm);
  if (member == nullptr || parts.empty()) return out;
  std::vector<std::string> raw;
  for (const auto& p : parts) {
    const std::string& value = p.checksums.*member;
    auto decoded = base::Base64Decode(value);
    if (value.empty() || !decoded.ok()) return out;
    raw.push_back(std::move(*decoded));
  }
  if (type == "FULL_OBJECT") {
    const size_t width = algorithm == "CRC64NVME" ? 8 : 4;
    if (algorithm != "CRC32" && algorithm != "CRC32C" && algorithm != "CRC64NVME") return out;
    uint64_t crc = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (raw[i].size() != width) return out;
      const uint64_t part = FromBigEndian(raw[i]);
      if (i == 0) {
        crc = part;
      } else if (algorithm == "CRC32") {
        crc = base::Crc32Combine(static_cast<uint32_t>(crc), static_cast<uint32_t>(part),
                                 parts[i].size);
      } else if (algorithm == "CRC32C") {
        crc = base::Crc32cCombine(static_cast<uint32_t>(crc), static_cast<uint32_t>(part),
                                  parts[i].size);
      } else {
        crc = base::Crc64NvmeCombine(crc, part, parts[i].size);
      }
    }
    out.*member = width == 8
                      ? base::Base64Encode(base::ToBigEndianBytes(crc))
                      : base::Base64Encode(base::ToBigEndianBytes(static_cast<uint32_t>(crc)));
    out.type = "FULL_OBJECT";
    return out;
  }
  // Uploads created before the type was recorded are COMPOSITE.
  if ((type != "COMPOSITE" && !type.empty()) || algorithm == "CRC64NVME") return out;
  std::string joined;
  for (const auto& r : raw) joined += r;
  std::string digest;
  if (algorithm == "CRC32") digest = base::ToBigEndianBytes(base::Crc32(joined));
  if (algorithm == "CRC32C") digest = base::ToBigEndianBytes(base::Crc32c(joined));
  if (algorithm == "SHA1") digest = base::Sha1(joined);
  if (algorithm == "SHA256") digest = base::Sha256(joined);
  out.*member = base::Base64Encode(digest) + "-" + std::to_string(parts.size());
  out.type = "COMPOSITE";
  return out;
}

S3Result<std::string> CheckMultipartChecksumType(std::string_view algorithm,
                                                 std::string_view type) {
  const std::string a = base::AsciiToUpper(algorithm);
  const std::string t = base::AsciiToUpper(type);
  if (a.empty()) {
    if (t.empty()) return std::string();
    return S3Error(S3Code::kInvalidRequest,
                   "The x-amz-checksum-type header can only be used with the "
                   "x-amz-checksum-algorithm header.");
  }
  if (MemberOf(a) == nullptr) {
    return S3Error(S3Code::kInvalidRequest, "Checksum algorithm '" + a + "' is not supported");
  }
  if (t.empty()) return std::string(a == "CRC64NVME" ? "FULL_OBJECT" : "COMPOSITE");
  if (t != "COMPOSITE" && t != "FULL_OBJECT") {
    return S3Error(
        S3Code::kInvalidRequest,
        "Value for x-amz-checksum-type header is invalid: use COMPOSITE or FULL_OBJECT.");
  }
  if (t == "FULL_OBJECT" && (a == "SHA1" || a == "SHA256")) {
    return S3Error(S3Code::kInvalidRequest,
                   "The FULL_OBJECT checksum type cannot be used with the " +
                       base::AsciiToLower(a) + " checksum algorithm.");
  }
  if (t == "COMPOSITE" && a == "CRC64NVME") {
    return S3Error(S3Code::kInvalidRequest,
                   "The COMPOSITE checksum type cannot be used with the crc64nvme checksum "
                   "algorithm.");
  }
  return t;
}

}  // namespace sovai::objstore
