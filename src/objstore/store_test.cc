#include "objstore/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "base/crypto.h"
#include "objstore/data_file.h"
#include "objstore/store_test_util.h"

namespace sovai::objstore {
namespace {

namespace fs = std::filesystem;
using store_testing::kBodyPieceBytes;
using store_testing::Pattern;

// A body that fails after some bytes, like a client that disconnects.
class FailingBody final : public net::BodyReader {
 public:
  base::Result<size_t> Read(char* buf, size_t n) override {
    if (sent_ >= 300000) return base::UnavailableError("client closed the connection");
    n = std::min<size_t>(n, 100000);
    std::memset(buf, 'x', n);
    sent_ += n;
    return n;
  }

 private:
  size_t sent_ = 0;
};

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("sovai-store-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    Reopen();
    ASSERT_TRUE(store_->CreateBucket("b", "alice").ok());
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(root_);
  }
  void Reopen() {
    store_.reset();
    StoreOptions o;
    o.root = root_.string();
    auto s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }

  S3Result<ObjectVersion> PutBytes(const std::string& key, const std::string& data,
                                   PutOptions o = {}, uint32_t checksums = 0) {
    net::StringBodyReader body(data, kBodyPieceBytes);
    auto staged = store_->Stage(body, {.checksums = checksums});
    if (!staged.ok()) return staged.error();
    o.bucket = o.bucket.empty() ? "b" : o.bucket;
    o.key = key;
    o.owner = "alice";
    return store_->Put(o, std::move(*staged));
  }

  std::string ReadAll(const ObjectVersion& v, uint64_t offset = 0,
                      std::optional<uint64_t> length = std::nullopt) {
    auto r = store_->Open(v, offset, length.value_or(v.size - offset));
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().ToString());
    if (!r.ok()) return {};
    std::string out;
    char buf[50000];
    for (;;) {
      auto n = (*r)->Read(buf, sizeof buf);
      EXPECT_TRUE(n.ok()) << n.status();
      if (!n.ok() || *n == 0) break;
      out.append(buf, *n);
    }
    return out;
  }

  std::string Get(const std::string& key) {
    auto v = store_->Head("b", key, std::nullopt);
    if (!v.ok()) return "<" + std::string(v.error().name()) + ">";
    return ReadAll(*v);
  }

  std::vector<std::string> Keys(const ListResult& r) {
    std::vector<std::string> out;
    for (const auto& o : r.objects) out.push_back(o.key);
    for (const auto& p : r.common_prefixes) out.push_back("P:" + p);
    return out;
  }

  size_t FilesUnder(const std::string& sub) {
    size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(root_ / sub)) n += e.is_regular_file();
    return n;
  }

  fs::path root_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, SmallObjectsAreInlineAndLargeOnesFileBacked) {
  std::string small = "hello";
  std::string large = Pattern(3 * 1024 * 1024 + 17, 1);
  auto a = PutBytes("small", small);
  auto b = PutBytes("large", large);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->inline_data);
  EXPECT_FALSE(b->inline_data);
  EXPECT_EQ(a->etag, "\"" + base::HexEncode(base::Md5(small)) + "\"");
  EXPECT_EQ(b->etag, "\"" + base::HexEncode(base::Md5(large)) + "\"");
  EXPECT_EQ(Get("small"), small);
  EXPECT_EQ(Get("large"), large);
  EXPECT_EQ(FilesUnder("data"), 1u);
  EXPECT_EQ(FilesUnder("tmp"), 0u);
  // Ranges across block boundaries.
  auto v = store_->Head("b", "large", std::nullopt);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(ReadAll(*v, 65530, 200000), large.substr(65530, 200000));
  EXPECT_EQ(ReadAll(*v, large.size() - 1, 1), large.substr(large.size() - 1));
  EXPECT_FALSE(store_->Open(*v, large.size(), 1).ok());
}

TEST_F(StoreTest, ChecksumsAreComputedAsS3EncodesThem) {
  // "hello world": CRC32 0x0d4a1185, CRC32C 0xc99465aa.
  auto v = PutBytes("k", "hello world", {}, kCrc32 | kCrc32c | kSha256);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->checksums.crc32, base::Base64Encode(std::string("\x0d\x4a\x11\x85", 4)));
  EXPECT_EQ(v->checksums.crc32c, base::Base64Encode(std::string("\xc9\x94\x65\xaa", 4)));
  EXPECT_EQ(v->checksums.sha256, base::Base64Encode(base::Sha256("hello world")));
  auto h = store_->Head("b", "k", std::nullopt);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->checksums.crc32c, v->checksums.crc32c);
  EXPECT_EQ(h->checksums.type, "FULL_OBJECT");
}

TEST_F(StoreTest, MetadataRoundTrips) {
  PutOptions o;
  o.meta.content_type = "text/csv";
  o.meta.cache_control = "max-age=60";
  o.meta.user = {{"origin", "lab"}, {"run", "7"}};
  o.meta.tags = {{"team", "nlp"}};
  ASSERT_TRUE(PutBytes("k", "a,b\n", o).ok());
  auto h = store_->Head("b", "k", std::nullopt);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->meta.content_type, "text/csv");
  EXPECT_EQ(h->meta.cache_control, "max-age=60");
  EXPECT_EQ(h->meta.user, o.meta.user);
  EXPECT_EQ(h->meta.tags, o.meta.tags);
  auto t = store_->SetTags("b", "k", std::nullopt, {{"a", "1"}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(store_->Head("b", "k", std::nullopt)->meta.tags.size(), 1u);
}

// The access documents are read from memory after the first read; every change, a deleted and
// re-created bucket, and a reopened store see the database's value.
TEST_F(StoreTest, BucketConfigsAndObjectAclsPersist) {
  using Configs = std::vector<std::pair<std::string, std::string>>;
  ASSERT_EQ(*store_->GetBucketConfigs("b"), Configs{});
  ASSERT_FALSE(store_->SetBucketConfig("b", "acl", "{\"owner\":\"alice\"}").has_value());
  ASSERT_FALSE(store_->SetBucketConfig("b", "policy", "{}").has_value());
  EXPECT_EQ(*store_->GetBucketConfigs("b"),
            (Configs{{"acl", "{\"owner\":\"alice\"}"}, {"policy", "{}"}}));
  ASSERT_FALSE(store_->SetBucketConfig("b", "policy", std::nullopt).has_value());
  EXPECT_EQ(*store_->GetBucketConfigs("b"), (Configs{{"acl", "{\"owner\":\"alice\"}"}}));
  EXPECT_EQ(store_->GetBucketConfigs("nope").error().code, S3Code::kNoSuchBucket);

  ASSERT_TRUE(PutBytes("k", "x").ok());
  auto set = store_->SetObjectAcl("b", "k", std::nullopt, "{\"grants\":[]}");
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->meta.acl, "{\"grants\":[]}");
  Reopen();
  EXPECT_EQ(store_->Head("b", "k", std::nullopt)->meta.acl, "{\"grants\":[]}");
  EXPECT_EQ(*store_->GetBucketConfigs("b"), (Configs{{"acl", "{\"owner\":\"alice\"}"}}));
  EXPECT_EQ(store_->SetObjectAcl("b", "missing", std::nullopt, "").error().code,
            S3Code::kNoSuchKey);
  ASSERT_TRUE(store_->Delete("b", "k", std::nullopt).ok());
  ASSERT_FALSE(store_->DeleteBucket("b").has_value());
  ASSERT_TRUE(store_->CreateBucket("b", "bob").ok());
  EXPECT_EQ(*store_->GetBucketConfigs("b"), Configs{}) << "a new bucket inherits nothing";
}

TEST_F(StoreTest, OverwriteReleasesTheOldFile) {
  ASSERT_TRUE(PutBytes("k", Pattern(500000, 1)).ok());
  ASSERT_TRUE(PutBytes("k", Pattern(600000, 2)).ok());
  EXPECT_EQ(Get("k"), Pattern(600000, 2));
  EXPECT_EQ(FilesUnder("data"), 1u);
  ASSERT_TRUE(store_->Delete("b", "k", std::nullopt).ok());
  EXPECT_EQ(Get("k"), "<NoSuchKey>");
  EXPECT_EQ(FilesUnder("data"), 0u);
}

TEST_F(StoreTest, MissingBucketAndKeyErrors) {
  EXPECT_EQ(store_->Head("nope", "k", std::nullopt).error().code, S3Code::kNoSuchBucket);
  EXPECT_EQ(store_->Head("b", "k", std::nullopt).error().code, S3Code::kNoSuchKey);
  EXPECT_EQ(store_->Head("b", "k", "x").error().code, S3Code::kNoSuchVersion);
  EXPECT_EQ(PutBytes("k", "x", {.bucket = "nope"}).error().code, S3Code::kNoSuchBucket);
  EXPECT_EQ(FilesUnder("tmp"), 0u);
}

TEST_F(StoreTest, BucketLifecycle) {
  EXPECT_EQ(store_->CreateBucket("b", "alice").error().code, S3Code::kBucketAlreadyOwnedByYou);
  EXPECT_EQ(store_->CreateBucket("b", "bob").error().code, S3Code::kBucketAlreadyExists);
  ASSERT_TRUE(PutBytes("k", "x").ok());
  EXPECT_EQ(store_->DeleteBucket("b")->code, S3Code::kBucketNotEmpty);
  ASSERT_TRUE(store_->SetBucketConfig("b", "cors", "<CORSConfiguration/>") == std::nullopt);
  EXPECT_EQ(**store_->GetBucketConfig("b", "cors"), "<CORSConfiguration/>");
  ASSERT_TRUE(store_->Delete("b", "k", std::nullopt).ok());
  EXPECT_EQ(store_->DeleteBucket("b"), std::nullopt);
  EXPECT_EQ(store_->GetBucket("b").error().code, S3Code::kNoSuchBucket);
  auto list = store_->ListBuckets();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

TEST_F(StoreTest, ConditionalWrites) {
  PutOptions create_only;
  create_only.if_none_match_star = true;
  ASSERT_TRUE(PutBytes("k", "v1", create_only).ok());
  auto again = PutBytes("k", "v2", create_only);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, S3Code::kPreconditionFailed);
  auto current = store_->Head("b", "k", std::nullopt);
  PutOptions match;
  match.if_match = "\"0000\"";
  EXPECT_EQ(PutBytes("k", "v3", match).error().code, S3Code::kPreconditionFailed);
  match.if_match = current->etag;
  EXPECT_TRUE(PutBytes("k", "v3", match).ok());
  match.if_match = "\"abc\"";
  EXPECT_EQ(PutBytes("missing", "v", match).error().code, S3Code::kNoSuchKey);
  EXPECT_EQ(Get("k"), "v3");
  // ETag lists, and both headers together (issue 29: some combinations answered 501).
  current = store_->Head("b", "k", std::nullopt);
  PutOptions lists;
  lists.if_match = "\"0000\", " + current->etag;
  lists.if_none_match = "\"1111\"";
  ASSERT_TRUE(PutBytes("k", "v4", lists).ok());
  current = store_->Head("b", "k", std::nullopt);
  PutOptions not_over;
  not_over.if_none_match = "\"1111\", W/" + current->etag;
  EXPECT_EQ(PutBytes("k", "v5", not_over).error().code, S3Code::kPreconditionFailed);
  PutOptions both;
  both.if_match = current->etag;
  both.if_none_match = "*";
  EXPECT_EQ(PutBytes("k", "v5", both).error().code, S3Code::kPreconditionFailed);
  EXPECT_EQ(Get("k"), "v4");
}

TEST_F(StoreTest, VersioningKeepsHistoryAndDeleteMarkers) {
  ASSERT_TRUE(PutBytes("k", "unversioned").ok());
  ASSERT_EQ(store_->SetVersioning("b", Versioning::kEnabled), std::nullopt);
  auto v1 = PutBytes("k", "one");
  auto v2 = PutBytes("k", "two");
  ASSERT_TRUE(v1.ok() && v2.ok());
  EXPECT_NE(v1->version_id, v2->version_id);
  EXPECT_TRUE(IsPlausibleVersionId(v1->version_id));
  EXPECT_EQ(Get("k"), "two");
  auto del = store_->Delete("b", "k", std::nullopt);
  ASSERT_TRUE(del.ok());
  EXPECT_TRUE(del->delete_marker);
  auto gone = store_->Head("b", "k", std::nullopt);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, S3Code::kNoSuchKey);
  EXPECT_EQ(ReadAll(*store_->Head("b", "k", v1->version_id)), "one");
  EXPECT_EQ(ReadAll(*store_->Head("b", "k", "null")), "unversioned");
  EXPECT_EQ(store_->Head("b", "k", del->version_id).error().code, S3Code::kMethodNotAllowed);

  auto versions = store_->ListVersions("b", {});
  ASSERT_TRUE(versions.ok());
  ASSERT_EQ(versions->versions.size(), 4u);  // marker, two, one, null — newest first
  EXPECT_TRUE(versions->versions[0].delete_marker);
  EXPECT_TRUE(versions->versions[0].is_latest);
  EXPECT_EQ(versions->versions[1].version_id, v2->version_id);
  EXPECT_EQ(versions->versions[3].version_id, "null");

  // Removing the marker brings "two" back; removing "two" makes "one" the latest.
  ASSERT_TRUE(store_->Delete("b", "k", del->version_id).ok());
  EXPECT_EQ(Get("k"), "two");
  ASSERT_TRUE(store_->Delete("b", "k", v2->version_id).ok());
  EXPECT_EQ(Get("k"), "one");
  EXPECT_TRUE(store_->List("b", {})->objects.size() == 1);
}

TEST_F(StoreTest, SuspendedVersioningWritesTheNullVersion) {
  ASSERT_EQ(store_->SetVersioning("b", Versioning::kEnabled), std::nullopt);
  auto kept = PutBytes("k", "kept");
  ASSERT_EQ(store_->SetVersioning("b", Versioning::kSuspended), std::nullopt);
  auto n1 = PutBytes("k", "null-1");
  auto n2 = PutBytes("k", "null-2");
  ASSERT_TRUE(n1.ok() && n2.ok());
  EXPECT_EQ(n2->version_id, "null");
  auto versions = store_->ListVersions("b", {});
  ASSERT_EQ(versions->versions.size(), 2u);  // null-2 replaced null-1
  EXPECT_EQ(ReadAll(*store_->Head("b", "k", kept->version_id)), "kept");
  auto del = store_->Delete("b", "k", std::nullopt);
  EXPECT_EQ(del->version_id, "null");
  EXPECT_TRUE(del->delete_marker);
  EXPECT_EQ(store_->ListVersions("b", {})->versions.size(), 2u);  // marker replaced null-2
}

TEST_F(StoreTest, ListingWithPrefixDelimiterAndPages) {
  for (const char* k : {"a", "dir/x", "dir/y", "dir/sub/z", "dir2/q", "e", "\xc3\xa9", "dir/"}) {
    ASSERT_TRUE(PutBytes(k, k).ok()) << k;
  }
  auto all = store_->List("b", {});
  EXPECT_EQ(Keys(*all), (std::vector<std::string>{"a", "dir/", "dir/sub/z", "dir/x", "dir/y",
                                                  "dir2/q", "e", "\xc3\xa9"}));
  auto top = store_->List("b", {.delimiter = "/"});
  EXPECT_EQ(Keys(*top), (std::vector<std::string>{"a", "e", "\xc3\xa9", "P:dir/", "P:dir2/"}));
  auto dir = store_->List("b", {.prefix = "dir/", .delimiter = "/"});
  EXPECT_EQ(Keys(*dir), (std::vector<std::string>{"dir/", "dir/x", "dir/y", "P:dir/sub/"}));

  // Paging two at a time visits every entry once, in order.
  std::vector<std::string> paged;
  ListOptions o{.delimiter = "/", .max_keys = 2};
  for (int page = 0; page < 10; ++page) {
    auto r = store_->List("b", o);
    ASSERT_TRUE(r.ok());
    auto k = Keys(*r);
    paged.insert(paged.end(), k.begin(), k.end());
    if (!r->truncated) break;
    o.after = r->next_marker;
  }
  std::vector<std::string> expected = {"a", "P:dir/", "P:dir2/", "e", "\xc3\xa9"};
  std::vector<std::string> sorted_paged = paged;
  EXPECT_EQ(paged.size(), expected.size());
  std::sort(sorted_paged.begin(), sorted_paged.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(sorted_paged, expected);

  // Deleted keys disappear; a prefix with only deleted keys is not listed.
  ASSERT_TRUE(store_->Delete("b", "dir2/q", std::nullopt).ok());
  EXPECT_EQ(Keys(*store_->List("b", {.delimiter = "/"})),
            (std::vector<std::string>{"a", "e", "\xc3\xa9", "P:dir/"}));
  EXPECT_TRUE(store_->List("b", {.max_keys = 0})->truncated);
}

TEST_F(StoreTest, ListVersionsPagesThroughManyVersionsOfOneKey) {
  ASSERT_EQ(store_->SetVersioning("b", Versioning::kEnabled), std::nullopt);
  std::vector<std::string> ids;
  for (int i = 0; i < 600; ++i) {
    auto v = PutBytes(i % 2 ? "k" : "j", std::to_string(i));
    ASSERT_TRUE(v.ok());
  }
  std::set<std::string> seen;
  ListVersionsOptions o{.max_keys = 77};
  int pages = 0;
  for (;; ++pages) {
    auto r = store_->ListVersions("b", o);
    ASSERT_TRUE(r.ok());
    for (const auto& v : r->versions) EXPECT_TRUE(seen.insert(v.key + "/" + v.version_id).second);
    if (!r->truncated) break;
    o.key_marker = r->next_key_marker;
    o.version_id_marker = r->next_version_id_marker;
  }
  EXPECT_EQ(seen.size(), 600u);
  EXPECT_EQ(pages, 7);
}

TEST_F(StoreTest, MultipartUploadAssemblesPartsWithoutCopying) {
  auto up =
      store_->CreateUpload("b", "big", "alice", {.content_type = "application/x-tar"}, "CRC32");
  ASSERT_TRUE(up.ok());
  std::string p1 = Pattern(kMinPartSize, 1), p2 = Pattern(kMinPartSize + 3, 2), p3 = "tail";
  std::vector<CompletePart> complete;
  int n = 0;
  for (const std::string* p : {&p1, &p2, &p3}) {
    ++n;
    net::StringBodyReader body(*p, 1 << 20);
    auto staged = store_->Stage(body, {.checksums = kCrc32, .allow_inline = false});
    ASSERT_TRUE(staged.ok());
    Checksums c = staged->checksums;
    auto part = store_->UploadPart(*up, n, std::move(*staged), c);
    ASSERT_TRUE(part.ok());
    complete.push_back({n, part->etag});
  }
  auto parts = store_->ListParts(*up);
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[2].size, 4u);
  bool truncated = true;
  auto uploads = store_->ListUploads("b", {}, &truncated);
  ASSERT_EQ(uploads->size(), 1u);
  EXPECT_FALSE(truncated);

  // Out of order, unknown part, wrong etag, a small part in the middle.
  EXPECT_EQ(store_->CompleteUpload(*up, {complete[1], complete[0]}, {}).error().code,
            S3Code::kInvalidPartOrder);
  EXPECT_EQ(store_->CompleteUpload(*up, {{9, complete[0].etag}}, {}).error().code,
            S3Code::kInvalidPart);
  EXPECT_EQ(store_->CompleteUpload(*up, {{1, "\"ffff\""}}, {}).error().code, S3Code::kInvalidPart);
  EXPECT_EQ(store_->CompleteUpload(*up, {complete[2]}, {}).ok(), true);
  // Completed: the upload is gone. Start again for the full object.
  EXPECT_EQ(store_->GetUpload("b", "big", up->upload_id).error().code, S3Code::kNoSuchUpload);
  EXPECT_EQ(Get("big"), "tail");

  auto up2 = store_->CreateUpload("b", "big", "alice", {}, "");
  std::string md5s;
  complete.clear();
  n = 0;
  for (const std::string* p : {&p1, &p3, &p2}) {  // a small part in the middle
    ++n;
    net::StringBodyReader body(*p, kBodyPieceBytes);
    auto staged = store_->Stage(body, {.allow_inline = false});
    auto part = store_->UploadPart(*up2, n, std::move(*staged), {});
    complete.push_back({n, part->etag});
    md5s += base::Md5(*p);
  }
  EXPECT_EQ(store_->CompleteUpload(*up2, complete, {}).error().code, S3Code::kEntityTooSmall);
  // Re-upload part 2 with a big body: the old part file is released.
  net::StringBodyReader body(p2, kBodyPieceBytes);
  auto staged = store_->Stage(body, {.allow_inline = false});
  auto part2 = store_->UploadPart(*up2, 2, std::move(*staged), {});
  ASSERT_TRUE(part2.ok());
  complete[1].etag = part2->etag;
  complete[2].etag = complete[2].etag;
  auto obj = store_->CompleteUpload(*up2, {complete[0], complete[1]}, {});
  ASSERT_TRUE(obj.ok()) << obj.error().ToString();
  EXPECT_EQ(obj->etag, "\"" + base::HexEncode(base::Md5(base::Md5(p1) + base::Md5(p2))) + "-2\"");
  EXPECT_EQ(obj->part_sizes, (std::vector<uint64_t>{p1.size(), p2.size()}));
  EXPECT_EQ(Get("big"), p1 + p2);
  auto v = store_->Head("b", "big", std::nullopt);
  EXPECT_EQ(ReadAll(*v, p1.size() - 10, 20), (p1 + p2).substr(p1.size() - 10, 20));
  // Only the two chosen parts remain on disk (part 3 and the replaced part 2 are gone).
  EXPECT_EQ(FilesUnder("data"), 2u);
  EXPECT_EQ(FilesUnder("tmp"), 0u);
}

TEST_F(StoreTest, AbortReleasesParts) {
  auto up = store_->CreateUpload("b", "k", "alice", {}, "");
  net::StringBodyReader body(Pattern(1000, 3), kBodyPieceBytes);
  auto staged = store_->Stage(body, {.allow_inline = false});
  ASSERT_TRUE(store_->UploadPart(*up, 1, std::move(*staged), {}).ok());
  EXPECT_EQ(FilesUnder("data"), 1u);
  EXPECT_EQ(store_->AbortUpload(*up), std::nullopt);
  EXPECT_EQ(FilesUnder("data"), 0u);
  EXPECT_EQ(store_->AbortUpload(*up)->code, S3Code::kNoSuchUpload);
  EXPECT_EQ(store_->DeleteBucket("b"), std::nullopt);
}

// Issue 29: S3 deletes a bucket whose multipart uploads are unfinished (they go with it); this
// store answered BucketNotEmpty, so every tool that cleans objects but not uploads failed.
TEST_F(StoreTest, DeleteBucketAbortsItsUploadsAndReleasesTheirParts) {
  auto up = store_->CreateUpload("b", "k", "alice", {}, "");
  ASSERT_TRUE(up.ok());
  net::StringBodyReader body(Pattern(1000, 3), kBodyPieceBytes);
  auto staged = store_->Stage(body, {.allow_inline = false});
  ASSERT_TRUE(store_->UploadPart(*up, 1, std::move(*staged), {}).ok());
  EXPECT_EQ(FilesUnder("data"), 1u);
  EXPECT_EQ(store_->DeleteBucket("b"), std::nullopt);
  EXPECT_EQ(FilesUnder("data"), 0u);
  ASSERT_TRUE(store_->CreateBucket("b", "alice").ok());
  EXPECT_EQ(store_->GetUpload("b", "k", up->upload_id).error().code, S3Code::kNoSuchUpload);
  bool truncated = true;
  auto uploads = store_->ListUploads("b", {}, &truncated);
  ASSERT_TRUE(uploads.ok());
  EXPECT_TRUE(uploads->empty());
}

// A completion's answer is kept for a retry; what the client declared is checked first.
TEST_F(StoreTest, CompletedUploadsAreRememberedAndDeclarationsChecked) {
  auto up = store_->CreateUpload("b", "k", "alice", {}, "SHA256");
  ASSERT_TRUE(up.ok());
  net::StringBodyReader body(Pattern(1000, 3), kBodyPieceBytes);
  auto staged = store_->Stage(body, {.checksums = kSha256, .allow_inline = false});
  ASSERT_TRUE(staged.ok());
  Checksums part_sums = staged->checksums;
  auto part = store_->UploadPart(*up, 1, std::move(*staged), part_sums);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(store_->GetCompletedUpload("b", "k", up->upload_id).error().code,
            S3Code::kNoSuchUpload);
  PutOptions wrong_size;
  wrong_size.expected_size = 999;
  EXPECT_EQ(store_->CompleteUpload(*up, {{1, part->etag}}, wrong_size).error().code,
            S3Code::kInvalidRequest);
  PutOptions wrong_sum;
  wrong_sum.expected_checksums.sha256 = part_sums.sha256;  // the part's, not the composite
  EXPECT_EQ(store_->CompleteUpload(*up, {{1, part->etag}}, wrong_sum).error().code,
            S3Code::kBadDigest);
  PutOptions other_algorithm;
  other_algorithm.expected_checksums.crc32 = "AAAAAA==";
  EXPECT_EQ(store_->CompleteUpload(*up, {{1, part->etag}}, other_algorithm).error().code,
            S3Code::kInvalidRequest);
  // Nothing of those failures stuck: the upload is still there, and completes.
  auto done = store_->CompleteUpload(*up, {{1, part->etag}}, {.expected_size = 1000});
  ASSERT_TRUE(done.ok()) << done.error().ToString();
  auto remembered = store_->GetCompletedUpload("b", "k", up->upload_id);
  ASSERT_TRUE(remembered.ok());
  EXPECT_EQ(remembered->etag, done->etag);
  EXPECT_EQ(remembered->version_id, done->version_id);
  EXPECT_EQ(remembered->checksums.sha256, done->checksums.sha256);
  EXPECT_EQ(remembered->checksums.type, "COMPOSITE");
  EXPECT_EQ(store_->GetCompletedUpload("b", "other", up->upload_id).error().code,
            S3Code::kNoSuchUpload);
  // The bucket takes its memory with it.
  ASSERT_TRUE(store_->Delete("b", "k", std::nullopt).ok());
  EXPECT_EQ(store_->DeleteBucket("b"), std::nullopt);
  ASSERT_TRUE(store_->CreateBucket("b", "alice").ok());
  EXPECT_EQ(store_->GetCompletedUpload("b", "k", up->upload_id).error().code,
            S3Code::kNoSuchUpload);
}

TEST_F(StoreTest, FailedBodyLeavesNothingBehind) {
  FailingBody body;
  auto staged = store_->Stage(body, {});
  ASSERT_FALSE(staged.ok());
  EXPECT_EQ(staged.error().code, S3Code::kIncompleteBody);
  net::StringBodyReader big(Pattern(300, 1), kBodyPieceBytes);
  auto too_big = store_->Stage(big, {.max_size = 100});
  EXPECT_EQ(too_big.error().code, S3Code::kEntityTooLarge);
  EXPECT_EQ(FilesUnder("tmp"), 0u);
}

TEST_F(StoreTest, CorruptedDataIsDetectedNotServed) {
  std::string data = Pattern(300000, 9);
  ASSERT_TRUE(PutBytes("k", data).ok());
  fs::path file;
  for (const auto& e : fs::recursive_directory_iterator(root_ / "data")) {
    if (e.is_regular_file()) file = e.path();
  }
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200000);
    f.put('\x5a' ^ data[200000]);
  }
  auto v = store_->Head("b", "k", std::nullopt);
  auto r = store_->Open(*v, 0, v->size);
  ASSERT_TRUE(r.ok());
  char buf[65536];
  base::Status failure;
  uint64_t good = 0;
  for (;;) {
    auto n = (*r)->Read(buf, sizeof buf);
    if (!n.ok()) {
      failure = n.status();
      break;
    }
    if (*n == 0) break;
    EXPECT_EQ(std::string_view(buf, *n), std::string_view(data).substr(good, *n));
    good += *n;
  }
  EXPECT_EQ(failure.code(), base::StatusCode::kDataLoss) << failure;
  EXPECT_LE(good, 196608u);  // nothing from the bad block onwards
  EXPECT_EQ(store_->Stats().corruptions, 1u);
  // A range before the bad block still reads.
  EXPECT_EQ(ReadAll(*v, 0, 1000), data.substr(0, 1000));
}

TEST_F(StoreTest, StartupMovesCommittedTempFilesAndDeletesTheRest) {
  std::string data = Pattern(400000, 5);
  ASSERT_TRUE(PutBytes("k", data).ok());
  // Simulate the two crash windows: a committed file still in tmp/, and an unacknowledged one.
  fs::path file;
  for (const auto& e : fs::recursive_directory_iterator(root_ / "data")) {
    if (e.is_regular_file()) file = e.path();
  }
  store_.reset();
  fs::rename(file, root_ / "tmp" / file.filename());
  { std::ofstream(root_ / "tmp" / "01abandoned") << "half written"; }
  Reopen();
  EXPECT_EQ(store_->Stats().recovered_temp_files, 1u);
  EXPECT_EQ(store_->Stats().deleted_temp_files, 1u);
  EXPECT_EQ(FilesUnder("tmp"), 0u);
  EXPECT_EQ(Get("k"), data);
}

TEST_F(StoreTest, ReaderFindsAFileBetweenCommitAndMove) {
  std::string data = Pattern(200000, 6);
  ASSERT_TRUE(PutBytes("k", data).ok());
  for (const auto& e : fs::recursive_directory_iterator(root_ / "data")) {
    if (e.is_regular_file()) {
      fs::rename(e.path(), root_ / "tmp" / e.path().filename());
      break;
    }
  }
  EXPECT_EQ(Get("k"), data);
}

TEST_F(StoreTest, ConcurrentWritersShareCommits) {
  constexpr int kThreads = 16, kPerThread = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        if (!PutBytes(key, key).ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto stats = store_->Stats();
  EXPECT_GE(stats.committed_writes, uint64_t{kThreads * kPerThread});
  EXPECT_LT(stats.commit_batches, stats.committed_writes);  // some writes shared a commit
  EXPECT_EQ(store_->List("b", {.max_keys = 1000})->objects.size(), size_t{kThreads * kPerThread});
  Reopen();
  EXPECT_EQ(Get("t3/7"), "t3/7");
}

TEST_F(StoreTest, DataFileRejectsTruncationAndBadFooter) {
  std::string path = (root_ / "df").string();
  auto w = DataFileWriter::Create(base::Env::Default(), path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(Pattern(100000, 1)).ok());
  ASSERT_TRUE((*w)->Seal().ok());
  ASSERT_TRUE(DataFileReader::Open(base::Env::Default(), path).ok());
  fs::resize_file(path, fs::file_size(path) - 1);
  EXPECT_EQ(DataFileReader::Open(base::Env::Default(), path).status().code(),
            base::StatusCode::kDataLoss);
  EXPECT_EQ(
      DataFileReader::Open(base::Env::Default(), (root_ / "missing").string()).status().code(),
      base::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sovai::objstore
