// JobService end to end in one process: a real control database, a real object store with its S3
// front end on a loopback port, the real bubblewrap sandbox (the fixture of jobs_test_util.h).
// Skips (naming why) where bwrap cannot run, unless SOVAI_REQUIRE_SANDBOX is set.
#include "control/jobs.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "base/env.h"
#include "control/jobs_test_util.h"
#include "exec/s3_client.h"

namespace sovai::control {
namespace {

using base::StatusCode;
using std::chrono::milliseconds;

using testing::kOtherProject;
using testing::kProject;

class JobsTest : public testing::JobServiceTest {
 protected:
  JobSpec Shell(const std::string& script, std::vector<std::string> volumes = {}) {
    JobSpec spec;
    spec.image = "sovai/shell";
    spec.command = {"sh", "-c", script};
    spec.flavor = "ai1-1-cpu";
    spec.units = 1;
    spec.volumes = std::move(volumes);
    return spec;
  }

  Job Submit(JobSpec spec, const char* project = kProject) {
    auto job = service_->Submit(project, "usr_test", std::move(spec));
    SOVAI_CHECK(job.ok()) << job.status();
    return *job;
  }

  void PutObject(const std::string& bucket, const std::string& key, const std::string& body) {
    exec::S3Client client(s3_.ClientOptions());
    const std::string path = base::JoinPath(dir_, "upload.tmp");
    ASSERT_TRUE(env_.WriteFileAtomically(path, body).ok());
    ASSERT_TRUE(client.PutObjectFromFile(bucket, key, path).ok());
  }
  // The object's body, or std::nullopt when it does not exist.
  std::optional<std::string> GetObject(const std::string& bucket, const std::string& key) {
    exec::S3Client client(s3_.ClientOptions());
    const std::string path = base::JoinPath(dir_, "download.tmp");
    auto got = client.GetObjectToFile(bucket, key, path);
    if (!got.ok()) return std::nullopt;
    return *env_.ReadFile(path);
  }
  std::string Log(const std::string& id) {
    auto chunk = service_->ReadLog(kProject, id, 0, 1 << 20);
    SOVAI_CHECK(chunk.ok()) << chunk.status();
    return chunk->data;
  }
  // A crash of the server while job `id` runs, then a new server on the same database.
  // Shutting the old service down would record INTERRUPTED "shutting down"; a crash records
  // nothing: the row is put back to RUNNING after the shutdown to model it.
  void CrashAndRestart(const std::string& id) {
    service_.reset();
    ASSERT_TRUE(db_->Write([&](base::Database& sql) -> base::Status {
                     SOVAI_ASSIGN_OR_RETURN(
                         base::Statement st,
                         sql.Prepare("UPDATE jobs SET state = 'RUNNING' WHERE id = ?"));
                     st.Bind(1, id);
                     return st.Run();
                   })
                    .ok());
    OpenService();
  }
  static std::vector<JobState> States(const Job& job) {
    std::vector<JobState> states;
    for (const JobTransition& t : job.history) states.push_back(t.state);
    return states;
  }
};

TEST_F(JobsTest, ReadsARoVolumeWritesARwVolumeAndTheResultLandsInTheBucket) {
  PutObject("data", "dataset/a.txt", "hello\n");
  PutObject("data", "dataset/sub/b.txt", "world!\n");
  Job job =
      Submit(Shell("cat /workspace/data/a.txt /workspace/data/sub/b.txt | wc -c "
                   "> /workspace/output/result.txt && echo wrote result && "
                   "echo oops >&2 && ! touch /workspace/data/new",
                   {"data@EU-WEST-LOCAL/dataset:/workspace/data:ro",
                    "data@EU-WEST-LOCAL/output:/workspace/output:rw"}));
  Job done = WaitFor(job.id);
  EXPECT_EQ(done.state, JobState::kDone) << done.reason << "\n" << Log(job.id);
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_EQ(States(done),
            (std::vector<JobState>{JobState::kQueued, JobState::kInitializing, JobState::kPending,
                                   JobState::kRunning, JobState::kFinalizing, JobState::kDone}));
  for (size_t i = 1; i < done.history.size(); ++i) {
    EXPECT_LE(done.history[i - 1].at_unix_micros, done.history[i].at_unix_micros);
  }
  EXPECT_EQ(GetObject("data", "output/result.txt"), "13\n");
  // The ro volume was not written back.
  EXPECT_EQ(GetObject("data", "dataset/new"), std::nullopt);
  const std::string log = Log(job.id);
  EXPECT_NE(log.find(" stdout wrote result\n"), std::string::npos) << log;
  EXPECT_NE(log.find(" stderr oops\n"), std::string::npos) << log;
  EXPECT_NE(log.find(" sovai sync down data@EU-WEST-LOCAL/dataset"), std::string::npos) << log;
  // The log is archived into the project's bucket.
  auto archived = GetObject("sovai-01jobstestproject0000000", "jobs/" + job.id + "/log.txt");
  ASSERT_TRUE(archived.has_value());
  EXPECT_NE(archived->find("wrote result"), std::string::npos);
}

// Data residency in the service: a volume of another region is reached with that region's
// credentials only when s3_access hands them out (the rule itself is regions.h's), and the
// refusal names the volume's field.
TEST_F(JobsTest, AVolumeOfAnotherRegionIsSyncedFromThatRegionOnlyWhenAllowed) {
  StartOtherRegion();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(other_region_->store().CreateBucket("central", exec::testing::kS3TestAdminUser).ok());
  {
    exec::S3Client client(other_region_->ClientOptions());
    const std::string path = base::JoinPath(dir_, "upload.tmp");
    ASSERT_TRUE(env_.WriteFileAtomically(path, "from EU-CENTRAL-2\n").ok());
    ASSERT_TRUE(client.PutObjectFromFile("central", "ds/a.txt", path).ok());
  }
  const JobSpec spec = Shell(
      "cat /workspace/in/a.txt > /workspace/out/copy.txt",
      {"data@EU-WEST-LOCAL/out:/workspace/out:rw", "central@eu-central-2/ds:/workspace/in:ro"});
  std::string field;
  auto refused = service_->Submit(kProject, "usr_test", spec, &field);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(field, "volumes[1]");
  EXPECT_NE(refused.status().message().find("volume 'central@eu-central-2/ds': data residency"),
            std::string::npos)
      << refused.status();

  JobSpec unknown = spec;
  unknown.volumes[1] = "central@US-EAST-1/ds:/workspace/in:ro";
  field.clear();
  auto not_known = service_->Submit(kProject, "usr_test", unknown, &field);
  EXPECT_EQ(not_known.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(field, "volumes[1]");

  allowed_regions_.insert(testing::kOtherRegion);
  // A bucket that exists here but not in the other region is named with the region.
  JobSpec missing = spec;
  missing.volumes[1] = "data@EU-CENTRAL-2/ds:/workspace/in:ro";
  auto absent = service_->Submit(kProject, "usr_test", missing, &field);
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find("does not exist in region EU-CENTRAL-2"),
            std::string::npos)
      << absent.status();

  Job job = Submit(spec);
  Job done = WaitFor(job.id);
  EXPECT_EQ(done.state, JobState::kDone) << done.reason << "\n" << Log(job.id);
  EXPECT_EQ(GetObject("data", "out/copy.txt"), "from EU-CENTRAL-2\n");
  EXPECT_NE(Log(job.id).find("sync down central@eu-central-2/ds"), std::string::npos)
      << Log(job.id);

  // Allowed no more: refused again.
  allowed_regions_.clear();
  auto again = service_->Submit(kProject, "usr_test", spec);
  EXPECT_EQ(again.status().code(), StatusCode::kPermissionDenied);
}

TEST_F(JobsTest, RwdPropagatesDeletionsRwDoesNot) {
  PutObject("data", "keep/old.txt", "old");
  PutObject("data", "drop/old.txt", "old");
  Job rw = Submit(
      Shell("rm /out/old.txt && echo new > /out/new.txt", {"data@EU-WEST-LOCAL/keep:/out:rw"}));
  Job rwd = Submit(
      Shell("rm /out/old.txt && echo new > /out/new.txt", {"data@EU-WEST-LOCAL/drop:/out:rwd"}));
  EXPECT_EQ(WaitFor(rw.id).state, JobState::kDone) << Log(rw.id);
  EXPECT_EQ(WaitFor(rwd.id).state, JobState::kDone) << Log(rwd.id);
  EXPECT_EQ(GetObject("data", "keep/old.txt"), "old");
  EXPECT_EQ(GetObject("data", "keep/new.txt"), "new\n");
  EXPECT_EQ(GetObject("data", "drop/old.txt"), std::nullopt);
  EXPECT_EQ(GetObject("data", "drop/new.txt"), "new\n");
}

TEST_F(JobsTest, FailingExitCodeAndRestartPolicy) {
  JobSpec spec = Shell("echo try; exit 3");
  spec.restart = RestartPolicy::kOnFailure;
  spec.max_retries = 1;
  Job job = Submit(spec);
  Job failed = WaitFor(job.id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_EQ(failed.retries, 1);
  EXPECT_EQ(failed.reason, "exited with code 3");
  auto states = States(failed);
  EXPECT_EQ(std::count(states.begin(), states.end(), JobState::kRunning), 2);
  EXPECT_EQ(std::count(states.begin(), states.end(), JobState::kFailed), 2);
  const std::string log = Log(job.id);
  size_t first = log.find(" stdout try\n");
  ASSERT_NE(first, std::string::npos);
  EXPECT_NE(log.find(" stdout try\n", first + 1), std::string::npos) << "two tries in one log";
}

TEST_F(JobsTest, StopTimeoutAndTheirFinalizing) {
  Job slow = Submit(
      Shell("echo started > /out/partial.txt; sleep 60", {"data@EU-WEST-LOCAL/stopped:/out:rw"}));
  WaitFor(slow.id, JobState::kRunning);
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_TRUE(service_->Stop(kProject, slow.id).ok());
  Job stopped = WaitFor(slow.id);
  EXPECT_EQ(stopped.state, JobState::kInterrupted);
  EXPECT_EQ(stopped.reason, "stopped by a user");
  // FINALIZING still synced what it wrote.
  EXPECT_EQ(GetObject("data", "stopped/partial.txt"), "started\n");
  EXPECT_EQ(service_->Stop(kProject, slow.id).status().code(), StatusCode::kFailedPrecondition);

  JobSpec spec = Shell("sleep 60");
  spec.timeout_s = 1;
  Job timed = Submit(spec);
  Job out = WaitFor(timed.id);
  EXPECT_EQ(out.state, JobState::kTimeout);
  EXPECT_NE(out.reason.find("timeout_s 1"), std::string::npos) << out.reason;
}

TEST_F(JobsTest, QuotaKeepsASecondJobQueuedUntilTheFirstEnds) {
  ASSERT_TRUE(service_->SetQuota(kProject, Quota{std::nullopt, 1}).ok());
  // Persisted: a restarted service keeps it.
  OpenService();
  EXPECT_EQ(service_->GetQuota(kProject).max_cpus, 1);
  EXPECT_FALSE(service_->GetQuota(kProject).max_gpus.has_value());
  Job first = Submit(Shell("sleep 60"));
  WaitFor(first.id, JobState::kRunning);
  Job second = Submit(Shell("echo second"));
  auto waiting = service_->Get(kProject, second.id);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->state, JobState::kQueued);
  EXPECT_NE(waiting->reason.find("project quota: 1 CPU"), std::string::npos) << waiting->reason;
  ASSERT_TRUE(service_->Stop(kProject, first.id).ok());
  EXPECT_EQ(WaitFor(second.id).state, JobState::kDone);
}

TEST_F(JobsTest, PushDataSyncsWhileRunning) {
  Job job =
      Submit(Shell("echo step1 > /out/ckpt.txt; sleep 60", {"data@EU-WEST-LOCAL/ckpt:/out:rw"}));
  WaitFor(job.id, JobState::kRunning);
  // The file is written right after start; retry until the push sees it (up to 30 s: a loaded
  // machine may take seconds to run the shell's first line).
  std::optional<std::string> pushed;
  for (int i = 0; i < 600 && !pushed; ++i) {
    ASSERT_TRUE(service_->PushData(kProject, job.id).ok());
    pushed = GetObject("data", "ckpt/ckpt.txt");
    if (!pushed) std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(pushed, "step1\n");
  EXPECT_EQ(service_->Get(kProject, job.id)->state, JobState::kRunning);
  ASSERT_TRUE(service_->Stop(kProject, job.id).ok());
  WaitFor(job.id);
  EXPECT_EQ(service_->PushData(kProject, job.id).code(), StatusCode::kFailedPrecondition);
}

TEST_F(JobsTest, CachedVolumeIsReusedOnARerun) {
  PutObject("data", "cached/a.bin", std::string(100000, 'a'));
  PutObject("data", "cached/b.bin", std::string(100000, 'b'));
  const std::string volume = "data@EU-WEST-LOCAL/cached:/in:ro:cache";
  Job first = Submit(Shell("cat /in/a.bin /in/b.bin | wc -c", {volume}));
  EXPECT_EQ(WaitFor(first.id).state, JobState::kDone);
  PutObject("data", "cached/b.bin", std::string(100, 'c'));  // changed: downloaded again
  Job second = Submit(Shell("cat /in/a.bin /in/b.bin | wc -c", {volume}));
  EXPECT_EQ(WaitFor(second.id).state, JobState::kDone);
  const std::string log = Log(second.id);
  EXPECT_NE(log.find("1 from cache"), std::string::npos) << log;
  EXPECT_NE(log.find(" stdout 100100\n"), std::string::npos) << log;
}

TEST_F(JobsTest, ProjectsAreIsolated) {
  Job mine = Submit(Shell("echo mine"));
  WaitFor(mine.id);
  EXPECT_EQ(service_->Get(kOtherProject, mine.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(service_->ReadLog(kOtherProject, mine.id, 0, 100).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(service_->Stop(kOtherProject, mine.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(service_->Delete(kOtherProject, mine.id).code(), StatusCode::kNotFound);
  auto theirs = service_->List(kOtherProject, {}, 100, "");
  ASSERT_TRUE(theirs.ok());
  EXPECT_TRUE(theirs->jobs.empty());
  // A job cannot mount another project's bucket: its sync down is denied.
  // A job cannot mount another project's bucket: refused at submission like a missing one.
  for (const char* volume : {"theirs@EU-WEST-LOCAL:/in:ro", "missing@EU-WEST-LOCAL:/in:ro"}) {
    auto sneaky = service_->Submit(kProject, "usr_test", Shell("cat /in/*", {volume}));
    ASSERT_FALSE(sneaky.ok()) << volume;
    EXPECT_EQ(sneaky.status().code(), StatusCode::kNotFound) << sneaky.status();
    EXPECT_NE(sneaky.status().message().find("volumes[0]: bucket '"), std::string::npos)
        << sneaky.status();
  }
}

// An oci: image is data the job reads, like a volume: its archive must be there when the job is
// submitted (it used to be QUEUED and end in ERROR once INITIALIZING looked for the archive).
TEST_F(JobsTest, AnOciImageWithoutItsArchiveIsRefusedAtSubmission) {
  PutObject("data", "images/nope.tar.bak", "not the archive: only its key starts the same");
  PutObject("data", "images/there.tar", "an archive (not a valid one: the job ends in ERROR)");
  JobSpec spec = Shell("true");
  spec.image = "oci:data@EU-WEST-LOCAL/images/nope.tar";
  std::string field;
  auto refused = service_->Submit(kProject, "usr_test", spec, &field);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound) << refused.status();
  EXPECT_EQ(field, "image");
  EXPECT_EQ(refused.status().message().rfind(
                "image: the archive s3://data/images/nope.tar does not exist (upload it with", 0),
            0u)
      << refused.status();
  auto listed = service_->List(kProject, {}, 100, "");
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->jobs.empty()) << "a refused job leaves no row";
  // Another project's bucket is refused like a missing one, naming the image too.
  spec.image = "oci:theirs@EU-WEST-LOCAL/images/there.tar";
  field.clear();
  refused = service_->Submit(kProject, "usr_test", spec, &field);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound) << refused.status();
  EXPECT_EQ(field, "image");

  spec.image = "oci:data@EU-WEST-LOCAL/images/there.tar";
  Job accepted = Submit(spec);
  EXPECT_EQ(WaitFor(accepted.id).state, JobState::kError);
}

TEST_F(JobsTest, AGpuFlavorIsRefusedOnAMachineWithoutThatGpu) {
  JobSpec spec = Shell("true");
  spec.flavor = "h100-1-gpu";
  auto job = service_->Submit(kProject, "usr_test", spec);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(job.status().message().find("0 GPUs (H100)"), std::string::npos) << job.status();
}

TEST_F(JobsTest, ListFiltersByLabelsAndPages) {
  for (int i = 0; i < 5; ++i) {
    JobSpec spec = Shell("true");
    spec.labels["team"] = i % 2 == 0 ? "nlp" : "vision";
    WaitFor(Submit(spec).id);
  }
  auto nlp = service_->List(kProject, {{"team", "nlp"}}, 100, "");
  ASSERT_TRUE(nlp.ok());
  EXPECT_EQ(nlp->jobs.size(), 3u);
  auto page1 = service_->List(kProject, {}, 2, "");
  ASSERT_TRUE(page1.ok());
  ASSERT_EQ(page1->jobs.size(), 2u);
  ASSERT_FALSE(page1->next_cursor.empty());
  auto page2 = service_->List(kProject, {}, 10, page1->next_cursor);
  ASSERT_TRUE(page2.ok());
  EXPECT_EQ(page2->jobs.size(), 3u);
  EXPECT_TRUE(page2->next_cursor.empty());
  EXPECT_GT(page1->jobs[1].sequence, page2->jobs[0].sequence) << "newest first, no overlap";
  // Delete: only ended jobs; the row and the files go.
  const std::string id = page2->jobs[0].id;
  ASSERT_TRUE(service_->Delete(kProject, id).ok());
  EXPECT_EQ(service_->Get(kProject, id).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(env_.FileExists(base::JoinPath(data_dir_, "jobs/" + id)));
}

// Two servers on one database: the follower's submissions and stops reach the leader through
// the database, nothing runs twice, and the follower takes over when it becomes the leader.
TEST_F(JobsTest, AFollowerQueuesAndStopsThroughTheDatabaseAndTakesOver) {
  std::atomic<bool> follower_leads{false};
  auto follower_db = ControlDb::Open(state_);
  ASSERT_TRUE(follower_db.ok()) << follower_db.status();
  JobServiceOptions o = Options();
  o.data_dir = base::JoinPath(dir_, "follower-data");
  o.is_leader = [&] { return follower_leads.load(); };
  o.coordination_interval = std::chrono::milliseconds(20);
  auto follower = JobService::Start(**follower_db, o);
  ASSERT_TRUE(follower.ok()) << follower.status();
  EXPECT_FALSE((*follower)->leading());
  EXPECT_TRUE(service_->leading());

  // The leader here: it adopts what the follower queued (service_ has no is_leader: it always
  // leads, and it adopts through a coordinator only when it has one, so restart it with one).
  service_.reset();
  JobServiceOptions lo = Options();
  lo.is_leader = [&] { return !follower_leads.load(); };
  lo.coordination_interval = std::chrono::milliseconds(20);
  auto leader = JobService::Start(*db_, lo);
  ASSERT_TRUE(leader.ok()) << leader.status();
  service_ = std::move(*leader);

  auto done = (*follower)->Submit(kProject, "usr_1", Shell("echo ok"));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state, JobState::kQueued);
  Job finished = WaitFor(done->id);
  EXPECT_EQ(finished.state, JobState::kDone) << finished.reason;
  // Its log lives with the leader; the follower reads it through remote_log (unset here: empty).
  auto log = service_->ReadLog(kProject, done->id, 0, 1 << 20);
  ASSERT_TRUE(log.ok());
  EXPECT_NE(log->data.find("stdout ok"), std::string::npos) << log->data;

  // The sequence is the database's: a job submitted on either server comes after the last one.
  auto second = service_->Submit(kProject, "usr_1", Shell("sleep 60"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->sequence, finished.sequence);
  WaitFor(second->id, JobState::kRunning);
  auto stopping = (*follower)->Stop(kProject, second->id);
  ASSERT_TRUE(stopping.ok()) << stopping.status();
  Job stopped = WaitFor(second->id);
  EXPECT_EQ(stopped.state, JobState::kInterrupted);
  EXPECT_EQ(stopped.reason, "stopped by a user");

  // A job queued while the leadership moves is run by the new leader, once.
  follower_leads = true;
  for (int i = 0; i < 500 && (!(*follower)->leading() || service_->leading()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE((*follower)->leading());
  ASSERT_FALSE(service_->leading());
  auto third = service_->Submit(kProject, "usr_1", Shell("echo on the new leader"));
  ASSERT_TRUE(third.ok()) << third.status();
  Job ran = WaitFor(third->id);
  EXPECT_EQ(ran.state, JobState::kDone) << ran.reason;
  auto third_log = (*follower)->ReadLog(kProject, third->id, 0, 1 << 20);
  ASSERT_TRUE(third_log.ok());
  EXPECT_NE(third_log->data.find("stdout on the new leader"), std::string::npos);
  int runs = 0;
  for (const JobTransition& t : ran.history) runs += t.state == JobState::kRunning;
  EXPECT_EQ(runs, 1);
  follower->reset();
}

TEST_F(JobsTest, ARestartKeepsTheQueueAndFinalizesJobsThatWereRunning) {
  // Hold the only free CPUs with a long job, queue two more behind it.
  JobSpec hog = Shell("echo partial > /out/p.txt; sleep 60", {"data@EU-WEST-LOCAL/hog:/out:rw"});
  hog.units = host_.cpus;
  hog.flavor = "ai1-1-cpu";
  Job running = Submit(hog);
  WaitFor(running.id, JobState::kRunning);
  // Each needs the whole machine, so they run one after the other, in queue order.
  JobSpec spec_a = Shell("echo a");
  spec_a.units = host_.cpus;
  JobSpec spec_b = Shell("echo b");
  spec_b.units = host_.cpus;
  Job queued_a = Submit(spec_a);
  Job queued_b = Submit(spec_b);
  EXPECT_EQ(service_->Get(kProject, queued_a.id)->state, JobState::kQueued);
  std::this_thread::sleep_for(milliseconds(300));

  // A crash: the process's runners vanish without a word. Simulate by marking the database as a
  // dead process leaves it (the running row stays RUNNING) and reopening without Shutdown.
  std::string running_row_state;
  ASSERT_TRUE(db_->Read([&](base::Database& sql) -> base::Status {
                   SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                                          sql.Prepare("SELECT state FROM jobs WHERE id = ?"));
                   st.Bind(1, running.id);
                   SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
                   if (row) running_row_state = st.ColumnText(0);
                   return base::Status();
                 })
                  .ok());
  EXPECT_EQ(running_row_state, "RUNNING");
  CrashAndRestart(running.id);

  Job recovered = WaitFor(running.id);
  EXPECT_EQ(recovered.state, JobState::kInterrupted);
  EXPECT_EQ(recovered.reason, "the server restarted while the job was RUNNING");
  EXPECT_EQ(GetObject("data", "hog/p.txt"), "partial\n") << "outputs are synced up";
  Job a = WaitFor(queued_a.id);
  Job b = WaitFor(queued_b.id);
  EXPECT_EQ(a.state, JobState::kDone);
  EXPECT_EQ(b.state, JobState::kDone);
  auto started = [](const Job& job) {
    for (const JobTransition& t : job.history) {
      if (t.state == JobState::kInitializing) return t.at_unix_micros;
    }
    return int64_t{0};
  };
  EXPECT_LE(a.history.back().at_unix_micros, started(b)) << "FIFO kept across the restart";
}

// The restart policy after a crash of the server: the job that was RUNNING is queued again
// (same id, retries 1), its outputs synced up first, so the next try sees what the first wrote.
TEST_F(JobsTest, ARestartPolicyRunsAJobLostWithItsServerAgain) {
  JobSpec spec =
      Shell("if [ -e /out/first ]; then echo second try; exit 0; fi; echo > /out/first; sleep 60",
            {"data@EU-WEST-LOCAL/again:/out:rw"});
  spec.restart = RestartPolicy::kOnFailure;
  spec.max_retries = 1;
  Job running = Submit(spec);
  WaitFor(running.id, JobState::kRunning);
  std::this_thread::sleep_for(milliseconds(300));
  CrashAndRestart(running.id);

  Job done = WaitFor(running.id);
  EXPECT_EQ(done.state, JobState::kDone) << done.reason << "\n" << Log(running.id);
  EXPECT_EQ(done.retries, 1);
  EXPECT_NE(Log(running.id).find("stdout second try"), std::string::npos) << Log(running.id);
  // The history says why: the lost try, then QUEUED by the policy. (The simulated crash's
  // shutdown recorded an INTERRUPTED of its own before: the lost try's is the one recovery
  // wrote.)
  auto lost = std::find_if(done.history.begin(), done.history.end(), [](const JobTransition& t) {
    return t.state == JobState::kInterrupted &&
           t.reason == "the server restarted while the job was RUNNING";
  });
  ASSERT_NE(lost, done.history.end());
  ASSERT_NE(lost + 1, done.history.end());
  EXPECT_EQ((lost + 1)->state, JobState::kQueued);
  EXPECT_EQ((lost + 1)->reason,
            "restart policy: the server restarted while the job was RUNNING; try 2 of 2");
  EXPECT_NE(Log(running.id).find("try 2 of 2"), std::string::npos);
}

TEST_F(JobsTest, ARestartPolicyRunsAJobKilledFromOutsideAgainButNeverOneAUserStopped) {
  JobSpec spec =
      Shell("if [ -e /out/first ]; then echo second try; exit 0; fi; echo > /out/first; sleep 60",
            {"data@EU-WEST-LOCAL/killed:/out:rw"});
  spec.restart = RestartPolicy::kOnFailure;
  spec.max_retries = 2;
  Job killed = Submit(spec);
  WaitFor(killed.id, JobState::kRunning);
  std::this_thread::sleep_for(milliseconds(300));
  // kill -9 of the sandbox's processes, as an OOM killer or an operator does.
  auto pids = service_->ProcessIds(killed.id);
  ASSERT_TRUE(pids.ok()) << pids.status();
  ASSERT_FALSE(pids->empty());
  for (pid_t pid : *pids) ::kill(pid, SIGKILL);
  Job done = WaitFor(killed.id);
  EXPECT_EQ(done.state, JobState::kDone) << done.reason << "\n" << Log(killed.id);
  EXPECT_EQ(done.retries, 1);
  EXPECT_NE(Log(killed.id).find("restart policy: "), std::string::npos) << Log(killed.id);

  spec.volumes = {"data@EU-WEST-LOCAL/stopped-once:/out:rw"};
  Job stopped = Submit(spec);
  WaitFor(stopped.id, JobState::kRunning);
  ASSERT_TRUE(service_->Stop(kProject, stopped.id).ok());
  Job after = WaitFor(stopped.id);
  EXPECT_EQ(after.state, JobState::kInterrupted);
  EXPECT_EQ(after.reason, "stopped by a user");
  EXPECT_EQ(after.retries, 0);
}

}  // namespace
}  // namespace sovai::control
