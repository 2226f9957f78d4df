#include "control/secrets.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string>

#include "base/crypto.h"

namespace sovai::control {
namespace {

using base::StatusCode;

constexpr std::string_view kContext{"datastore\0prj_1\0ext", 19};

class SecretsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-secrets-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    key_path_ = dir_ + "/" + kSecretsKeyFile;
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
  std::string key_path_;
};

TEST_F(SecretsTest, RoundTripCreatesTheKeyFileOnFirstUseWithMode0600) {
  SecretBox box(env_, key_path_);
  EXPECT_FALSE(env_.FileExists(key_path_));
  auto sealed = box.Seal("wJalrXUtnFEMI/K7MDENG+bPxRfiCY", kContext);
  ASSERT_TRUE(sealed.ok()) << sealed.status();
  auto stat = env_.Stat(key_path_);
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->size_bytes, base::kAes256KeyBytes);
  EXPECT_EQ(stat->mode & 0777, 0600u);
  // nonce || ciphertext || tag, named by the key's id.
  EXPECT_EQ(sealed->sealed.size(), base::kAesGcmNonceBytes + 30 + base::kAesGcmTagBytes);
  EXPECT_EQ(sealed->sealed.find("wJalr"), std::string::npos);
  const std::string key = *env_.ReadFile(key_path_);
  EXPECT_EQ(sealed->key_id, MasterKeyId(key));
  EXPECT_TRUE(sealed->key_id.starts_with("v1:"));
  EXPECT_EQ(sealed->key_id.size(), 3u + 16u);
  EXPECT_EQ(*box.Open(*sealed, kContext), "wJalrXUtnFEMI/K7MDENG+bPxRfiCY");

  // Another box over the same file (a restarted server) reads the same key.
  SecretBox again(env_, key_path_);
  EXPECT_EQ(*again.Open(*sealed, kContext), "wJalrXUtnFEMI/K7MDENG+bPxRfiCY");
  auto second = again.Seal("other", kContext);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->key_id, sealed->key_id);
  EXPECT_EQ(*env_.ReadFile(key_path_), key);
  // Two seals of one secret differ (fresh nonces).
  EXPECT_NE(box.Seal("same", kContext)->sealed, box.Seal("same", kContext)->sealed);
}

TEST_F(SecretsTest, TamperingIsDetected) {
  SecretBox box(env_, key_path_);
  SealedSecret sealed = *box.Seal("secret-key-value", kContext);
  for (size_t i = 0; i < sealed.sealed.size(); ++i) {
    SealedSecret tampered = sealed;
    tampered.sealed[i] ^= 0x20;
    EXPECT_EQ(box.Open(tampered, kContext).status().code(), StatusCode::kDataLoss) << i;
  }
  // Another row's context: the ciphertext does not move between rows.
  EXPECT_EQ(box.Open(sealed, std::string_view("datastore\0prj_2\0ext", 19)).status().code(),
            StatusCode::kDataLoss);
  SealedSecret cut = sealed;
  cut.sealed.resize(base::kAesGcmNonceBytes + base::kAesGcmTagBytes - 1);
  EXPECT_EQ(box.Open(cut, kContext).status().code(), StatusCode::kDataLoss);
}

TEST_F(SecretsTest, AnotherKeyIsNamedNotMistakenForTampering) {
  SecretBox box(env_, key_path_);
  SealedSecret sealed = *box.Seal("secret-key-value", kContext);
  // The key file replaced by another key (a restore from the wrong backup).
  ASSERT_TRUE(env_.DeleteFile(key_path_).ok());
  ASSERT_TRUE(
      env_.WriteFileAtomically(key_path_, base::RandomBytes(base::kAes256KeyBytes), 0600).ok());
  SecretBox replaced(env_, key_path_);
  auto opened = replaced.Open(sealed, kContext);
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find(sealed.key_id), std::string::npos) << opened.status();
  // A key id that lies about the key still fails on the tag.
  const std::string other_key = *env_.ReadFile(key_path_);
  SealedSecret relabeled = sealed;
  relabeled.key_id = MasterKeyId(other_key);
  EXPECT_EQ(OpenWithKey(other_key, relabeled, kContext).status().code(), StatusCode::kDataLoss);
}

TEST_F(SecretsTest, AMissingKeyIsNotRecreatedToOpen) {
  SecretBox box(env_, key_path_);
  SealedSecret sealed = *box.Seal("secret-key-value", kContext);
  ASSERT_TRUE(env_.DeleteFile(key_path_).ok());
  SecretBox fresh(env_, key_path_);
  auto opened = fresh.Open(sealed, kContext);
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find("is missing"), std::string::npos) << opened.status();
  EXPECT_FALSE(env_.FileExists(key_path_));
}

TEST_F(SecretsTest, ABadKeyFileIsRefused) {
  ASSERT_TRUE(env_.WriteFileAtomically(key_path_, "short", 0600).ok());
  EXPECT_EQ(ReadMasterKey(env_, key_path_).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(LoadOrCreateMasterKey(env_, key_path_).status().code(), StatusCode::kDataLoss);
  ASSERT_TRUE(env_.WriteFileAtomically(key_path_, std::string(33, 'k'), 0600).ok());
  EXPECT_EQ(ReadMasterKey(env_, key_path_).status().code(), StatusCode::kDataLoss);
  ASSERT_TRUE(env_.WriteFileAtomically(key_path_, std::string(32, 'k'), 0600).ok());
  EXPECT_TRUE(ReadMasterKey(env_, key_path_).ok());
  ASSERT_EQ(::chmod(key_path_.c_str(), 0640), 0);
  auto readable = ReadMasterKey(env_, key_path_);
  EXPECT_EQ(readable.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(readable.status().message().find("chmod 600"), std::string::npos);
}

}  // namespace
}  // namespace sovai::control
