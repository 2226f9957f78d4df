#include "base/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>

namespace sovai::base {
namespace {

std::string OpenSslError() {
  unsigned long code = ERR_get_error();
  if (code == 0) return "no OpenSSL error queued";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

// Explicitly fetched algorithm objects: fetching once avoids a provider lookup on every call.
// They are immutable and safe to share between threads; they live until exit.
const EVP_MD* FetchedMd(HashAlgorithm algorithm) {
  auto fetch = [](const char* name) {
    EVP_MD* md = EVP_MD_fetch(nullptr, name, nullptr);
    SOVAI_CHECK(md != nullptr) << "EVP_MD_fetch(" << name << "): " << OpenSslError();
    return md;
  };
  static const EVP_MD* md5 = fetch("MD5");
  static const EVP_MD* sha1 = fetch("SHA1");
  static const EVP_MD* sha256 = fetch("SHA256");
  static const EVP_MD* sha512 = fetch("SHA512");
  switch (algorithm) {
    case HashAlgorithm::kMd5:
      return md5;
    case HashAlgorithm::kSha1:
      return sha1;
    case HashAlgorithm::kSha256:
      return sha256;
    case HashAlgorithm::kSha512:
      return sha512;
  }
  SOVAI_CHECK(false) << "unknown hash algorithm";
  return nullptr;
}

EVP_MAC* FetchedHmac() {
  static EVP_MAC* mac = [] {
    EVP_MAC* m = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    SOVAI_CHECK(m != nullptr) << "EVP_MAC_fetch(HMAC): " << OpenSslError();
    return m;
  }();
  return mac;
}

std::string Digest(HashAlgorithm algorithm, std::string_view data) {
  const EVP_MD* md = FetchedMd(algorithm);
  std::string out(static_cast<size_t>(EVP_MD_get_size(md)), '\0');
  unsigned int len = 0;
  SOVAI_CHECK(EVP_Digest(data.data(), data.size(), reinterpret_cast<unsigned char*>(out.data()),
                         &len, md, nullptr) == 1)
      << "EVP_Digest: " << OpenSslError();
  SOVAI_CHECK_EQ(len, out.size());
  return out;
}

int Base64Value(char c, bool url) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == (url ? '-' : '+')) return 62;
  if (c == (url ? '_' : '/')) return 63;
  return -1;
}

std::string Base64EncodeImpl(std::string_view bytes, bool url) {
  const char* alphabet = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                             : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[k])); };
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    out.push_back(alphabet[v >> 18]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(alphabet[(v >> 6) & 63]);
    out.push_back(alphabet[v & 63]);
  }
  size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = byte(i) << 16 | (rest == 2 ? byte(i + 1) << 8 : 0);
    out.push_back(alphabet[v >> 18]);
    out.push_back(alphabet[(v >> 12) & 63]);
    if (rest == 2) out.push_back(alphabet[(v >> 6) & 63]);
    if (!url) out.append(rest == 2 ? "=" : "==");
  }
  return out;
}

// Decodes `text`, whose padding (if any) has been validated and removed by the caller.
Result<std::string> Base64DecodeUnpadded(std::string_view text, bool url, std::string_view what) {
  if (text.size() % 4 == 1) {
    return InvalidArgumentError("invalid " + std::string(what) + ": impossible length " +
                                std::to_string(text.size()));
  }
  std::string out;
  out.reserve(text.size() / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    int v = Base64Value(text[i], url);
    if (v < 0) {
      return InvalidArgumentError("invalid " + std::string(what) + ": bad character at offset " +
                                  std::to_string(i));
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

}  // namespace

std::string Md5(std::string_view data) { return Digest(HashAlgorithm::kMd5, data); }
std::string Sha1(std::string_view data) { return Digest(HashAlgorithm::kSha1, data); }
std::string Sha256(std::string_view data) { return Digest(HashAlgorithm::kSha256, data); }
std::string Sha512(std::string_view data) { return Digest(HashAlgorithm::kSha512, data); }

std::string HmacSha256(std::string_view key, std::string_view data) {
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(FetchedHmac());
  SOVAI_CHECK(ctx != nullptr) << "EVP_MAC_CTX_new: " << OpenSslError();
  char digest_name[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
      OSSL_PARAM_construct_end(),
  };
  std::string out(kSha256Bytes, '\0');
  size_t len = 0;
  // An empty key is legal for HMAC; OpenSSL wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const auto* key_bytes =
      key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  bool ok =
      EVP_MAC_init(ctx, key_bytes, key.size(), params) == 1 &&
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1 &&
      EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, out.size()) == 1;
  EVP_MAC_CTX_free(ctx);
  SOVAI_CHECK(ok && len == kSha256Bytes) << "HMAC-SHA256: " << OpenSslError();
  return out;
}

void Hasher::CtxDeleter::operator()(void* ctx) const {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx));
}

Hasher::Hasher(HashAlgorithm algorithm) : algorithm_(algorithm), ctx_(EVP_MD_CTX_new()) {
  SOVAI_CHECK(ctx_ != nullptr) << "EVP_MD_CTX_new: " << OpenSslError();
  Reset();
}

Hasher::~Hasher() = default;
Hasher::Hasher(Hasher&&) noexcept = default;
Hasher& Hasher::operator=(Hasher&&) noexcept = default;

void Hasher::Reset() {
  SOVAI_CHECK(ctx_ != nullptr) << "use of a moved-from Hasher";
  SOVAI_CHECK(
      EVP_DigestInit_ex2(static_cast<EVP_MD_CTX*>(ctx_.get()), FetchedMd(algorithm_), nullptr) == 1)
      << "EVP_DigestInit_ex2: " << OpenSslError();
  finished_ = false;
}

void Hasher::Update(std::string_view data) {
  SOVAI_CHECK(ctx_ != nullptr && !finished_) << "Hasher::Update after Finish";
  SOVAI_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_.get()), data.data(), data.size()) == 1)
      << "EVP_DigestUpdate: " << OpenSslError();
}

std::string Hasher::Finish() {
  SOVAI_CHECK(ctx_ != nullptr && !finished_) << "Hasher::Finish called twice";
  finished_ = true;
  std::string out(EVP_MAX_MD_SIZE, '\0');
  unsigned int len = 0;
  SOVAI_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_.get()),
                                 reinterpret_cast<unsigned char*>(out.data()), &len) == 1)
      << "EVP_DigestFinal_ex: " << OpenSslError();
  out.resize(len);
  return out;
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    auto c = static_cast<unsigned char>(ch);
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xF]);
  }
  return out;
}

Result<std::string> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) {
    return InvalidArgumentError("invalid hex: odd length " + std::to_string(hex.size()));
  }
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = value(hex[i]);
    int lo = value(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgumentError("invalid hex: non-hex character at offset " +
                                  std::to_string(hi < 0 ? i : i + 1));
    }
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

std::string Base64Encode(std::string_view bytes) { return Base64EncodeImpl(bytes, false); }
std::string Base64UrlEncode(std::string_view bytes) { return Base64EncodeImpl(bytes, true); }

Result<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) {
    return InvalidArgumentError("invalid base64: length " + std::to_string(text.size()) +
                                " is not a multiple of 4");
  }
  std::string_view body = text;
  if (!body.empty() && body.back() == '=') body.remove_suffix(1);
  if (!body.empty() && body.back() == '=') body.remove_suffix(1);
  return Base64DecodeUnpadded(body, /*url=*/false, "base64");
}

Result<std::string> Base64UrlDecode(std::string_view text) {
  std::string_view body = text;
  size_t padding = 0;
  while (!body.empty() && body.back() == '=' && padding < 2) {
    body.remove_suffix(1);
    ++padding;
  }
  if (padding > 0 && text.size() % 4 != 0) {
    return InvalidArgumentError("invalid base64url: padded length " + std::to_string(text.size()) +
                                " is not a multiple of 4");
  }
  return Base64DecodeUnpadded(body, /*url=*/true, "base64url");
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

struct CipherCtxDeleter {
  void operator()(EVP_CIPHER_CTX* ctx) const { EVP_CIPHER_CTX_free(ctx); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxDeleter>;

const EVP_CIPHER* FetchedAes256Gcm() {
  static EVP_CIPHER* cipher = [] {
    EVP_CIPHER* c = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
    SOVAI_CHECK(c != nullptr) << "EVP_CIPHER_fetch(AES-256-GCM): " << OpenSslError();
    return c;
  }();
  return cipher;
}

const unsigned char* Bytes(std::string_view s) {
  // OpenSSL wants a non-null pointer even for empty input.
  static const unsigned char kEmpty = 0;
  return s.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(s.data());
}

int IntSize(std::string_view s) {
  SOVAI_CHECK(s.size() <= static_cast<size_t>(INT32_MAX)) << "AES-GCM input too large";
  return static_cast<int>(s.size());
}

// A context initialized for AES-256-GCM with `key` and `nonce`, for encryption or decryption.
CipherCtx GcmContext(std::string_view key, std::string_view nonce, bool encrypt) {
  SOVAI_CHECK(key.size() == kAes256KeyBytes) << "AES-256 key of " << key.size() << " bytes";
  SOVAI_CHECK(nonce.size() == kAesGcmNonceBytes) << "AES-GCM nonce of " << nonce.size() << " bytes";
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  SOVAI_CHECK(ctx != nullptr) << "EVP_CIPHER_CTX_new: " << OpenSslError();
  SOVAI_CHECK(EVP_CipherInit_ex2(ctx.get(), FetchedAes256Gcm(), Bytes(key), Bytes(nonce),
                                 encrypt ? 1 : 0, nullptr) == 1)
      << "EVP_CipherInit_ex2: " << OpenSslError();
  return ctx;
}

}  // namespace

std::string Aes256GcmSeal(std::string_view key, std::string_view nonce, std::string_view plaintext,
                          std::string_view aad) {
  CipherCtx ctx = GcmContext(key, nonce, /*encrypt=*/true);
  int len = 0;
  if (!aad.empty()) {
    SOVAI_CHECK(EVP_EncryptUpdate(ctx.get(), nullptr, &len, Bytes(aad), IntSize(aad)) == 1)
        << "EVP_EncryptUpdate(aad): " << OpenSslError();
  }
  std::string out(plaintext.size() + kAesGcmTagBytes, '\0');
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  size_t written = 0;
  if (!plaintext.empty()) {
    SOVAI_CHECK(EVP_EncryptUpdate(ctx.get(), dst, &len, Bytes(plaintext), IntSize(plaintext)) == 1)
        << "EVP_EncryptUpdate: " << OpenSslError();
    written = static_cast<size_t>(len);
  }
  SOVAI_CHECK(EVP_EncryptFinal_ex(ctx.get(), dst + written, &len) == 1)
      << "EVP_EncryptFinal_ex: " << OpenSslError();
  written += static_cast<size_t>(len);
  SOVAI_CHECK(written == plaintext.size()) << "AES-GCM wrote " << written << " bytes";
  SOVAI_CHECK(
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kAesGcmTagBytes, dst + written) == 1)
      << "EVP_CTRL_GCM_GET_TAG: " << OpenSslError();
  return out;
}

Result<std::string> Aes256GcmOpen(std::string_view key, std::string_view nonce,
                                  std::string_view sealed, std::string_view aad) {
  if (sealed.size() < kAesGcmTagBytes) {
    return InvalidArgumentError("AES-GCM: " + std::to_string(sealed.size()) +
                                " bytes is shorter than the " + std::to_string(kAesGcmTagBytes) +
                                "-byte tag");
  }
  std::string_view ciphertext = sealed.substr(0, sealed.size() - kAesGcmTagBytes);
  std::string tag(sealed.substr(ciphertext.size()));
  CipherCtx ctx = GcmContext(key, nonce, /*encrypt=*/false);
  int len = 0;
  if (!aad.empty()) {
    SOVAI_CHECK(EVP_DecryptUpdate(ctx.get(), nullptr, &len, Bytes(aad), IntSize(aad)) == 1)
        << "EVP_DecryptUpdate(aad): " << OpenSslError();
  }
  std::string out(ciphertext.size(), '\0');
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  size_t written = 0;
  if (!ciphertext.empty()) {
    SOVAI_CHECK(EVP_DecryptUpdate(ctx.get(), dst, &len, Bytes(ciphertext), IntSize(ciphertext)) ==
                1)
        << "EVP_DecryptUpdate: " << OpenSslError();
    written = static_cast<size_t>(len);
  }
  SOVAI_CHECK(EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kAesGcmTagBytes, tag.data()) ==
              1)
      << "EVP_CTRL_GCM_SET_TAG: " << OpenSslError();
  if (EVP_DecryptFinal_ex(ctx.get(), dst + written, &len) != 1) {
    ERR_clear_error();
    // Wipe what was decrypted before the tag failed: unauthenticated bytes must not leak.
    OPENSSL_cleanse(out.data(), out.size());
    return DataLossError(
        "AES-GCM: the authentication tag does not verify (another key or context, or modified "
        "bytes)");
  }
  return out;
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (n == 0) return out;
  SOVAI_CHECK(n <= static_cast<size_t>(INT32_MAX)) << "RandomBytes(" << n << ") is too large";
  SOVAI_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) == 1)
      << "RAND_bytes: " << OpenSslError();
  return out;
}

std::string RandomToken(std::string_view prefix, size_t n_bytes) {
  std::string out(prefix);
  out += HexEncode(RandomBytes(n_bytes));
  return out;
}

}  // namespace sovai::base
