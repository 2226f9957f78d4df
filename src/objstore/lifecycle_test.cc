// Lifecycle: the XML body, the rules' arithmetic, and the sweeper against a real store with an
// injected clock (base::ManualClockEnv).
#include "objstore/lifecycle.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "base/time.h"
#include "objstore/lifecycle_sweeper.h"
#include "objstore/object_lock.h"

namespace sovai::objstore {
namespace {

std::string Code(std::string_view xml) {
  auto r = ParseLifecycleConfiguration(xml);
  return r.ok() ? std::string("ok") : std::string(r.error().name());
}

std::string Rules(std::string_view rules) {
  return "<LifecycleConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">" +
         std::string(rules) + "</LifecycleConfiguration>";
}

TEST(LifecycleXmlTest, ParsesFiltersAndActionsAndRoundTrips) {
  // botocore's shape for put_bucket_lifecycle_configuration.
  auto c = ParseLifecycleConfiguration(Rules(
      "<Rule><ID>logs</ID><Filter><And><Prefix>logs/</Prefix><Tag><Key>k</Key><Value>v</Value>"
      "</Tag><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan></And></Filter>"
      "<Status>Enabled</Status><Expiration><Days>7</Days></Expiration>"
      "<NoncurrentVersionExpiration><NoncurrentDays>3</NoncurrentDays>"
      "<NewerNoncurrentVersions>2</NewerNoncurrentVersions></NoncurrentVersionExpiration>"
      "</Rule>"
      "<Rule><ID>uploads</ID><Filter><Prefix></Prefix></Filter><Status>Disabled</Status>"
      "<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>"
      "</AbortIncompleteMultipartUpload></Rule>"
      "<Rule><Prefix>old/</Prefix><Status>Enabled</Status><Expiration>"
      "<Date>2030-01-01T00:00:00.000Z</Date></Expiration></Rule>"
      "<Rule><ID>markers</ID><Filter/><Status>Enabled</Status><Expiration>"
      "<ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>"));
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  ASSERT_EQ(c->rules.size(), 4u);
  const LifecycleRule& logs = c->rules[0];
  EXPECT_EQ(logs.filter.prefix, "logs/");
  EXPECT_EQ(logs.filter.tags, (std::vector<Tag>{{"k", "v"}}));
  EXPECT_EQ(logs.filter.size_greater_than, 10u);
  EXPECT_EQ(logs.expiration_days, 7);
  EXPECT_EQ(logs.noncurrent_days, 3);
  EXPECT_EQ(logs.newer_noncurrent_versions, 2);
  EXPECT_FALSE(c->rules[1].enabled);
  EXPECT_EQ(c->rules[2].id, "rule-3");  // named when the client gave no ID
  EXPECT_EQ(c->rules[2].filter.prefix, "old/");
  EXPECT_EQ(c->rules[2].expiration_date_micros, *base::ParseRfc3339("2030-01-01T00:00:00Z"));
  EXPECT_TRUE(c->rules[3].expired_object_delete_marker);
  EXPECT_EQ(*ParseLifecycleConfiguration(RenderLifecycleConfiguration(*c)), *c);
}

TEST(LifecycleXmlTest, RefusesMalformedAndInvalidRules) {
  EXPECT_EQ(Code(Rules("")), "MalformedXML");
  EXPECT_EQ(Code(Rules("<Rule><Status>Enabled</Status><Expiration><Days>1</Days></Expiration>"
                       "</Rule><Rule><Status>Enabled</Status></Rule>")),
            "InvalidArgument");  // no action
  EXPECT_EQ(Code(Rules("<Rule><Expiration><Days>1</Days></Expiration></Rule>")), "MalformedXML");
  EXPECT_EQ(Code(Rules("<Rule><Status>On</Status><Expiration><Days>1</Days></Expiration></Rule>")),
            "MalformedXML");
  EXPECT_EQ(Code(Rules("<Rule><Status>Enabled</Status><Expiration><Days>0</Days></Expiration>"
                       "</Rule>")),
            "InvalidArgument");
  EXPECT_EQ(Code(Rules("<Rule><Status>Enabled</Status><Expiration><Days>x</Days></Expiration>"
                       "</Rule>")),
            "MalformedXML");
  EXPECT_EQ(Code(Rules("<Rule><Status>Enabled</Status><Expiration><Days>1</Days>"
                       "<Date>2030-01-01T00:00:00Z</Date></Expiration></Rule>")),
            "MalformedXML");
  EXPECT_EQ(Code(Rules("<Rule><Status>Enabled</Status><Expiration>"
                       "<Date>2030-01-01T10:00:00Z</Date></Expiration></Rule>")),
            "InvalidArgument");  // not midnight
  EXPECT_EQ(Code(Rules("<Rule><Filter><Prefix>a</Prefix><Tag><Key>k</Key><Value>v</Value></Tag>"
                       "</Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration>"
                       "</Rule>")),
            "MalformedXML");  // two conditions outside <And>
  EXPECT_EQ(Code(Rules("<Rule><Prefix>a</Prefix><Filter/><Status>Enabled</Status><Expiration>"
                       "<Days>1</Days></Expiration></Rule>")),
            "MalformedXML");
  EXPECT_EQ(Code(Rules("<Rule><ID>x</ID><Status>Enabled</Status><Expiration><Days>1</Days>"
                       "</Expiration></Rule><Rule><ID>x</ID><Status>Enabled</Status><Expiration>"
                       "<Days>2</Days></Expiration></Rule>")),
            "InvalidArgument");  // repeated ID
  EXPECT_EQ(Code(Rules("<Rule><ID>" + std::string(256, 'i') +
                       "</ID><Status>Enabled</Status><Expiration><Days>1</Days></Expiration>"
                       "</Rule>")),
            "InvalidArgument");
  EXPECT_EQ(Code(Rules("<Rule><Status>Enabled</Status><Transition><Days>1</Days><StorageClass>"
                       "GLACIER</StorageClass></Transition></Rule>")),
            "NotImplemented");
  EXPECT_EQ(Code(Rules("<Rule><Filter><And><ObjectSizeGreaterThan>9</ObjectSizeGreaterThan>"
                       "<ObjectSizeLessThan>5</ObjectSizeLessThan></And></Filter>"
                       "<Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>")),
            "InvalidArgument");
  EXPECT_EQ(Code("<LifecycleConfiguration><Rule>"), "MalformedXML");
  std::string many;
  for (int i = 0; i <= 1000; ++i) {
    many += "<Rule><ID>r" + std::to_string(i) +
            "</ID><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>";
  }
  EXPECT_EQ(Code(Rules(many)), "InvalidArgument");
}

TEST(LifecycleRulesTest, CoversAndExpiry) {
  LifecycleRule r;
  r.id = "r";
  r.filter.prefix = "logs/";
  r.filter.tags = {{"keep", "no"}};
  r.filter.size_less_than = 100;
  r.expiration_days = 1;
  ObjectVersion v;
  v.key = "logs/a";
  v.size = 10;
  v.meta.tags = {{"keep", "no"}};
  v.mtime_micros = *base::ParseRfc3339("2026-03-01T10:00:00Z");
  EXPECT_TRUE(RuleCovers(r, v));
  ObjectVersion other = v;
  other.key = "data/a";
  EXPECT_FALSE(RuleCovers(r, other));
  other = v;
  other.size = 100;
  EXPECT_FALSE(RuleCovers(r, other));
  other = v;
  other.meta.tags.clear();
  EXPECT_FALSE(RuleCovers(r, other));
  // One day later, rounded up to midnight UTC, as S3 computes it.
  auto e = CurrentExpiry({{r}}, v, kDayMicros);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->at_micros, *base::ParseRfc3339("2026-03-03T00:00:00Z"));
  EXPECT_EQ(FormatExpirationHeader(*e),
            "expiry-date=\"Tue, 03 Mar 2026 00:00:00 GMT\", rule-id=\"r\"");
  r.enabled = false;
  EXPECT_FALSE(CurrentExpiry({{r}}, v, kDayMicros).has_value());
  EXPECT_EQ(DaysLater(1000, 2, 10), 1020);  // a test "day" is not rounded
}

// The sweeper against a real store; "days" are 1 second long, the clock is a ManualClock.
class SweeperTest : public ::testing::Test {
 protected:
  static constexpr int64_t kTestDay = 1'000'000;
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("sovai-lifecycle-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    auto s = Store::Open({.root = root_.string(), .env = &env_});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
    sweeper_ = std::make_unique<LifecycleSweeper>(
        *store_, LifecycleSweeperOptions{.env = &env_, .day_micros = kTestDay});
  }
  void TearDown() override {
    sweeper_.reset();
    store_.reset();
    std::filesystem::remove_all(root_);
  }
  class Body final : public net::BodyReader {
   public:
    explicit Body(std::string d) : d_(std::move(d)) {}
    base::Result<size_t> Read(char* buf, size_t n) override {
      n = std::min(n, d_.size() - pos_);
      std::memcpy(buf, d_.data() + pos_, n);
      pos_ += n;
      return n;
    }

   private:
    std::string d_;
    size_t pos_ = 0;
  };
  ObjectVersion Put(const std::string& bucket, const std::string& key, std::string data,
                    ObjectMeta meta = {}) {
    Body body(std::move(data));
    auto staged = store_->Stage(body, {});
    PutOptions o{.bucket = bucket, .key = key, .owner = "alice", .meta = std::move(meta)};
    auto v = store_->Put(o, std::move(*staged));
    EXPECT_TRUE(v.ok());
    return *v;
  }
  void SetRules(const std::string& bucket, std::string_view rules) {
    auto c = ParseLifecycleConfiguration(Rules(rules));
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    ASSERT_FALSE(store_->SetBucketConfig(bucket, std::string(kLifecycleConfigKind),
                                         RenderLifecycleConfiguration(*c)));
  }
  size_t Versions(const std::string& bucket) {
    return store_->ListVersions(bucket, {})->versions.size();
  }

  base::ManualClock clock_;
  base::ManualClockEnv env_{base::Env::Default(), clock_};
  std::filesystem::path root_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<LifecycleSweeper> sweeper_;
};

TEST_F(SweeperTest, ExpiresCurrentVersionsByPrefixTagAndSize) {
  ASSERT_TRUE(store_->CreateBucket("plain", "alice").ok());
  SetRules("plain",
           "<Rule><ID>tmp</ID><Filter><And><Prefix>tmp/</Prefix><Tag><Key>t</Key><Value>1</Value>"
           "</Tag></And></Filter><Status>Enabled</Status><Expiration><Days>2</Days></Expiration>"
           "</Rule><Rule><ID>big</ID><Filter><ObjectSizeGreaterThan>5</ObjectSizeGreaterThan>"
           "</Filter><Status>Enabled</Status><Expiration><Days>5</Days></Expiration></Rule>");
  Put("plain", "tmp/tagged", "x", {.tags = {{"t", "1"}}});
  Put("plain", "tmp/untagged", "x");
  Put("plain", "keep/big", "123456789");
  Put("plain", "keep/small", "12");
  sweeper_->SweepNow();
  EXPECT_EQ(Versions("plain"), 4u);  // nothing is due yet
  clock_.Advance(3 * kTestDay);
  sweeper_->SweepNow();
  EXPECT_EQ(store_->Head("plain", "tmp/tagged", std::nullopt).error().code, S3Code::kNoSuchKey);
  EXPECT_TRUE(store_->Head("plain", "tmp/untagged", std::nullopt).ok());
  EXPECT_TRUE(store_->Head("plain", "keep/big", std::nullopt).ok());
  // A version written after the examination is not the one expired: a fresh write survives.
  clock_.Advance(3 * kTestDay);
  Put("plain", "keep/big", "123456789");
  sweeper_->SweepNow();
  EXPECT_TRUE(store_->Head("plain", "keep/big", std::nullopt).ok());
  EXPECT_TRUE(store_->Head("plain", "keep/small", std::nullopt).ok());
  EXPECT_EQ(sweeper_->stats().expired_current.load(), 1u);
  EXPECT_EQ(sweeper_->stats().sweeps.load(), 3u);
}

TEST_F(SweeperTest, VersionedBucketsNoncurrentVersionsMarkersAndLocks) {
  ASSERT_TRUE(store_->CreateBucket("v", "alice", {.versioning = Versioning::kEnabled}).ok());
  SetRules("v",
           "<Rule><ID>cur</ID><Filter><Prefix>a</Prefix></Filter><Status>Enabled</Status>"
           "<Expiration><Days>10</Days></Expiration></Rule>"
           "<Rule><ID>old</ID><Filter></Filter><Status>Enabled</Status>"
           "<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays>"
           "<NewerNoncurrentVersions>1</NewerNoncurrentVersions></NoncurrentVersionExpiration>"
           "</Rule><Rule><ID>markers</ID><Filter><Prefix>gone</Prefix></Filter>"
           "<Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true"
           "</ExpiredObjectDeleteMarker></Expiration><NoncurrentVersionExpiration>"
           "<NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration></Rule>");
  Put("v", "k", "1");
  Put("v", "k", "2");
  Put("v", "k", "3");
  ObjectVersion locked = Put("v", "held", "1", {.lock = {"", 0, true}});
  Put("v", "held", "2");
  Put("v", "held", "3");
  Put("v", "gone", "1");
  clock_.Advance(kTestDay / 2);
  ASSERT_TRUE(store_->Delete("v", "gone", std::nullopt).ok());  // a marker over "gone"
  clock_.Advance(2 * kTestDay);
  sweeper_->SweepNow();
  // k: the current one and the newest noncurrent one stay, the oldest goes.
  auto k = store_->ListVersions("v", {.prefix = "k"});
  ASSERT_EQ(k->versions.size(), 2u);
  // held: its oldest version is under a legal hold and stays.
  EXPECT_TRUE(store_->Head("v", "held", locked.version_id).ok());
  EXPECT_EQ(sweeper_->stats().skipped_locked.load(), 1u);
  // gone: the only noncurrent version expired, then the marker alone is removed.
  sweeper_->SweepNow();
  EXPECT_EQ(store_->ListVersions("v", {.prefix = "gone"})->versions.size(), 0u);
  EXPECT_EQ(sweeper_->stats().removed_delete_markers.load(), 1u);
  // "a…" current versions get a delete marker, as on S3: the data stays as a version.
  Put("v", "a1", "x");
  clock_.Advance(11 * kTestDay);
  sweeper_->SweepNow();
  EXPECT_EQ(store_->Head("v", "a1", std::nullopt).error().code, S3Code::kNoSuchKey);
  EXPECT_EQ(store_->ListVersions("v", {.prefix = "a1"})->versions.size(), 2u);
}

TEST_F(SweeperTest, AbortsIncompleteUploads) {
  ASSERT_TRUE(store_->CreateBucket("u", "alice").ok());
  SetRules("u",
           "<Rule><ID>mp</ID><Filter><Prefix>big/</Prefix></Filter><Status>Enabled</Status>"
           "<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>"
           "</AbortIncompleteMultipartUpload></Rule>");
  ASSERT_TRUE(store_->CreateUpload("u", "big/1", "alice", {}, "").ok());
  ASSERT_TRUE(store_->CreateUpload("u", "small/1", "alice", {}, "").ok());
  clock_.Advance(2 * kTestDay);
  ASSERT_TRUE(store_->CreateUpload("u", "big/2", "alice", {}, "").ok());
  sweeper_->SweepNow();
  bool truncated = false;
  auto left = store_->ListUploads("u", {}, &truncated);
  ASSERT_EQ(left->size(), 2u);
  EXPECT_EQ((*left)[0].key, "big/2");
  EXPECT_EQ((*left)[1].key, "small/1");
  EXPECT_EQ(sweeper_->stats().aborted_uploads.load(), 1u);
}

}  // namespace
}  // namespace sovai::objstore
