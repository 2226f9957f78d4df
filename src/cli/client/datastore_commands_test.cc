// `sovai datastore add|list|get|delete` end to end against a fake of /v1/datastores on a loopback
// net::Server (the real API is covered by tests/e2e/datastores_test.py).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "cli/client/commands.h"
#include "cli/client/fake_api_test_util.h"
#include "net/http.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr char kToken[] = "sov_datastores";
constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

Json Datastore() {
  return {{"alias", "ext"},
          {"type", "s3"},
          {"endpoint", "https://s3.example.eu"},
          {"region", "eu-central-1"},
          {"access_key", "AKIAIOSFODNN7EXAMPLE"},
          {"secret_key_set", true},
          {"project", "prj_1"},
          {"created_by", "usr_1"},
          {"created_at", "2026-11-30T10:00:00Z"}};
}

// Records "METHOD target" and the last POST body; knows one datastore, "ext".
class FakeDatastoreApi {
 public:
  FakeDatastoreApi()
      : server_(StartFakeApiServer([this](net::Request& req) { return Handle(req); })) {}
  std::string url() const { return FakeApiUrl(*server_); }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  Json body() {
    std::lock_guard<std::mutex> lock(mu_);
    return body_;
  }

 private:
  net::Response Handle(net::Request& req) {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(std::string(req.method()) + " " + std::string(req.target()));
    if (req.header("Authorization").value_or("") != std::string("Bearer ") + kToken) {
      return FakeProblem(401, "unauthenticated", "bad token");
    }
    const std::string path = req.path();
    if (path == "/v1/datastores" && req.method() == "POST") {
      body_ = Json::parse(*req.body().ReadAll());
      Json d = Datastore();
      d["alias"] = body_["alias"];
      return net::Response::Json(201, d.dump());
    }
    if (path == "/v1/datastores") {
      return net::Response::Json(
          200, Json{{"items", Json::array({Datastore()})}, {"next_cursor", nullptr}}.dump());
    }
    if (path == "/v1/datastores/ext" && req.method() == "GET") {
      return net::Response::Json(200, Datastore().dump());
    }
    if (path == "/v1/datastores/ext" && req.method() == "DELETE") return net::Response::Empty(204);
    return FakeProblem(404, "not-found",
                       "datastore 'nope' not found in this project; `sovai datastore list` shows "
                       "its datastores");
  }

  std::mutex mu_;  // guards everything below
  std::vector<std::string> requests_;
  Json body_;
  std::unique_ptr<net::Server> server_;  // last: stops before the state its handlers use
};

class DatastoreCommandsTest : public FakeApiCommandTest<FakeDatastoreApi> {
 protected:
  DatastoreCommandsTest() : FakeApiCommandTest(kToken) {}

  const std::vector<std::string> kAdd = {"datastore",    "add",
                                         "s3",           "ext",
                                         "--endpoint",   "https://s3.example.eu",
                                         "--region",     "eu-central-1",
                                         "--access-key", "AKIAIOSFODNN7EXAMPLE"};
};

TEST_F(DatastoreCommandsTest, AddReadsTheSecretFromStdinAndNeverPrintsIt) {
  console_.set_stdin_line(std::string(kSecret) + "\n");
  std::vector<std::string> args = kAdd;
  args.insert(args.end(), {"--secret-key", "-"});
  ASSERT_EQ(Run(args), kExitOk) << console_.err();
  EXPECT_EQ(api_.body(), Json({{"alias", "ext"},
                               {"type", "s3"},
                               {"endpoint", "https://s3.example.eu"},
                               {"region", "eu-central-1"},
                               {"access_key", "AKIAIOSFODNN7EXAMPLE"},
                               {"secret_key", kSecret}}));
  EXPECT_EQ(console_.out(),
            "Added datastore ext (s3, https://s3.example.eu, access key AKIAIOSFODNN7EXAMPLE).\n"
            "Mount its buckets with --volume BUCKET@ext/PREFIX:/PATH.\n");
  EXPECT_EQ(console_.err(), "");
}

TEST_F(DatastoreCommandsTest, AddTakesTheSecretFromTheEnvironmentOrWarnsAboutTheFlag) {
  vars_["SOVAI_DATASTORE_SECRET_KEY"] = kSecret;
  ASSERT_EQ(Run(kAdd), kExitOk) << console_.err();
  EXPECT_EQ(api_.body()["secret_key"], kSecret);
  EXPECT_EQ(console_.err(), "");

  std::vector<std::string> args = kAdd;
  args.insert(args.end(), {"--secret-key", "on-the-line"});
  ASSERT_EQ(Run(args), kExitOk) << console_.err();
  EXPECT_EQ(api_.body()["secret_key"], "on-the-line");
  EXPECT_NE(console_.err().find("warning: --secret-key on the command line"), std::string::npos);
}

TEST_F(DatastoreCommandsTest, BadFlagsAreUsageErrorsWithoutARequest) {
  EXPECT_EQ(Run(kAdd), kExitUsage);  // no secret anywhere
  EXPECT_NE(console_.err().find("SOVAI_DATASTORE_SECRET_KEY"), std::string::npos);
  std::vector<std::string> gcs = kAdd;
  gcs[2] = "gcs";
  EXPECT_EQ(Run(gcs), kExitUsage);
  EXPECT_EQ(Run({"datastore", "add", "s3"}), kExitUsage);
  EXPECT_EQ(Run({"datastore", "get"}), kExitUsage);
  EXPECT_TRUE(api_.requests().empty());
}

TEST_F(DatastoreCommandsTest, ListGetAndDelete) {
  ASSERT_EQ(Run({"datastore", "list"}), kExitOk) << console_.err();
  const std::string table = console_.out();
  EXPECT_NE(table.find("ALIAS  TYPE  ENDPOINT"), std::string::npos) << table;
  EXPECT_NE(
      table.find("ext    s3    https://s3.example.eu  eu-central-1  AKIAIOSFODNN7EXAMPLE  set"),
      std::string::npos)
      << table;
  ASSERT_EQ(Run({"datastore", "list", "-o", "json"}), kExitOk);
  EXPECT_EQ(Json::parse(console_.out()),
            (Json{{"items", Json::array({Datastore()})}, {"next_cursor", nullptr}}));

  ASSERT_EQ(Run({"datastore", "get", "ext"}), kExitOk) << console_.err();
  EXPECT_NE(console_.out().find("Secret key:"), std::string::npos) << console_.out();
  EXPECT_NE(console_.out().find("BUCKET@ext/PREFIX:/PATH"), std::string::npos);
  EXPECT_EQ(Run({"datastore", "get", "nope"}), kExitFailure);
  EXPECT_NE(console_.err().find("datastore 'nope' not found"), std::string::npos);

  ASSERT_EQ(Run({"datastore", "delete", "ext"}), kExitOk) << console_.err();
  EXPECT_EQ(console_.out(), "Deleted datastore ext.\n");
  EXPECT_EQ(api_.requests().back(), "DELETE /v1/datastores/ext");
}

}  // namespace
}  // namespace sovai::cli::client
