// NotebookService on the real JobService (jobs_test_util.h: a real control database, object
// store and bwrap sandbox). The notebook's program is a stand-in for Jupyter written in Python
// (its /api/status and /api/kernels, the token check, a file written into the rw volume), so the
// state machine is tested without Jupyter; one test runs the real jupyter-notebook when the host
// has it.
#include "control/notebooks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/json.h"
#include "control/jobs_test_util.h"
#include "exec/s3_client.h"
#include "net/client.h"

namespace sovai::control {
namespace {

using std::chrono::milliseconds;
using testing::kOtherProject;
using testing::kProject;

constexpr char kUser[] = "usr_01NOTEBOOKSTESTUSER00000";
constexpr auto kDeadline = std::chrono::seconds(60);

// Jupyter's flags in, Jupyter's answers out. FAKE_MODE: "" (idle kernel), "busy" (a kernel
// computing), "exit" (dies at once), "mute" (never answers 200).
constexpr char kFakeJupyter[] = R"py(
import datetime, http.server, json, os, signal, sys
args = dict(a.split('=', 1) for a in sys.argv[1:] if '=' in a)
port, base = int(args['--port']), args['--NotebookApp.base_url']
workdir, token = args['--NotebookApp.notebook_dir'], os.environ['JUPYTER_TOKEN']
mode = os.environ.get('FAKE_MODE', '')
if mode == 'exit':
    sys.exit(3)
started = datetime.datetime.utcnow().isoformat() + 'Z'
out = os.path.join(workdir, 'out')
if os.path.isdir(out):
    with open(os.path.join(out, 'hello.txt'), 'w') as f:
        f.write('from the notebook\n')
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if mode == 'mute':
            self.send_response(503); self.end_headers(); return
        if self.headers.get('Authorization') != 'token ' + token:
            self.send_response(403); self.end_headers(); return
        path = self.path.split('?')[0]
        if path == base + 'api/status':
            body = {'last_activity': started, 'started': started, 'connections': 0,
                    'kernels': 1 if mode == 'busy' else 0}
        elif path == base + 'api/kernels':
            body = [{'id': 'k1', 'execution_state': 'busy' if mode == 'busy' else 'idle'}]
        else:
            self.send_response(404); self.end_headers(); return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))
print('fake jupyter on', port, base, flush=True)
http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()
)py";

// code-server's flags and environment in, its /healthz out: the heartbeat is FAKE_BEAT_MS (0 =
// now); "/" answers 200 only with the session cookie that HASHED_PASSWORD names.
constexpr char kFakeCodeServer[] = R"py(
import http.server, json, os, signal, sys, time
argv = sys.argv[1:]
host, port = argv[argv.index('--bind-addr') + 1].rsplit(':', 1)
workspace, token = argv[-1], os.environ['HASHED_PASSWORD']
assert argv[argv.index('--auth') + 1] == 'password'
out = os.path.join(workspace, 'out')
if os.path.isdir(out):
    with open(os.path.join(out, 'hello.txt'), 'w') as f:
        f.write('from vs code\n')
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == '/healthz':
            beat = int(os.environ.get('FAKE_BEAT_MS', '0')) or int(time.time() * 1000)
            body = {'status': 'alive', 'lastHeartbeat': beat}
        elif 'code-server-session=' + token in self.headers.get('Cookie', ''):
            body = {'workbench': True}
        else:
            self.send_response(302); self.send_header('Location', './login'); self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))
print('fake code-server on', port, 'in', workspace, flush=True)
http.server.HTTPServer((host, int(port)), H).serve_forever()
)py";

class NotebooksTest : public testing::JobServiceTest {
 protected:
  using JobServiceTest::WaitFor;  // a job's

  void SetUp() override {
    JobServiceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    OpenNotebooks();
  }

  void TearDown() override {
    notebooks_.reset();  // before the JobService it uses
    JobServiceTest::TearDown();
  }

  void OpenNotebooks(std::vector<std::string> command = {"python3", "-c", kFakeJupyter}) {
    notebooks_.reset();
    notebooks_ = StartNotebooks(*db_, is_leader_, std::move(command));
  }

  // A NotebookService on `db` (the fixture's, or another connection to its database) with the
  // fixture's options; it submits jobs to the fixture's JobService.
  std::unique_ptr<NotebookService> StartNotebooks(ControlDb& db, std::function<bool()> is_leader,
                                                  std::vector<std::string> command = {
                                                      "python3", "-c", kFakeJupyter}) {
    NotebookServiceOptions o;
    o.jobs = service_.get();
    o.jupyter_command = std::move(command);
    o.vscode_command = vscode_command_;
    o.reconcile_interval = milliseconds(50);
    o.probe_interval = milliseconds(100);
    o.activity_poll_interval = milliseconds(100);
    o.start_timeout = start_timeout_;
    o.is_leader = std::move(is_leader);
    auto notebooks = NotebookService::Start(db, std::move(o));
    EXPECT_TRUE(notebooks.ok()) << notebooks.status();
    return notebooks.ok() ? std::move(*notebooks) : nullptr;
  }

  static NotebookSpec Spec(std::string name = "", int64_t idle_timeout_s = 0) {
    NotebookSpec spec;
    spec.name = std::move(name);
    spec.flavor = "ai1-1-cpu";
    spec.idle_timeout_s = idle_timeout_s;
    spec.volumes = {"data@EU-WEST-LOCAL/out:/workspace/out:rw"};
    return spec;
  }

  Notebook Create(NotebookSpec spec) {
    auto nb = notebooks_->Create(kProject, kUser, std::move(spec));
    SOVAI_CHECK(nb.ok()) << nb.status();
    return *nb;
  }

  // Polls `on` (nullptr: notebooks_) until the notebook is in `state`, up to kDeadline.
  Notebook WaitFor(const std::string& id, NotebookState state, NotebookService* on = nullptr) {
    if (on == nullptr) on = notebooks_.get();
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    for (;;) {
      auto nb = on->Get(kProject, id);
      SOVAI_CHECK(nb.ok()) << nb.status();
      if (nb->state == state) return *nb;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "notebook " << id << " is not " << NotebookStateName(state)
                      << " after 60 s: " << NotebookToJson(*nb, "").dump() << "\nlog:\n"
                      << Log(id);
        return *nb;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }

  std::string Log(const std::string& id) {
    auto chunk = notebooks_->ReadLog(kProject, id, "", 0, 1 << 20);
    return chunk.ok() ? chunk->data : chunk.status().ToString();
  }

  std::optional<std::string> GetObject(const std::string& bucket, const std::string& key) {
    exec::S3Client client(s3_.ClientOptions());
    const std::string path = base::JoinPath(dir_, "download.tmp");
    auto got = client.GetObjectToFile(bucket, key, path);
    if (!got.ok()) return std::nullopt;
    return *env_.ReadFile(path);
  }

  milliseconds start_timeout_{20'000};
  std::vector<std::string> vscode_command_ = {"python3", "-c", kFakeCodeServer};
  std::function<bool()> is_leader_;  // NotebookServiceOptions::is_leader of OpenNotebooks
  std::unique_ptr<NotebookService> notebooks_;
};

TEST_F(NotebooksTest, RunsStopsSyncsItsRwVolumeAndStartsAgain) {
  Notebook nb = Create(Spec("explore"));
  EXPECT_TRUE(nb.id.starts_with("nb_"));
  EXPECT_EQ(nb.state, NotebookState::kStarting);
  EXPECT_FALSE(nb.job.empty());
  EXPECT_GT(nb.port, 0);
  nb = WaitFor(nb.id, NotebookState::kRunning);
  // The job carries the notebook's label; the route has what the gateway needs.
  auto job = service_->Get(kProject, nb.job);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->spec.labels.at("sovai.notebook"), nb.id);
  std::optional<NotebookRoute> route = notebooks_->Route(nb.id);
  ASSERT_TRUE(route.has_value());
  EXPECT_EQ(route->project, kProject);
  EXPECT_EQ(route->state, NotebookState::kRunning);
  EXPECT_EQ(route->port, nb.port);
  EXPECT_FALSE(route->jupyter_token.empty());
  // The token is the platform's: not in the REST representation.
  EXPECT_EQ(NotebookToJson(nb, "http://h").dump().find(route->jupyter_token), std::string::npos);
  EXPECT_EQ(NotebookToJson(nb, "http://h")["url"], "http://h/notebooks/" + nb.id + "/");
  // By name, too; another project sees nothing.
  EXPECT_TRUE(notebooks_->Get(kProject, "explore").ok());
  EXPECT_EQ(notebooks_->Get(kOtherProject, nb.id).status().code(), base::StatusCode::kNotFound);

  auto stopped = notebooks_->Stop(kProject, "explore");
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->state, NotebookState::kStopping);
  nb = WaitFor(nb.id, NotebookState::kStopped);
  EXPECT_EQ(nb.reason, "stopped by the user");
  job = service_->Get(kProject, nb.job);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kInterrupted);
  // STOPPED means synced: what the notebook wrote is in the bucket.
  EXPECT_EQ(GetObject("data", "out/hello.txt"), "from the notebook\n");

  const std::string first_job = nb.job;
  const std::string first_token = route->jupyter_token;
  auto started = notebooks_->StartNotebook(kProject, nb.id);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->state, NotebookState::kStarting);
  EXPECT_NE(started->job, first_job);
  nb = WaitFor(nb.id, NotebookState::kRunning);
  EXPECT_NE(notebooks_->Route(nb.id)->jupyter_token, first_token);
  EXPECT_EQ(nb.recent_jobs, (std::vector<std::string>{first_job, nb.job}));
  EXPECT_NE(Log(nb.id).find("fake jupyter on"), std::string::npos);
  // Only STOPPED, FAILED or ERROR notebooks start.
  EXPECT_EQ(notebooks_->StartNotebook(kProject, nb.id).status().code(),
            base::StatusCode::kFailedPrecondition);
}

TEST_F(NotebooksTest, TheIdleTimeoutStopsAForgottenNotebook) {
  Notebook nb = Create(Spec("", /*idle_timeout_s=*/1));
  WaitFor(nb.id, NotebookState::kRunning);
  nb = WaitFor(nb.id, NotebookState::kStopped);
  EXPECT_NE(nb.reason.find("idle timeout"), std::string::npos) << nb.reason;
  bool logged = false;
  for (const NotebookEvent& e : nb.events) logged |= e.what.find("idle") != std::string::npos;
  EXPECT_TRUE(logged);
  EXPECT_EQ(GetObject("data", "out/hello.txt"), "from the notebook\n");
}

TEST_F(NotebooksTest, ABusyKernelOrAGatewayRequestIsActivity) {
  NotebookSpec busy = Spec("busy", 1);
  busy.env["FAKE_MODE"] = "busy";
  Notebook computing = Create(busy);
  Notebook used = Create(Spec("used", 1));
  WaitFor(computing.id, NotebookState::kRunning);
  WaitFor(used.id, NotebookState::kRunning);
  for (int i = 0; i < 25; ++i) {
    notebooks_->NoteActivity(used.id);  // what the gateway does on each request
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(notebooks_->Get(kProject, computing.id)->state, NotebookState::kRunning);
  EXPECT_EQ(notebooks_->Get(kProject, used.id)->state, NotebookState::kRunning);
  // Once the requests stop, it is idle.
  WaitFor(used.id, NotebookState::kStopped);
  EXPECT_EQ(notebooks_->Get(kProject, computing.id)->state, NotebookState::kRunning);
}

TEST_F(NotebooksTest, JupyterExitingIsFailedAndStartsAgain) {
  NotebookSpec spec = Spec("dies");
  spec.env["FAKE_MODE"] = "exit";
  Notebook nb = Create(spec);
  nb = WaitFor(nb.id, NotebookState::kFailed);
  EXPECT_NE(nb.reason.find("Jupyter exited"), std::string::npos) << nb.reason;
  EXPECT_NE(nb.reason.find("sovai notebook logs"), std::string::npos) << nb.reason;
  EXPECT_TRUE(notebooks_->StartNotebook(kProject, nb.id).ok());
  WaitFor(nb.id, NotebookState::kFailed);
}

TEST_F(NotebooksTest, NoAnswerWithinTheStartTimeoutIsFailedAndTheJobStops) {
  start_timeout_ = milliseconds(1'500);
  OpenNotebooks();
  NotebookSpec spec = Spec("mute");
  spec.env["FAKE_MODE"] = "mute";
  Notebook nb = Create(spec);
  nb = WaitFor(nb.id, NotebookState::kFailed);
  EXPECT_NE(nb.reason.find("did not answer"), std::string::npos) << nb.reason;
  Job job = WaitFor(nb.job);
  EXPECT_EQ(job.state, JobState::kInterrupted);
}

TEST_F(NotebooksTest, DeleteStopsTheJobAndFreesTheName) {
  Notebook nb = Create(Spec("scratch"));
  WaitFor(nb.id, NotebookState::kRunning);
  auto taken = notebooks_->Create(kProject, kUser, Spec("scratch"));
  EXPECT_EQ(taken.status().code(), base::StatusCode::kAlreadyExists);
  // Another project may use the name.
  NotebookSpec theirs = Spec("scratch");
  theirs.volumes.clear();
  auto other = notebooks_->Create(kOtherProject, kUser, theirs);
  ASSERT_TRUE(other.ok()) << other.status();

  auto deleted = notebooks_->Delete(kProject, "scratch");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->state, NotebookState::kDeleting);
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (notebooks_->Get(kProject, nb.id).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(notebooks_->Get(kProject, nb.id).status().code(), base::StatusCode::kNotFound);
  EXPECT_FALSE(notebooks_->Route(nb.id).has_value());
  EXPECT_TRUE(IsTerminal(WaitFor(nb.job).state));
  EXPECT_EQ(GetObject("data", "out/hello.txt"), "from the notebook\n");
  auto again = notebooks_->Create(kProject, kUser, Spec("scratch"));
  EXPECT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(notebooks_->List(kProject, {})->size(), 1u);
  (void)notebooks_->Delete(kOtherProject, other->id);
}

TEST_F(NotebooksTest, AMissingBucketIsRefusedAndLeavesNothing) {
  NotebookSpec spec = Spec("nobucket");
  spec.volumes = {"missing@EU-WEST-LOCAL/x:/workspace/x:rw"};
  std::string bad_field;
  auto nb = notebooks_->Create(kProject, kUser, spec, &bad_field);
  EXPECT_EQ(nb.status().code(), base::StatusCode::kNotFound);
  EXPECT_EQ(bad_field, "volumes[0]");
  EXPECT_TRUE(notebooks_->List(kProject, {})->empty());
  auto jobs = service_->List(kProject, {}, 10, "");
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->jobs.empty());
}

// "Sync now": with sync=end nothing goes up by itself while the notebook runs; PushData does.
TEST_F(NotebooksTest, SyncNowUploadsTheRwVolumeWhileItRuns) {
  NotebookSpec spec = Spec("sync-now");
  spec.volumes = {"data@EU-WEST-LOCAL/now:/workspace/out:rw:sync=end"};
  Notebook nb = Create(spec);
  EXPECT_EQ(notebooks_->PushData(kProject, nb.id).code(), base::StatusCode::kFailedPrecondition)
      << "STARTING";
  nb = WaitFor(nb.id, NotebookState::kRunning);
  EXPECT_EQ(GetObject("data", "now/hello.txt"), std::nullopt);
  ASSERT_TRUE(notebooks_->PushData(kProject, "sync-now").ok());
  EXPECT_EQ(GetObject("data", "now/hello.txt"), "from the notebook\n");
  EXPECT_EQ(notebooks_->Get(kProject, nb.id)->state, NotebookState::kRunning);
  EXPECT_EQ(notebooks_->PushData(kOtherProject, nb.id).code(), base::StatusCode::kNotFound);
  ASSERT_TRUE(notebooks_->Stop(kProject, nb.id).ok());
  WaitFor(nb.id, NotebookState::kStopped);
  EXPECT_EQ(notebooks_->PushData(kProject, nb.id).code(), base::StatusCode::kFailedPrecondition);

  // Without a writable volume there is nothing to sync.
  NotebookSpec ro = Spec("read-only");
  ro.volumes = {"data@EU-WEST-LOCAL/now:/workspace/in:ro"};
  Notebook reader = WaitFor(Create(ro).id, NotebookState::kRunning);
  EXPECT_EQ(notebooks_->PushData(kProject, reader.id).code(),
            base::StatusCode::kFailedPrecondition);
}

// An image is checked when the notebook's job is submitted, naming `image`; nothing is left.
TEST_F(NotebooksTest, AnImageThatIsNotThereIsRefusedNamingIt) {
  NotebookSpec spec = Spec("boxed");
  spec.image = "oci:data@EU-WEST-LOCAL/images/missing.tar";
  std::string bad_field;
  auto nb = notebooks_->Create(kProject, kUser, spec, &bad_field);
  EXPECT_EQ(nb.status().code(), base::StatusCode::kNotFound) << nb.status();
  EXPECT_EQ(bad_field, "image");
  // A registry image on a server without a registry (this fixture's JobService).
  spec.image = "torch-notebook:2.4";
  bad_field.clear();
  nb = notebooks_->Create(kProject, kUser, spec, &bad_field);
  EXPECT_EQ(nb.status().code(), base::StatusCode::kFailedPrecondition) << nb.status();
  EXPECT_EQ(bad_field, "image");
  EXPECT_NE(nb.status().message().find("torch-notebook:2.4"), std::string::npos);
  EXPECT_TRUE(notebooks_->List(kProject, {})->empty());
  auto jobs = service_->List(kProject, {}, 10, "");
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->jobs.empty());
}

TEST_F(NotebooksTest, LabelsFilterTheList) {
  NotebookSpec a = Spec("a");
  a.labels = {{"team", "nlp"}};
  Create(a);
  Create(Spec("b"));
  auto nlp = notebooks_->List(kProject, {{"team", "nlp"}});
  ASSERT_TRUE(nlp.ok());
  ASSERT_EQ(nlp->size(), 1u);
  EXPECT_EQ((*nlp)[0].spec.name, "a");
  EXPECT_EQ(notebooks_->List(kProject, {})->size(), 2u);
}

TEST_F(NotebooksTest, ARestartLeavesLiveNotebooksStopped) {
  Notebook nb = Create(Spec("survivor"));
  WaitFor(nb.id, NotebookState::kRunning);
  notebooks_.reset();
  OpenService();  // the JobService of the new process: the job is INTERRUPTED, outputs synced
  OpenNotebooks();
  auto after = notebooks_->Get(kProject, nb.id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->state, NotebookState::kStopped);
  EXPECT_NE(after->reason.find("restarted"), std::string::npos) << after->reason;
  EXPECT_EQ(GetObject("data", "out/hello.txt"), "from the notebook\n");
  EXPECT_TRUE(notebooks_->StartNotebook(kProject, nb.id).ok());
  WaitFor(nb.id, NotebookState::kRunning);
}

// Two servers on one database: while this server does not lead, its loop neither probes Jupyter
// nor stops a job; once it leads, its next rounds do both.
TEST_F(NotebooksTest, TheLoopActsOnlyWhileThisServerLeads) {
  std::atomic<bool> leader = false;
  is_leader_ = [&] { return leader.load(); };
  OpenNotebooks();
  Notebook nb = Create(Spec("waits"));
  WaitFor(nb.job, JobState::kRunning);  // the JobService leads: the job runs, Jupyter answers
  std::this_thread::sleep_for(milliseconds(1'000));  // 20 rounds, 10 probe intervals
  EXPECT_EQ(notebooks_->Get(kProject, nb.id)->state, NotebookState::kStarting)
      << "a follower does not probe";
  leader = true;
  WaitFor(nb.id, NotebookState::kRunning);

  leader = false;
  std::this_thread::sleep_for(milliseconds(200));  // a round in flight ends
  auto stopping = notebooks_->Stop(kProject, nb.id);
  ASSERT_TRUE(stopping.ok()) << stopping.status();
  EXPECT_EQ(stopping->state, NotebookState::kStopping);
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(notebooks_->Get(kProject, nb.id)->state, NotebookState::kStopping);
  EXPECT_EQ(service_->Get(kProject, nb.job)->state, JobState::kRunning)
      << "a follower does not stop the job";
  leader = true;
  WaitFor(nb.id, NotebookState::kStopped);
  EXPECT_EQ(service_->Get(kProject, nb.job)->state, JobState::kInterrupted);
}

// Two servers on one database, each with its own connection: what the follower is asked, the
// leader runs, and each sees the other's changes.
TEST_F(NotebooksTest, AFollowersCallsAreRunByTheLeader) {
  is_leader_ = [] { return true; };
  OpenNotebooks();
  auto follower_db = ControlDb::Open(state_);
  ASSERT_TRUE(follower_db.ok()) << follower_db.status();
  std::unique_ptr<NotebookService> follower = StartNotebooks(**follower_db, [] { return false; });
  ASSERT_NE(follower, nullptr);

  auto created = follower->Create(kProject, kUser, Spec("shared"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(follower->Create(kProject, kUser, Spec("shared")).status().code(),
            base::StatusCode::kAlreadyExists);
  Notebook nb = WaitFor(created->id, NotebookState::kRunning, follower.get());
  EXPECT_EQ(nb.job, created->job);
  EXPECT_EQ(notebooks_->Get(kProject, "shared")->state, NotebookState::kRunning);
  EXPECT_EQ(follower->Route(nb.id)->port, nb.port);

  ASSERT_TRUE(follower->Stop(kProject, "shared").ok());
  WaitFor(nb.id, NotebookState::kStopped, follower.get());
  EXPECT_EQ(service_->Get(kProject, nb.job)->state, JobState::kInterrupted);
  auto again = follower->StartNotebook(kProject, nb.id);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->job, nb.job);
  WaitFor(nb.id, NotebookState::kRunning);

  ASSERT_TRUE(notebooks_->Delete(kProject, nb.id).ok());
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (follower->Get(kProject, nb.id).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(follower->Get(kProject, nb.id).status().code(), base::StatusCode::kNotFound);
  EXPECT_TRUE(IsTerminal(WaitFor(again->job).state));
  EXPECT_TRUE(follower->List(kProject, {})->empty());
  follower.reset();
}

// The real jupyter-notebook in the sandbox: it starts, answers its API with the platform's token
// (and refuses without it), writes a file into the rw volume through its contents API, and the
// file reaches the bucket when the notebook stops.
TEST_F(NotebooksTest, VscodeRunsCodeServerWithTheTokenAsItsPasswordAndItsHeartbeat) {
  // code-server beats all the time (FAKE_BEAT_MS 0: now): a 1 s idle timeout never fires.
  NotebookSpec spec = Spec("code", /*idle_timeout_s=*/1);
  spec.editor = std::string(kVscodeEditor);
  Notebook nb = Create(spec);
  nb = WaitFor(nb.id, NotebookState::kRunning);
  bool answered = false;
  for (const NotebookEvent& e : nb.events) answered |= e.what.starts_with("VS Code answers");
  EXPECT_TRUE(answered) << NotebookToJson(nb, "").dump();
  std::optional<NotebookRoute> route = notebooks_->Route(nb.id);
  ASSERT_TRUE(route.has_value());
  EXPECT_EQ(route->editor, kVscodeEditor);
  // code-server opens only with the platform's token as its session cookie.
  net::ClientOptions client_options;
  client_options.port = route->port;
  net::HttpClient client(client_options);
  net::ClientRequest request;
  request.target = "/";
  auto anonymous = client.Send(request);
  ASSERT_TRUE(anonymous.ok()) << anonymous.status();
  EXPECT_EQ(anonymous->status, 302);
  request.headers.Set("Cookie", std::string(kCodeServerSessionCookie) + "=" + route->jupyter_token);
  auto with_cookie = client.Send(request);
  ASSERT_TRUE(with_cookie.ok()) << with_cookie.status();
  EXPECT_EQ(with_cookie->status, 200);
  // The heartbeat is polled (every 100 ms here) and is the notebook's activity.
  std::this_thread::sleep_for(milliseconds(2500));
  nb = *notebooks_->Get(kProject, nb.id);
  EXPECT_EQ(nb.state, NotebookState::kRunning) << nb.reason;
  EXPECT_GT(nb.last_activity_unix_micros, nb.started_unix_micros + 1'000'000);

  ASSERT_TRUE(notebooks_->Stop(kProject, nb.id).ok());
  WaitFor(nb.id, NotebookState::kStopped);
  EXPECT_EQ(GetObject("data", "out/hello.txt"), "from vs code\n");
  EXPECT_NE(Log(nb.id).find("fake code-server on"), std::string::npos);
}

TEST_F(NotebooksTest, VscodesIdleTimeoutFollowsCodeServersHeartbeat) {
  NotebookSpec spec = Spec("", /*idle_timeout_s=*/1);
  spec.editor = std::string(kVscodeEditor);
  spec.env["FAKE_BEAT_MS"] = "1700000000123";  // long ago: idle, unlike the test above
  Notebook nb = Create(spec);
  WaitFor(nb.id, NotebookState::kRunning);
  nb = WaitFor(nb.id, NotebookState::kStopped);
  EXPECT_NE(nb.reason.find("idle timeout"), std::string::npos) << nb.reason;
}

TEST_F(NotebooksTest, VscodeWithoutCodeServerIsRefusedAndLeavesNothing) {
  vscode_command_ = {"/nonexistent/code-server"};
  OpenNotebooks();
  NotebookSpec spec = Spec("nocode");
  spec.editor = std::string(kVscodeEditor);
  std::string bad_field;
  auto nb = notebooks_->Create(kProject, kUser, spec, &bad_field);
  ASSERT_FALSE(nb.ok());
  EXPECT_EQ(nb.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bad_field, "editor");
  EXPECT_NE(nb.status().message().find("tools/install_code_server.sh"), std::string::npos);
  auto list = notebooks_->List(kProject, {});
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  // Jupyter notebooks are not affected.
  EXPECT_TRUE(notebooks_->Create(kProject, kUser, Spec("jupyter")).ok());
}

TEST_F(NotebooksTest, RealJupyterWritesIntoTheRwVolume) {
  if (::access("/usr/bin/jupyter-notebook", X_OK) != 0) {
    GTEST_SKIP() << "jupyter-notebook is not installed (apt-get install jupyter-notebook, as "
                    "tools/bootstrap.sh does)";
  }
  start_timeout_ = milliseconds(60'000);
  OpenNotebooks({"jupyter-notebook"});
  Notebook nb = Create(Spec("real"));
  nb = WaitFor(nb.id, NotebookState::kRunning);
  ASSERT_EQ(nb.state, NotebookState::kRunning);
  NotebookRoute route = *notebooks_->Route(nb.id);
  net::HttpClient client({.port = route.port});
  const std::string base = "/notebooks/" + nb.id + "/";
  auto anonymous = client.Get(base + "api/status");
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ(anonymous->status, 403);
  net::ClientRequest put;
  put.method = "PUT";
  put.target = base + "api/contents/out/made.txt";
  put.headers.Set("Authorization", "token " + route.jupyter_token);
  put.headers.Set("Content-Type", "application/json");
  put.body = R"({"type": "file", "format": "text", "content": "made in jupyter\n"})";
  auto made = client.Send(put);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->status, 201) << made->body;
  ASSERT_TRUE(notebooks_->Stop(kProject, nb.id).ok());
  WaitFor(nb.id, NotebookState::kStopped);
  EXPECT_EQ(GetObject("data", "out/made.txt"), "made in jupyter\n");
}

}  // namespace
}  // namespace sovai::control
