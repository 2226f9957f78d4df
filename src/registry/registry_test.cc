// The /v2/ API over a real net::Server and object store: each handler's answers, its malformed
// inputs and the authorization rules.
#include "registry/registry.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "registry/internal/test_fixture.h"

namespace sovai::registry {
namespace {

using testing::RegistryFixture;
using testing::Sha256Digest;

class RegistryTest : public RegistryFixture {};

TEST_F(RegistryTest, BaseNeedsAuthAndSendsTheBearerChallenge) {
  auto anonymous = Call("GET", "/v2/", "", "");
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_EQ(Code(anonymous), "UNAUTHORIZED");
  std::string challenge(anonymous.headers.Get("WWW-Authenticate").value_or(""));
  EXPECT_NE(challenge.find("Bearer realm=\"http://"), std::string::npos) << challenge;
  EXPECT_NE(challenge.find("/auth/token\",service=\"sovai-registry\""), std::string::npos);
  EXPECT_EQ(anonymous.headers.Get("Docker-Distribution-API-Version").value_or(""), "registry/2.0");
  auto scoped = Call("GET", "/v2/alpha/img/manifests/latest", "", "");
  EXPECT_NE(std::string(scoped.headers.Get("WWW-Authenticate").value_or(""))
                .find("scope=\"repository:alpha/img:pull\""),
            std::string::npos);
  EXPECT_EQ(Call("GET", "/v2/", "", "wrong").status, 401);
  EXPECT_EQ(Call("GET", "/v2/").status, 200);
}

TEST_F(RegistryTest, TokenEndpointIssuesBearerTokens) {
  EXPECT_EQ(Call("GET", "/auth/token?service=sovai-registry", "", "").status, 401);
  auto res = Call("GET", "/auth/token?service=sovai-registry&scope=repository:alpha/x:pull");
  ASSERT_EQ(res.status, 200) << res.body;
  auto doc = nlohmann::json::parse(res.body);
  std::string token = doc["token"];
  EXPECT_EQ(doc["access_token"], token);
  EXPECT_EQ(doc["expires_in"], 300);
  net::HttpClient client({.port = server_->port()});
  net::ClientRequest req;
  req.target = "/v2/";
  req.headers.Set("Authorization", "Bearer " + token);
  auto v2 = client.Send(req);
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->status, 200);
  req.headers.Set("Authorization", "Bearer " + token + "x");
  EXPECT_EQ(client.Send(req)->status, 401);
}

TEST_F(RegistryTest, MonolithicBlobAndRanges) {
  std::string bytes = "0123456789abcdef";
  std::string digest = PushBlob("alpha/img", bytes);
  auto head = Call("HEAD", "/v2/alpha/img/blobs/" + digest);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers.Get("Content-Length").value_or(""), "16");
  EXPECT_EQ(head.headers.Get("Docker-Content-Digest").value_or(""), digest);
  auto get = Call("GET", "/v2/alpha/img/blobs/" + digest);
  EXPECT_EQ(get.body, bytes);
  // Blobs are shared by the project's repositories, readable with a read token.
  EXPECT_EQ(Call("GET", "/v2/alpha/other/blobs/" + digest, "", "tok-alpha-read").body, bytes);
  auto part =
      Call("GET", "/v2/alpha/img/blobs/" + digest, "", "tok-alpha-op", {{"Range", "bytes=2-5"}});
  EXPECT_EQ(part.status, 206);
  EXPECT_EQ(part.body, "2345");
  EXPECT_EQ(part.headers.Get("Content-Range").value_or(""), "bytes 2-5/16");
  auto bad =
      Call("GET", "/v2/alpha/img/blobs/" + digest, "", "tok-alpha-op", {{"Range", "bytes=99-"}});
  EXPECT_EQ(bad.status, 416);
  auto missing = Call("GET", "/v2/alpha/img/blobs/" + Sha256Digest("nothing"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Code(missing), "BLOB_UNKNOWN");
  // A wrong digest stores nothing.
  auto wrong = Call("POST", "/v2/alpha/img/blobs/uploads/?digest=" + Sha256Digest("other"), "abc");
  EXPECT_EQ(wrong.status, 400);
  EXPECT_EQ(Code(wrong), "DIGEST_INVALID");
  EXPECT_EQ(Call("HEAD", "/v2/alpha/img/blobs/" + Sha256Digest("abc")).status, 404);
  EXPECT_EQ(registry_->storage().open_uploads(), 0u);
}

TEST_F(RegistryTest, ChunkedUploadWithContentRangeStatusAndFinalChunk) {
  auto start = Call("POST", "/v2/alpha/img/blobs/uploads/");
  ASSERT_EQ(start.status, 202) << start.body;
  std::string location(start.headers.Get("Location").value_or(""));
  ASSERT_TRUE(location.starts_with("/v2/alpha/img/blobs/uploads/")) << location;
  EXPECT_EQ(start.headers.Get("Range").value_or(""), "0-0");
  auto c1 = Call("PATCH", location, "hello ", "tok-alpha-op", {{"Content-Range", "0-5"}});
  EXPECT_EQ(c1.status, 202) << c1.body;
  EXPECT_EQ(c1.headers.Get("Range").value_or(""), "0-5");
  auto gap = Call("PATCH", location, "xx", "tok-alpha-op", {{"Content-Range", "9-10"}});
  EXPECT_EQ(gap.status, 416);
  EXPECT_EQ(gap.headers.Get("Range").value_or(""), "0-5");
  auto c2 = Call("PATCH", location, "chunked ");  // stream mode: no Content-Range
  EXPECT_EQ(c2.status, 202);
  auto status = Call("GET", location);
  EXPECT_EQ(status.status, 204);
  EXPECT_EQ(status.headers.Get("Range").value_or(""), "0-13");
  std::string whole = "hello chunked world";
  auto done = Call("PUT", location + "?digest=" + Sha256Digest(whole), "world");
  ASSERT_EQ(done.status, 201) << done.body;
  EXPECT_EQ(done.headers.Get("Docker-Content-Digest").value_or(""), Sha256Digest(whole));
  EXPECT_EQ(Call("GET", "/v2/alpha/img/blobs/" + Sha256Digest(whole)).body, whole);
  // The upload is over.
  EXPECT_EQ(Code(Call("GET", location)), "BLOB_UPLOAD_UNKNOWN");
}

TEST_F(RegistryTest, Sha512DigestsAndEmptyBlobs) {
  std::string bytes = "sha512 bytes";
  std::string digest = "sha512:" + base::HexEncode(base::Sha512(bytes));
  auto res = Call("POST", "/v2/alpha/img/blobs/uploads/?digest=" + digest, bytes);
  ASSERT_EQ(res.status, 201) << res.body;
  EXPECT_EQ(Call("GET", "/v2/alpha/img/blobs/" + digest).body, bytes);
  auto start = Call("POST", "/v2/alpha/img/blobs/uploads/");
  std::string location(start.headers.Get("Location").value_or(""));
  auto empty = Call("PUT", location + "?digest=" + Sha256Digest(""));
  ASSERT_EQ(empty.status, 201) << empty.body;
  auto head = Call("HEAD", "/v2/alpha/img/blobs/" + Sha256Digest(""));
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers.Get("Content-Length").value_or(""), "0");
}

TEST_F(RegistryTest, CancelledAndWrongDigestUploadsLeaveNoBlob) {
  auto start = Call("POST", "/v2/alpha/img/blobs/uploads/");
  std::string location(start.headers.Get("Location").value_or(""));
  EXPECT_EQ(Call("PATCH", location, "partial").status, 202);
  EXPECT_EQ(Call("DELETE", location).status, 204);
  EXPECT_EQ(Code(Call("PATCH", location, "more")), "BLOB_UPLOAD_UNKNOWN");
  EXPECT_EQ(Call("HEAD", "/v2/alpha/img/blobs/" + Sha256Digest("partial")).status, 404);

  start = Call("POST", "/v2/alpha/img/blobs/uploads/");
  location = std::string(start.headers.Get("Location").value_or(""));
  EXPECT_EQ(Call("PATCH", location, "abc").status, 202);
  auto wrong = Call("PUT", location + "?digest=" + Sha256Digest("abd"));
  EXPECT_EQ(Code(wrong), "DIGEST_INVALID");
  EXPECT_EQ(Call("HEAD", "/v2/alpha/img/blobs/" + Sha256Digest("abc")).status, 404);
  EXPECT_EQ(Call("HEAD", "/v2/alpha/img/blobs/" + Sha256Digest("abd")).status, 404);
}

TEST_F(RegistryTest, ExpiredUploadsAreReclaimed) {
  auto start = Call("POST", "/v2/alpha/img/blobs/uploads/");
  std::string location(start.headers.Get("Location").value_or(""));
  EXPECT_EQ(Call("PATCH", location, "abandoned").status, 202);
  EXPECT_EQ(registry_->storage().ReclaimExpiredUploads(env_.NowUnixMicros()), 0u);
  clock_.Advance(601ll * 1000000);
  EXPECT_EQ(registry_->storage().ReclaimExpiredUploads(env_.NowUnixMicros()), 1u);
  EXPECT_EQ(Code(Call("GET", location)), "BLOB_UPLOAD_UNKNOWN");
  bool truncated = false;
  auto left = store_->ListUploads("sovai-registry", {}, &truncated);
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

TEST_F(RegistryTest, ManifestsByTagAndDigestWithNegotiation) {
  std::string digest = PushImage("alpha/img", "v1");
  auto by_tag = Call("GET", "/v2/alpha/img/manifests/v1", "", "tok-alpha-read",
                     {{"Accept", "application/vnd.oci.image.manifest.v1+json"}});
  ASSERT_EQ(by_tag.status, 200) << by_tag.body;
  EXPECT_EQ(by_tag.headers.Get("Content-Type").value_or(""),
            "application/vnd.oci.image.manifest.v1+json");
  EXPECT_EQ(by_tag.headers.Get("Docker-Content-Digest").value_or(""), digest);
  EXPECT_EQ(Sha256Digest(by_tag.body), digest);
  auto by_digest = Call("GET", "/v2/alpha/img/manifests/" + digest);
  EXPECT_EQ(by_digest.body, by_tag.body);
  auto head = Call("HEAD", "/v2/alpha/img/manifests/v1");
  EXPECT_EQ(head.headers.Get("Content-Length").value_or(""), std::to_string(by_tag.body.size()));
  auto refused = Call("GET", "/v2/alpha/img/manifests/v1", "", "tok-alpha-op",
                      {{"Accept", "application/vnd.docker.distribution.manifest.v2+json"}});
  EXPECT_EQ(refused.status, 404);
  EXPECT_EQ(Code(refused), "MANIFEST_UNKNOWN");
  EXPECT_EQ(Code(Call("GET", "/v2/alpha/img/manifests/v2")), "MANIFEST_UNKNOWN");
  EXPECT_EQ(Code(Call("GET", "/v2/alpha/nothing/manifests/v1")), "MANIFEST_UNKNOWN");
}

TEST_F(RegistryTest, ManifestsNamingMissingBlobsOrWrongDigestsAreRefused) {
  std::string config = "{}";
  std::string cd = PushBlob("alpha/img", config);
  std::string manifest = ImageManifest(cd, 2, Sha256Digest("never pushed"), 12);
  auto res = Call("PUT", "/v2/alpha/img/manifests/v1", manifest, "tok-alpha-op",
                  {{"Content-Type", "application/vnd.oci.image.manifest.v1+json"}});
  EXPECT_EQ(res.status, 400);
  EXPECT_EQ(Code(res), "MANIFEST_BLOB_UNKNOWN");
  EXPECT_EQ(Call("GET", "/v2/alpha/img/manifests/v1").status, 404);
  // Another project's blob does not count.
  std::string ld = PushBlob("beta/img", "beta layer", "tok-beta-op");
  manifest = ImageManifest(cd, 2, ld, 10);
  EXPECT_EQ(Code(Call("PUT", "/v2/alpha/img/manifests/v1", manifest)), "MANIFEST_BLOB_UNKNOWN");
  // A wrong size, a wrong digest in the reference.
  std::string ok_layer = PushBlob("alpha/img", "layer");
  EXPECT_EQ(Code(Call("PUT", "/v2/alpha/img/manifests/v1", ImageManifest(cd, 2, ok_layer, 99))),
            "MANIFEST_INVALID");
  manifest = ImageManifest(cd, 2, ok_layer, 5);
  EXPECT_EQ(Code(Call("PUT", "/v2/alpha/img/manifests/" + Sha256Digest("x"), manifest)),
            "DIGEST_INVALID");
  auto by_digest = Call("PUT", "/v2/alpha/img/manifests/" + Sha256Digest(manifest), manifest);
  EXPECT_EQ(by_digest.status, 201);
  std::string sha512 = "sha512:" + base::HexEncode(base::Sha512(manifest));
  EXPECT_EQ(Call("PUT", "/v2/alpha/img/manifests/" + sha512, manifest).status, 201);
  EXPECT_EQ(Call("GET", "/v2/alpha/img/manifests/" + sha512).body, manifest);
}

TEST_F(RegistryTest, MalformedInputsGetTheSpecsCodes) {
  EXPECT_EQ(Code(Call("GET", "/v2/Alpha/img/tags/list")), "NAME_INVALID");
  EXPECT_EQ(Code(Call("GET", "/v2/img/tags/list")), "NAME_INVALID");  // no project component
  EXPECT_EQ(Code(Call("GET", "/v2/alpha/img/blobs/sha256:abc")), "DIGEST_INVALID");
  EXPECT_EQ(Code(Call("PUT", "/v2/alpha/img/manifests/-bad", "{}")), "TAG_INVALID");
  EXPECT_EQ(Code(Call("PUT", "/v2/alpha/img/manifests/v1", "not json")), "MANIFEST_INVALID");
  EXPECT_EQ(Code(Call("PUT", "/v2/alpha/img/manifests/sha256:12", "{}")), "MANIFEST_INVALID");
  auto huge = Call("PUT", "/v2/alpha/img/manifests/v1", std::string(5 << 20, ' '));
  EXPECT_EQ(huge.status, 413);
  EXPECT_EQ(Code(Call("GET", "/v2/alpha/img/tags/list?n=x")), "PAGINATION_NUMBER_INVALID");
  EXPECT_EQ(Code(Call("GET", "/v2/alpha/img/tags/list")), "NAME_UNKNOWN");
  EXPECT_EQ(Code(Call("PATCH", "/v2/alpha/img/blobs/uploads/nope", "x")), "BLOB_UPLOAD_UNKNOWN");
  EXPECT_EQ(Code(Call("POST", "/v2/alpha/img/blobs/uploads/?digest=md5:1", "x")), "DIGEST_INVALID");
  auto start = Call("POST", "/v2/alpha/img/blobs/uploads/");
  std::string location(start.headers.Get("Location").value_or(""));
  EXPECT_EQ(Code(Call("PATCH", location, "abc", "tok-alpha-op", {{"Content-Range", "zz"}})),
            "BLOB_UPLOAD_INVALID");
  EXPECT_EQ(Code(Call("PATCH", location, "abc", "tok-alpha-op", {{"Content-Range", "0-9"}})),
            "BLOB_UPLOAD_INVALID");
  EXPECT_EQ(Code(Call("PUT", location, "")), "DIGEST_INVALID");
  EXPECT_EQ(Call("PUT", "/v2/alpha/img/blobs/" + Sha256Digest("x"), "x").status, 405);
  EXPECT_EQ(Call("POST", "/v2/alpha/img/tags/list").status, 405);
}

TEST_F(RegistryTest, AnotherProjectIsDeniedAndReadTokensCannotPush) {
  std::string digest = PushImage("alpha/img", "v1");
  for (auto [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/v2/alpha/img/manifests/v1"},
           {"GET", "/v2/alpha/img/tags/list"},
           {"POST", "/v2/alpha/img/blobs/uploads/"},
           {"PUT", "/v2/alpha/img/manifests/v2"},
           {"DELETE", "/v2/alpha/img/manifests/" + digest}}) {
    auto res = Call(method, target, "", "tok-beta-op");
    EXPECT_EQ(res.status, 403) << method << " " << target;
    EXPECT_EQ(Code(res), "DENIED");
  }
  auto push = Call("POST", "/v2/alpha/img/blobs/uploads/", "", "tok-alpha-read");
  EXPECT_EQ(push.status, 403);
  EXPECT_EQ(Code(push), "DENIED");
  EXPECT_EQ(Call("GET", "/v2/alpha/img/manifests/v1", "", "tok-admin").status, 200);
}

TEST_F(RegistryTest, TagsPaginationCatalogAndDeletes) {
  std::string digest = PushImage("alpha/img", "b");
  std::string manifest = Call("GET", "/v2/alpha/img/manifests/b").body;
  for (const char* tag : {"a", "c"}) {
    EXPECT_EQ(Call("PUT", std::string("/v2/alpha/img/manifests/") + tag, manifest).status, 201);
  }
  auto page = Call("GET", "/v2/alpha/img/tags/list?n=2");
  EXPECT_EQ(nlohmann::json::parse(page.body)["tags"], nlohmann::json({"a", "b"}));
  EXPECT_EQ(page.headers.Get("Link").value_or(""),
            "</v2/alpha/img/tags/list?n=2&last=b>; rel=\"next\"");
  auto rest = Call("GET", "/v2/alpha/img/tags/list?n=2&last=b");
  EXPECT_EQ(nlohmann::json::parse(rest.body)["tags"], nlohmann::json({"c"}));
  EXPECT_FALSE(rest.headers.Has("Link"));

  PushBlob("beta/x", "b", "tok-beta-op");
  std::string beta_manifest =
      ImageManifest(PushBlob("beta/x", "{}", "tok-beta-op"), 2, Sha256Digest("b"), 1);
  EXPECT_EQ(Call("PUT", "/v2/beta/x/manifests/t", beta_manifest, "tok-beta-op").status, 201);
  auto all = Call("GET", "/v2/_catalog", "", "tok-admin");
  EXPECT_EQ(nlohmann::json::parse(all.body)["repositories"],
            nlohmann::json({"alpha/img", "beta/x"}));
  auto own = Call("GET", "/v2/_catalog", "", "tok-alpha-read");
  EXPECT_EQ(nlohmann::json::parse(own.body)["repositories"], nlohmann::json({"alpha/img"}));

  EXPECT_EQ(Call("DELETE", "/v2/alpha/img/manifests/a").status, 202);
  EXPECT_EQ(Call("GET", "/v2/alpha/img/manifests/a").status, 404);
  EXPECT_EQ(Call("DELETE", "/v2/alpha/img/manifests/" + digest).status, 202);
  EXPECT_EQ(Call("GET", "/v2/alpha/img/manifests/c").status, 404);  // its tags went with it
  EXPECT_EQ(Code(Call("DELETE", "/v2/alpha/img/manifests/" + digest)), "MANIFEST_UNKNOWN");
}

TEST_F(RegistryTest, CrossRepositoryMountAndIndexes) {
  std::string digest = PushImage("alpha/img", "v1");
  std::string layer = Sha256Digest("layer bytes");
  auto mount = Call("POST", "/v2/alpha/copy/blobs/uploads/?mount=" + layer + "&from=alpha/img");
  EXPECT_EQ(mount.status, 201);
  EXPECT_EQ(mount.headers.Get("Location").value_or(""), "/v2/alpha/copy/blobs/" + layer);
  // From another project the blob is not there: an ordinary upload starts instead.
  auto foreign = Call("POST", "/v2/beta/x/blobs/uploads/?mount=" + layer + "&from=alpha/img", "",
                      "tok-beta-op");
  EXPECT_EQ(foreign.status, 202);

  std::string manifest = Call("GET", "/v2/alpha/img/manifests/v1").body;
  std::string size = std::to_string(manifest.size());
  auto index = [&](const std::string& d) {
    return R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json",)"
           R"("manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" +
           d + R"(","size":)" + size + "}]}";
  };
  EXPECT_EQ(Code(Call("PUT", "/v2/alpha/img/manifests/multi", index(Sha256Digest("none")))),
            "MANIFEST_BLOB_UNKNOWN");
  EXPECT_EQ(Code(Call("PUT", "/v2/alpha/copy/manifests/multi", index(digest))),
            "MANIFEST_BLOB_UNKNOWN");  // the child manifest is in another repository
  auto ok = Call("PUT", "/v2/alpha/img/manifests/multi", index(digest), "tok-alpha-op",
                 {{"Content-Type", "application/vnd.oci.image.index.v1+json"}});
  EXPECT_EQ(ok.status, 201) << ok.body;
  EXPECT_EQ(Call("GET", "/v2/alpha/img/manifests/multi").headers.Get("Content-Type").value_or(""),
            "application/vnd.oci.image.index.v1+json");
}

TEST_F(RegistryTest, GarbageCollectionRemovesOnlyUnreferencedBlobs) {
  PushImage("alpha/img", "v1");
  std::string orphan = PushBlob("alpha/img", "nobody references me");
  std::string beta_orphan = PushBlob("beta/x", "beta orphan", "tok-beta-op");
  // Young blobs are left alone by default; this collection runs with min_age_s=0.
  auto young = Call("POST", "/sovai/registry/v1/gc?dry_run=false", "", "tok-alpha-op");
  EXPECT_EQ(nlohmann::json::parse(young.body)["removed"].size(), 0u);
  auto dry = Call("POST", "/sovai/registry/v1/gc?min_age_s=0", "", "tok-alpha-op");
  ASSERT_EQ(dry.status, 200) << dry.body;
  auto report = nlohmann::json::parse(dry.body);
  EXPECT_TRUE(report["dry_run"]);
  ASSERT_EQ(report["removed"].size(), 1u);  // alpha's only: an operator collects its project
  EXPECT_EQ(report["removed"][0]["digest"], orphan);
  EXPECT_EQ(Call("HEAD", "/v2/alpha/img/blobs/" + orphan).status, 200);
  EXPECT_EQ(Call("POST", "/sovai/registry/v1/gc?project=beta", "", "tok-alpha-op").status, 403);
  EXPECT_EQ(Call("POST", "/sovai/registry/v1/gc", "", "tok-alpha-read").status, 403);

  auto real = Call("POST", "/sovai/registry/v1/gc?min_age_s=0&dry_run=false", "", "tok-admin");
  report = nlohmann::json::parse(real.body);
  EXPECT_EQ(report["removed"].size(), 2u);
  EXPECT_EQ(report["kept_blobs"], 2);
  EXPECT_EQ(Call("HEAD", "/v2/alpha/img/blobs/" + orphan).status, 404);
  EXPECT_EQ(Call("HEAD", "/v2/beta/x/blobs/" + beta_orphan, "", "tok-beta-op").status, 404);
  // The image is whole.
  EXPECT_EQ(Call("GET", "/v2/alpha/img/manifests/v1").status, 200);
  EXPECT_EQ(Call("GET", "/v2/alpha/img/blobs/" + Sha256Digest("layer bytes")).body, "layer bytes");
}

// Billing's view (docs/billing.md): a blob shared by two repositories of a project counts once,
// in the first by name; blobs no manifest references are the project's unreferenced bytes.
TEST_F(RegistryTest, UsageCountsEachBlobOnceInTheFirstRepositoryThatReferencesIt) {
  const std::string config = R"({"architecture":"amd64","os":"linux"})";
  const std::string layer = "layer bytes";
  const std::string manifest =
      ImageManifest(Sha256Digest(config), config.size(), Sha256Digest(layer), layer.size());
  PushImage("alpha/zeta", "v1");
  PushImage("alpha/img", "v1");  // the same blobs: alpha/img comes first by name
  const std::string orphan = "nobody references me";
  PushBlob("alpha/img", orphan);
  auto usage = registry_->storage().Usage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  std::map<std::string, uint64_t> bytes;
  for (const RepositoryUsage& u : *usage) {
    EXPECT_EQ(u.project, "alpha");
    bytes[u.repository] = u.bytes;
  }
  EXPECT_EQ(bytes, (std::map<std::string, uint64_t>{
                       {"", orphan.size()},
                       {"alpha/img", manifest.size() + config.size() + layer.size()},
                       {"alpha/zeta", manifest.size()}}));
  // Once the first repository's manifest is gone, the next one holds the blobs.
  ASSERT_EQ(Call("DELETE", "/v2/alpha/img/manifests/" + Sha256Digest(manifest), "", "tok-alpha-op")
                .status,
            202);
  usage = registry_->storage().Usage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  bytes.clear();
  for (const RepositoryUsage& u : *usage) bytes[u.repository] = u.bytes;
  EXPECT_EQ(bytes, (std::map<std::string, uint64_t>{
                       {"", orphan.size()},
                       {"alpha/zeta", manifest.size() + config.size() + layer.size()}}));
}

}  // namespace
}  // namespace sovai::registry
