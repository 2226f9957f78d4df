// libFuzzer target for src/objstore's access-control parsers: bucket policies (the IAM policy
// engine), ACL bodies and grant headers, ownership controls and the Public Access Block. The
// first byte picks what the rest of the input goes to (an ASCII digit, so corpus files stay
// readable):
//   '0' IamPolicy::Parse, then Evaluate for a few requests and IsPublic
//   '1' ParseAccessControlPolicy, then Render -> Parse and JSON round trips
//   '2' AclFromGrantHeaders (the rest is every x-amz-grant-* header's value)
//   '3' ParseOwnershipControls / ParsePublicAccessBlock, then Render -> Parse
// Beyond "no crash, no leak, no UB", it checks the contracts: errors carry a message and an S3
// code other than InternalError, what parses satisfies the limits and round-trips unchanged.
//
// Build: cmake --preset fuzz && cmake --build build-fuzz --target s3_access_fuzzer
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.h"
#include "objstore/acl.h"
#include "objstore/bucket_access.h"
#include "objstore/iam_policy.h"

namespace {

using namespace sovai::objstore;

template <class T>
bool Check(const S3Result<T>& r) {
  if (r.ok()) return true;
  SOVAI_CHECK(!r.error().message.empty());
  SOVAI_CHECK(r.error().code != S3Code::kInternalError) << r.error().ToString();
  return false;
}

AclResolver Resolver() {
  AclResolver r;
  r.user_exists = [](std::string_view id) { return id == "alice" || id == "bob"; };
  r.user_by_email = [](std::string_view email) -> std::optional<std::string> {
    if (email == "bob@example.com") return std::string("bob");
    return std::nullopt;
  };
  return r;
}

void FuzzPolicy(std::string_view text) {
  auto p = IamPolicy::Parse(text, "bucket");
  if (!Check(p)) return;
  SOVAI_CHECK(text.size() <= kMaxPolicyBytes);
  for (const char* user : {"", "alice", "bob"}) {
    for (const char* action : {"s3:GetObject", "s3:PutObject", "s3:ListBucket"}) {
      PolicyRequest r;
      r.user = user;
      r.anonymous = r.user.empty();
      r.action = action;
      r.resource = "arn:aws:s3:::bucket/key";
      r.Set("aws:SourceIp", "10.1.2.3");
      r.Set("aws:SecureTransport", "false");
      r.Set("s3:prefix", "home/");
      r.Set("s3:max-keys", "10");
      r.Set("aws:CurrentTime", "2026-12-01T00:00:00Z");
      r.Set("s3:ExistingObjectTag/team", "ml");
      (void)p->Evaluate(r);
    }
  }
  (void)p->IsPublic();
}

void FuzzAclBody(std::string_view text) {
  auto acl = ParseAccessControlPolicy(text, "alice", Resolver());
  if (!Check(acl)) return;
  SOVAI_CHECK(acl->grants.size() <= kMaxAclGrants);
  auto again = ParseAccessControlPolicy(RenderAccessControlPolicy(*acl), "alice", Resolver());
  SOVAI_CHECK(again.ok()) << again.error().ToString();
  SOVAI_CHECK(*again == *acl);
  auto stored = AclFromJson(AclToJson(*acl));
  SOVAI_CHECK(stored.has_value() && *stored == *acl);
}

void FuzzGrantHeaders(std::string_view value) {
  auto acl = AclFromGrantHeaders(
      [&](std::string_view) -> std::optional<std::string_view> { return value; }, "alice",
      Resolver());
  if (!Check(acl)) return;
  SOVAI_CHECK(acl->has_value());
  SOVAI_CHECK((*acl)->grants.size() <= kMaxAclGrants);
}

void FuzzBucketAccess(std::string_view text) {
  auto o = ParseOwnershipControls(text);
  if (Check(o)) {
    auto again = ParseOwnershipControls(RenderOwnershipControls(*o));
    SOVAI_CHECK(again.ok() && *again == *o);
  }
  auto pab = ParsePublicAccessBlock(text);
  if (Check(pab)) {
    SOVAI_CHECK(PublicAccessBlockFromStored(RenderPublicAccessBlock(*pab)) == *pab);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0]) {
    case '0':
      FuzzPolicy(rest);
      break;
    case '1':
      FuzzAclBody(rest);
      break;
    case '2':
      FuzzGrantHeaders(rest);
      break;
    case '3':
      FuzzBucketAccess(rest);
      break;
    default:
      break;
  }
  return 0;
}
