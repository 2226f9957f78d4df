#include "registry/auth.h"

#include <gtest/gtest.h>

#include "base/crypto.h"
#include "registry/internal/test_fixture.h"

namespace sovai::registry {
namespace {

TEST(AuthTest, RegistryTokensRoundTripExpireAndResistForgery) {
  base::ManualClock clock;
  base::ManualClockEnv env(base::Env::Default(), clock);
  TokenIssuer issuer("key-1", env, 300);
  Caller alice{"tok_1", "alpha", true, false};
  std::string token = issuer.Issue(alice);
  EXPECT_TRUE(TokenIssuer::IsRegistryToken(token));
  auto back = issuer.Verify(token);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, alice);

  TokenIssuer other("key-2", env, 300);
  EXPECT_EQ(other.Verify(token).status().code(), base::StatusCode::kUnauthenticated);
  std::string tampered = token;
  tampered[8] = tampered[8] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(issuer.Verify(tampered).ok());
  for (const char* junk : {"", "svr1.", "svr1.x", "svr1..", "svr1.e30.", "sov_abc"}) {
    EXPECT_FALSE(issuer.Verify(junk).ok()) << junk;
  }
  clock.Advance(301ll * 1000000);
  EXPECT_FALSE(issuer.Verify(token).ok());
}

TEST(AuthTest, AuthorizationHeaders) {
  base::ManualClock clock;
  base::ManualClockEnv env(base::Env::Default(), clock);
  TokenIssuer issuer("k", env, 300);
  testing::FixedAuthenticator auth;
  auth.Add("sov_secret", {"tok_1", "alpha", false, false});
  auto basic = AuthenticateHeader(testing::BasicAuth("sov_secret"), auth, issuer);
  ASSERT_TRUE(basic.ok());
  EXPECT_EQ(basic->project, "alpha");
  EXPECT_TRUE(AuthenticateHeader("Bearer sov_secret", auth, issuer).ok());
  EXPECT_TRUE(AuthenticateHeader("bearer " + issuer.Issue(*basic), auth, issuer).ok());
  for (std::string bad :
       {std::string(), std::string("Basic !!!"), "Basic " + base::Base64Encode("no-colon"),
        std::string("Bearer nope"), std::string("Digest x"), "Basic " + std::string(9000, 'A'),
        testing::BasicAuth("wrong")}) {
    auto r = AuthenticateHeader(bad, auth, issuer);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), base::StatusCode::kUnauthenticated);
  }
}

TEST(AuthTest, CallerRules) {
  Caller reader{"t", "alpha", false, false};
  EXPECT_TRUE(reader.CanPull("alpha"));
  EXPECT_FALSE(reader.CanPushTo("alpha"));
  EXPECT_FALSE(reader.CanPull("beta"));
  Caller op{"t", "alpha", true, false};
  EXPECT_TRUE(op.CanPushTo("alpha"));
  EXPECT_FALSE(op.CanPushTo("beta"));
  Caller admin{"t", "default", true, true};
  EXPECT_TRUE(admin.CanPull("beta"));
  EXPECT_TRUE(admin.CanPushTo("beta"));
}

}  // namespace
}  // namespace sovai::registry
