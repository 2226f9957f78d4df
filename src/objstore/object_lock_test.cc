// Object Lock: the XML bodies, the rules, and the store refusing what they refuse inside its
// write transaction.
#include "objstore/object_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "base/time.h"

namespace sovai::objstore {
namespace {

constexpr int64_t kNow = 1'700'000'000'000'000;
constexpr int64_t kDay = 86400ll * 1000 * 1000;

TEST(ObjectLockXmlTest, ConfigurationRoundTripsAndRefusesMalformedOnes) {
  auto c = ParseObjectLockConfiguration(
      "<ObjectLockConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention>"
      "<Mode>GOVERNANCE</Mode><Days>3</Days></DefaultRetention></Rule>"
      "</ObjectLockConfiguration>");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(*c, (ObjectLockConfiguration{true, "GOVERNANCE", 3, 0}));
  EXPECT_EQ(*ParseObjectLockConfiguration(RenderObjectLockConfiguration(*c)), *c);
  auto bare = ParseObjectLockConfiguration(
      "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled>"
      "</ObjectLockConfiguration>");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->default_mode.empty());

  auto code = [](std::string_view body) {
    auto r = ParseObjectLockConfiguration(body);
    return r.ok() ? std::string("ok") : std::string(r.error().name());
  };
  const std::string head =
      "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled>";
  EXPECT_EQ(code("<ObjectLockConfiguration><ObjectLockEnabled>Disabled</ObjectLockEnabled>"
                 "</ObjectLockConfiguration>"),
            "MalformedXML");
  EXPECT_EQ(code(head + "<Rule><DefaultRetention><Mode>GOVERNANCE</Mode><Days>1</Days><Years>1"
                        "</Years></DefaultRetention></Rule></ObjectLockConfiguration>"),
            "MalformedXML");
  EXPECT_EQ(code(head + "<Rule><DefaultRetention><Mode>FOREVER</Mode><Days>1</Days>"
                        "</DefaultRetention></Rule></ObjectLockConfiguration>"),
            "MalformedXML");
  EXPECT_EQ(code(head + "<Rule><DefaultRetention><Mode>COMPLIANCE</Mode><Days>0</Days>"
                        "</DefaultRetention></Rule></ObjectLockConfiguration>"),
            "InvalidRetentionPeriod");
  EXPECT_EQ(code(head + "<Rule><DefaultRetention><Mode>COMPLIANCE</Mode><Years>101</Years>"
                        "</DefaultRetention></Rule></ObjectLockConfiguration>"),
            "InvalidRetentionPeriod");
  EXPECT_EQ(code(head + "<Rule></Rule></ObjectLockConfiguration>"), "MalformedXML");
  EXPECT_EQ(code("<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled>"),
            "MalformedXML");
  EXPECT_EQ(code("not xml"), "MalformedXML");
}

TEST(ObjectLockXmlTest, RetentionAndLegalHold) {
  auto r = ParseRetention(
      "<Retention><Mode>COMPLIANCE</Mode><RetainUntilDate>2030-01-02T03:04:05Z</RetainUntilDate>"
      "</Retention>");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->mode, "COMPLIANCE");
  EXPECT_EQ(r->retain_until_micros, *base::ParseRfc3339("2030-01-02T03:04:05Z"));
  EXPECT_EQ(ParseRetention(RenderRetention(*r))->retain_until_micros, r->retain_until_micros);
  EXPECT_TRUE(ParseRetention("<Retention/>")->mode.empty());  // removes the retention
  EXPECT_EQ(ParseRetention("<Retention><Mode>GOVERNANCE</Mode></Retention>").error().code,
            S3Code::kMalformedXML);
  EXPECT_EQ(ParseRetention("<Retention><Mode>GOVERNANCE</Mode><RetainUntilDate>tomorrow"
                           "</RetainUntilDate></Retention>")
                .error()
                .code,
            S3Code::kInvalidArgument);
  EXPECT_TRUE(*ParseLegalHold("<LegalHold><Status>ON</Status></LegalHold>"));
  EXPECT_FALSE(*ParseLegalHold(RenderLegalHold(false)));
  EXPECT_EQ(ParseLegalHold("<LegalHold><Status>on</Status></LegalHold>").error().code,
            S3Code::kMalformedXML);
  EXPECT_EQ(ParseLegalHold("<LegalHold/>").error().code, S3Code::kMalformedXML);
}

TEST(ObjectLockRulesTest, HeadersDefaultsAndRemoval) {
  auto lock = LockFromHeaders("GOVERNANCE", "2030-01-01T00:00:00Z", "ON", kNow);
  ASSERT_TRUE(lock.ok());
  EXPECT_TRUE(lock->legal_hold);
  EXPECT_EQ(LockFromHeaders("GOVERNANCE", "", "", kNow).error().code, S3Code::kInvalidArgument);
  EXPECT_EQ(LockFromHeaders("", "2030-01-01T00:00:00Z", "", kNow).error().code,
            S3Code::kInvalidArgument);
  EXPECT_EQ(LockFromHeaders("GOVERNANCE", "2001-01-01T00:00:00Z", "", kNow).error().code,
            S3Code::kInvalidArgument);
  EXPECT_EQ(LockFromHeaders("", "", "MAYBE", kNow).error().code, S3Code::kInvalidArgument);
  EXPECT_EQ(*LockFromHeaders("", "", "", kNow), ObjectLock());

  ObjectLock by_days = DefaultRetention({true, "COMPLIANCE", 2, 0}, kNow);
  EXPECT_EQ(by_days.retain_until_micros, kNow + 2 * kDay);
  ObjectLock by_years = DefaultRetention({true, "GOVERNANCE", 0, 1}, kNow);
  EXPECT_EQ(base::ToCivil(by_years.retain_until_micros).year, base::ToCivil(kNow).year + 1);
  EXPECT_EQ(DefaultRetention({true, "", 0, 0}, kNow), ObjectLock());

  ObjectLock governance{"GOVERNANCE", kNow + kDay, false};
  ObjectLock compliance{"COMPLIANCE", kNow + kDay, false};
  EXPECT_EQ(CheckVersionRemovable(governance, kNow, false)->code, S3Code::kAccessDenied);
  EXPECT_FALSE(CheckVersionRemovable(governance, kNow, true));
  EXPECT_EQ(CheckVersionRemovable(compliance, kNow, true)->code, S3Code::kAccessDenied);
  EXPECT_FALSE(CheckVersionRemovable(compliance, kNow + 2 * kDay, false));  // expired
  EXPECT_EQ(CheckVersionRemovable({"", 0, true}, kNow, true)->code, S3Code::kAccessDenied);
}

TEST(ObjectLockRulesTest, RetentionChanges) {
  ObjectLock governance{"GOVERNANCE", kNow + kDay, false};
  ObjectLock compliance{"COMPLIANCE", kNow + kDay, false};
  ObjectLock longer{"COMPLIANCE", kNow + 2 * kDay, false};
  ObjectLock shorter{"GOVERNANCE", kNow + kDay / 2, false};
  EXPECT_FALSE(CheckRetentionChange(compliance, longer, kNow, false));
  EXPECT_EQ(CheckRetentionChange(compliance, {"COMPLIANCE", kNow + 1, false}, kNow, true)->code,
            S3Code::kAccessDenied);
  EXPECT_EQ(CheckRetentionChange(compliance, {"GOVERNANCE", kNow + kDay, false}, kNow, true)->code,
            S3Code::kAccessDenied);
  EXPECT_EQ(CheckRetentionChange(compliance, ObjectLock(), kNow, true)->code,
            S3Code::kAccessDenied);
  EXPECT_EQ(CheckRetentionChange(governance, shorter, kNow, false)->code, S3Code::kAccessDenied);
  EXPECT_FALSE(CheckRetentionChange(governance, shorter, kNow, true));
  EXPECT_FALSE(CheckRetentionChange(governance, longer, kNow, false));  // to COMPLIANCE, longer
  EXPECT_EQ(CheckRetentionChange(ObjectLock(), {"GOVERNANCE", kNow - 1, false}, kNow, false)->code,
            S3Code::kInvalidArgument);
}

class LockTestBody final : public net::BodyReader {
 public:
  explicit LockTestBody(std::string data) : data_(std::move(data)) {}
  base::Result<size_t> Read(char* buf, size_t n) override {
    n = std::min(n, data_.size() - pos_);
    std::memcpy(buf, data_.data() + pos_, n);
    pos_ += n;
    return n;
  }

 private:
  std::string data_;
  size_t pos_ = 0;
};

// The store: locks persist, and a guard refuses a delete in the write's transaction.
class LockStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("sovai-lock-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    auto s = Store::Open({.root = root_.string()});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(root_);
  }
  S3Result<ObjectVersion> Put(const std::string& key, ObjectLock lock) {
    LockTestBody body("bytes of " + key);
    auto staged = store_->Stage(body, {});
    if (!staged.ok()) return staged.error();
    PutOptions o{.bucket = "locked", .key = key, .owner = "alice"};
    o.meta.lock = lock;
    return store_->Put(o, std::move(*staged));
  }
  std::filesystem::path root_;
  std::unique_ptr<Store> store_;
};

TEST_F(LockStoreTest, BucketSetupAndGuardedDeletes) {
  auto b = store_->CreateBucket(
      "locked", "alice",
      {.versioning = Versioning::kEnabled,
       .configs = {{std::string(kObjectLockConfigKind), RenderObjectLockConfiguration({true})}}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(store_->GetBucket("locked")->versioning, Versioning::kEnabled);
  EXPECT_TRUE(store_->GetBucketConfig("locked", std::string(kObjectLockConfigKind))->has_value());

  auto v = Put("k", {"COMPLIANCE", kNow * 2, true});
  ASSERT_TRUE(v.ok());
  auto head = store_->Head("locked", "k", std::nullopt);
  EXPECT_EQ(head->meta.lock, (ObjectLock{"COMPLIANCE", kNow * 2, true}));
  VersionGuard guard = [](const ObjectVersion& stored) {
    return CheckVersionRemovable(stored.meta.lock, kNow, true);
  };
  auto refused = store_->Delete("locked", "k", v->version_id, guard);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, S3Code::kAccessDenied);
  EXPECT_TRUE(store_->Head("locked", "k", v->version_id).ok());
  // A plain delete hides the version behind a marker; the version stays.
  EXPECT_TRUE(store_->Delete("locked", "k", std::nullopt, nullptr)->delete_marker);
  EXPECT_TRUE(store_->Head("locked", "k", v->version_id).ok());

  // Releasing the hold (UpdateVersion) still leaves COMPLIANCE in force until it expires.
  auto released = store_->UpdateVersion("locked", "k", v->version_id, [](ObjectVersion& s) {
    s.meta.lock.legal_hold = false;
    return S3Status();
  });
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(store_->Delete("locked", "k", v->version_id, guard).error().code,
            S3Code::kAccessDenied);
  VersionGuard later = [](const ObjectVersion& stored) {
    return CheckVersionRemovable(stored.meta.lock, kNow * 3, false);
  };
  EXPECT_TRUE(store_->Delete("locked", "k", v->version_id, later).ok());
  EXPECT_EQ(store_->Head("locked", "k", v->version_id).error().code, S3Code::kNoSuchVersion);
  // A refused edit changes nothing.
  auto w = Put("w", {"GOVERNANCE", kNow * 2, false});
  auto edit = store_->UpdateVersion("locked", "w", std::nullopt, [](ObjectVersion& s) {
    s.meta.lock = ObjectLock();
    return S3Status(S3Error(S3Code::kAccessDenied, "no"));
  });
  EXPECT_FALSE(edit.ok());
  EXPECT_EQ(store_->Head("locked", "w", std::nullopt)->meta.lock.mode, "GOVERNANCE");
}

}  // namespace
}  // namespace sovai::objstore
