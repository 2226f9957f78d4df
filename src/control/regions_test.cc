#include "control/regions.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "control/limits.h"

namespace sovai::control {
namespace {

using base::StatusCode;

constexpr char kOwn[] = "EU-WEST-LOCAL";
constexpr char kKey[] = "SVCENTRALKEY00000001";
constexpr char kSecret[] = "central-secret-0123456789abcdefghijklmnop";

class RegionsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-regions-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { env_.DeleteDirRecursive(dir_).IgnoreError(); }

  // Writes `text` to <dir>/`name` with `mode`; returns the path.
  std::string Write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(env_.WriteFileAtomically(path, text).ok());
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }

  base::Result<std::vector<RegionEndpoint>> Parse(const std::string& text) {
    return ParseRegionsFile(env_, text, dir_, kOwn);
  }

  // The message of a refused file; fails the test when the file is accepted or the code differs.
  std::string Refused(const std::string& text, StatusCode code = StatusCode::kInvalidArgument) {
    auto parsed = Parse(text);
    EXPECT_FALSE(parsed.ok()) << text;
    if (parsed.ok()) return "";
    EXPECT_EQ(parsed.status().code(), code) << parsed.status();
    return parsed.status().message();
  }

  // A file with one region whose members are `members` (a JSON object's inside).
  static std::string One(const std::string& members) {
    return R"({"regions": [{)" + members + "}]}";
  }
  static std::string Valid(const std::string& extra = "") {
    return R"("name": "EU-CENTRAL-2", "s3_endpoint": "https://s3.central.example.eu:9000",
              "jurisdiction": "EU", "access_key_id": ")" +
           std::string(kKey) + R"(", "secret_access_key": ")" + kSecret + "\"" + extra;
  }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
};

TEST_F(RegionsFileTest, ParsesInlineKeysAndACredentialsFile) {
  // A sovai server's admin.json is a credentials file: its other members are ignored.
  Write("central-admin.json", R"({"user": "admin", "access_key_id": ")" + std::string(kKey) +
                                  R"(", "secret_access_key": ")" + kSecret +
                                  R"(", "api_token": "sovai_x"})");
  Write("ca.pem", "-----BEGIN CERTIFICATE-----\n");
  auto parsed = Parse(R"({"regions": [
      {"name": "EU-CENTRAL-2", "s3_endpoint": "http://127.0.0.1:9100", "jurisdiction": "EU",
       "credentials_file": "central-admin.json"},
      {"name": "CH-ZURICH-1", "s3_endpoint": "https://s3.zurich.example.ch",
       "s3_region": "ch-zh", "jurisdiction": "CH", "ca_file": "ca.pem",
       "access_key_id": ")" +
                      std::string(kKey) + R"(", "secret_access_key": ")" + kSecret + R"("}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  const RegionEndpoint& central = (*parsed)[0];
  EXPECT_EQ(central.name, "EU-CENTRAL-2");
  EXPECT_EQ(central.s3_endpoint, "http://127.0.0.1:9100");
  EXPECT_EQ(central.s3_region, "eu-central-2");  // the name in lowercase by default
  EXPECT_EQ(central.jurisdiction, "EU");
  EXPECT_EQ(central.access_key_id, kKey);
  EXPECT_EQ(central.secret_access_key, kSecret);
  EXPECT_EQ(central.ca_file, "");
  const RegionEndpoint& zurich = (*parsed)[1];
  EXPECT_EQ(zurich.s3_region, "ch-zh");
  EXPECT_EQ(zurich.ca_file, dir_ + "/ca.pem");
  EXPECT_EQ(NamesOf(*parsed), (std::vector<std::string>{"EU-CENTRAL-2", "CH-ZURICH-1"}));
  // No other region at all is a valid file.
  auto empty = Parse(R"({"regions": []})");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST_F(RegionsFileTest, RefusesMalformedFilesNamingTheField) {
  struct Case {
    std::string text;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"{", "JSON"},
      {"[]", "must be a JSON object {\"regions\": [...]}, not array"},
      {R"({"regions": [], "extra": 1})", "extra: unknown field; the file has only \"regions\""},
      {R"({})", "regions: is required and must be an array"},
      {R"({"regions": {}})", "regions: is required and must be an array"},
      {R"({"regions": ["EU-CENTRAL-2"]})", "regions[0]: must be an object"},
      {One(Valid(R"(, "endpoint": "x")")), "regions[0].endpoint: unknown field"},
      {One(R"("s3_endpoint": "http://h", "jurisdiction": "EU")"), "regions[0].name: is required"},
      {One(R"("name": "EU-CENTRAL-2", "jurisdiction": "EU")"),
       "regions[0].s3_endpoint: is required"},
      {One(R"("name": "EU-CENTRAL-2", "s3_endpoint": "http://h")"),
       "regions[0].jurisdiction: is required"},
      {One(R"("name": 7)"), "regions[0].name: must be a string, not number"},
      {One(R"("name": "eu-central-2")"), "regions[0].name: region 'eu-central-2' must be 2 to 32"},
      {One(R"("name": "EU CENTRAL")"), "regions[0].name: region 'EU CENTRAL' must be"},
      {One(R"("name": "EU-WEST-LOCAL", "s3_endpoint": "http://h", "jurisdiction": "EU",
              "access_key_id": ")" +
           std::string(kKey) + R"(", "secret_access_key": ")" + kSecret + "\""),
       "regions[0].name: 'EU-WEST-LOCAL' is this server's own region (--region)"},
      {R"({"regions": [{)" + Valid() + "}, {" + Valid() + "}]}",
       "regions[1].name: 'EU-CENTRAL-2' is listed twice (also regions[0])"},
      {One(R"("name": "X1", "s3_endpoint": "ftp://h", "jurisdiction": "EU")"),
       "regions[0].s3_endpoint: must be http://HOST[:PORT] or https://HOST[:PORT] without a path"},
      {One(R"("name": "X1", "s3_endpoint": "https://h/bucket", "jurisdiction": "EU")"),
       "regions[0].s3_endpoint: must be http"},
      {One(R"("name": "X1", "s3_endpoint": "https://h?x=1", "jurisdiction": "EU")"),
       "regions[0].s3_endpoint: must be http"},
      {One(R"("name": "X1", "s3_endpoint": "https://user@h", "jurisdiction": "EU")"),
       "regions[0].s3_endpoint: must be http"},
      {One(R"("name": "X1", "s3_endpoint": "https://h:0", "jurisdiction": "EU")"),
       "regions[0].s3_endpoint: must be http"},
      {One(R"("name": "X1", "s3_endpoint": "https://h:70000", "jurisdiction": "EU")"),
       "regions[0].s3_endpoint: must be http"},
      {One(R"("name": "X1", "s3_endpoint": "https://", "jurisdiction": "EU")"),
       "regions[0].s3_endpoint: must be http"},
      {One(R"("name": "X1", "s3_endpoint": "https://)" + std::string(300, 'h') +
           R"(", "jurisdiction": "EU")"),
       "regions[0].s3_endpoint: must be http"},
      {One(Valid(R"(, "s3_region": "EU-Central")")),
       "regions[0].s3_region: must be 1 to 64 characters of a-z"},
      {One(R"("name": "X1", "s3_endpoint": "http://h", "jurisdiction": "E\nU")"),
       "regions[0].jurisdiction: must be 1 to 64 printable ASCII characters"},
      {One(R"("name": "X1", "s3_endpoint": "http://h", "jurisdiction": "")"),
       "regions[0].jurisdiction: must not be empty"},
      {One(R"("name": "X1", "s3_endpoint": "http://h", "jurisdiction": "EU")"),
       "regions[0]: needs credentials: access_key_id with secret_access_key, or "
       "credentials_file"},
      {One(R"("name": "X1", "s3_endpoint": "http://h", "jurisdiction": "EU", "access_key_id": ")" +
           std::string(kKey) + "\""),
       "regions[0].secret_access_key: is required with access_key_id"},
      {One(Valid(R"(, "credentials_file": "c.json")")),
       "regions[0].credentials_file: give either credentials_file or access_key_id"},
      {One(R"("name": "X1", "s3_endpoint": "http://h", "jurisdiction": "EU",
              "access_key_id": "short", "secret_access_key": ")" +
           std::string(kSecret) + "\""),
       "regions[0].access_key_id: must be 16 to 128 characters"},
      {One(R"("name": "X1", "s3_endpoint": "http://h", "jurisdiction": "EU", "access_key_id": ")" +
           std::string(kKey) + R"(", "secret_access_key": "has a space")"),
       "regions[0].secret_access_key: must be 8 to 128 printable ASCII characters"},
      {One(Valid(R"(, "ca_file": "missing.pem")")), "regions[0].ca_file: no file at '"},
  };
  for (const Case& c : cases) {
    const std::string message = Refused(c.text);
    EXPECT_NE(message.find(c.message_part), std::string::npos)
        << "file: " << c.text << "\nmessage: " << message;
  }
}

TEST_F(RegionsFileTest, RefusesBadCredentialsFiles) {
  auto with_file = [](const std::string& name) {
    return One(R"("name": "EU-CENTRAL-2", "s3_endpoint": "http://h", "jurisdiction": "EU",
                  "credentials_file": ")" +
               name + "\"");
  };
  EXPECT_NE(Refused(with_file("absent.json"), StatusCode::kNotFound)
                .find("regions[0].credentials_file: "),
            std::string::npos);
  Write("not-json.json", "access_key_id=x");
  EXPECT_NE(Refused(with_file("not-json.json")).find("must be a JSON object with access_key_id"),
            std::string::npos);
  Write("no-secret.json", R"({"access_key_id": ")" + std::string(kKey) + "\"}");
  EXPECT_NE(Refused(with_file("no-secret.json")).find("secret_access_key"), std::string::npos);
  Write("bad-key.json",
        R"({"access_key_id": "k", "secret_access_key": ")" + std::string(kSecret) + "\"}");
  EXPECT_NE(Refused(with_file("bad-key.json")).find("access_key_id must be 16 to 128"),
            std::string::npos);
  // Secrets readable by others are refused, as admin.json's are.
  Write("open.json",
        R"({"access_key_id": ")" + std::string(kKey) + R"(", "secret_access_key": ")" + kSecret +
            "\"}",
        0644);
  EXPECT_NE(Refused(with_file("open.json"), StatusCode::kFailedPrecondition).find("chmod 600"),
            std::string::npos);
  Write("huge.json", std::string(kMaxCredentialsFileBytes + 1, ' '));
  EXPECT_NE(Refused(with_file("huge.json")).find("is larger than"), std::string::npos);
}

TEST_F(RegionsFileTest, EnforcesItsLimits) {
  std::string many = R"({"regions": [)";
  for (size_t i = 0; i <= kMaxRegions; ++i) {
    if (i > 0) many += ", ";
    many += R"({"name": "R)" + std::to_string(i) +
            R"(", "s3_endpoint": "http://h", "jurisdiction": "EU", "access_key_id": ")" + kKey +
            R"(", "secret_access_key": ")" + kSecret + "\"}";
  }
  many += "]}";
  EXPECT_NE(Refused(many).find("regions: lists 33 regions; the limit is 32"), std::string::npos);
  const std::string big =
      R"({"regions": [], "pad": ")" + std::string(kMaxRegionsFileBytes, 'x') + "\"}";
  EXPECT_NE(Refused(big).find("; the limit is 65536"), std::string::npos);
}

TEST_F(RegionsFileTest, LoadRefusesAFileWithSecretsReadableByOthers) {
  const std::string text = One(Valid());
  const std::string open = Write("open-regions.json", text, 0644);
  auto refused = LoadRegionsFile(env_, open, kOwn);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("chmod 600 " + open), std::string::npos);
  const std::string closed = Write("regions.json", text, 0600);
  auto loaded = LoadRegionsFile(env_, closed, kOwn);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->size(), 1u);
  // Errors name the file.
  const std::string bad = Write("bad.json", "{\"regions\": 1}", 0644);
  auto parsed = LoadRegionsFile(env_, bad, kOwn);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message().rfind(bad + ": regions:", 0), 0u) << parsed.status();
  EXPECT_EQ(LoadRegionsFile(env_, dir_ + "/absent.json", kOwn).status().code(),
            StatusCode::kNotFound);
}

TEST(ValidateRegionNameTest, AcceptsTheServerRegionSyntaxOnly) {
  for (const char* ok : {"EU-WEST-LOCAL", "EU-CENTRAL-2", "CH", "A1-2"}) {
    EXPECT_TRUE(ValidateRegionName(ok).ok()) << ok;
  }
  for (const char* bad :
       {"", "E", "eu-west", "1EU", "EU_WEST", "EU WEST", "A234567890123456789012345678901234"}) {
    EXPECT_EQ(ValidateRegionName(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
}

// --- The admission rule -------------------------------------------------------------------------

const KnownRegions kKnown{"EU-WEST-LOCAL", {"EU-CENTRAL-2", "EU-NORTH-1"}};

TEST(CheckResidencyTest, OwnRegionIsAlwaysAllowed) {
  EXPECT_TRUE(CheckResidency(kKnown, "nlp", {}, "volume 'b@EU-WEST-LOCAL'", "EU-WEST-LOCAL").ok());
  EXPECT_TRUE(CheckResidency(kKnown, "nlp", {}, "", "eu-west-local").ok());
}

TEST(CheckResidencyTest, AnotherRegionIsRefusedWithTheRuleAndTheCommandThatAllowsIt) {
  base::Status st = CheckResidency(kKnown, "nlp", {}, "volume 'b@EU-CENTRAL-2/p'", "EU-CENTRAL-2");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(st.message(),
            "volume 'b@EU-CENTRAL-2/p': data residency: project 'nlp' may mount only buckets of "
            "region EU-WEST-LOCAL; a project admin can allow EU-CENTRAL-2 with `sovai project "
            "update nlp --allow-region EU-CENTRAL-2`");
  // With a region already allowed, the message and the command keep it (the list is replaced).
  st = CheckResidency(kKnown, "nlp", {"EU-NORTH-1"}, "", "eu-central-2");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(st.message(),
            "data residency: project 'nlp' may mount only buckets of regions EU-WEST-LOCAL, "
            "EU-NORTH-1; a project admin can allow EU-CENTRAL-2 with `sovai project update nlp "
            "--allow-region EU-NORTH-1 --allow-region EU-CENTRAL-2`");
}

TEST(CheckResidencyTest, AllowedAfterTheProjectSetting) {
  EXPECT_TRUE(CheckResidency(kKnown, "nlp", {"EU-CENTRAL-2"}, "", "EU-CENTRAL-2").ok());
  EXPECT_TRUE(CheckResidency(kKnown, "nlp", {"EU-CENTRAL-2"}, "", "eu-central-2").ok());
  // Allowing one region does not allow the others.
  EXPECT_EQ(CheckResidency(kKnown, "nlp", {"EU-CENTRAL-2"}, "", "EU-NORTH-1").code(),
            StatusCode::kPermissionDenied);
}

TEST(CheckResidencyTest, AnUnknownRegionIsRefusedEvenWhenTheProjectNamesIt) {
  for (const std::vector<std::string>& allowed :
       {std::vector<std::string>{}, std::vector<std::string>{"US-EAST-1"}}) {
    base::Status st = CheckResidency(kKnown, "nlp", allowed, "volume 'b@US-EAST-1'", "US-EAST-1");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message(),
              "volume 'b@US-EAST-1': region 'US-EAST-1' is not one this server knows "
              "(docs/sovereignty.md); known: EU-WEST-LOCAL, EU-CENTRAL-2, EU-NORTH-1; the "
              "project's datastores (docs/api/datastores.md): none");
  }
}

TEST(CheckSpecResidencyTest, NamesTheFirstRefusedFieldOfAJobOrAnApp) {
  JobSpec job;
  job.image = "oci:images@EU-NORTH-1/shell.tar";
  job.volumes = {"data@EU-WEST-LOCAL/ds:/workspace/data:ro:no-cache",
                 "far@EU-CENTRAL-2/ds:/workspace/far:ro:no-cache"};
  const std::vector<BucketSource> sources = SourcesOf(job);
  ASSERT_EQ(sources.size(), 3u);
  EXPECT_EQ(sources[1].field, "volumes[1]");
  EXPECT_EQ(sources[1].what, "volume 'far@EU-CENTRAL-2/ds'");
  EXPECT_EQ(sources[1].region, "EU-CENTRAL-2");
  EXPECT_EQ(sources[2].field, "image");
  EXPECT_EQ(sources[2].what, "image 'images@EU-NORTH-1/shell.tar'");
  std::string field;
  base::Status st = CheckSpecResidency(kKnown, "nlp", {}, sources, &field);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(field, "volumes[1]");
  EXPECT_EQ(st.message().rfind("volume 'far@EU-CENTRAL-2/ds': data residency: ", 0), 0u);
  field.clear();
  st = CheckSpecResidency(kKnown, "nlp", {"EU-CENTRAL-2"}, sources, &field);
  EXPECT_EQ(field, "image");
  EXPECT_TRUE(CheckSpecResidency(kKnown, "nlp", {"EU-CENTRAL-2", "EU-NORTH-1"}, sources).ok());

  AppSpec app;
  app.model = "out@EU-WEST-LOCAL/adapter";
  app.base_model = "base@EU-CENTRAL-2/llama";
  const std::vector<BucketSource> app_sources = SourcesOf(app);
  ASSERT_EQ(app_sources.size(), 2u);
  st = CheckSpecResidency(kKnown, "nlp", {}, app_sources, &field);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(field, "base_model");
  EXPECT_EQ(st.message().rfind("base model 'base@EU-CENTRAL-2/llama': data residency", 0), 0u)
      << st.message();
}

}  // namespace
}  // namespace sovai::control
