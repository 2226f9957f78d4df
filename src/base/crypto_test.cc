#include "base/crypto.h"

#include <gtest/gtest.h>

#include <set>

namespace sovai::base {
namespace {

std::string Hex(std::string_view bytes) { return HexEncode(bytes); }

TEST(CryptoTest, Sha256NistVectors) {
  EXPECT_EQ(Hex(Sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256("abc").size(), kSha256Bytes);
}

TEST(CryptoTest, Sha512NistVectorAndIncremental) {
  EXPECT_EQ(Hex(Sha512("abc")),
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
            "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f");
  Hasher h(HashAlgorithm::kSha512);
  h.Update("a");
  h.Update("bc");
  EXPECT_EQ(h.Finish(), Sha512("abc"));
  EXPECT_EQ(Sha512("").size(), kSha512Bytes);
}

TEST(CryptoTest, Sha1) {
  EXPECT_EQ(Hex(Sha1("abc")), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(Hex(Sha1("")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
}

TEST(CryptoTest, Md5Rfc1321Vectors) {
  EXPECT_EQ(Hex(Md5("")), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(Hex(Md5("a")), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(Hex(Md5("abc")), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(Hex(Md5("message digest")), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(Hex(Md5("abcdefghijklmnopqrstuvwxyz")), "c3fcd3d76192e4007dfb496cca67e13b");
  EXPECT_EQ(Hex(Md5("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")),
            "d174ab98d277d9f5a5611c2c9f419d9f");
  EXPECT_EQ(Hex(Md5("1234567890123456789012345678901234567890123456789012345678901234567890123456"
                    "7890")),
            "57edf4a22be3c955ac49da2e2107b67a");
}

TEST(CryptoTest, HmacSha256Rfc4231) {
  // Test case 1.
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2.
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3.
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 6: a key longer than the block size.
  EXPECT_EQ(Hex(HmacSha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // An empty key is legal.
  EXPECT_EQ(HmacSha256("", "x").size(), kSha256Bytes);
}

TEST(CryptoTest, SigV4SigningKeyChain) {
  // The derivation example from the AWS Signature Version 4 documentation.
  std::string k = HmacSha256("AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215");
  k = HmacSha256(k, "us-east-1");
  k = HmacSha256(k, "iam");
  k = HmacSha256(k, "aws4_request");
  EXPECT_EQ(Hex(k), "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
}

TEST(CryptoTest, IncrementalHashersMatchOneShot) {
  std::string data;
  for (int i = 0; i < 100'000; ++i) data.push_back(static_cast<char>(i * 7));
  Sha256Hasher sha256;
  Md5Hasher md5;
  Sha1Hasher sha1;
  for (size_t pos = 0; pos < data.size(); pos += 777) {
    std::string_view piece = std::string_view(data).substr(pos, 777);
    sha256.Update(piece);
    md5.Update(piece);
    sha1.Update(piece);
  }
  EXPECT_EQ(sha256.Finish(), Sha256(data));
  EXPECT_EQ(md5.Finish(), Md5(data));
  EXPECT_EQ(sha1.Finish(), Sha1(data));
  // Reset starts over; a moved hasher keeps its state.
  sha256.Reset();
  sha256.Update("ab");
  Sha256Hasher moved = std::move(sha256);
  moved.Update("c");
  EXPECT_EQ(Hex(moved.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(CryptoDeathTest, UpdateAfterFinishIsABug) {
  Md5Hasher h;
  (void)h.Finish();
  EXPECT_DEATH(h.Update("x"), "Update after Finish");
  EXPECT_DEATH((void)h.Finish(), "Finish called twice");
}

TEST(CryptoTest, Hex) {
  EXPECT_EQ(HexEncode("foobar"), "666f6f626172");
  EXPECT_EQ(HexEncode(std::string("\x00\xff", 2)), "00ff");
  EXPECT_EQ(*HexDecode("666F6f626172"), "foobar");
  EXPECT_EQ(*HexDecode(""), "");
  EXPECT_EQ(HexDecode("abc").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(HexDecode("zz").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(HexDecode("00g0").status().message().find("offset 2"), std::string::npos);
}

TEST(CryptoTest, Base64Rfc4648Vectors) {
  const std::pair<std::string_view, std::string_view> vectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
  };
  for (auto [plain, encoded] : vectors) {
    EXPECT_EQ(Base64Encode(plain), encoded);
    EXPECT_EQ(*Base64Decode(encoded), plain);
  }
  // Content-MD5 of the empty body, as S3 clients send it.
  EXPECT_EQ(Base64Encode(Md5("")), "1B2M2Y8AsgTpgAmY7PhCfg==");
}

TEST(CryptoTest, Base64DecodeRejectsBadInput) {
  for (std::string_view bad : {"Zg", "Zg=", "Zm9", "Z===", "====", "Zg==Zg==", "Zm9v\n", "Zm 9v",
                               "Zm9-", "Zm9_", "Zm=v", "=Zm9"}) {
    Result<std::string> r = Base64Decode(bad);
    EXPECT_FALSE(r.ok()) << "accepted: " << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(CryptoTest, Base64Url) {
  std::string bytes("\xfb\xff\xbf", 3);
  EXPECT_EQ(Base64Encode(bytes), "+/+/");
  EXPECT_EQ(Base64UrlEncode(bytes), "-_-_");
  EXPECT_EQ(Base64UrlEncode("f"), "Zg");  // no padding
  EXPECT_EQ(*Base64UrlDecode("Zg"), "f");
  EXPECT_EQ(*Base64UrlDecode("Zg=="), "f");
  EXPECT_EQ(*Base64UrlDecode("-_-_"), bytes);
  for (std::string_view bad : {"Z", "Zg=", "+/+/", "Zg===", "Z=g"}) {
    EXPECT_FALSE(Base64UrlDecode(bad).ok()) << "accepted: " << bad;
  }
  // Round trip of every length.
  std::string data = RandomBytes(70);
  for (size_t n = 0; n <= data.size(); ++n) {
    std::string_view piece = std::string_view(data).substr(0, n);
    ASSERT_EQ(*Base64UrlDecode(Base64UrlEncode(piece)), piece);
    ASSERT_EQ(*Base64Decode(Base64Encode(piece)), piece);
  }
}

TEST(CryptoTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
}

TEST(CryptoTest, RandomBytesAndTokens) {
  EXPECT_EQ(RandomBytes(0), "");
  EXPECT_EQ(RandomBytes(33).size(), 33u);
  EXPECT_NE(RandomBytes(16), RandomBytes(16));
  std::string token = RandomToken("sv_");
  EXPECT_EQ(token.size(), 3u + 64u);
  EXPECT_TRUE(token.starts_with("sv_"));
  EXPECT_TRUE(HexDecode(token.substr(3)).ok());
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(RandomToken("", 8));
  EXPECT_EQ(seen.size(), 1000u);
}

// NIST GCM spec, test case 16 (AES-256, 60-byte plaintext, 20-byte AAD).
TEST(CryptoTest, Aes256GcmMatchesTheNistVector) {
  const std::string key =
      *HexDecode("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
  const std::string nonce = *HexDecode("cafebabefacedbaddecaf888");
  const std::string plaintext = *HexDecode(
      "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e24"
      "49a6b525b16aedf5aa0de657ba637b39");
  const std::string aad = *HexDecode("feedfacedeadbeeffeedfacedeadbeefabaddad2");
  const std::string sealed = Aes256GcmSeal(key, nonce, plaintext, aad);
  EXPECT_EQ(HexEncode(sealed),
            "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08"
            "b1056828838c5f61e6393ba7a0abcc9f662"
            "76fc6ece0f4e1768cddf8853bb2d551b");
  auto opened = Aes256GcmOpen(key, nonce, sealed, aad);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(*opened, plaintext);
}

TEST(CryptoTest, Aes256GcmRoundTripsAndRefusesEveryChange) {
  const std::string key = RandomBytes(kAes256KeyBytes);
  const std::string nonce = RandomBytes(kAesGcmNonceBytes);
  for (std::string_view plaintext : {std::string_view(""), std::string_view("s3cr3t/Key+value")}) {
    const std::string sealed = Aes256GcmSeal(key, nonce, plaintext, "datastore ext");
    ASSERT_EQ(sealed.size(), plaintext.size() + kAesGcmTagBytes);
    EXPECT_EQ(*Aes256GcmOpen(key, nonce, sealed, "datastore ext"), plaintext);
    // Each flipped bit, of the ciphertext or the tag, is refused.
    for (size_t i = 0; i < sealed.size(); ++i) {
      std::string tampered = sealed;
      tampered[i] ^= 0x01;
      EXPECT_EQ(Aes256GcmOpen(key, nonce, tampered, "datastore ext").status().code(),
                StatusCode::kDataLoss)
          << "byte " << i;
    }
    // Another key, nonce or context.
    std::string other_key = key;
    other_key[0] ^= 0x80;
    EXPECT_EQ(Aes256GcmOpen(other_key, nonce, sealed, "datastore ext").status().code(),
              StatusCode::kDataLoss);
    std::string other_nonce = nonce;
    other_nonce[11] ^= 0x01;
    EXPECT_EQ(Aes256GcmOpen(key, other_nonce, sealed, "datastore ext").status().code(),
              StatusCode::kDataLoss);
    EXPECT_EQ(Aes256GcmOpen(key, nonce, sealed, "datastore ex7").status().code(),
              StatusCode::kDataLoss);
    EXPECT_EQ(Aes256GcmOpen(key, nonce, sealed, "").status().code(), StatusCode::kDataLoss);
    // Cut short.
    EXPECT_EQ(Aes256GcmOpen(key, nonce, sealed.substr(0, sealed.size() - 1), "datastore ext")
                  .status()
                  .code(),
              plaintext.empty() ? StatusCode::kInvalidArgument : StatusCode::kDataLoss);
  }
  // Nothing of the plaintext shows in the ciphertext.
  const std::string secret = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
  EXPECT_EQ(Aes256GcmSeal(key, nonce, secret, "").find("AAAA"), std::string::npos);
}

}  // namespace
}  // namespace sovai::base
