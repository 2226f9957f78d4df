// The routing table (s3_routes.h): its invariants, and the routes that once went wrong (issue 29:
// `PUT ?retention` reached PutObject and replaced the object's bytes with the XML).
#include "objstore/s3_routes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

namespace sovai::objstore {
namespace {

using Query = std::vector<std::pair<std::string, std::string>>;

S3Route Route(std::string_view method, S3Level level, Query query = {}) {
  return RouteS3Request(method, level, query);
}

TEST(S3Routes, SubresourcesAreSortedAndUnique) {
  auto subs = S3Subresources();
  EXPECT_TRUE(std::is_sorted(subs.begin(), subs.end()));
  EXPECT_EQ(std::adjacent_find(subs.begin(), subs.end()), subs.end());
  EXPECT_EQ(subs.size(), 42u);
}

TEST(S3Routes, EveryRowIsReachableAndTheBareRowComesLast) {
  auto subs = S3Subresources();
  std::set<std::tuple<std::string, int, std::string>> seen;
  std::set<std::pair<std::string, int>> closed;  // (method, level) whose bare row was seen
  for (const S3RouteRow& row : S3RouteTable()) {
    const std::pair<std::string, int> group(std::string(row.method), static_cast<int>(row.level));
    EXPECT_FALSE(closed.contains(group)) << row.name << " comes after its bare row";
    if (row.subresource.empty()) {
      closed.insert(group);
    } else {
      EXPECT_NE(std::find(subs.begin(), subs.end(), row.subresource), subs.end()) << row.name;
    }
    EXPECT_TRUE(seen.emplace(group.first, group.second, std::string(row.subresource)).second)
        << row.name << " is routed twice";
    // Each row is what its own request reaches.
    Query q;
    if (!row.subresource.empty()) q.emplace_back(std::string(row.subresource), "");
    S3Route r = Route(row.method, row.level, q);
    if (row.op == S3Op::kNotImplemented) {
      EXPECT_EQ(r.op, S3Op::kNotImplemented) << row.name;
      EXPECT_NE(r.name.find(row.name), std::string::npos) << r.name;
    } else {
      EXPECT_EQ(r.op, row.op) << row.name;
      EXPECT_EQ(r.name, row.name);
    }
  }
}

TEST(S3Routes, UnimplementedSubresourcesNeverReachTheObject) {
  for (const char* sub :
       {"renameObject", "encryption", "restore", "torrent", "select", "versioning", "website"}) {
    for (const char* method : {"GET", "HEAD", "PUT", "POST", "DELETE"}) {
      S3Route r = Route(method, S3Level::kObject, {{sub, ""}});
      EXPECT_EQ(r.op, S3Op::kNotImplemented) << method << " ?" << sub << ": " << r.name;
    }
  }
  S3Route rename = Route("PUT", S3Level::kObject, {{"renameObject", ""}});
  EXPECT_EQ(rename.name, "RenameObject (PUT ?renameObject) is not implemented by this server");
  // Object Lock and GetObjectAttributes are their own operations, never the object's.
  EXPECT_EQ(Route("PUT", S3Level::kObject, {{"retention", ""}}).op, S3Op::kObjectRetention);
  EXPECT_EQ(Route("GET", S3Level::kObject, {{"legal-hold", ""}, {"versionId", "v"}}).op,
            S3Op::kObjectLegalHold);
  EXPECT_EQ(Route("GET", S3Level::kObject, {{"attributes", ""}}).op, S3Op::kGetObjectAttributes);
  EXPECT_EQ(Route("DELETE", S3Level::kObject, {{"retention", ""}}).op, S3Op::kNotImplemented);
  EXPECT_EQ(Route("POST", S3Level::kObject, {{"legal-hold", ""}}).op, S3Op::kNotImplemented);
  EXPECT_EQ(Route("PUT", S3Level::kBucket, {{"lifecycle", ""}}).op, S3Op::kBucketLifecycle);
  S3Route torrent = Route("GET", S3Level::kObject, {{"torrent", ""}, {"versionId", "x"}});
  EXPECT_EQ(torrent.name, "GetObjectTorrent (GET ?torrent) is not implemented by this server");
}

TEST(S3Routes, SubresourcesTheOperationDoesNotTakeAreRefused) {
  // A second subresource is another operation, not a flag of the first one.
  S3Route both = Route("PUT", S3Level::kObject, {{"acl", ""}, {"retention", ""}});
  EXPECT_EQ(both.op, S3Op::kNotImplemented);
  EXPECT_EQ(both.name, "PUT ?retention (with PutObjectAcl) is not implemented by this server");
  EXPECT_EQ(Route("GET", S3Level::kBucket, {{"versionId", "v"}}).op, S3Op::kNotImplemented);
  EXPECT_EQ(Route("HEAD", S3Level::kBucket, {{"acl", ""}}).op, S3Op::kNotImplemented);
  // The parameters an operation does take.
  EXPECT_EQ(Route("GET", S3Level::kObject, {{"versionId", "v"}, {"partNumber", "2"}}).op,
            S3Op::kGetObject);
  EXPECT_EQ(Route("PUT", S3Level::kObject, {{"partNumber", "2"}, {"uploadId", "u"}}).op,
            S3Op::kUploadPart);
  EXPECT_EQ(Route("DELETE", S3Level::kObject, {{"versionId", "v"}}).op, S3Op::kDeleteObject);
  EXPECT_EQ(Route("PUT", S3Level::kObject, {{"tagging", ""}, {"versionId", "v"}}).op,
            S3Op::kObjectTagging);
}

TEST(S3Routes, UnknownPlainParametersAreIgnoredByReadsAndRefusedByWrites) {
  EXPECT_EQ(Route("GET", S3Level::kObject, {{"v", "2"}}).op, S3Op::kGetObject);
  EXPECT_EQ(Route("GET", S3Level::kBucket, {{"list-type", "2"}, {"prefix", "a"}}).op,
            S3Op::kListObjects);
  for (const char* method : {"PUT", "DELETE"}) {
    for (S3Level level : {S3Level::kBucket, S3Level::kObject}) {
      S3Route r = Route(method, level, {{"v", "2"}});
      EXPECT_EQ(r.op, S3Op::kNotImplemented) << method;
      EXPECT_NE(r.name.find(std::string(method) + " ?v"), std::string::npos) << r.name;
    }
  }
  EXPECT_EQ(Route("POST", S3Level::kObject, {{"v", "2"}}).op, S3Op::kNotImplemented);
}

TEST(S3Routes, SignatureAndCallerParametersSelectNothing) {
  Query presigned = {{"X-Amz-Algorithm", "AWS4-HMAC-SHA256"},
                     {"X-Amz-Signature", "abc"},
                     {"x-sovai-origin", "http://127.0.0.1:8080"},
                     {"x-id", "PutObject"},
                     {"AWSAccessKeyId", "AK"},
                     {"Signature", "sig"},
                     {"Expires", "1"}};
  EXPECT_EQ(Route("PUT", S3Level::kBucket, presigned).op, S3Op::kCreateBucket);
  EXPECT_EQ(Route("DELETE", S3Level::kBucket, presigned).op, S3Op::kDeleteBucket);
  EXPECT_EQ(Route("PUT", S3Level::kObject, presigned).op, S3Op::kPutObject);
}

TEST(S3Routes, MethodsWithoutAnOperation) {
  EXPECT_EQ(Route("PUT", S3Level::kService).op, S3Op::kMethodNotAllowed);
  EXPECT_EQ(Route("PATCH", S3Level::kObject).op, S3Op::kMethodNotAllowed);
  EXPECT_EQ(Route("POST", S3Level::kObject).op, S3Op::kMethodNotAllowed);
  // A subresource names an operation even on a method this level does not have.
  EXPECT_EQ(Route("PATCH", S3Level::kObject, {{"retention", ""}}).op, S3Op::kNotImplemented);
  // A POST on the bucket without a subresource is a browser form upload.
  EXPECT_EQ(Route("POST", S3Level::kBucket).op, S3Op::kPostObject);
  EXPECT_EQ(Route("POST", S3Level::kBucket, {{"delete", ""}}).op, S3Op::kDeleteObjects);
}

}  // namespace
}  // namespace sovai::objstore
