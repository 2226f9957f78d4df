#include "objstore/acl.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "objstore/bucket_access.h"

namespace sovai::objstore {
namespace {

AclResolver Users() {
  AclResolver r;
  r.user_exists = [](std::string_view id) { return id == "alice" || id == "bob"; };
  r.user_by_email = [](std::string_view email) -> std::optional<std::string> {
    if (email == "bob@example.com") return std::string("bob");
    return std::nullopt;
  };
  return r;
}

std::function<std::optional<std::string_view>(std::string_view)> Headers(
    const std::map<std::string, std::string>& h) {
  return [h](std::string_view name) -> std::optional<std::string_view> {
    auto it = h.find(std::string(name));
    if (it == h.end()) return std::nullopt;
    return std::string_view(it->second);
  };
}

TEST(AclTest, CannedAclsGrantWhatAwsDocuments) {
  auto pr = CannedAcl("public-read", "alice", "alice", true);
  ASSERT_TRUE(pr.ok());
  EXPECT_EQ(AclPermissionsFor(*pr, "", true, false), kAclRead);
  EXPECT_EQ(AclPermissionsFor(*pr, "bob", false, false), kAclRead);
  EXPECT_EQ(AclPermissionsFor(*pr, "alice", false, false), kAclFullControl);
  EXPECT_EQ(AclPermissionsFor(*pr, "", true, /*ignore_public=*/true), 0u);
  EXPECT_TRUE(AclIsPublic(*pr));

  auto prw = CannedAcl("public-read-write", "alice", "alice", false);
  ASSERT_TRUE(prw.ok());
  EXPECT_EQ(AclPermissionsFor(*prw, "", true, false), kAclRead | kAclWrite);

  auto auth = CannedAcl("authenticated-read", "alice", "alice", true);
  ASSERT_TRUE(auth.ok());
  EXPECT_EQ(AclPermissionsFor(*auth, "", true, false), 0u);
  EXPECT_EQ(AclPermissionsFor(*auth, "bob", false, false), kAclRead);

  auto bor = CannedAcl("bucket-owner-read", "bob", "alice", true);
  ASSERT_TRUE(bor.ok());
  EXPECT_EQ(AclPermissionsFor(*bor, "alice", false, false), kAclRead);
  EXPECT_FALSE(AclIsPublic(*bor));
  auto bofc = CannedAcl("bucket-owner-full-control", "bob", "alice", true);
  ASSERT_TRUE(bofc.ok());
  EXPECT_EQ(AclPermissionsFor(*bofc, "alice", false, false), kAclFullControl);
  // Written by the bucket owner, or on a bucket: the same as private.
  EXPECT_EQ(*CannedAcl("bucket-owner-full-control", "alice", "alice", true), PrivateAcl("alice"));
  EXPECT_EQ(*CannedAcl("bucket-owner-read", "alice", "alice", false), PrivateAcl("alice"));
  EXPECT_EQ(*CannedAcl("private", "alice", "alice", true), PrivateAcl("alice"));

  auto bad = CannedAcl("public", "alice", "alice", true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, S3Code::kInvalidArgument);
  EXPECT_FALSE(CannedAcl("log-delivery-write", "alice", "alice", true).ok())
      << "a bucket-only canned ACL";
}

TEST(AclTest, GrantHeaders) {
  auto none = AclFromGrantHeaders(Headers({}), "alice", Users());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto acl = AclFromGrantHeaders(
      Headers({{"x-amz-grant-read",
                "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\", id=\"bob\""},
               {"x-amz-grant-full-control", "id=alice"},
               {"x-amz-grant-write-acp", "emailAddress=\"bob@example.com\""}}),
      "alice", Users());
  ASSERT_TRUE(acl.ok()) << acl.error().ToString();
  ASSERT_TRUE(acl->has_value());
  EXPECT_EQ(AclPermissionsFor(**acl, "", true, false), kAclRead);
  EXPECT_EQ(AclPermissionsFor(**acl, "bob", false, false), kAclRead | kAclWriteAcp);
  EXPECT_EQ(AclPermissionsFor(**acl, "alice", false, false), kAclFullControl);

  auto unknown_id =
      AclFromGrantHeaders(Headers({{"x-amz-grant-read", "id=\"mallory\""}}), "alice", Users());
  ASSERT_FALSE(unknown_id.ok());
  EXPECT_EQ(unknown_id.error().code, S3Code::kInvalidArgument);
  auto unknown_email = AclFromGrantHeaders(
      Headers({{"x-amz-grant-read", "emailAddress=\"nobody@example.com\""}}), "alice", Users());
  ASSERT_FALSE(unknown_email.ok());
  EXPECT_EQ(unknown_email.error().code, S3Code::kUnresolvableGrantByEmailAddress);
  auto bad_uri = AclFromGrantHeaders(
      Headers({{"x-amz-grant-read", "uri=\"http://acs.amazonaws.com/groups/global/Nobody\""}}),
      "alice", Users());
  ASSERT_FALSE(bad_uri.ok());
  EXPECT_EQ(bad_uri.error().code, S3Code::kInvalidArgument);
  auto no_kind = AclFromGrantHeaders(Headers({{"x-amz-grant-read", "bob"}}), "alice", Users());
  ASSERT_FALSE(no_kind.ok());
  EXPECT_EQ(no_kind.error().code, S3Code::kInvalidArgument);
  auto bad_kind =
      AclFromGrantHeaders(Headers({{"x-amz-grant-read", "user=\"bob\""}}), "alice", Users());
  ASSERT_FALSE(bad_kind.ok());
}

constexpr std::string_view kPolicyXml =
    R"(<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
    R"(<Owner><ID>alice</ID><DisplayName>alice</DisplayName></Owner><AccessControlList>)"
    R"(<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" )"
    R"(xsi:type="CanonicalUser"><ID>alice</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant>)"
    R"(<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="Group">)"
    R"(<URI>http://acs.amazonaws.com/groups/global/AuthenticatedUsers</URI></Grantee>)"
    R"(<Permission>READ</Permission></Grant>)"
    R"(<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" )"
    R"(xsi:type="AmazonCustomerByEmail"><EmailAddress>bob@example.com</EmailAddress></Grantee>)"
    R"(<Permission>WRITE</Permission></Grant>)"
    R"(</AccessControlList></AccessControlPolicy>)";

TEST(AclTest, AccessControlPolicyRoundTrips) {
  auto acl = ParseAccessControlPolicy(kPolicyXml, "alice", Users());
  ASSERT_TRUE(acl.ok()) << acl.error().ToString();
  ASSERT_EQ(acl->grants.size(), 3u);
  EXPECT_EQ(acl->grants[2], (AclGrant{false, "bob", "WRITE"}));
  std::string xml = RenderAccessControlPolicy(*acl);
  EXPECT_NE(
      xml.find(
          R"(xsi:type="Group"><URI>http://acs.amazonaws.com/groups/global/AuthenticatedUsers</URI>)"),
      std::string::npos)
      << xml;
  EXPECT_NE(xml.find(R"(xsi:type="CanonicalUser"><ID>bob</ID>)"), std::string::npos) << xml;
  auto again = ParseAccessControlPolicy(xml, "alice", Users());
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_EQ(*again, *acl);
  auto json = AclFromJson(AclToJson(*acl));
  ASSERT_TRUE(json.has_value());
  EXPECT_EQ(*json, *acl);
  EXPECT_FALSE(AclFromJson("[1]").has_value());
}

TEST(AclTest, MalformedAccessControlPolicies) {
  auto code = [](std::string_view xml) {
    auto acl = ParseAccessControlPolicy(xml, "alice", Users());
    return acl.ok() ? std::string("ok") : std::string(acl.error().name());
  };
  EXPECT_EQ(code("<AccessControlPolicy>"), "MalformedXML");
  EXPECT_EQ(code("<Other/>"), "MalformedXML");
  EXPECT_EQ(code("<AccessControlPolicy/>"), "MalformedACLError");
  EXPECT_EQ(code("<AccessControlPolicy><AccessControlList><Grant><Grantee><ID>bob</ID></Grantee>"
                 "<Permission>EVERYTHING</Permission></Grant></AccessControlList>"
                 "</AccessControlPolicy>"),
            "MalformedACLError");
  EXPECT_EQ(code("<AccessControlPolicy><AccessControlList><Grant><Grantee><ID>mallory</ID>"
                 "</Grantee><Permission>READ</Permission></Grant></AccessControlList>"
                 "</AccessControlPolicy>"),
            "InvalidArgument");
  EXPECT_EQ(code("<AccessControlPolicy><AccessControlList><Grant><Grantee><EmailAddress>x@y"
                 "</EmailAddress></Grantee><Permission>READ</Permission></Grant>"
                 "</AccessControlList></AccessControlPolicy>"),
            "UnresolvableGrantByEmailAddress");
  EXPECT_EQ(code("<AccessControlPolicy><AccessControlList><Grant><Permission>READ</Permission>"
                 "</Grant></AccessControlList></AccessControlPolicy>"),
            "MalformedXML");
  EXPECT_EQ(code("<AccessControlPolicy><AccessControlList><Grant><Grantee><Nick>b</Nick>"
                 "</Grantee><Permission>READ</Permission></Grant></AccessControlList>"
                 "</AccessControlPolicy>"),
            "MalformedXML");
  EXPECT_EQ(code("<AccessControlPolicy><Owner><ID>bob</ID></Owner><AccessControlList/>"
                 "</AccessControlPolicy>"),
            "AccessDenied")
      << "an ACL cannot give the resource away";
  std::string many = "<AccessControlPolicy><AccessControlList>";
  for (size_t i = 0; i <= kMaxAclGrants; ++i) {
    many += "<Grant><Grantee><ID>bob</ID></Grantee><Permission>" +
            std::string(i % 2 ? "READ" : "WRITE") + "</Permission></Grant>";
    many += "<Grant><Grantee><URI>" + std::string(kAllUsersGroup) + "</URI></Grantee><Permission>" +
            std::string(i % 3 ? "READ_ACP" : "WRITE_ACP") + "</Permission></Grant>";
  }
  // Repeated grants collapse; distinct ones beyond the limit do not fit.
  EXPECT_EQ(code(many + "</AccessControlList></AccessControlPolicy>"), "ok");
  std::string distinct = "<AccessControlPolicy><AccessControlList>";
  AclResolver everyone;
  everyone.user_exists = [](std::string_view) { return true; };
  for (size_t i = 0; i <= kMaxAclGrants; ++i) {
    distinct += "<Grant><Grantee><ID>u" + std::to_string(i) +
                "</ID></Grantee><Permission>READ</Permission></Grant>";
  }
  auto too_many = ParseAccessControlPolicy(distinct + "</AccessControlList></AccessControlPolicy>",
                                           "alice", everyone);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.error().code, S3Code::kMalformedACLError);
}

TEST(BucketAccessTest, OwnershipControls) {
  auto o = ParseOwnershipControls(
      "<OwnershipControls xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Rule>"
      "<ObjectOwnership>ObjectWriter</ObjectOwnership></Rule></OwnershipControls>");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, ObjectOwnership::kObjectWriter);
  auto again =
      ParseOwnershipControls(RenderOwnershipControls(ObjectOwnership::kBucketOwnerPreferred));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, ObjectOwnership::kBucketOwnerPreferred);
  EXPECT_FALSE(ParseOwnershipControls("<OwnershipControls/>").ok());
  EXPECT_FALSE(ParseOwnershipControls("<OwnershipControls><Rule><ObjectOwnership>Mine"
                                      "</ObjectOwnership></Rule></OwnershipControls>")
                   .ok());
  EXPECT_FALSE(ParseOwnershipControls(
                   "<OwnershipControls><Rule><ObjectOwnership>ObjectWriter</ObjectOwnership>"
                   "</Rule><Rule><ObjectOwnership>ObjectWriter</ObjectOwnership></Rule>"
                   "</OwnershipControls>")
                   .ok());
  EXPECT_EQ(OwnershipFromStored(std::nullopt), ObjectOwnership::kBucketOwnerEnforced);
  EXPECT_EQ(OwnershipFromStored(std::string(kOwnershipDeleted)), std::nullopt);
  EXPECT_EQ(ParseObjectOwnershipName("bogus").error().code, S3Code::kInvalidArgument);
}

TEST(BucketAccessTest, PublicAccessBlock) {
  auto pab = ParsePublicAccessBlock(
      "<PublicAccessBlockConfiguration><BlockPublicAcls>true</BlockPublicAcls>"
      "<RestrictPublicBuckets>TRUE</RestrictPublicBuckets></PublicAccessBlockConfiguration>");
  ASSERT_TRUE(pab.ok());
  EXPECT_EQ(*pab, (PublicAccessBlock{true, false, false, true}));
  EXPECT_EQ(PublicAccessBlockFromStored(RenderPublicAccessBlock(*pab)), *pab);
  EXPECT_EQ(PublicAccessBlockFromStored(std::nullopt), PublicAccessBlock{});
  EXPECT_EQ(PublicAccessBlockFromStored(std::string("garbage")),
            (PublicAccessBlock{true, true, true, true}));
  EXPECT_FALSE(ParsePublicAccessBlock("<PublicAccessBlockConfiguration><BlockPublicAcls>maybe"
                                      "</BlockPublicAcls></PublicAccessBlockConfiguration>")
                   .ok());
  EXPECT_FALSE(ParsePublicAccessBlock("<PublicAccessBlockConfiguration><BlockEverything>true"
                                      "</BlockEverything></PublicAccessBlockConfiguration>")
                   .ok());
  EXPECT_NE(RenderPolicyStatus(true).find("<IsPublic>true</IsPublic>"), std::string::npos);
}

}  // namespace
}  // namespace sovai::objstore
