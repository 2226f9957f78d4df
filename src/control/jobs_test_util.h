// Test support for tests of JobService and of what runs on it (apps): a fixture with a real
// control database, a real object store with its S3 front end on a loopback port, and the real
// bubblewrap sandbox. SetUp skips (naming why) where bwrap cannot run, unless
// SOVAI_REQUIRE_SANDBOX is set. Not part of any library.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "base/env.h"
#include "control/jobs.h"
#include "control/postgres_test_util.h"
#include "exec/resources.h"
#include "exec/s3_test_server.h"
#include "exec/sandbox.h"
#include "exec/sandbox_test_util.h"

namespace sovai::control::testing {

inline constexpr char kProject[] = "prj_01JOBSTESTPROJECT0000000";
inline constexpr char kOtherProject[] = "prj_01JOBSTESTOTHER00000000";
// The region of StartOtherRegion's object store; the service's own is EU-WEST-LOCAL.
inline constexpr char kOtherRegion[] = "EU-CENTRAL-2";

// Owns, in this order of construction: a temporary directory, the sandbox, the S3 test server
// with an access key for kProject and kOtherProject (buckets "data" of kProject and "theirs" of
// kOtherProject), the control database and the JobService. A derived fixture that overrides
// SetUp calls JobServiceTest::SetUp first and returns when IsSkipped() or HasFatalFailure(); one
// that builds services on top of service_ destroys them before calling JobServiceTest::TearDown.
class JobServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = "/tmp/sovai-jobs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    // The workload's uid (65534 when tests run as root) traverses down to its volumes.
    ASSERT_EQ(::chmod(dir_.c_str(), 0711), 0);
    data_dir_ = base::JoinPath(dir_, "data");
    exec::SandboxOptions sandbox_options;
    sandbox_options.hidden_paths = {dir_};
    auto sandbox = exec::Sandbox::Create(env_, sandbox_options);
    if (std::string skip = exec::testing::SandboxSkipReason(sandbox.status()); !skip.empty()) {
      GTEST_SKIP() << skip;
    }
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    sandbox_ = std::move(*sandbox);
    ASSERT_TRUE(s3_.Start(base::JoinPath(dir_, "s3")).ok());
    for (const char* project : {kProject, kOtherProject}) {
      auto key = s3_.store().CreateAccessKey(project);
      ASSERT_TRUE(key.ok());
      keys_[project] = *key;
    }
    ASSERT_TRUE(s3_.store().CreateBucket("data", kProject).ok());
    ASSERT_TRUE(s3_.store().CreateBucket("theirs", kOtherProject).ok());
    auto host = exec::DiscoverHost(env_, {});
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = *host;
    OpenService();
  }

  void TearDown() override {
    service_.reset();
    db_.reset();
    other_region_.reset();
    if (!dir_.empty()) (void)env_.DeleteDirRecursive(dir_);
  }

  // (Re)opens the database and a JobService on it; the previous service is shut down first.
  void OpenService() {
    service_.reset();
    db_.reset();
    if (state_.empty()) SOVAI_STATE_LOCATION_OR_SKIP(state_, dir_);  // kept across reopens
    auto db = ControlDb::Open(state_);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
    auto service = JobService::Start(*db_, Options());
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
  }

  // The options OpenService starts its JobService with.
  JobServiceOptions Options() {
    JobServiceOptions o;
    o.data_dir = data_dir_;
    o.region = "EU-WEST-LOCAL";
    o.flavors = &FlavorCatalog::Default();
    o.capacity.cpus = host_.cpus;
    o.capacity.memory_bytes = uint64_t{64} << 30;
    o.cpu_ids = host_.cpu_ids;
    o.s3_access = [this](const std::string& project,
                         const std::string& region) -> base::Result<S3Access> {
      auto it = keys_.find(project);
      if (it == keys_.end()) return base::NotFoundError("no key for " + project);
      if (region.empty()) {
        return S3Access{s3_.endpoint(), exec::testing::kS3TestRegion, it->second.access_key,
                        it->second.secret_key};
      }
      // Another region: a stand-in for the server's rule (regions.h, tested there).
      if (!other_region_ || region != kOtherRegion) {
        return base::InvalidArgumentError("region '" + region + "' is not one this server knows");
      }
      if (!allowed_regions_.contains(region)) {
        return base::PermissionDeniedError("data residency: " + region + " is not allowed");
      }
      return S3Access{other_region_->endpoint(), exec::testing::kS3TestRegion,
                      exec::testing::kS3TestAccessKey, exec::testing::kS3TestSecretKey};
    };
    o.sandbox = sandbox_.get();
    o.env = jobs_env_;
    o.stop_grace = std::chrono::milliseconds(500);
    return o;
  }

  // Polls until the job of kProject reaches a terminal state (or `until`), up to 60 s.
  Job WaitFor(const std::string& id, std::optional<JobState> until = std::nullopt) {
    for (int i = 0; i < 6000; ++i) {
      auto job = service_->Get(kProject, id);
      SOVAI_CHECK(job.ok()) << job.status();
      if (until ? job->state == *until : IsTerminal(job->state)) return *job;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "job " << id << " did not reach the expected state in 60 s";
    return *service_->Get(kProject, id);
  }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
  std::string state_;  // control.db in dir_, or a PostgreSQL URL (postgres_test_util.h)
  std::string data_dir_;
  exec::HostResources host_;
  std::unique_ptr<exec::Sandbox> sandbox_;
  exec::testing::S3TestServer s3_;
  std::map<std::string, objstore::Credential> keys_;
  std::unique_ptr<ControlDb> db_;
  std::unique_ptr<JobService> service_;
  // The JobService's Env (nullptr: the default), for a test that hooks into it; set it before
  // OpenService.
  base::Env* jobs_env_ = nullptr;
  // Another region's object store (StartOtherRegion), reached as the admin when the region is
  // in allowed_regions_.
  std::unique_ptr<exec::testing::S3TestServer> other_region_;
  std::set<std::string> allowed_regions_;

  void StartOtherRegion() {
    other_region_ = std::make_unique<exec::testing::S3TestServer>();
    ASSERT_TRUE(other_region_->Start(base::JoinPath(dir_, "s3-" + std::string(kOtherRegion))).ok());
  }
};

}  // namespace sovai::control::testing
