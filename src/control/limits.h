// Named limits of the control plane. Each one is checked where input enters (the REST layer and
// Identity), and exceeding it is a clear 400/409 naming the field, never a silent truncation.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sovai::control {

// --- Names and free text (bytes of UTF-8) ----------------------------------------------------
// User and project names: [a-z0-9] first, then [a-z0-9._-]; they appear in S3 owner ids, CLI
// arguments and URLs, so they stay short and shell-safe.
inline constexpr size_t kMaxNameBytes = 63;
inline constexpr size_t kMaxDisplayNameBytes = 128;
inline constexpr size_t kMaxEmailBytes = 254;  // RFC 5321 path limit
inline constexpr size_t kMaxDescriptionBytes = 1024;
// A token's human label ("ci on gitlab").
inline constexpr size_t kMaxTokenNameBytes = 128;

// --- Label selectors ("team=nlp,env=prod") ---------------------------------------------------
inline constexpr size_t kMaxSelectorLabels = 16;
inline constexpr size_t kMaxLabelKeyBytes = 63;
inline constexpr size_t kMaxLabelValueBytes = 63;

// --- Credentials -----------------------------------------------------------------------------
// A bearer token longer than this is rejected before it is hashed. The bootstrap admin token may
// be up to 256 characters (bootstrap.h), ours are 47.
inline constexpr size_t kMaxBearerTokenBytes = 256;
// Random bytes in a new API token ("sov_" + 43 base64url characters = 256 bits).
inline constexpr size_t kTokenRandomBytes = 32;
// Tokens a user may hold un-revoked (expired ones included) in one project; beyond it creation
// answers 409 asking to revoke some.
inline constexpr int64_t kMaxActiveTokensPerUserProject = 256;
// S3 access keys of one user.
inline constexpr int64_t kMaxS3KeysPerUser = 16;

// --- REST ------------------------------------------------------------------------------------
// Request bodies of /v1 identity routes are small JSON objects.
inline constexpr uint64_t kMaxRequestBodyBytes = 64 * 1024;
// POST /v1/jobs: a spec's command and environment may hold up to 256 KiB of strings.
inline constexpr uint64_t kMaxJobSpecBytes = 512 * 1024;
// One read of a job log for GET /v1/jobs/{id}/logs, and how often ?follow=true looks for more.
inline constexpr size_t kMaxLogChunkBytes = 1 << 20;
inline constexpr std::chrono::milliseconds kLogFollowPoll{100};
// A project quota's largest value (GPUs or CPUs at once).
inline constexpr int64_t kMaxQuotaUnits = 1 << 20;
inline constexpr int kMaxRequestJsonDepth = 8;
// List endpoints: ?limit= defaults to kDefaultPageSize and may not exceed kMaxPageSize.
inline constexpr int64_t kDefaultPageSize = 50;
inline constexpr int64_t kMaxPageSize = 500;
// ?cursor= is an id we handed out; anything longer is not one.
inline constexpr size_t kMaxCursorBytes = 128;

// --- Apps (docs/api/apps.md) ------------------------------------------------------------------
// App names are served model names and URL segments: [a-z][a-z0-9-]*.
inline constexpr size_t kMaxAppNameBytes = 63;
// Replicas of one app, fixed or the autoscaler's maximum.
inline constexpr int kMaxAppReplicas = 64;
// Longest autoscaling window or cooldown.
inline constexpr int64_t kMaxScalingWindowS = 24 * 3600;
inline constexpr size_t kMaxProbePathBytes = 256;
// Scaling decisions and state transitions kept in an app's status (oldest dropped first).
inline constexpr size_t kMaxAppEvents = 32;
// A replica that failed this many times in a row before any replica of its generation became
// ready makes the app FAILED (a model that cannot load must not be retried forever).
inline constexpr int kMaxAppStartFailures = 3;
// A ready replica whose probe fails this many times in a row stops receiving requests.
inline constexpr int kMaxProbeFailures = 3;
// How long a draining replica may finish its requests before it is stopped anyway.
inline constexpr std::chrono::milliseconds kReplicaDrainTimeout{30'000};
// One health probe's connect + answer time.
inline constexpr std::chrono::milliseconds kProbeTimeout{2'000};
// Catalog endpoints' default rate limit per project per model.
inline constexpr char kDefaultEndpointRateLimit[] = "400/min";

// --- Jobs and billing (docs/billing.md) -------------------------------------------------------
// What a job without timeout_s may run for, and what admission prices it at.
inline constexpr int64_t kDefaultJobTimeoutS = 7 * 24 * 3600;
// How often the billing service compares each budgeted project's month with its cap (and
// refreshes the heartbeat that keeps a crash's downtime off the bill).
inline constexpr std::chrono::milliseconds kBudgetWatchPeriod{5'000};
// How often the object store's bytes per project are sampled: storage is billed per hour held.
inline constexpr std::chrono::milliseconds kStorageSamplePeriod{3'600'000};
// An app replica's job timeout: replicas run until stopped; the timeout only bounds a forgotten
// one (it is then replaced like any replica that ended).
inline constexpr int64_t kAppReplicaTimeoutS = 30LL * 24 * 3600;
// Apps have no end: a budget admits an app's replica when the month's spend plus this much of
// the replica's running stays under the cap (the dry run prices the app for this long), and the
// cap watcher stops the app when the cap is reached.
inline constexpr int64_t kAppAdmissionHorizonS = 3600;
// Lines in one usage or statement answer; more is refused (OutOfRange, 400): a shorter window.
inline constexpr size_t kMaxBillingLines = 100'000;
// The longest window GET /v1/billing/usage accepts.
inline constexpr int64_t kMaxBillingWindowDays = 366;

// --- Notebooks (docs/api/notebooks.md) --------------------------------------------------------
// No activity (kernel execution, API call, open connection) for this long stops a notebook, so a
// forgotten one stops being billed; `idle_timeout_s` overrides it (0: never), up to the max.
inline constexpr int64_t kDefaultNotebookIdleTimeoutS = 3600;
inline constexpr int64_t kMaxNotebookIdleTimeoutS = 7 * 24 * 3600;
// A notebook's job timeout: it bounds a notebook whose idle stop is off. Admission and the dry
// run price a notebook as an app replica, for kAppAdmissionHorizonS.
inline constexpr int64_t kNotebookJobTimeoutS = 30LL * 24 * 3600;
// Jupyter must answer its probe this long after its job started RUNNING, else the notebook
// FAILED (Jupyter starts in seconds; a missing package must not keep a GPU forever).
inline constexpr std::chrono::milliseconds kNotebookStartTimeout{300'000};
// How often a RUNNING notebook's Jupyter is asked for its activity (GET /api/status).
inline constexpr std::chrono::milliseconds kNotebookActivityPollInterval{30'000};
// State transitions kept in a notebook's status (oldest dropped first).
inline constexpr size_t kMaxNotebookEvents = 32;
// Notebooks per project that are not DELETED (each holds a row and, running, a job).
inline constexpr int64_t kMaxNotebooksPerProject = 256;

// --- Regions (docs/formats/regions.md, docs/sovereignty.md) -----------------------------------
// A --regions file, and the other regions it may list.
inline constexpr uint64_t kMaxRegionsFileBytes = 64 * 1024;
inline constexpr size_t kMaxRegions = 32;
// A project's allowed_regions: at most every region the server could know.
inline constexpr size_t kMaxAllowedRegions = kMaxRegions;
inline constexpr size_t kMaxRegionEndpointBytes = 256;
inline constexpr size_t kMaxJurisdictionBytes = 64;
// A credentials_file of a region (a sovai server's admin.json is well under it).
inline constexpr uint64_t kMaxCredentialsFileBytes = 64 * 1024;

// --- Datastores (docs/api/datastores.md) -----------------------------------------------------
// External S3 services one project may register (each is a row and an alias in its volumes).
inline constexpr int64_t kMaxDatastoresPerProject = 64;
// A datastore's access key (AWS's are 20 characters, other services' longer) and secret key.
inline constexpr size_t kMaxDatastoreKeyBytes = 128;
inline constexpr size_t kMaxDatastoreSecretBytes = 256;

// --- Audit log (docs/audit.md) ----------------------------------------------------------------
// Events waiting for the audit writer. Append() never blocks the request path: beyond this the
// event is dropped, counted, logged, and the count written into the chain as an "AUDIT DROPPED"
// entry once the writer catches up (a gap an auditor sees, never a silent one).
inline constexpr size_t kAuditQueueLimit = 10'000;
// Events written per transaction by the writer.
inline constexpr size_t kAuditWriteBatch = 256;
// Rows Verify() reads per read transaction (the database lock is released between chunks).
inline constexpr int64_t kAuditVerifyChunk = 1'000;
// A free-text field (resource, detail) longer than this is cut and marked "...(cut)"; request
// paths are already bounded by the HTTP server's target limit.
inline constexpr size_t kMaxAuditFieldBytes = 2048;
// Export to a bucket (audit_export.h): how often, and how large one JSON Lines object may grow
// (an export with more entries writes several objects).
inline constexpr std::chrono::seconds kAuditExportDefaultInterval{3600};
inline constexpr std::chrono::seconds kAuditExportMinInterval{1};
inline constexpr std::chrono::seconds kAuditExportMaxInterval{7 * 24 * 3600};
inline constexpr int64_t kAuditExportMaxEntriesPerObject = 100'000;
inline constexpr size_t kAuditExportMaxObjectBytes = 64 << 20;
// One exported line. The cut fields are at most kMaxAuditFieldBytes, the others come from
// request heads (at most 16 KiB, net/limits.h); JSON escaping at most sextuples a byte, so real
// lines stay far below this. A longer line stops the export (and fails VerifyAuditExport).
inline constexpr size_t kMaxAuditExportLineBytes = 1 << 20;

}  // namespace sovai::control
