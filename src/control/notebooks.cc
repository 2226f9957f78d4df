#include "control/notebooks.h"

#include <algorithm>
#include <set>

#include "base/crypto.h"
#include "base/json.h"
#include "base/log.h"
#include "base/time.h"
#include "control/apps.h"
#include "control/row_version.h"
#include "net/client.h"

namespace sovai::control {

namespace {

using base::Result;
using base::Status;
using Json = nlohmann::json;

constexpr std::string_view kStateNames[] = {"STARTING", "RUNNING", "STOPPING", "STOPPED",
                                            "FAILED",   "ERROR",   "DELETING", "DELETED"};
// Jobs whose logs `notebook logs --job` can still name.
constexpr size_t kMaxRecentJobs = 16;

std::optional<NotebookState> ParseNotebookState(std::string_view name) {
  for (size_t i = 0; i < std::size(kStateNames); ++i) {
    if (kStateNames[i] == name) return static_cast<NotebookState>(i);
  }
  return std::nullopt;
}

// States in which the notebook has (or is about to have) a live job.
bool Live(NotebookState s) {
  return s == NotebookState::kStarting || s == NotebookState::kRunning ||
         s == NotebookState::kStopping || s == NotebookState::kDeleting;
}

bool Startable(NotebookState s) {
  return s == NotebookState::kStopped || s == NotebookState::kFailed || s == NotebookState::kError;
}

std::string BasePath(const std::string& id) { return "/notebooks/" + id + "/"; }

std::optional<JupyterAnswer> HttpFetch(const std::string& host, uint16_t port,
                                       const std::string& path, const std::string& token) {
  net::ClientOptions options;
  if (!host.empty()) options.host = host;
  options.port = port;
  options.connect_timeout = kProbeTimeout;
  options.read_timeout = kProbeTimeout;
  net::HttpClient client(options);
  net::ClientRequest request;
  request.target = path;
  request.headers.Set("Authorization", "token " + token);
  auto response = client.Send(request);
  if (!response.ok()) return std::nullopt;
  return JupyterAnswer{response->status, std::move(response->body)};
}

// The columns NotebookFromRow reads, in its order.
constexpr char kColumns[] =
    "id, project, user, spec, state, reason, job, port, jupyter_token, status, created_at, "
    "updated_at";

// A row of `notebooks` (kColumns) as it is stored; its updated_at is the row's version.
Notebook NotebookFromRow(const base::Statement& st, int64_t* version) {
  Notebook nb;
  nb.id = st.ColumnText(0);
  nb.project = st.ColumnText(1);
  nb.user = st.ColumnText(2);
  nb.state = ParseNotebookState(st.ColumnText(4)).value_or(NotebookState::kError);
  nb.reason = st.ColumnText(5);
  nb.job = st.ColumnText(6);
  nb.port = static_cast<uint16_t>(st.ColumnInt(7));
  nb.jupyter_token = st.ColumnText(8);
  nb.created_unix_micros = st.ColumnInt(10);
  *version = st.ColumnInt(11);
  // The stored spec was valid when it was created; read it back without the catalog (a flavor
  // that left it makes the next start fail at admission, which says so).
  if (auto spec = base::ParseJson(st.ColumnText(3)); spec.ok() && spec->is_object()) {
    nb.spec.name = spec->value("name", "");
    nb.spec.editor = spec->value("editor", std::string(kJupyterEditor));
    if (auto image = spec->find("image"); image != spec->end() && image->is_string()) {
      nb.spec.image = image->get<std::string>();
    }
    nb.spec.flavor = spec->value("flavor", "");
    nb.spec.units = spec->value("units", 1);
    nb.spec.volumes = spec->value("volumes", std::vector<std::string>{});
    nb.spec.labels = spec->value("labels", std::map<std::string, std::string>{});
    nb.spec.env = spec->value("env", std::map<std::string, std::string>{});
    nb.spec.idle_timeout_s = spec->value("idle_timeout_s", kDefaultNotebookIdleTimeoutS);
  }
  if (auto status = base::ParseJson(st.ColumnText(9)); status.ok() && status->is_object()) {
    for (const Json& j : status->value("recent_jobs", Json::array())) {
      if (j.is_string()) nb.recent_jobs.push_back(j.get<std::string>());
    }
    for (const Json& e : status->value("events", Json::array())) {
      if (e.is_object()) {
        nb.events.push_back({e.value("at_unix_micros", int64_t{0}), e.value("what", "")});
      }
    }
    nb.image_digest = status->value("image_digest", "");
    nb.started_unix_micros = status->value("started_at", int64_t{0});
    nb.last_activity_unix_micros = status->value("last_activity", int64_t{0});
  }
  return nb;
}

Json StatusJson(const Notebook& nb) {
  Json events = Json::array();
  for (const NotebookEvent& e : nb.events) {
    events.push_back({{"at_unix_micros", e.at_unix_micros}, {"what", e.what}});
  }
  return {{"recent_jobs", nb.recent_jobs},
          {"events", std::move(events)},
          {"started_at", nb.started_unix_micros},
          {"last_activity", nb.last_activity_unix_micros},
          {"image_digest", nb.image_digest}};
}

}  // namespace

std::string_view NotebookStateName(NotebookState state) {
  return kStateNames[static_cast<int>(state)];
}

Json NotebookToJson(const Notebook& nb, std::string_view api_url) {
  Json events = Json::array();
  for (const NotebookEvent& e : nb.events) {
    events.push_back({{"at", base::FormatRfc3339(e.at_unix_micros)}, {"what", e.what}});
  }
  auto time_or_null = [](int64_t micros) {
    return micros > 0 ? Json(base::FormatRfc3339(micros)) : Json(nullptr);
  };
  return {{"id", nb.id},
          {"name", nb.spec.name},
          {"project", nb.project},
          {"user", nb.user},
          {"state", std::string(NotebookStateName(nb.state))},
          {"reason", nb.reason},
          {"url", std::string(api_url) + BasePath(nb.id)},
          {"spec", NotebookSpecToJson(nb.spec)},
          {"job", nb.job.empty() ? Json(nullptr) : Json(nb.job)},
          {"image_digest", nb.image_digest.empty() ? Json(nullptr) : Json(nb.image_digest)},
          {"recent_jobs", nb.recent_jobs},
          {"workdir", NotebookDirOf(nb.spec)},
          {"events", std::move(events)},
          {"created_at", base::FormatRfc3339(nb.created_unix_micros)},
          {"started_at", time_or_null(nb.started_unix_micros)},
          {"last_activity_at", time_or_null(nb.last_activity_unix_micros)}};
}

// What the loop remembers about a notebook between ticks.
struct NotebookService::Runtime {
  std::chrono::steady_clock::time_point last_probe;     // while STARTING
  std::chrono::steady_clock::time_point last_activity;  // of the activity poll, while RUNNING
  std::optional<int64_t> running_since_ms;  // monotonic: when the job was first seen RUNNING
  bool stop_sent = false;                   // Stop was sent to the current job
  int64_t gateway_activity_unix_micros = 0;
};

NotebookService::NotebookService(ControlDb& db, NotebookServiceOptions options)
    : db_(db),
      options_(std::move(options)),
      env_(options_.env != nullptr ? *options_.env : base::Env::Default()) {}

NotebookService::~NotebookService() { Shutdown(); }

Result<std::unique_ptr<NotebookService>> NotebookService::Start(ControlDb& db,
                                                                NotebookServiceOptions options) {
  SOVAI_CHECK(options.jobs != nullptr);
  std::unique_ptr<NotebookService> service(new NotebookService(db, std::move(options)));
  if (!service->options_.fetch) service->options_.fetch = HttpFetch;
  service->leading_ = service->Leading();
  SOVAI_RETURN_IF_ERROR(service->Load(service->leading_));
  service->loop_ = std::thread([s = service.get()] { s->Loop(); });
  return service;
}

void NotebookService::Shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

Status NotebookService::Load(bool leading) {
  std::lock_guard lock(mu_);  // no other thread yet; Save expects it
  std::vector<Notebook> changed;
  Status read = db_.Read([&](base::Database& sql) -> Status {
    SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                           sql.Prepare(std::string("SELECT ") + kColumns +
                                       " FROM notebooks WHERE state != 'DELETED' ORDER BY id"));
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      int64_t version = 0;
      Notebook nb = NotebookFromRow(st, &version);
      versions_[nb.id] = version;
      // A follower shows the notebooks as the leader keeps them; only a leader's start is a
      // restart of the notebooks.
      if (leading && nb.state == NotebookState::kDeleting) {
        nb.state = NotebookState::kDeleted;
        changed.push_back(nb);
        continue;
      }
      if (leading && Live(nb.state)) {
        // Its job died with the previous process (JobService syncs its outputs up).
        nb.reason = "the server restarted while the notebook was " +
                    std::string(NotebookStateName(nb.state)) + "; start it again";
        nb.state = NotebookState::kStopped;
        nb.events.push_back({env_.NowUnixMicros(), "state STOPPED: " + nb.reason});
        if (nb.events.size() > kMaxNotebookEvents) nb.events.erase(nb.events.begin());
        changed.push_back(nb);
      }
      runtime_[nb.id] = std::make_shared<Runtime>();
      notebooks_.emplace(nb.id, std::move(nb));
    }
    return Status();
  });
  SOVAI_RETURN_IF_ERROR(read);
  for (const Notebook& nb : changed) SOVAI_RETURN_IF_ERROR(Save(nb));
  return Status();
}

Status NotebookService::RefreshLocked() {
  std::vector<std::pair<Notebook, int64_t>> rows;  // changed rows and their versions
  std::vector<std::string> gone;                   // rows that no longer exist
  SOVAI_RETURN_IF_ERROR(db_.Read([&](base::Database& sql) -> Status {
    std::vector<std::string> held;
    for (const auto& [id, nb] : notebooks_) held.push_back(id);
    SOVAI_ASSIGN_OR_RETURN(std::vector<std::string> load,
                           RowsToReload(sql, "notebooks", versions_, held));
    SOVAI_ASSIGN_OR_RETURN(base::Statement one, sql.Prepare(std::string("SELECT ") + kColumns +
                                                            " FROM notebooks WHERE id = ?1"));
    for (const std::string& id : load) {
      one.Reset();
      one.Bind(1, id);
      SOVAI_ASSIGN_OR_RETURN(bool row, one.Step());
      if (!row) {
        gone.push_back(id);
        continue;
      }
      int64_t version = 0;
      Notebook nb = NotebookFromRow(one, &version);
      rows.emplace_back(std::move(nb), version);
    }
    return Status();
  }));
  for (auto& [nb, version] : rows) {
    versions_[nb.id] = version;
    if (nb.state == NotebookState::kDeleted) {
      gone.push_back(nb.id);
      continue;
    }
    auto it = notebooks_.find(nb.id);
    if (it == notebooks_.end() || it->second.job != nb.job) {
      // New here, or started again elsewhere: what the loop knew is about another job.
      runtime_[nb.id] = std::make_shared<Runtime>();
    } else {
      nb.last_activity_unix_micros =
          std::max(nb.last_activity_unix_micros, it->second.last_activity_unix_micros);
    }
    const std::string id = nb.id;
    notebooks_[id] = std::move(nb);
  }
  for (const std::string& id : gone) {
    notebooks_.erase(id);
    runtime_.erase(id);
  }
  return Status();
}

Status NotebookService::SyncLocked() { return options_.is_leader ? RefreshLocked() : Status(); }

bool NotebookService::Leading() const { return !options_.is_leader || options_.is_leader(); }

Status NotebookService::Save(const Notebook& nb) {
  auto known = versions_.find(nb.id);
  const int64_t expected = known == versions_.end() ? 0 : known->second;
  int64_t version = 0;
  SOVAI_RETURN_IF_ERROR(db_.Write([&](base::Database& sql) -> Status {
    // One server (no is_leader) is the only writer: nothing to check.
    SOVAI_ASSIGN_OR_RETURN(version,
                           NextRowVersion(sql, "notebooks", "notebook", nb.id, expected,
                                          options_.is_leader != nullptr, env_.NowUnixMicros()));
    SOVAI_ASSIGN_OR_RETURN(
        base::Statement st,
        sql.Prepare(
            "INSERT INTO notebooks(id, project, user, name, spec, state, reason, job, port, "
            "jupyter_token, status, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, "
            "?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON CONFLICT(id) DO UPDATE SET "
            "name = ?4, spec = ?5, state = ?6, reason = ?7, job = ?8, port = ?9, "
            "jupyter_token = ?10, status = ?11, updated_at = ?13"));
    st.Bind(1, nb.id).Bind(2, nb.project).Bind(3, nb.user).Bind(4, nb.spec.name);
    st.Bind(5, base::DumpJson(NotebookSpecToJson(nb.spec)));
    st.Bind(6, NotebookStateName(nb.state)).Bind(7, nb.reason).Bind(8, nb.job);
    st.Bind(9, int64_t{nb.port}).Bind(10, nb.jupyter_token);
    st.Bind(11, base::DumpJson(StatusJson(nb))).Bind(12, nb.created_unix_micros);
    st.Bind(13, version);
    return st.Run();
  }));
  versions_[nb.id] = version;
  return Status();
}

void NotebookService::AddEventLocked(Notebook& nb, std::string what) {
  SOVAI_LOG(INFO).With("notebook", nb.id) << what;
  nb.events.push_back({env_.NowUnixMicros(), std::move(what)});
  if (nb.events.size() > kMaxNotebookEvents) nb.events.erase(nb.events.begin());
}

void NotebookService::SetStateLocked(Notebook& nb, NotebookState state, std::string reason) {
  if (nb.state == state && nb.reason == reason) return;
  nb.state = state;
  nb.reason = std::move(reason);
  AddEventLocked(nb, "state " + std::string(NotebookStateName(state)) +
                         (nb.reason.empty() ? "" : ": " + nb.reason));
}

Result<Notebook*> NotebookService::FindLocked(const std::string& project, const std::string& ref) {
  for (auto& [id, nb] : notebooks_) {
    if (nb.project == project && nb.state != NotebookState::kDeleted &&
        (id == ref || (!nb.spec.name.empty() && nb.spec.name == ref))) {
      return &nb;
    }
  }
  return base::NotFoundError("notebook '" + ref + "' does not exist in this project");
}

Status NotebookService::SubmitJob(Notebook& nb, std::string* bad_field) {
  const std::vector<std::string> command =
      EditorCommandFor(nb.spec, nb.spec.editor == kVscodeEditor ? options_.vscode_command
                                                                : options_.jupyter_command);
  // The host's editor is checked here; an image's is on the image's PATH (EditorInImageHint).
  if (Status installed = CheckEditorInstalled(env_, nb.spec.editor, command);
      nb.spec.image.empty() && !installed.ok()) {
    if (bad_field != nullptr) *bad_field = "editor";
    return installed;
  }
  SOVAI_ASSIGN_OR_RETURN(uint16_t port, FreeLoopbackPort());
  std::string token = base::RandomToken("", 24);
  SOVAI_ASSIGN_OR_RETURN(
      Job job, options_.jobs->Submit(nb.project, nb.user,
                                     EditorJobSpec(nb.id, nb.spec, port, token, command, command,
                                                   options_.on_other_hosts),
                                     bad_field));
  nb.job = job.id;
  nb.image_digest = job.image_digest;
  nb.port = port;
  nb.jupyter_token = std::move(token);
  nb.started_unix_micros = env_.NowUnixMicros();
  nb.last_activity_unix_micros = nb.started_unix_micros;
  nb.recent_jobs.push_back(job.id);
  if (nb.recent_jobs.size() > kMaxRecentJobs) nb.recent_jobs.erase(nb.recent_jobs.begin());
  return Status();
}

Result<Notebook> NotebookService::Create(const std::string& project, const std::string& user,
                                         NotebookSpec spec, std::string* bad_field) {
  auto field = [&](const char* name) {
    if (bad_field) *bad_field = name;
  };
  auto check_name = [&]() -> Status {
    int64_t count = 0;
    for (const auto& [id, nb] : notebooks_) {
      if (nb.project != project || nb.state == NotebookState::kDeleted) continue;
      ++count;
      if (!spec.name.empty() && nb.spec.name == spec.name) {
        field("name");
        return base::AlreadyExistsError("a notebook named '" + spec.name +
                                        "' already exists in this project (" + id + ")");
      }
    }
    if (count >= kMaxNotebooksPerProject) {
      return base::ResourceExhaustedError("the project has " + std::to_string(count) +
                                          " notebooks, the most allowed; delete " +
                                          "some (sovai notebook delete)");
    }
    return Status();
  };
  Notebook nb;
  {
    std::lock_guard lock(mu_);
    SOVAI_RETURN_IF_ERROR(SyncLocked());
    SOVAI_RETURN_IF_ERROR(check_name());
    nb.id = "nb_" + ulids_.Next().ToString();
  }
  nb.project = project;
  nb.user = user;
  nb.spec = std::move(spec);
  nb.created_unix_micros = env_.NowUnixMicros();
  // The job first, outside the lock (admission may read the bill): a refusal leaves nothing.
  SOVAI_RETURN_IF_ERROR(SubmitJob(nb, bad_field));
  std::lock_guard lock(mu_);
  Status taken = check_name();
  if (taken.ok()) {
    AddEventLocked(nb, "created; job " + nb.job + " on port " + std::to_string(nb.port));
    taken = Save(nb);
  }
  if (!taken.ok()) {
    (void)options_.jobs->Stop(project, nb.job, "the notebook could not be created");
    return taken;
  }
  runtime_[nb.id] = std::make_shared<Runtime>();
  auto [it, inserted] = notebooks_.emplace(nb.id, nb);
  cv_.notify_all();
  return it->second;
}

Result<Notebook> NotebookService::Get(const std::string& project, const std::string& ref) {
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  SOVAI_ASSIGN_OR_RETURN(Notebook * nb, FindLocked(project, ref));
  return *nb;
}

Result<std::vector<Notebook>> NotebookService::List(
    const std::string& project, const std::map<std::string, std::string>& labels) {
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  std::vector<Notebook> out;
  for (const auto& [id, nb] : notebooks_) {
    if (nb.project != project || nb.state == NotebookState::kDeleted) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = nb.spec.labels.find(k);
      match = match && it != nb.spec.labels.end() && it->second == v;
    }
    if (match) out.push_back(nb);
    if (out.size() >= static_cast<size_t>(kMaxPageSize)) break;
  }
  return out;
}

Result<Notebook> NotebookService::Stop(const std::string& project, const std::string& ref,
                                       const std::string& reason) {
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  SOVAI_ASSIGN_OR_RETURN(Notebook * nb, FindLocked(project, ref));
  if (nb->state == NotebookState::kDeleting) {
    return base::FailedPreconditionError("notebook " + nb->id + " is being deleted");
  }
  if (!Live(nb->state) || nb->state == NotebookState::kStopping) return *nb;
  SetStateLocked(*nb, nb->job.empty() ? NotebookState::kStopped : NotebookState::kStopping,
                 reason.empty() ? "stopped by the user" : reason);
  SOVAI_RETURN_IF_ERROR(Save(*nb));
  cv_.notify_all();
  return *nb;
}

Result<Notebook> NotebookService::StartNotebook(const std::string& project,
                                                const std::string& ref) {
  Notebook copy;
  {
    std::lock_guard lock(mu_);
    SOVAI_RETURN_IF_ERROR(SyncLocked());
    SOVAI_ASSIGN_OR_RETURN(Notebook * nb, FindLocked(project, ref));
    if (!Startable(nb->state)) {
      return base::FailedPreconditionError(
          "notebook " + nb->id + " is " + std::string(NotebookStateName(nb->state)) +
          "; only a STOPPED, FAILED or ERROR notebook can be started");
    }
    copy = *nb;
  }
  SOVAI_RETURN_IF_ERROR(SubmitJob(copy, nullptr));
  std::lock_guard lock(mu_);
  auto it = notebooks_.find(copy.id);
  if (it == notebooks_.end() || !Startable(it->second.state)) {
    // Started, stopped or deleted meanwhile: this job is not wanted.
    (void)options_.jobs->Stop(project, copy.job, "the notebook changed while it was starting");
    return base::FailedPreconditionError("notebook " + copy.id + " changed while it was starting");
  }
  Notebook& nb = it->second;
  nb.job = copy.job;
  nb.image_digest = copy.image_digest;
  nb.port = copy.port;
  nb.jupyter_token = copy.jupyter_token;
  nb.started_unix_micros = copy.started_unix_micros;
  nb.last_activity_unix_micros = copy.last_activity_unix_micros;
  nb.recent_jobs = copy.recent_jobs;
  // A fresh runtime: the loop may still hold the old one, outside the lock.
  runtime_[nb.id] = std::make_shared<Runtime>();
  SetStateLocked(nb, NotebookState::kStarting);
  AddEventLocked(nb, "job " + nb.job + " on port " + std::to_string(nb.port));
  SOVAI_RETURN_IF_ERROR(Save(nb));
  cv_.notify_all();
  return nb;
}

Result<Notebook> NotebookService::Delete(const std::string& project, const std::string& ref) {
  std::lock_guard lock(mu_);
  SOVAI_RETURN_IF_ERROR(SyncLocked());
  SOVAI_ASSIGN_OR_RETURN(Notebook * nb, FindLocked(project, ref));
  SetStateLocked(*nb, Live(nb->state) ? NotebookState::kDeleting : NotebookState::kDeleted,
                 "deleted by the user");
  SOVAI_RETURN_IF_ERROR(Save(*nb));
  Notebook out = *nb;
  if (nb->state == NotebookState::kDeleted) {
    runtime_.erase(nb->id);
    notebooks_.erase(nb->id);
  }
  cv_.notify_all();
  return out;
}

Status NotebookService::PushData(const std::string& project, const std::string& ref) {
  std::string job;
  {
    std::lock_guard lock(mu_);
    SOVAI_RETURN_IF_ERROR(SyncLocked());
    SOVAI_ASSIGN_OR_RETURN(Notebook * nb, FindLocked(project, ref));
    if (nb->state != NotebookState::kRunning) {
      return base::FailedPreconditionError(
          "notebook " + nb->id + " is " + std::string(NotebookStateName(nb->state)) +
          "; sync now needs a RUNNING notebook (a stop syncs its volumes anyway)");
    }
    job = nb->job;
  }
  // Outside the lock: the upload takes as long as the changed files do.
  return options_.jobs->PushData(project, job);
}

Result<exec::LogChunk> NotebookService::ReadLog(const std::string& project, const std::string& ref,
                                                const std::string& job, uint64_t offset,
                                                size_t max_bytes) {
  std::string which;
  {
    std::lock_guard lock(mu_);
    SOVAI_RETURN_IF_ERROR(SyncLocked());
    SOVAI_ASSIGN_OR_RETURN(Notebook * nb, FindLocked(project, ref));
    if (job.empty()) {
      if (nb->job.empty()) return exec::LogChunk{};
      which = nb->job;
    } else if (std::find(nb->recent_jobs.begin(), nb->recent_jobs.end(), job) !=
               nb->recent_jobs.end()) {
      which = job;
    } else {
      return base::NotFoundError("notebook " + nb->id + " has no job '" + job + "'");
    }
  }
  return options_.jobs->ReadLog(project, which, offset, max_bytes);
}

std::optional<NotebookRoute> NotebookService::Route(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = notebooks_.find(id);
  if (it == notebooks_.end() || it->second.state == NotebookState::kDeleted) return std::nullopt;
  const Notebook& nb = it->second;
  return NotebookRoute{nb.id,   nb.project,       nb.spec.labels, nb.state,
                       nb.port, nb.jupyter_token, nb.host,        nb.spec.editor};
}

void NotebookService::NoteActivity(const std::string& id) {
  const int64_t now = env_.NowUnixMicros();
  std::lock_guard lock(mu_);
  auto rt = runtime_.find(id);
  if (rt != runtime_.end()) rt->second->gateway_activity_unix_micros = now;
}

std::optional<int64_t> NotebookService::JupyterActivity(const Notebook& nb) {
  const std::string base = BasePath(nb.id);
  // no_track_activity: the platform's own calls must not count as the user's activity.
  auto status =
      options_.fetch(nb.host, nb.port, base + "api/status?no_track_activity=1", nb.jupyter_token);
  if (!status || status->status != 200) return std::nullopt;
  auto doc = base::ParseJson(status->body);
  if (!doc.ok() || !doc->is_object()) return std::nullopt;
  int64_t last = 0;
  if (auto text = doc->find("last_activity"); text != doc->end() && text->is_string()) {
    if (auto t = base::ParseRfc3339(text->get<std::string>()); t.ok()) last = *t;
  }
  // A kernel that computes without printing updates nothing: busy means active now.
  if (doc->value("kernels", 0) > 0) {
    auto kernels = options_.fetch(nb.host, nb.port, base + "api/kernels?no_track_activity=1",
                                  nb.jupyter_token);
    if (kernels && kernels->status == 200) {
      auto list = base::ParseJson(kernels->body);
      if (list.ok() && list->is_array()) {
        for (const Json& k : *list) {
          if (k.is_object() && k.value("execution_state", "") == "busy") {
            return env_.NowUnixMicros();
          }
        }
      }
    }
  }
  return last;
}

std::optional<int64_t> NotebookService::EditorActivity(const Notebook& nb) {
  if (nb.spec.editor != kVscodeEditor) return JupyterActivity(nb);
  auto health =
      options_.fetch(nb.host, nb.port, EditorReadyPath(nb.spec.editor, nb.id), nb.jupyter_token);
  if (!health || health->status != 200) return std::nullopt;
  auto beat = ParseCodeServerHealth(health->body);
  if (!beat.ok()) return std::nullopt;
  return *beat;
}

void NotebookService::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    Round();
    lock.lock();
    cv_.wait_for(lock, options_.reconcile_interval, [&] { return stopping_; });
  }
}

void NotebookService::Round() {
  const bool leading = Leading();
  if (leading != leading_) {
    if (leading) {
      SOVAI_LOG(INFO) << "this server now runs the notebooks (it leads)";
    } else {
      SOVAI_LOG(WARNING) << "this server no longer leads: it stops running the notebooks";
    }
    leading_ = leading;
  }
  if (options_.is_leader) {
    std::lock_guard lock(mu_);
    if (Status st = RefreshLocked(); !st.ok()) {
      SOVAI_LOG(WARNING) << "notebooks: reading the changes of other servers: " << st;
      return;  // a round on stale rows could act on what another server already changed
    }
  }
  if (leading) ReconcileAll();
}

void NotebookService::ReconcileAll() {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, nb] : notebooks_) ids.push_back(id);
  }
  for (const std::string& id : ids) Reconcile(id);
}

void NotebookService::Reconcile(const std::string& id) {
  Notebook snapshot;
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard lock(mu_);
    auto it = notebooks_.find(id);
    if (it == notebooks_.end()) return;
    snapshot = it->second;
    rt = runtime_[id];
  }
  if (!Live(snapshot.state) || snapshot.job.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  const int64_t now_ms = env_.NowMonotonicMicros() / 1000;

  // 1. Look at the job, and at Jupyter; decide without the lock.
  const std::string editor(EditorDisplayName(snapshot.spec.editor));
  auto job = options_.jobs->Get(snapshot.project, snapshot.job);
  if (job.ok()) snapshot.host = job->node;
  std::optional<NotebookState> next;
  std::string why;
  std::vector<std::string> events;
  bool send_stop = false;
  std::string stop_reason;
  std::optional<int64_t> activity;
  if (!job.ok() || IsTerminal(job->state)) {
    const std::string ended = job.ok() ? "job " + snapshot.job + " ended " +
                                             std::string(JobStateName(job->state)) +
                                             (job->reason.empty() ? "" : ": " + job->reason)
                                       : job.status().message();
    if (snapshot.state == NotebookState::kStopping) {
      next = NotebookState::kStopped;
      why = snapshot.reason;
    } else if (snapshot.state == NotebookState::kDeleting) {
      next = NotebookState::kDeleted;
      why = snapshot.reason;
    } else if (!job.ok() || job->state == JobState::kError) {
      next = NotebookState::kError;
      why = ended;
    } else if (job->state == JobState::kInterrupted || job->state == JobState::kTimeout) {
      // Stopped from outside the notebook: a budget cap, the job's timeout, a shutdown.
      next = NotebookState::kStopped;
      why = ended;
    } else {
      next = NotebookState::kFailed;
      // In an image, an editor that never answered is most often one the image lacks.
      const std::string hint = snapshot.state == NotebookState::kStarting
                                   ? EditorInImageHint(snapshot.spec)
                                   : std::string();
      why = editor + " exited (" + ended + ")" + (hint.empty() ? "" : "; " + hint) +
            "; see `sovai notebook logs " + snapshot.id + "`";
    }
  } else if (snapshot.state == NotebookState::kStopping ||
             snapshot.state == NotebookState::kDeleting) {
    send_stop = !rt->stop_sent;
    stop_reason = snapshot.reason;
  } else if (job->state == JobState::kRunning) {
    if (!rt->running_since_ms) rt->running_since_ms = now_ms;
    if (snapshot.state == NotebookState::kStarting) {
      if (now - rt->last_probe >= options_.probe_interval) {
        rt->last_probe = now;
        auto answer = options_.fetch(snapshot.host, snapshot.port,
                                     EditorReadyPath(snapshot.spec.editor, snapshot.id),
                                     snapshot.jupyter_token);
        if (answer && answer->status == 200) {
          next = NotebookState::kRunning;
          events.push_back(editor + " answers on port " + std::to_string(snapshot.port));
          rt->last_activity = now;
        } else if (now_ms - *rt->running_since_ms >= options_.start_timeout.count()) {
          next = NotebookState::kFailed;
          why = editor + " did not answer within " +
                std::to_string(options_.start_timeout.count() / 1000) +
                " s of its start; see `sovai notebook logs " + snapshot.id + "`";
          send_stop = true;
          stop_reason = why;
        }
      }
    } else if (snapshot.state == NotebookState::kRunning &&
               now - rt->last_activity >= options_.activity_poll_interval) {
      rt->last_activity = now;
      activity = EditorActivity(snapshot);
    }
  }

  // 2. Apply under the lock, to the notebook as it is now (the user may have changed it).
  std::string stop_job;
  {
    std::lock_guard lock(mu_);
    auto it = notebooks_.find(id);
    if (it == notebooks_.end() || it->second.job != snapshot.job) return;
    Notebook& nb = it->second;
    nb.host = snapshot.host;
    bool dirty = false;
    for (std::string& e : events) {
      AddEventLocked(nb, std::move(e));
      dirty = true;
    }
    const int64_t gateway = rt->gateway_activity_unix_micros;
    const int64_t latest = std::max({nb.last_activity_unix_micros, activity.value_or(0), gateway});
    if (latest != nb.last_activity_unix_micros) nb.last_activity_unix_micros = latest;
    if (next && (nb.state == snapshot.state || *next == NotebookState::kDeleted ||
                 *next == NotebookState::kStopped)) {
      // A user's stop or delete that came meanwhile wins over what the job said.
      if (nb.state == NotebookState::kDeleting) next = NotebookState::kDeleted;
      if (nb.state == NotebookState::kStopping) next = NotebookState::kStopped;
      SetStateLocked(nb, *next, Live(*next) ? "" : (why.empty() ? nb.reason : why));
      dirty = true;
    } else if (nb.state == NotebookState::kRunning && activity && nb.spec.idle_timeout_s > 0 &&
               env_.NowUnixMicros() - nb.last_activity_unix_micros >=
                   nb.spec.idle_timeout_s * 1'000'000) {
      // Forgotten: stop it (its rw volumes sync up), and the billing with it.
      const std::string idle = "idle for " + std::to_string(nb.spec.idle_timeout_s) +
                               " s (no kernel activity and no request); its volumes were synced";
      SetStateLocked(nb, NotebookState::kStopping, "stopped after the idle timeout: " + idle);
      send_stop = true;
      stop_reason = nb.reason;
      dirty = true;
    }
    if (send_stop && (nb.state == NotebookState::kStopping ||
                      nb.state == NotebookState::kDeleting || nb.state == NotebookState::kFailed)) {
      stop_job = nb.job;
      rt->stop_sent = true;
    }
    if (dirty) (void)Save(nb);
    if (nb.state == NotebookState::kDeleted) {
      notebooks_.erase(it);
      runtime_.erase(id);
    }
  }
  if (!stop_job.empty()) {
    auto stopped = options_.jobs->Stop(snapshot.project, stop_job, stop_reason);
    if (!stopped.ok() && stopped.status().code() != base::StatusCode::kFailedPrecondition) {
      SOVAI_LOG(WARNING).With("notebook", id)
          << "stopping job " << stop_job << ": " << stopped.status();
    }
  }
}

}  // namespace sovai::control
