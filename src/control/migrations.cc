#include "control/migrations.h"

namespace sovai::control {

namespace {

// Times are INTEGER Unix microseconds (the unit of Env::NowUnixMicros). Ids are "<type>_<ULID>"
// so that ORDER BY id is creation order, which list pagination relies on.
constexpr Migration kMigrations[] = {
    {"identity", R"sql(
CREATE TABLE users (
  id            TEXT PRIMARY KEY,          -- usr_<ULID>
  name          TEXT NOT NULL UNIQUE,      -- login name; also the S3 owner id
  display_name  TEXT NOT NULL DEFAULT '',
  email         TEXT NOT NULL DEFAULT '',
  bootstrap     INTEGER NOT NULL DEFAULT 0, -- 1 for the admin imported from admin.json
  created_at    INTEGER NOT NULL
);

CREATE TABLE projects (
  id           TEXT PRIMARY KEY,           -- prj_<ULID>
  name         TEXT NOT NULL UNIQUE,
  description  TEXT NOT NULL DEFAULT '',
  system       INTEGER NOT NULL DEFAULT 0, -- 1 for 'default': its admins administer the platform
  created_at   INTEGER NOT NULL
);

CREATE TABLE memberships (
  project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  role        TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'read')),
  created_at  INTEGER NOT NULL,
  PRIMARY KEY (project_id, user_id)
);
CREATE INDEX memberships_by_user ON memberships(user_id, project_id);

CREATE TABLE tokens (
  id          TEXT PRIMARY KEY,            -- tok_<ULID>
  hash        BLOB NOT NULL UNIQUE,        -- SHA-256 of the whole bearer token; never the token
  user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  role        TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'read')),
  selector    TEXT NOT NULL DEFAULT '',    -- canonical "k1=v1,k2=v2", '' = no selector
  name        TEXT NOT NULL DEFAULT '',
  bootstrap   INTEGER NOT NULL DEFAULT 0,  -- 1 for the token of admin.json
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER,                     -- NULL = never
  revoked_at  INTEGER                      -- NULL = active
);
CREATE INDEX tokens_by_user_project ON tokens(user_id, project_id);
CREATE INDEX tokens_by_project ON tokens(project_id);

-- S3 access keys issued through the control plane. The secret lives only in the object store.
CREATE TABLE s3_keys (
  access_key_id  TEXT PRIMARY KEY,
  user_id        TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  bootstrap      INTEGER NOT NULL DEFAULT 0,
  created_at     INTEGER NOT NULL
);
CREATE INDEX s3_keys_by_user ON s3_keys(user_id, access_key_id);
)sql"},
    {"jobs", R"sql(
-- Jobs (src/control/jobs.h, docs/api/jobs.md). `spec`, `history` and `allocation` are JSON: the
-- spec as submitted (JobSpecToJson), [{state, at_unix_micros}], {gpus, cpus, memory_bytes}.
CREATE TABLE jobs (
  id           TEXT PRIMARY KEY,            -- job_<ULID>
  project      TEXT NOT NULL,
  user         TEXT NOT NULL,
  sequence     INTEGER NOT NULL UNIQUE,     -- submission order: FIFO across restarts
  state        TEXT NOT NULL,
  spec         TEXT NOT NULL,
  history      TEXT NOT NULL,
  exit_code    INTEGER,
  exit_signal  INTEGER,
  reason       TEXT NOT NULL DEFAULT '',
  retries      INTEGER NOT NULL DEFAULT 0,
  allocation   TEXT,
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL
);
CREATE INDEX jobs_by_project ON jobs(project, sequence);
CREATE INDEX jobs_by_state ON jobs(state);
)sql"},
    {"project_quotas", R"sql(
-- What one project's jobs may hold at once (scheduler.h Quota); NULL = no limit.
CREATE TABLE project_quotas (
  project   TEXT PRIMARY KEY,
  max_gpus  INTEGER,
  max_cpus  INTEGER
);
)sql"},
    {"apps", R"sql(
-- Apps (src/control/apps.h, docs/api/apps.md). `spec` is AppSpecToJson; `status` holds what the
-- reconcile loop keeps across restarts: {recent_jobs, events}. Replica jobs are rows of `jobs`
-- labelled sovai.app=<id>. A DELETED app keeps its row, and frees its name.
CREATE TABLE apps (
  id            TEXT PRIMARY KEY,            -- app_<ULID>
  project       TEXT NOT NULL,
  user          TEXT NOT NULL,
  name          TEXT NOT NULL,
  spec          TEXT NOT NULL,
  adapter       INTEGER NOT NULL DEFAULT 0,  -- 1: spec.model is a PEFT adapter
  state         TEXT NOT NULL,
  reason        TEXT NOT NULL DEFAULT '',
  generation    INTEGER NOT NULL,
  desired       INTEGER NOT NULL,
  status        TEXT NOT NULL,
  created_at    INTEGER NOT NULL,
  updated_at    INTEGER NOT NULL
);
CREATE UNIQUE INDEX apps_by_name ON apps(project, name) WHERE state != 'DELETED';

-- The endpoints catalog: models published by operators under /v1, each served by an app of the
-- system project.
CREATE TABLE endpoints (
  name        TEXT PRIMARY KEY,  -- the model name clients send
  app         TEXT NOT NULL,
  rate_limit  TEXT NOT NULL,     -- "400/min"
  created_at  INTEGER NOT NULL
);
)sql"},
    {"app_usage", R"sql(
-- What apps served, per minute, app, token and calling project (the gateway's meter), for
-- billing. `token` is '' for unsecure_http apps and anonymous catalog calls.
CREATE TABLE app_usage (
  app                TEXT NOT NULL,
  token              TEXT NOT NULL,
  project            TEXT NOT NULL,
  minute             INTEGER NOT NULL,  -- Unix time / 60
  requests           INTEGER NOT NULL,
  prompt_tokens      INTEGER NOT NULL,
  completion_tokens  INTEGER NOT NULL,
  PRIMARY KEY (app, token, project, minute)
);
CREATE INDEX app_usage_by_project ON app_usage(project, minute);
)sql"},
    {"billing", R"sql(
-- Billing (src/control/billing_service.h, docs/billing.md). Amounts are integer micro-euros.
-- A project's monthly budget; alerted_month ('YYYY-MM') is the month of the last alert logged.
CREATE TABLE project_budgets (
  project                TEXT PRIMARY KEY,
  monthly_cap_micro_eur  INTEGER NOT NULL,
  alert_percent          INTEGER NOT NULL,
  alerted_month          TEXT NOT NULL DEFAULT '',
  updated_at             INTEGER NOT NULL
);

-- The object store's bytes per project, sampled hourly.
CREATE TABLE storage_samples (
  project  TEXT NOT NULL,
  at       INTEGER NOT NULL,
  bytes    INTEGER NOT NULL,
  PRIMARY KEY (project, at)
);
CREATE INDEX storage_samples_by_time ON storage_samples(at);

-- Server lifetimes and their last heartbeat: a RUNNING interval cut by a crash is billed up to
-- the heartbeat, not through the downtime.
CREATE TABLE billing_server_runs (
  started_at  INTEGER PRIMARY KEY,
  alive_at    INTEGER NOT NULL
);

-- Deleting a job must not take its minutes off the bill: the row is kept here.
CREATE TABLE billing_deleted_jobs (
  id          TEXT PRIMARY KEY,
  project     TEXT NOT NULL,
  spec        TEXT NOT NULL,
  history     TEXT NOT NULL,
  created_at  INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL
);
CREATE INDEX billing_deleted_jobs_by_project ON billing_deleted_jobs(project, updated_at);
CREATE TRIGGER jobs_deleted_keep_billing AFTER DELETE ON jobs BEGIN
  INSERT OR REPLACE INTO billing_deleted_jobs(id, project, spec, history, created_at, updated_at)
  VALUES (OLD.id, OLD.project, OLD.spec, OLD.history, OLD.created_at, OLD.updated_at);
END;
CREATE INDEX jobs_by_project_updated ON jobs(project, updated_at);

-- Which apps served catalog endpoints, kept after the endpoint is deleted: their token usage is
-- billed to the calling projects.
CREATE TABLE billing_endpoint_apps (
  app   TEXT PRIMARY KEY,
  name  TEXT NOT NULL
);
INSERT OR IGNORE INTO billing_endpoint_apps(app, name) SELECT app, name FROM endpoints;
CREATE TRIGGER endpoints_created_keep_billing AFTER INSERT ON endpoints BEGIN
  INSERT OR REPLACE INTO billing_endpoint_apps(app, name) VALUES (NEW.app, NEW.name);
END;
)sql",
     // PostgreSQL: the same tables (as translated), and the triggers as PL/pgSQL functions.
     R"sql(
CREATE TABLE project_budgets (
  project                TEXT COLLATE "C" PRIMARY KEY,
  monthly_cap_micro_eur  BIGINT NOT NULL,
  alert_percent          BIGINT NOT NULL,
  alerted_month          TEXT COLLATE "C" NOT NULL DEFAULT '',
  updated_at             BIGINT NOT NULL
);

CREATE TABLE storage_samples (
  project  TEXT COLLATE "C" NOT NULL,
  at       BIGINT NOT NULL,
  bytes    BIGINT NOT NULL,
  PRIMARY KEY (project, at)
);
CREATE INDEX storage_samples_by_time ON storage_samples(at);

CREATE TABLE billing_server_runs (
  started_at  BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  alive_at    BIGINT NOT NULL
);

CREATE TABLE billing_deleted_jobs (
  id          TEXT COLLATE "C" PRIMARY KEY,
  project     TEXT COLLATE "C" NOT NULL,
  spec        TEXT COLLATE "C" NOT NULL,
  history     TEXT COLLATE "C" NOT NULL,
  created_at  BIGINT NOT NULL,
  updated_at  BIGINT NOT NULL
);
CREATE INDEX billing_deleted_jobs_by_project ON billing_deleted_jobs(project, updated_at);
CREATE FUNCTION jobs_deleted_keep_billing() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO billing_deleted_jobs(id, project, spec, history, created_at, updated_at)
  VALUES (OLD.id, OLD.project, OLD.spec, OLD.history, OLD.created_at, OLD.updated_at)
  ON CONFLICT (id) DO UPDATE SET project = excluded.project, spec = excluded.spec,
    history = excluded.history, created_at = excluded.created_at,
    updated_at = excluded.updated_at;
  RETURN OLD;
END
$fn$;
CREATE TRIGGER jobs_deleted_keep_billing AFTER DELETE ON jobs
  FOR EACH ROW EXECUTE FUNCTION jobs_deleted_keep_billing();
CREATE INDEX jobs_by_project_updated ON jobs(project, updated_at);

CREATE TABLE billing_endpoint_apps (
  app   TEXT COLLATE "C" PRIMARY KEY,
  name  TEXT COLLATE "C" NOT NULL
);
INSERT INTO billing_endpoint_apps(app, name) SELECT app, name FROM endpoints
  ON CONFLICT (app) DO NOTHING;
CREATE FUNCTION endpoints_created_keep_billing() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO billing_endpoint_apps(app, name) VALUES (NEW.app, NEW.name)
  ON CONFLICT (app) DO UPDATE SET name = excluded.name;
  RETURN NEW;
END
$fn$;
CREATE TRIGGER endpoints_created_keep_billing AFTER INSERT ON endpoints
  FOR EACH ROW EXECUTE FUNCTION endpoints_created_keep_billing();
)sql"},
    {"audit_log", R"sql(
-- The audit log (src/control/audit.h, docs/audit.md): append only, hash-chained. `hash` is
-- lowercase hex SHA-256(raw prev_hash || canonical fields); the first entry's prev_hash is 64 '0'.
CREATE TABLE audit_log (
  seq          INTEGER PRIMARY KEY,  -- 1, 2, 3, ... without gaps
  at           INTEGER NOT NULL,
  actor_user   TEXT NOT NULL,
  actor_token  TEXT NOT NULL,
  project      TEXT NOT NULL,
  action       TEXT NOT NULL,        -- "POST /v1/jobs", "S3 GET object", "APP POST"
  resource     TEXT NOT NULL,
  source       TEXT NOT NULL,        -- remote address
  result       INTEGER NOT NULL,     -- HTTP status
  detail       TEXT NOT NULL,
  prev_hash    TEXT NOT NULL,
  hash         TEXT NOT NULL
);
CREATE INDEX audit_log_by_time ON audit_log(at);
CREATE INDEX audit_log_by_project ON audit_log(project, seq);
)sql"},
    {"project_regions", R"sql(
-- Data residency (docs/sovereignty.md): the regions besides the server's own whose buckets the
-- project's workloads may mount, as canonical names joined by ',' ("EU-CENTRAL-2,EU-NORTH-1");
-- '' = only the server's own region.
ALTER TABLE projects ADD COLUMN allowed_regions TEXT NOT NULL DEFAULT '';
)sql"},
    {"notebooks", R"sql(
-- Notebooks (src/control/notebooks.h, docs/api/notebooks.md). `spec` is NotebookSpecToJson;
-- `status` holds {recent_jobs, events, started_at, last_activity}. Each start is a row of `jobs`
-- labelled sovai.notebook=<id>, running Jupyter on `port` with `jupyter_token` (the platform's
-- secret, sent by the gateway, never shown). A DELETED notebook keeps its row, and frees its name.
CREATE TABLE notebooks (
  id             TEXT PRIMARY KEY,            -- nb_<ULID>
  project        TEXT NOT NULL,
  user           TEXT NOT NULL,
  name           TEXT NOT NULL,               -- '' when unnamed
  spec           TEXT NOT NULL,
  state          TEXT NOT NULL,
  reason         TEXT NOT NULL DEFAULT '',
  job            TEXT NOT NULL DEFAULT '',
  port           INTEGER NOT NULL DEFAULT 0,
  jupyter_token  TEXT NOT NULL DEFAULT '',
  status         TEXT NOT NULL,
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL
);
CREATE UNIQUE INDEX notebooks_by_name ON notebooks(project, name)
  WHERE name != '' AND state != 'DELETED';
)sql"},
    {"datastores", R"sql(
-- External S3 datastores of a project (src/control/datastores.h, docs/api/datastores.md), named
-- in volumes as bucket@ALIAS. The secret key is never stored in clear: `secret_sealed` is
-- nonce || AES-256-GCM ciphertext || tag under the master key <data-dir>/secrets.key whose id
-- is `secret_key_id` (src/control/secrets.h).
CREATE TABLE datastores (
  project        TEXT NOT NULL,
  alias          TEXT NOT NULL,     -- lowercase
  type           TEXT NOT NULL,     -- 's3'
  endpoint       TEXT NOT NULL,     -- http(s)://HOST[:PORT]
  region         TEXT NOT NULL,     -- the S3 signing region
  access_key     TEXT NOT NULL,
  secret_key_id  TEXT NOT NULL,     -- 'v1:<16 hex>'
  secret_sealed  BLOB NOT NULL,
  created_by     TEXT NOT NULL,     -- usr_<ULID>
  created_at     INTEGER NOT NULL,
  PRIMARY KEY (project, alias)
);
)sql"},
    {"jobs_slurm_job_id", R"sql(
-- The Slurm job of a job's current try on the Slurm executor (jobs.h SlurmExecution), so that a
-- restarted server follows the Slurm jobs it submitted instead of losing them.
ALTER TABLE jobs ADD COLUMN slurm_job_id TEXT NOT NULL DEFAULT '';
)sql"},
    {"two_servers", R"sql(
-- Several servers on one database (docs/state.md): a stop requested through a server that does
-- not run the job waits here for the one that does; `leaders` says which server holds each
-- leadership and where its API answers the others (a job's log).
ALTER TABLE jobs ADD COLUMN stop_request TEXT NOT NULL DEFAULT '';
CREATE TABLE leaders (
  name        TEXT PRIMARY KEY,    -- 'jobs'
  api_url     TEXT NOT NULL,       -- http(s)://host:port of the leader's API
  since       INTEGER NOT NULL     -- unix micros
);
)sql"},
    {"jobs_node", R"sql(
-- The host a job's workload runs on when that is not the server's own (a Slurm node): where the
-- gateway reaches an app replica or a notebook.
ALTER TABLE jobs ADD COLUMN node TEXT NOT NULL DEFAULT '';
)sql"},
    {"storage_samples_resource", R"sql(
-- Storage is sampled per resource (billing.h StorageUsage): 'buckets', or a registry repository
-- ('registry:<project>/<name>', 'registry' for blobs no manifest references). The primary key
-- gains the resource, so the table is rebuilt; earlier samples were of the buckets.
CREATE TABLE storage_samples_by_resource (
  project   TEXT NOT NULL,
  resource  TEXT NOT NULL,
  at        INTEGER NOT NULL,
  bytes     INTEGER NOT NULL,
  PRIMARY KEY (project, resource, at)
);
INSERT INTO storage_samples_by_resource(project, resource, at, bytes)
  SELECT project, 'buckets', at, bytes FROM storage_samples;
DROP TABLE storage_samples;
ALTER TABLE storage_samples_by_resource RENAME TO storage_samples;
CREATE INDEX storage_samples_by_time ON storage_samples(at);
)sql"},
    {"jobs_image_digest", R"sql(
-- The manifest digest a registry image reference resolved to at submission (jobs.h
-- Job::image_digest): every try of the job runs that image.
ALTER TABLE jobs ADD COLUMN image_digest TEXT NOT NULL DEFAULT '';
)sql"},
};

}  // namespace

std::span<const Migration> ControlMigrations() { return kMigrations; }

}  // namespace sovai::control
