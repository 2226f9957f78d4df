// Registry: setup, authentication, routing, the token endpoint, listings and garbage
// collection. Blobs, uploads and manifests: registry_content.cc.
#include "registry/registry.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "base/crypto.h"
#include "base/json.h"
#include "base/log.h"
#include "base/time.h"
#include "registry/internal/http_util.h"

namespace sovai::registry {

using internal::Json;
using internal::WithApiVersion;

net::Response ErrorResponse(int status, std::string_view code, std::string message) {
  nlohmann::json body = {
      {"errors",
       nlohmann::json::array({{{"code", code}, {"message", message}, {"detail", nullptr}}})}};
  net::Response res = net::Response::Json(status, base::DumpJson(body));
  return WithApiVersion(std::move(res));
}

net::ErrorRenderer ErrorRenderer() {
  return [](const net::Request*, net::Response& res) {
    std::string_view code = "UNSUPPORTED";
    switch (res.status) {
      case 400:
        code = "UNSUPPORTED";
        break;
      case 401:
        code = "UNAUTHORIZED";
        break;
      case 403:
        code = "DENIED";
        break;
      case 404:
        code = "NAME_UNKNOWN";
        break;
      case 413:
        code = "SIZE_INVALID";
        break;
      case 429:
        code = "TOO_MANY_REQUESTS";
        break;
      default:
        if (res.status >= 500) code = "UNKNOWN";
    }
    std::string message =
        res.error_message.value_or(std::string(net::HttpReasonPhrase(res.status)));
    net::Response rendered = ErrorResponse(res.status, code, std::move(message));
    res.body = std::move(rendered.body);
    res.headers.Set("Content-Type", "application/json");
    res.headers.Set("Docker-Distribution-API-Version", "registry/2.0");
  };
}

Registry::Registry(std::unique_ptr<Storage> storage, Authenticator& authenticator, base::Env& env,
                   RegistryOptions options)
    : storage_(std::move(storage)),
      authenticator_(authenticator),
      env_(env),
      options_(std::move(options)),
      tokens_(options_.token_key.empty() ? base::RandomBytes(32) : options_.token_key, env_,
              options_.token_lifetime_s) {
  if (options_.reclaim_thread) reclaim_thread_ = std::thread([this] { ReclaimLoop(); });
}

Registry::~Registry() {
  {
    std::lock_guard lock(reclaim_mu_);
    stop_ = true;
  }
  reclaim_cv_.notify_all();
  if (reclaim_thread_.joinable()) reclaim_thread_.join();
}

base::Result<std::unique_ptr<Registry>> Registry::Create(objstore::Store& store,
                                                         Authenticator& authenticator,
                                                         base::Env& env, RegistryOptions options) {
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage,
                         Storage::Open(store, env, options.storage));
  return std::unique_ptr<Registry>(
      new Registry(std::move(storage), authenticator, env, std::move(options)));
}

void Registry::ReclaimLoop() {
  // A quarter of the timeout between sweeps, at most a minute: an upload lives at most 1.25×.
  const auto period =
      std::chrono::seconds(std::clamp<int64_t>(options_.storage.upload_timeout_s / 4, 1, 60));
  std::unique_lock lock(reclaim_mu_);
  while (!reclaim_cv_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    size_t n = storage_->ReclaimExpiredUploads(env_.NowUnixMicros());
    if (n > 0) SOVAI_LOG(INFO) << "registry: reclaimed " << n << " expired uploads";
    lock.lock();
  }
}

void Registry::AddRoutes(net::Router& router) {
  auto v2 = [this](net::Request& req) { return HandleV2(req); };
  // Blob uploads stream through these routes; manifests are bounded by their handler.
  // One request carries at most net's ceiling (6 GiB): larger blobs come in several chunks.
  net::RouteOptions big{.max_body_bytes =
                            std::min<uint64_t>(options_.storage.max_blob_bytes, kMaxChunkBytes)};
  for (const char* method : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}) {
    router.Add(method, "/v2", v2, big);
    router.Add(method, "/v2/{path...}", v2, big);
  }
  router.Get("/auth/token", [this](net::Request& req) { return HandleToken(req); });
  router.Post("/sovai/registry/v1/gc", [this](net::Request& req) { return HandleGc(req); });
  auto settings = [this](net::Request& req) { return HandleSettings(req); };
  router.Get("/sovai/registry/v1/settings", settings);
  router.Put("/sovai/registry/v1/settings", settings);
}

net::Response Registry::Challenge(const net::Request& req, const V2Path& path,
                                  const base::Status& why) {
  std::string host(req.header("Host").value_or("localhost"));
  std::string challenge = "Bearer realm=\"" + std::string(req.is_tls() ? "https" : "http") + "://" +
                          host + "/auth/token\",service=\"" + options_.service + "\"";
  if (!path.repository.empty() && ValidateRepositoryName(path.repository).ok()) {
    bool pull_only = req.method() == "GET" || req.method() == "HEAD";
    challenge +=
        ",scope=\"repository:" + path.repository + (pull_only ? ":pull\"" : ":pull,push\"");
  }
  net::Response res = ErrorResponse(401, "UNAUTHORIZED", std::string(why.message()));
  res.headers.Set("WWW-Authenticate", challenge);
  return res;
}

net::Response Registry::HandleV2(net::Request& req) {
  V2Path path = ParseV2Path(req.path());
  auto caller =
      AuthenticateHeader(req.header("Authorization").value_or(""), authenticator_, tokens_);
  if (!caller.ok()) return Challenge(req, path, caller.status());
  if (path.kind == V2Path::kBase) {
    if (req.method() != "GET" && req.method() != "HEAD") {
      return ErrorResponse(405, "UNSUPPORTED", "only GET /v2/ is defined");
    }
    return Json(200, "{}");
  }
  if (path.kind == V2Path::kUnknown) {
    return ErrorResponse(404, "NAME_UNKNOWN",
                         "no registry endpoint at " + req.path().substr(0, 200));
  }
  if (path.kind == V2Path::kCatalog) {
    if (req.method() != "GET" && req.method() != "HEAD") {
      return ErrorResponse(405, "UNSUPPORTED", "the catalog is read with GET");
    }
    return HandleCatalog(req, *caller);
  }
  if (base::Status valid = ValidateRepositoryName(path.repository); !valid.ok()) {
    return ErrorResponse(400, "NAME_INVALID", std::string(valid.message()));
  }
  const std::string_view project = ProjectOf(path.repository);
  const bool reading = req.method() == "GET" || req.method() == "HEAD";
  if (!caller->CanPull(project)) {
    return ErrorResponse(403, "DENIED",
                         "repository " + path.repository + " belongs to project " +
                             std::string(project) + "; this token is of project " +
                             caller->project);
  }
  if (!reading && !caller->CanPushTo(project)) {
    return ErrorResponse(403, "DENIED",
                         "pushing to or deleting from " + path.repository +
                             " needs an operator or admin token of project " +
                             std::string(project));
  }
  switch (path.kind) {
    case V2Path::kTags:
      return HandleTags(req, path);
    case V2Path::kManifest:
      return HandleManifest(req, path);
    case V2Path::kBlob:
      return HandleBlob(req, path);
    case V2Path::kUploadStart:
      return HandleUploadStart(req, path);
    case V2Path::kUpload:
      return HandleUpload(req, path);
    default:
      return ErrorResponse(404, "NAME_UNKNOWN", "no registry endpoint at " + req.path());
  }
}

net::Response Registry::HandleToken(net::Request& req) {
  auto caller =
      AuthenticateHeader(req.header("Authorization").value_or(""), authenticator_, tokens_);
  if (!caller.ok()) {
    net::Response res = ErrorResponse(401, "UNAUTHORIZED", std::string(caller.status().message()));
    res.headers.Set("WWW-Authenticate", "Basic realm=\"" + options_.service + "\"");
    return res;
  }
  std::string token = tokens_.Issue(*caller);
  nlohmann::json body = {{"token", token},
                         {"access_token", token},
                         {"expires_in", tokens_.lifetime_s()},
                         {"issued_at", base::FormatRfc3339(env_.NowUnixMicros(), 0)}};
  return Json(200, base::DumpJson(body));
}

namespace {

// Reads `n` and `last` of a list request. 400 PAGINATION_NUMBER_INVALID for a bad `n`.
std::optional<net::Response> ParsePage(const net::Request& req, int* n, std::string* last) {
  *n = kDefaultListPage;
  if (auto text = req.query("n")) {
    int value = 0;
    auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (ec != std::errc() || end != text->data() + text->size() || value < 0) {
      return ErrorResponse(
          400, "PAGINATION_NUMBER_INVALID",
          "n must be a non-negative integer, got '" + std::string(text->substr(0, 20)) + "'");
    }
    *n = std::min(value, kMaxListPage);
  }
  *last = std::string(req.query("last").value_or(""));
  return std::nullopt;
}

std::string NextLink(std::string_view base, int n, const std::string& last) {
  return "<" + std::string(base) + "?n=" + std::to_string(n) +
         "&last=" + net::PercentEncode(last, true) + ">; rel=\"next\"";
}

}  // namespace

net::Response Registry::HandleCatalog(net::Request& req, const Caller& caller) {
  int n = 0;
  std::string last;
  if (auto bad = ParsePage(req, &n, &last)) return std::move(*bad);
  // Platform admins see every repository; everyone else their project's.
  std::optional<std::string> project;
  if (!caller.admin) project = caller.project;
  auto page = storage_->ListRepositories(project, last, n);
  if (!page.ok()) return ErrorResponse(500, "UNKNOWN", std::string(page.status().message()));
  net::Response res = Json(200, base::DumpJson({{"repositories", page->items}}));
  if (page->more) res.headers.Set("Link", NextLink("/v2/_catalog", n, page->items.back()));
  return res;
}

net::Response Registry::HandleTags(net::Request& req, const V2Path& path) {
  if (req.method() != "GET" && req.method() != "HEAD") {
    return ErrorResponse(405, "UNSUPPORTED", "tags are listed with GET");
  }
  int n = 0;
  std::string last;
  if (auto bad = ParsePage(req, &n, &last)) return std::move(*bad);
  auto page = storage_->ListTags(path.repository, last, n);
  if (!page.ok()) {
    if (page.status().code() == base::StatusCode::kNotFound) {
      return ErrorResponse(404, "NAME_UNKNOWN", std::string(page.status().message()));
    }
    return ErrorResponse(500, "UNKNOWN", std::string(page.status().message()));
  }
  net::Response res = Json(200, base::DumpJson({{"name", path.repository}, {"tags", page->items}}));
  if (page->more) {
    res.headers.Set("Link",
                    NextLink("/v2/" + path.repository + "/tags/list", n, page->items.back()));
  }
  return res;
}

net::Response Registry::HandleGc(net::Request& req) {
  auto caller =
      AuthenticateHeader(req.header("Authorization").value_or(""), authenticator_, tokens_);
  if (!caller.ok())
    return ErrorResponse(401, "UNAUTHORIZED", std::string(caller.status().message()));
  GcOptions gc;
  gc.dry_run = req.query("dry_run").value_or("true") != "false";
  if (auto project = req.query("project"); project && !project->empty()) {
    gc.project = std::string(*project);
  }
  if (!caller->admin) {
    if (!gc.project) gc.project = caller->project;
    if (!caller->CanPushTo(*gc.project)) {
      return ErrorResponse(403, "DENIED",
                           "garbage collection of project " + *gc.project +
                               " needs an operator or admin token of that project");
    }
  }
  if (auto age = req.query("min_age_s")) {
    int64_t value = -1;
    auto [end, ec] = std::from_chars(age->data(), age->data() + age->size(), value);
    if (ec != std::errc() || end != age->data() + age->size() || value < 0) {
      return ErrorResponse(400, "UNSUPPORTED", "min_age_s must be a non-negative integer");
    }
    gc.min_age_s = value;
  }
  auto report = storage_->CollectGarbage(gc);
  if (!report.ok()) return ErrorResponse(500, "UNKNOWN", std::string(report.status().message()));
  nlohmann::json removed = nlohmann::json::array();
  for (const auto& r : report->removed) {
    removed.push_back({{"project", r.project}, {"digest", r.digest}, {"size", r.size}});
  }
  nlohmann::json body = {{"dry_run", report->dry_run},
                         {"removed", removed},
                         {"removed_bytes", report->removed_bytes},
                         {"kept_blobs", report->kept_blobs},
                         {"manifests_read", report->manifests_read}};
  return Json(200, base::DumpJson(body));
}

net::Response Registry::HandleSettings(net::Request& req) {
  auto caller =
      AuthenticateHeader(req.header("Authorization").value_or(""), authenticator_, tokens_);
  if (!caller.ok())
    return ErrorResponse(401, "UNAUTHORIZED", std::string(caller.status().message()));
  const std::string repository(req.query("repository").value_or(""));
  if (base::Status name = ValidateRepositoryName(repository); !name.ok()) {
    return ErrorResponse(400, "NAME_INVALID", std::string(name.message()));
  }
  const std::string_view project = ProjectOf(repository);
  // Another project's repository answers as a missing one would.
  if (!caller->CanPull(project)) {
    return ErrorResponse(404, "NAME_UNKNOWN", "repository " + repository + " is not known");
  }
  if (req.method() == "PUT") {
    if (!caller->CanPushTo(project)) {
      return ErrorResponse(403, "DENIED",
                           "changing the settings of " + repository +
                               " needs an operator or admin token of project " +
                               std::string(project));
    }
    const std::string value(req.query("immutable_tags").value_or(""));
    if (value != "true" && value != "false") {
      return ErrorResponse(400, "UNSUPPORTED", "immutable_tags must be true or false");
    }
    base::Status st = storage_->SetSettings(repository, {.immutable_tags = value == "true"});
    if (!st.ok()) return ErrorResponse(500, "UNKNOWN", std::string(st.message()));
  }
  auto settings = storage_->GetSettings(repository);
  if (!settings.ok()) {
    return ErrorResponse(500, "UNKNOWN", std::string(settings.status().message()));
  }
  nlohmann::json body = {{"repository", repository}, {"immutable_tags", settings->immutable_tags}};
  return Json(200, base::DumpJson(body));
}

}  // namespace sovai::registry
