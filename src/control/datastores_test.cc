#include "control/datastores.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "base/crypto.h"
#include "control/job_spec.h"
#include "exec/volume_spec.h"

namespace sovai::control {
namespace {

using base::StatusCode;

const KnownRegions kKnown{"EU-WEST-LOCAL", {"EU-CENTRAL-2"}};
constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

NewDatastore Valid(std::string alias = "ext") {
  return NewDatastore{.alias = std::move(alias),
                      .endpoint = "http://127.0.0.1:9000",
                      .region = "eu-west-local",
                      .access_key = "AKIAIOSFODNN7EXAMPLE",
                      .secret_key = kSecret};
}

// The fields of the errors, in order.
std::vector<std::string> Fields(const std::vector<FieldError>& errors) {
  std::vector<std::string> out;
  for (const FieldError& e : errors) out.push_back(e.field);
  return out;
}

TEST(ValidateDatastoreTest, AliasesAreVolumeRegionsAndNeverAKnownRegion) {
  for (const std::string& alias :
       std::vector<std::string>{"ext", "EXT", "my-ceph-1", "ab", std::string(32, 'a')}) {
    EXPECT_TRUE(ValidateDatastoreAlias(alias).ok()) << alias;
    // Whatever is accepted here is a REGION of a volume spec.
    EXPECT_TRUE(exec::ParseVolumeSpec("data@" + alias + "/p:/mnt").ok()) << alias;
  }
  for (const std::string& alias :
       std::vector<std::string>{"", "e", "1ext", "-ext", "ex t", "ext.1", "ext_1", "ext/1", "ext:1",
                                "é-ext", std::string(33, 'a')}) {
    base::Status st = ValidateDatastoreAlias(alias);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << alias;
    EXPECT_NE(st.message().find("must be 2 to 32 letters"), std::string::npos) << st.message();
  }
  // The server's region and those of --regions, in any case.
  for (std::string alias : {"EU-WEST-LOCAL", "eu-west-local", "Eu-Central-2"}) {
    std::vector<FieldError> errors = ValidateNewDatastore(Valid(alias), kKnown);
    ASSERT_EQ(Fields(errors), std::vector<std::string>{"alias"}) << alias;
    EXPECT_NE(errors[0].message.find("region"), std::string::npos) << errors[0].message;
  }
  EXPECT_TRUE(ValidateNewDatastore(Valid(), kKnown).empty());
}

TEST(ValidateDatastoreTest, NamesEveryBadFieldAndNeverQuotesTheSecret) {
  NewDatastore bad{.alias = "9x",
                   .type = "gcs",
                   .endpoint = "ftp://s3.example.eu",
                   .region = "EU-WEST",
                   .access_key = "has space",
                   .secret_key = "secret with space"};
  std::vector<FieldError> errors = ValidateNewDatastore(bad, kKnown);
  EXPECT_EQ(Fields(errors), (std::vector<std::string>{"alias", "type", "endpoint", "region",
                                                      "access_key", "secret_key"}));
  for (const FieldError& e : errors) {
    EXPECT_EQ(e.message.find("secret with space"), std::string::npos) << e.message;
  }
  for (std::string endpoint : {"https://s3.example.eu/bucket", "http://user@host", "s3.example.eu",
                               "http://", "https://host:0", "https://host:65536"}) {
    NewDatastore d = Valid();
    d.endpoint = endpoint;
    EXPECT_EQ(Fields(ValidateNewDatastore(d, kKnown)), std::vector<std::string>{"endpoint"})
        << endpoint;
  }
  for (std::string endpoint : {"https://s3.example.eu", "http://10.0.0.1:7480", "https://[::1]"}) {
    NewDatastore d = Valid();
    d.endpoint = endpoint;
    EXPECT_TRUE(ValidateNewDatastore(d, kKnown).empty()) << endpoint;
  }
  NewDatastore empty = Valid();
  empty.access_key = "";
  empty.secret_key = std::string(kMaxDatastoreSecretBytes + 1, 's');
  EXPECT_EQ(Fields(ValidateNewDatastore(empty, kKnown)),
            (std::vector<std::string>{"access_key", "secret_key"}));
}

class DatastoresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sovai-datastores-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto db = ControlDb::Open(dir_ + "/control.db", {.env = &env_});
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    stores_ = std::make_unique<Datastores>(*db_, env_, dir_ + "/" + kSecretsKeyFile);
  }
  void TearDown() override {
    stores_.reset();
    db_.reset();
    env_.DeleteDirRecursive(dir_).IgnoreError();
  }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
  std::unique_ptr<ControlDb> db_;
  std::unique_ptr<Datastores> stores_;
};

TEST_F(DatastoresTest, AddListGetDeleteWithinAProject) {
  auto added = stores_->Add("prj_a", "usr_1", Valid("Ext"));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->alias, "ext");  // stored in lowercase
  EXPECT_EQ(added->project, "prj_a");
  EXPECT_EQ(added->type, "s3");
  EXPECT_EQ(added->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(added->region, "eu-west-local");
  EXPECT_EQ(added->access_key, "AKIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(added->created_by, "usr_1");
  ASSERT_TRUE(stores_->Add("prj_a", "usr_1", Valid("ceph")).ok());

  // Duplicates in any case: AlreadyExists.
  EXPECT_EQ(stores_->Add("prj_a", "usr_1", Valid("EXT")).status().code(),
            StatusCode::kAlreadyExists);
  // Another project may use the same alias for its own datastore.
  ASSERT_TRUE(stores_->Add("prj_b", "usr_2", Valid("ext")).ok());

  auto page = stores_->List("prj_a", {.limit = 1});
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].alias, "ceph");
  ASSERT_EQ(page->next_cursor, "ceph");
  auto rest = stores_->List("prj_a", {.limit = 10, .after = "ceph"});
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->items.size(), 1u);
  EXPECT_EQ(rest->items[0].alias, "ext");
  EXPECT_FALSE(rest->next_cursor);
  EXPECT_EQ(*stores_->Aliases("prj_a"), (std::vector<std::string>{"ceph", "ext"}));
  EXPECT_TRUE(stores_->Aliases("prj_c")->empty());

  auto got = stores_->Get("prj_a", "EXT");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->alias, "ext");
  auto credentials = stores_->Credentials("prj_a", "ext");
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_EQ(credentials->secret_key, kSecret);
  EXPECT_EQ(credentials->datastore.endpoint, "http://127.0.0.1:9000");

  // Another project's alias is exactly as unknown as one nobody registered.
  EXPECT_TRUE(stores_->Delete("prj_b", "ext").ok());
  for (const char* project : {"prj_b", "prj_c"}) {
    auto missing = stores_->Credentials(project, "ext");
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    EXPECT_EQ(missing.status().message(),
              "datastore 'ext' not found in this project; `sovai datastore list` shows its "
              "datastores");
    EXPECT_EQ(stores_->Get(project, "ext").status().code(), StatusCode::kNotFound);
    EXPECT_EQ(stores_->Delete(project, "ext").code(), StatusCode::kNotFound);
  }
  ASSERT_TRUE(stores_->Delete("prj_a", "EXT").ok());
  EXPECT_EQ(stores_->Get("prj_a", "ext").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*stores_->Aliases("prj_a"), std::vector<std::string>{"ceph"});
}

TEST_F(DatastoresTest, TheSecretIsSealedAtRestAndBoundToItsRow) {
  ASSERT_TRUE(stores_->Add("prj_a", "usr_1", Valid("ext")).ok());
  ASSERT_TRUE(stores_->Add("prj_a", "usr_1", Valid("other")).ok());
  auto stat = env_.Stat(dir_ + "/" + kSecretsKeyFile);
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->mode & 0777, 0600u);
  // Neither the database nor its write-ahead log holds the secret in clear.
  for (const char* file : {"/control.db", "/control.db-wal"}) {
    auto bytes = env_.ReadFile(dir_ + file, 64 << 20);
    if (!bytes.ok()) continue;
    EXPECT_EQ(bytes->find(kSecret), std::string::npos) << file;
    EXPECT_EQ(bytes->find("wJalrXUtnFEMI"), std::string::npos) << file;
  }
  // A sealed secret moved into another row does not open there.
  ASSERT_TRUE(db_->Write([](base::Database& sql) -> base::Status {
                   return sql.Exec(
                       "UPDATE datastores SET secret_sealed = (SELECT secret_sealed FROM "
                       "datastores WHERE alias = 'other') WHERE alias = 'ext'");
                 })
                  .ok());
  EXPECT_EQ(stores_->Credentials("prj_a", "ext").status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(stores_->Credentials("prj_a", "other").ok());
  // A modified byte is refused, and the listing still works (it never opens secrets).
  ASSERT_TRUE(db_->Write([](base::Database& sql) -> base::Status {
                   return sql.Exec(
                       "UPDATE datastores SET secret_sealed = X'00' || substr(secret_sealed, 2) "
                       "WHERE alias = 'other'");
                 })
                  .ok());
  auto tampered = stores_->Credentials("prj_a", "other");
  EXPECT_EQ(tampered.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(tampered.status().message().find("datastore 'other'"), std::string::npos);
  EXPECT_TRUE(stores_->List("prj_a", {}).ok());
}

TEST_F(DatastoresTest, ALostMasterKeyIsNamed) {
  ASSERT_TRUE(stores_->Add("prj_a", "usr_1", Valid("ext")).ok());
  ASSERT_TRUE(env_.DeleteFile(dir_ + "/" + kSecretsKeyFile).ok());
  Datastores restarted(*db_, env_, dir_ + "/" + kSecretsKeyFile);
  auto opened = restarted.Credentials("prj_a", "ext");
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find("secrets.key is missing"), std::string::npos)
      << opened.status();
  // Listing and getting need no key.
  EXPECT_TRUE(restarted.Get("prj_a", "ext").ok());
}

TEST_F(DatastoresTest, AProjectHasAtMostTheLimit) {
  for (int64_t i = 0; i < kMaxDatastoresPerProject; ++i) {
    ASSERT_TRUE(stores_->Add("prj_a", "usr_1", Valid("ds" + std::to_string(i))).ok()) << i;
  }
  auto over = stores_->Add("prj_a", "usr_1", Valid("one-more"));
  EXPECT_EQ(over.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(over.status().message().find("delete unused ones first"), std::string::npos);
}

TEST(DatastoreSpecTest, AJobMountsItsProjectsDatastoresOnly) {
  const FlavorCatalog& flavors = FlavorCatalog::Default();
  nlohmann::json body = {
      {"image", "sovai/shell"},
      {"command", {"true"}},
      {"flavor", "ai1-1-cpu"},
      {"volumes", {"input@ext/data:/mnt/in:ro", "output@EXT/results:/mnt/out:rw"}}};
  auto without = ParseJobSpec(body, SpecContext{&flavors, "EU-WEST-LOCAL", {"EU-CENTRAL-2"}});
  ASSERT_TRUE(std::holds_alternative<SpecError>(without));
  const SpecError& error = std::get<SpecError>(without);
  ASSERT_EQ(error.fields.size(), 1u);
  EXPECT_EQ(error.fields[0].field, "volumes");
  EXPECT_NE(
      error.fields[0].message.find("known: EU-WEST-LOCAL, EU-CENTRAL-2; the project's datastores "
                                   "(docs/api/datastores.md): none"),
      std::string::npos)
      << error.fields[0].message;
  auto with = ParseJobSpec(body, SpecContext{&flavors, "EU-WEST-LOCAL", {}, {"ext"}});
  ASSERT_TRUE(std::holds_alternative<JobSpec>(with));
  // The job record names the datastore as the volume's source.
  EXPECT_EQ(std::get<JobSpec>(with).volumes[0], "input@ext/data:/mnt/in:ro:no-cache");
  EXPECT_EQ(exec::ParseVolumeSpec(std::get<JobSpec>(with).volumes[1])->SourceName(),
            "output@EXT/results");

  // The residency rule admits the project's own datastores.
  KnownRegions known = kKnown;
  known.datastores = {"ext"};
  EXPECT_TRUE(CheckResidency(known, "nlp", {}, "volume 'in@ext/data'", "ext").ok());
  EXPECT_TRUE(CheckResidency(known, "nlp", {}, "volume 'in@EXT/data'", "EXT").ok());
  base::Status unknown = CheckResidency(known, "nlp", {}, "volume 'in@ceph'", "ceph");
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.message(),
            "volume 'in@ceph': region 'ceph' is not one this server knows (docs/sovereignty.md); "
            "known: EU-WEST-LOCAL, EU-CENTRAL-2; the project's datastores "
            "(docs/api/datastores.md): ext");
  // A region wins over an alias of the same name: the residency rule still applies to it.
  known.datastores = {"eu-central-2"};
  EXPECT_EQ(CheckResidency(known, "nlp", {}, "", "EU-CENTRAL-2").code(),
            StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace sovai::control
