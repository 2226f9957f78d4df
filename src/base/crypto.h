// Hashes, HMAC, encodings and randomness, over OpenSSL 3 EVP (no deprecated APIs).
//
// Digests are returned as raw bytes in a std::string (32 bytes for SHA-256, 20 for SHA-1, 16 for
// MD5), so they chain directly into HmacSha256 keys (SigV4) and into HexEncode/Base64Encode.
// Failures inside OpenSSL for these fixed algorithms are bugs or a broken installation, not
// expected errors: they stop the process (SOVAI_CHECK). Decoders of untrusted text return
// InvalidArgument.
//
// Thread-safety: free functions are thread-safe. A hasher object is not: use one per stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace sovai::base {

inline constexpr size_t kMd5Bytes = 16;
inline constexpr size_t kSha1Bytes = 20;
inline constexpr size_t kSha256Bytes = 32;
inline constexpr size_t kSha512Bytes = 64;

std::string Md5(std::string_view data);
std::string Sha1(std::string_view data);
std::string Sha256(std::string_view data);
std::string Sha512(std::string_view data);  // 64 raw bytes (OCI digests "sha512:...")
// HMAC-SHA256(key, data), 32 raw bytes.
std::string HmacSha256(std::string_view key, std::string_view data);

enum class HashAlgorithm : uint8_t { kMd5, kSha1, kSha256, kSha512 };

// Incremental digest for streamed data (uploads of many GB):
//   Sha256Hasher h; h.Update(chunk1); h.Update(chunk2); std::string digest = h.Finish();
// Finish() may be called once; Update or Finish after Finish is a bug (SOVAI_CHECK). Reset()
// starts over. Movable, not copyable.
class Hasher {
 public:
  explicit Hasher(HashAlgorithm algorithm);
  ~Hasher();
  Hasher(Hasher&&) noexcept;
  Hasher& operator=(Hasher&&) noexcept;

  void Update(std::string_view data);
  std::string Finish();
  void Reset();
  HashAlgorithm algorithm() const { return algorithm_; }

 private:
  struct CtxDeleter {
    void operator()(void* ctx) const;
  };
  HashAlgorithm algorithm_;
  std::unique_ptr<void, CtxDeleter> ctx_;  // EVP_MD_CTX
  bool finished_ = false;
};

class Md5Hasher : public Hasher {
 public:
  Md5Hasher() : Hasher(HashAlgorithm::kMd5) {}
};
class Sha1Hasher : public Hasher {
 public:
  Sha1Hasher() : Hasher(HashAlgorithm::kSha1) {}
};
class Sha256Hasher : public Hasher {
 public:
  Sha256Hasher() : Hasher(HashAlgorithm::kSha256) {}
};

// Lowercase hex. HexDecode accepts either case; errors: InvalidArgument for an odd length or a
// non-hex character.
std::string HexEncode(std::string_view bytes);
Result<std::string> HexDecode(std::string_view hex);

// RFC 4648 section 4 (standard alphabet, '=' padding). Base64Decode is strict: the length must
// be a multiple of 4, padding only at the end, no whitespace; anything else is InvalidArgument.
std::string Base64Encode(std::string_view bytes);
Result<std::string> Base64Decode(std::string_view text);

// RFC 4648 section 5 ('-' and '_'), without padding (the JWT/URL-token form). Base64UrlDecode
// accepts input with or without '=' padding; errors: InvalidArgument.
std::string Base64UrlEncode(std::string_view bytes);
Result<std::string> Base64UrlDecode(std::string_view text);

// Compares in time that depends only on the lengths, not the contents (for MACs and tokens).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// AES-256-GCM (NIST SP 800-38D): authenticated encryption of small secrets.
//
//   std::string nonce = RandomBytes(kAesGcmNonceBytes);  // never twice with one key
//   std::string sealed = Aes256GcmSeal(key, nonce, plaintext, aad);
//   SOVAI_ASSIGN_OR_RETURN(std::string plain, Aes256GcmOpen(key, nonce, sealed, aad));
//
// `sealed` is the ciphertext followed by the 16-byte tag. `aad` is authenticated, not encrypted:
// it binds the ciphertext to its context (opening with another aad fails). A key other than 32
// bytes or a nonce other than 12 is a bug (SOVAI_CHECK). Open errors: DataLoss when the tag does
// not verify (another key or aad, or modified bytes: nothing of the plaintext is returned);
// InvalidArgument when `sealed` is shorter than a tag.
inline constexpr size_t kAes256KeyBytes = 32;
inline constexpr size_t kAesGcmNonceBytes = 12;
inline constexpr size_t kAesGcmTagBytes = 16;
std::string Aes256GcmSeal(std::string_view key, std::string_view nonce, std::string_view plaintext,
                          std::string_view aad);
Result<std::string> Aes256GcmOpen(std::string_view key, std::string_view nonce,
                                  std::string_view sealed, std::string_view aad);

// `n` bytes from OpenSSL's CSPRNG. A CSPRNG failure stops the process (SOVAI_CHECK).
std::string RandomBytes(size_t n);
// `prefix` followed by the lowercase hex of `n_bytes` random bytes (default 32 → 64 hex chars),
// e.g. RandomToken("sv_"). Safe in URLs, headers, file names and shells.
std::string RandomToken(std::string_view prefix = "", size_t n_bytes = 32);

}  // namespace sovai::base
