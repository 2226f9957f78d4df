#include "control/bootstrap.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "base/crypto.h"

namespace sovai::control {
namespace {

class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-bootstrap-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
};

AdminOverrides ValidOverrides() {
  return AdminOverrides{.access_key_id = "AKIAIOSFODNN7EXAMPLE",
                        .secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                        .api_token = "sovai_test_token_0123456789"};
}

TEST_F(BootstrapTest, GeneratesOnceWithPrivateModeAndReusesLater) {
  auto first = BootstrapAdmin(env_, dir_, {});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->access_key_id.size(), 20u);
  EXPECT_EQ(first->access_key_id.substr(0, 2), "SV");
  EXPECT_EQ(first->secret_access_key.size(), 40u);
  EXPECT_EQ(first->api_token.rfind("sovai_", 0), 0u);

  auto stat = env_.Stat(dir_ + "/admin.json");
  ASSERT_TRUE(stat.ok());
  EXPECT_EQ(stat->mode & 0777, 0600u);

  auto second = BootstrapAdmin(env_, dir_, {});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->access_key_id, first->access_key_id);
  EXPECT_EQ(second->secret_access_key, first->secret_access_key);
  EXPECT_EQ(second->api_token, first->api_token);

  // A second data directory gets different credentials.
  std::string other = dir_ + "/other";
  ASSERT_TRUE(env_.CreateDir(other).ok());
  auto third = BootstrapAdmin(env_, other, {});
  ASSERT_TRUE(third.ok());
  EXPECT_NE(third->secret_access_key, first->secret_access_key);
  EXPECT_NE(third->api_token, first->api_token);
}

TEST_F(BootstrapTest, UsesOverridesAndRefusesToChangeThemSilently) {
  auto creds = BootstrapAdmin(env_, dir_, ValidOverrides());
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_EQ(creds->access_key_id, "AKIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(creds->api_token, "sovai_test_token_0123456789");

  // Same overrides on restart: fine. Other overrides: refused, file untouched.
  EXPECT_TRUE(BootstrapAdmin(env_, dir_, ValidOverrides()).ok());
  AdminOverrides other = ValidOverrides();
  other.api_token = "sovai_another_token_0123456789";
  auto refused = BootstrapAdmin(env_, dir_, other);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), base::StatusCode::kFailedPrecondition);
  auto kept = BootstrapAdmin(env_, dir_, {});
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->api_token, "sovai_test_token_0123456789");
}

TEST_F(BootstrapTest, RejectsPartialOrMalformedOverrides) {
  AdminOverrides partial = ValidOverrides();
  partial.api_token.reset();
  auto r = BootstrapAdmin(env_, dir_, partial);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("all three"), std::string::npos);

  AdminOverrides short_key = ValidOverrides();
  short_key.access_key_id = "SHORT";
  EXPECT_EQ(BootstrapAdmin(env_, dir_, short_key).status().code(),
            base::StatusCode::kInvalidArgument);
  AdminOverrides spaced_secret = ValidOverrides();
  spaced_secret.secret_access_key = "has a space in it";
  EXPECT_EQ(BootstrapAdmin(env_, dir_, spaced_secret).status().code(),
            base::StatusCode::kInvalidArgument);
  // Nothing was written by the refused calls.
  EXPECT_FALSE(env_.FileExists(dir_ + "/admin.json"));
}

TEST_F(BootstrapTest, CorruptOrExposedFileIsAnError) {
  ASSERT_TRUE(BootstrapAdmin(env_, dir_, {}).ok());
  const std::string path = dir_ + "/admin.json";

  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto exposed = BootstrapAdmin(env_, dir_, {});
  ASSERT_FALSE(exposed.ok());
  EXPECT_EQ(exposed.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(exposed.status().message().find("chmod 600"), std::string::npos);

  ASSERT_TRUE(env_.WriteFileAtomically(path, "{\"user\": \"admin\"", 0600).ok());
  auto corrupt = BootstrapAdmin(env_, dir_, {});
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), base::StatusCode::kDataLoss);

  ASSERT_TRUE(env_.WriteFileAtomically(path, "{\"user\": \"admin\"}", 0600).ok());
  auto missing = BootstrapAdmin(env_, dir_, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), base::StatusCode::kDataLoss);
  EXPECT_NE(missing.status().message().find("access_key_id"), std::string::npos);
}

TEST_F(BootstrapTest, WriteFailureLeavesNoFile) {
  base::FaultInjectionEnv faulty(env_);
  faulty.FailAlways(base::FaultOp::kRename);
  auto r = BootstrapAdmin(faulty, dir_, {});
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(env_.FileExists(dir_ + "/admin.json"));
  auto entries = env_.ListDir(dir_);
  ASSERT_TRUE(entries.ok());
  EXPECT_TRUE(entries->empty()) << "temporary file left behind";
}

}  // namespace
}  // namespace sovai::control
