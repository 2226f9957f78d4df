#include "control/identity.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "base/time.h"
#include "control/postgres_test_util.h"

namespace sovai::control {
namespace {

using base::StatusCode;

constexpr char kAdminToken[] = "sovai_identity_test_admin_token_0123456789";

AdminCredentials TestAdmin(std::string token = kAdminToken) {
  AdminCredentials admin;
  admin.access_key_id = "SVADMINKEY0000000001";
  admin.secret_access_key = "secret-not-stored-by-the-control-plane";
  admin.api_token = std::move(token);
  return admin;
}

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-identity-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    SOVAI_STATE_LOCATION_OR_SKIP(state_, dir_);
    auto db = ControlDb::Open(state_, {.env = &env_});
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    identity_ = std::make_unique<Identity>(*db_, env_);
    ASSERT_TRUE(identity_->ImportBootstrapAdmin(TestAdmin()).ok());
    auto admin = identity_->Authenticate(kAdminToken);
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *admin;
  }
  void TearDown() override {
    identity_.reset();
    db_.reset();
    base::Env::Default().DeleteDirRecursive(dir_).IgnoreError();
  }

  User MakeUser(const std::string& name) {
    auto user = identity_->CreateUser({.name = name});
    EXPECT_TRUE(user.ok()) << user.status();
    return user.value_or(User{});
  }
  Project MakeProject(const std::string& name) {
    auto project = identity_->CreateProject({.name = name});
    EXPECT_TRUE(project.ok()) << project.status();
    return project.value_or(Project{});
  }
  CreatedToken MakeToken(const User& user, const Project& project, Role role,
                         std::string labels = "") {
    NewToken request{.user_id = user.id, .project_id = project.id, .role = role};
    request.selector = *LabelSelector::Parse(labels);
    auto token = identity_->CreateToken(request);
    EXPECT_TRUE(token.ok()) << token.status();
    return token.value_or(CreatedToken{});
  }

  base::ManualClock clock_;
  base::ManualClockEnv env_{base::Env::Default(), clock_};
  std::string dir_;
  std::string state_;  // control.db in dir_, or a PostgreSQL URL (postgres_test_util.h)
  std::unique_ptr<ControlDb> db_;
  std::unique_ptr<Identity> identity_;
  Principal admin_;
};

TEST(LabelSelectorTest, ParsesCanonicalizesAndCompares) {
  auto s = LabelSelector::Parse("team=nlp,env=prod");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->ToString(), "env=prod,team=nlp");
  EXPECT_EQ(*LabelSelector::Parse(s->ToString()), *s);
  EXPECT_TRUE(s->Matches({{"team", "nlp"}, {"env", "prod"}, {"extra", "x"}}));
  EXPECT_FALSE(s->Matches({{"team", "nlp"}}));
  EXPECT_FALSE(s->Matches({{"team", "nlp"}, {"env", "dev"}}));

  auto team = *LabelSelector::Parse("team=nlp");
  EXPECT_TRUE(s->Includes(team));   // narrower includes wider
  EXPECT_FALSE(team.Includes(*s));  // wider does not include narrower
  EXPECT_TRUE(team.Includes(LabelSelector()));
  EXPECT_FALSE(LabelSelector().Includes(team));
  EXPECT_TRUE(LabelSelector::Parse("")->empty());
  EXPECT_TRUE(LabelSelector().Matches({}));
}

TEST(LabelSelectorTest, RejectsMalformedSelectors) {
  for (const char* bad : {"team", "=nlp", "team=", "team=nlp,", ",team=nlp", "team=nlp,team=cv",
                          "te am=nlp", "team=n/p", "-team=nlp", "team=nlp-", "team=nlp, env=x"}) {
    auto s = LabelSelector::Parse(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  std::string many;
  for (size_t i = 0; i <= kMaxSelectorLabels; ++i) {
    many += (i ? ",k" : "k") + std::to_string(i) + "=v";
  }
  EXPECT_FALSE(LabelSelector::Parse(many).ok());
  EXPECT_FALSE(LabelSelector::Parse("k=" + std::string(kMaxLabelValueBytes + 1, 'v')).ok());
  EXPECT_TRUE(LabelSelector::Parse("k=" + std::string(kMaxLabelValueBytes, 'v')).ok());
}

TEST(RoleTest, NamesRoundTripAndOrder) {
  for (Role r : {Role::kRead, Role::kOperator, Role::kAdmin}) {
    EXPECT_EQ(*ParseRole(RoleName(r)), r);
  }
  EXPECT_FALSE(ParseRole("Admin").ok());
  EXPECT_FALSE(ParseRole("").ok());
  EXPECT_LT(Role::kRead, Role::kOperator);
  EXPECT_LT(Role::kOperator, Role::kAdmin);
}

TEST(ValidatorsTest, NamesAndText) {
  EXPECT_TRUE(ValidateName("alice").ok());
  EXPECT_TRUE(ValidateName("a.b_c-9").ok());
  EXPECT_TRUE(ValidateName(std::string(kMaxNameBytes, 'a')).ok());
  for (std::string bad :
       {std::string(), std::string("Alice"), std::string("-x"), std::string("a b"),
        std::string("a/b"), std::string(kMaxNameBytes + 1, 'a')}) {
    EXPECT_FALSE(ValidateName(bad).ok()) << bad;
  }
  EXPECT_TRUE(ValidateEmail("").ok());
  EXPECT_TRUE(ValidateEmail("a@b.example").ok());
  EXPECT_FALSE(ValidateEmail("no-at").ok());
  EXPECT_FALSE(ValidateEmail("a@b@c").ok());
  EXPECT_FALSE(ValidateEmail("@b").ok());
  EXPECT_FALSE(ValidateDisplayName("bell\a").ok());
  EXPECT_FALSE(ValidateDisplayName(std::string(kMaxDisplayNameBytes + 1, 'x')).ok());
  EXPECT_TRUE(ValidateDescription("two\nlines").ok());
  EXPECT_FALSE(ValidateDescription(std::string(kMaxDescriptionBytes + 1, 'x')).ok());
  EXPECT_FALSE(ValidateTokenName("tab\tnot allowed in names").ok());
}

TEST_F(IdentityTest, BootstrapAdminIsAPlatformAdminOfTheDefaultProject) {
  EXPECT_EQ(admin_.user.name, "admin");
  EXPECT_TRUE(admin_.user.bootstrap);
  EXPECT_EQ(admin_.project.name, "default");
  EXPECT_TRUE(admin_.project.system);
  EXPECT_EQ(admin_.role, Role::kAdmin);
  EXPECT_TRUE(admin_.platform_admin());
  EXPECT_TRUE(admin_.token.bootstrap);
  EXPECT_TRUE(admin_.token.id.starts_with("tok_"));
  EXPECT_TRUE(admin_.user.id.starts_with("usr_"));
  EXPECT_TRUE(admin_.project.id.starts_with("prj_"));

  auto key = identity_->GetS3Key("SVADMINKEY0000000001");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->user_id, admin_.user.id);
  EXPECT_TRUE(key->bootstrap);
}

TEST_F(IdentityTest, BootstrapImportIsIdempotentAndRotationRevokesTheOldToken) {
  ASSERT_TRUE(identity_->ImportBootstrapAdmin(TestAdmin()).ok());
  auto again = identity_->Authenticate(kAdminToken);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->token.id, admin_.token.id);
  EXPECT_EQ(again->user.id, admin_.user.id);
  auto users = identity_->ListUsers({});
  ASSERT_TRUE(users.ok());
  EXPECT_EQ(users->items.size(), 1u);

  const std::string rotated = "sovai_rotated_admin_token_abcdefghijklmnop";
  ASSERT_TRUE(identity_->ImportBootstrapAdmin(TestAdmin(rotated)).ok());
  auto old_token = identity_->Authenticate(kAdminToken);
  EXPECT_EQ(old_token.status().code(), StatusCode::kUnauthenticated);
  auto new_token = identity_->Authenticate(rotated);
  ASSERT_TRUE(new_token.ok()) << new_token.status();
  EXPECT_TRUE(new_token->platform_admin());
  EXPECT_EQ(new_token->user.id, admin_.user.id);
}

TEST_F(IdentityTest, BootstrapIdentityIsProtected) {
  EXPECT_EQ(identity_->DeleteUser(admin_.user.id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(identity_->RevokeToken(admin_.token.id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(identity_->RemoveMember(admin_.project.id, admin_.user.id).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(identity_->SetMember(admin_.project.id, admin_.user.id, Role::kRead).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(identity_->RemoveS3Key("SVADMINKEY0000000001").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(identity_->Authenticate(kAdminToken).ok());
}

// ACL grants by e-mail (S3's emailAddress=) name the one user with that address.
TEST_F(IdentityTest, FindsTheOneUserWithAnEmailAddress) {
  auto carol = identity_->CreateUser({.name = "carol", .email = "Carol@Example.com"});
  ASSERT_TRUE(carol.ok()) << carol.status();
  auto found = identity_->FindUserByEmail("carol@example.COM");
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->name, "carol");
  EXPECT_FALSE(identity_->FindUserByEmail("nobody@example.com")->has_value());
  EXPECT_FALSE(identity_->FindUserByEmail("")->has_value());
  // An address two users share names neither.
  ASSERT_TRUE(identity_->CreateUser({.name = "dave", .email = "dave@example.com"}).ok());
  ASSERT_TRUE(identity_->CreateUser({.name = "dave2", .email = "DAVE@example.com"}).ok());
  EXPECT_FALSE(identity_->FindUserByEmail("dave@example.com")->has_value());
}

TEST_F(IdentityTest, UsersAreUniqueByNameAndListedInPages) {
  std::vector<User> made;
  for (const char* name : {"u1", "u2", "u3", "u4", "u5"}) made.push_back(MakeUser(name));
  auto dup = identity_->CreateUser({.name = "u3"});
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(identity_->CreateUser({.name = "Bad Name"}).status().code(),
            StatusCode::kInvalidArgument);

  // 6 users (admin first, by creation order), pages of 4 and 2.
  auto first = identity_->ListUsers({.limit = 4});
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->items.size(), 4u);
  ASSERT_TRUE(first->next_cursor.has_value());
  EXPECT_EQ(first->items[0].name, "admin");
  EXPECT_EQ(first->items[3].name, "u3");
  auto second = identity_->ListUsers({.limit = 4, .after = *first->next_cursor});
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->items.size(), 2u);
  EXPECT_EQ(second->items[1].name, "u5");
  EXPECT_FALSE(second->next_cursor.has_value());

  auto exact = identity_->ListUsers({.limit = 6});
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->items.size(), 6u);
  EXPECT_FALSE(exact->next_cursor.has_value());

  EXPECT_EQ(identity_->GetUser("usr_nope").status().code(), StatusCode::kNotFound);
  auto got = identity_->GetUser(made[1].id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->name, "u2");
}

TEST_F(IdentityTest, MembershipsScopeUsersAndCapTokenRoles) {
  User alice = MakeUser("alice");
  User bob = MakeUser("bob");
  Project nlp = MakeProject("nlp");
  EXPECT_EQ(identity_->CreateProject({.name = "nlp"}).status().code(), StatusCode::kAlreadyExists);

  auto added = identity_->SetMember(nlp.id, alice.id, Role::kOperator);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_TRUE(added->second);
  auto changed = identity_->SetMember(nlp.id, alice.id, Role::kAdmin);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(changed->second);
  EXPECT_EQ(changed->first.role, Role::kAdmin);
  EXPECT_EQ(identity_->SetMember(nlp.id, "usr_nope", Role::kRead).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(identity_->SetMember("prj_nope", alice.id, Role::kRead).status().code(),
            StatusCode::kNotFound);

  auto members = identity_->ListUsers({}, nlp.id);
  ASSERT_TRUE(members.ok());
  ASSERT_EQ(members->items.size(), 1u);
  EXPECT_EQ(members->items[0].name, "alice");

  // bob is not a member: no token for him in nlp.
  NewToken for_bob{.user_id = bob.id, .project_id = nlp.id, .role = Role::kRead};
  EXPECT_EQ(identity_->CreateToken(for_bob).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(identity_->SetMember(nlp.id, bob.id, Role::kOperator).ok());
  for_bob.role = Role::kAdmin;
  EXPECT_EQ(identity_->CreateToken(for_bob).status().code(), StatusCode::kPermissionDenied);
  for_bob.role = Role::kOperator;
  auto bob_token = identity_->CreateToken(for_bob);
  ASSERT_TRUE(bob_token.ok()) << bob_token.status();

  // Demoting bob lowers his token's effective role at once.
  ASSERT_TRUE(identity_->SetMember(nlp.id, bob.id, Role::kRead).ok());
  auto p = identity_->Authenticate(bob_token->secret);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->role, Role::kRead);
  EXPECT_EQ(p->token.role, Role::kOperator);
  EXPECT_FALSE(p->platform_admin());

  // Removing him revokes the token for good, even if he comes back.
  ASSERT_TRUE(identity_->RemoveMember(nlp.id, bob.id).ok());
  EXPECT_EQ(identity_->RemoveMember(nlp.id, bob.id).code(), StatusCode::kNotFound);
  ASSERT_TRUE(identity_->SetMember(nlp.id, bob.id, Role::kOperator).ok());
  auto after = identity_->Authenticate(bob_token->secret);
  EXPECT_EQ(after.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(after.status().message().find("revoked"), std::string::npos) << after.status();
}

TEST_F(IdentityTest, AdminsOfOtherProjectsAreNotPlatformAdmins) {
  User alice = MakeUser("alice");
  Project nlp = MakeProject("nlp");
  ASSERT_TRUE(identity_->SetMember(nlp.id, alice.id, Role::kAdmin).ok());
  auto p = identity_->Authenticate(MakeToken(alice, nlp, Role::kAdmin).secret);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->role, Role::kAdmin);
  EXPECT_FALSE(p->platform_admin());
}

TEST_F(IdentityTest, TokensAreStoredOnlyAsHashes) {
  User alice = MakeUser("alice");
  Project nlp = MakeProject("nlp");
  ASSERT_TRUE(identity_->SetMember(nlp.id, alice.id, Role::kOperator).ok());
  CreatedToken token = MakeToken(alice, nlp, Role::kOperator, "team=nlp");
  EXPECT_TRUE(token.secret.starts_with("sov_"));
  EXPECT_EQ(token.secret.size(), 4u + 43u);
  EXPECT_EQ(token.token.selector.ToString(), "team=nlp");

  // Neither the database nor its WAL holds the token text.
  identity_.reset();
  db_.reset();
  for (const char* file : {"/control.db", "/control.db-wal"}) {
    auto bytes = base::Env::Default().ReadFile(dir_ + file);
    if (!bytes.ok()) continue;
    EXPECT_EQ(bytes->find(token.secret), std::string::npos) << file;
    EXPECT_EQ(bytes->find(token.secret.substr(4)), std::string::npos) << file;
    EXPECT_EQ(bytes->find(kAdminToken), std::string::npos) << file;
  }
}

TEST_F(IdentityTest, AuthenticateRejectsUnknownRevokedAndExpiredTokens) {
  User alice = MakeUser("alice");
  Project nlp = MakeProject("nlp");
  ASSERT_TRUE(identity_->SetMember(nlp.id, alice.id, Role::kOperator).ok());

  EXPECT_EQ(identity_->Authenticate("sov_unknown").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(identity_->Authenticate("").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(identity_->Authenticate(std::string(kMaxBearerTokenBytes + 1, 'x')).status().code(),
            StatusCode::kUnauthenticated);

  CreatedToken revoked = MakeToken(alice, nlp, Role::kRead);
  ASSERT_TRUE(identity_->Authenticate(revoked.secret).ok());
  ASSERT_TRUE(identity_->RevokeToken(revoked.token.id).ok());
  ASSERT_TRUE(identity_->RevokeToken(revoked.token.id).ok());  // idempotent
  auto r = identity_->Authenticate(revoked.secret);
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(identity_->RevokeToken("tok_nope").code(), StatusCode::kNotFound);

  const int64_t hour_us = 3600 * base::kMicrosPerSecond;
  NewToken expiring{.user_id = alice.id,
                    .project_id = nlp.id,
                    .role = Role::kRead,
                    .expires_at_us = clock_.NowUnixMicros() + hour_us};
  auto e = identity_->CreateToken(expiring);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(identity_->Authenticate(e->secret).ok());
  clock_.Advance(hour_us - 1);
  ASSERT_TRUE(identity_->Authenticate(e->secret).ok());
  clock_.Advance(1);
  auto expired = identity_->Authenticate(e->secret);
  EXPECT_EQ(expired.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(expired.status().message().find("expired"), std::string::npos) << expired.status();

  expiring.expires_at_us = clock_.NowUnixMicros();
  EXPECT_EQ(identity_->CreateToken(expiring).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(IdentityTest, DeletingAUserRemovesItsTokensMembershipsAndKeyRecords) {
  User alice = MakeUser("alice");
  Project nlp = MakeProject("nlp");
  ASSERT_TRUE(identity_->SetMember(nlp.id, alice.id, Role::kOperator).ok());
  CreatedToken token = MakeToken(alice, nlp, Role::kOperator);
  ASSERT_TRUE(identity_->AddS3Key(alice.id, "SVALICE").ok());
  ASSERT_TRUE(identity_->DeleteUser(alice.id).ok());
  EXPECT_EQ(identity_->DeleteUser(alice.id).code(), StatusCode::kNotFound);
  EXPECT_EQ(identity_->Authenticate(token.secret).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(identity_->GetS3Key("SVALICE").status().code(), StatusCode::kNotFound);
  auto members = identity_->ListMembers(nlp.id, {});
  ASSERT_TRUE(members.ok());
  EXPECT_TRUE(members->items.empty());
}

TEST_F(IdentityTest, ListTokensFiltersByUserProjectAndSelector) {
  User alice = MakeUser("alice");
  User bob = MakeUser("bob");
  Project nlp = MakeProject("nlp");
  Project cv = MakeProject("cv");
  for (const User& u : {alice, bob}) {
    for (const Project& p : {nlp, cv})
      ASSERT_TRUE(identity_->SetMember(p.id, u.id, Role::kAdmin).ok());
  }
  MakeToken(alice, nlp, Role::kRead);
  MakeToken(alice, nlp, Role::kRead, "team=nlp");
  MakeToken(alice, nlp, Role::kRead, "team=nlp,env=prod");
  MakeToken(alice, cv, Role::kRead, "team=nlp");
  MakeToken(bob, nlp, Role::kRead, "team=nlp");

  auto all = identity_->ListTokens({}, {});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items.size(), 6u);  // with the bootstrap token

  auto alice_nlp = identity_->ListTokens({.user_id = alice.id, .project_id = nlp.id}, {});
  ASSERT_TRUE(alice_nlp.ok());
  EXPECT_EQ(alice_nlp->items.size(), 3u);

  TokenFilter labeled{.must_include = *LabelSelector::Parse("team=nlp")};
  auto narrow = identity_->ListTokens(labeled, {});
  ASSERT_TRUE(narrow.ok());
  EXPECT_EQ(narrow->items.size(), 4u);
  for (const ApiToken& t : narrow->items) EXPECT_EQ(t.selector.labels().at("team"), "nlp");

  // Pages of 1 through a filtered scan: each cursor continues after the last item returned.
  std::vector<std::string> seen;
  PageRequest page{.limit = 1};
  for (int i = 0; i < 10; ++i) {
    auto p = identity_->ListTokens(labeled, page);
    ASSERT_TRUE(p.ok());
    for (const ApiToken& t : p->items) seen.push_back(t.id);
    if (!p->next_cursor) break;
    page.after = *p->next_cursor;
  }
  ASSERT_EQ(seen.size(), 4u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], narrow->items[i].id);
}

TEST_F(IdentityTest, TokenAndKeyLimitsAreEnforced) {
  User alice = MakeUser("alice");
  Project nlp = MakeProject("nlp");
  ASSERT_TRUE(identity_->SetMember(nlp.id, alice.id, Role::kOperator).ok());
  for (int64_t i = 0; i < kMaxActiveTokensPerUserProject; ++i) MakeToken(alice, nlp, Role::kRead);
  NewToken one_more{.user_id = alice.id, .project_id = nlp.id, .role = Role::kRead};
  auto refused = identity_->CreateToken(one_more);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("revoke"), std::string::npos);

  for (int64_t i = 0; i < kMaxS3KeysPerUser; ++i) {
    ASSERT_TRUE(identity_->AddS3Key(alice.id, "SVKEY" + std::to_string(100 + i)).ok());
  }
  EXPECT_EQ(identity_->AddS3Key(alice.id, "SVKEYMORE").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(identity_->AddS3Key(alice.id, "SVKEY100").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(identity_->AddS3Key("usr_nope", "SVX").code(), StatusCode::kNotFound);
  auto count = identity_->CountS3Keys(alice.id);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, kMaxS3KeysPerUser);
  auto keys = identity_->ListS3Keys(alice.id, {.limit = 10});
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->items.size(), 10u);
  EXPECT_TRUE(keys->next_cursor.has_value());
  ASSERT_TRUE(identity_->RemoveS3Key("SVKEY100").ok());
  EXPECT_EQ(identity_->RemoveS3Key("SVKEY100").code(), StatusCode::kNotFound);
}

TEST_F(IdentityTest, StateSurvivesReopening) {
  User alice = MakeUser("alice");
  Project nlp = MakeProject("nlp");
  ASSERT_TRUE(identity_->SetMember(nlp.id, alice.id, Role::kOperator).ok());
  CreatedToken token = MakeToken(alice, nlp, Role::kOperator);
  identity_.reset();
  db_.reset();
  auto db = ControlDb::Open(state_, {.env = &env_});
  ASSERT_TRUE(db.ok());
  db_ = std::move(*db);
  identity_ = std::make_unique<Identity>(*db_, env_);
  auto p = identity_->Authenticate(token.secret);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->user.name, "alice");
  EXPECT_EQ(p->project.name, "nlp");
}

}  // namespace
}  // namespace sovai::control
