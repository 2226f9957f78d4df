#include "control/regions.h"

#include <set>

#include "base/json.h"
#include "base/strings.h"
#include "control/limits.h"
#include "exec/volume_spec.h"

namespace sovai::control {

namespace {

using base::Status;
using Json = nlohmann::json;

constexpr std::string_view kEntryMembers[] = {
    "name",    "s3_endpoint",   "s3_region",         "jurisdiction",
    "ca_file", "access_key_id", "secret_access_key", "credentials_file"};

// At most `n` bytes of `value`, quoted, for messages.
std::string Quoted(std::string_view value, size_t n = 64) {
  if (value.size() <= n) return "'" + std::string(value) + "'";
  return "'" + std::string(value.substr(0, n)) + "...'";
}

bool Printable(std::string_view s, bool allow_space) {
  for (char c : s) {
    if (c < (allow_space ? ' ' : '!') || c > '~') return false;
  }
  return true;
}

Status CheckAccessKey(std::string_view key) {
  bool ok = key.size() >= 16 && key.size() <= 128;
  for (char c : key) {
    ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'));
  }
  if (ok) return Status();
  return base::InvalidArgumentError("must be 16 to 128 characters of A-Z, a-z and 0-9");
}

Status CheckSecret(std::string_view secret) {
  if (secret.size() >= 8 && secret.size() <= 128 && Printable(secret, false)) return Status();
  return base::InvalidArgumentError("must be 8 to 128 printable ASCII characters without spaces");
}

// http(s)://host[:port]: what exec::S3Client takes as an endpoint.
Status CheckEndpoint(std::string_view url) {
  auto bad = [&] {
    return base::InvalidArgumentError(
        "must be http://HOST[:PORT] or https://HOST[:PORT] without a path (at most " +
        std::to_string(kMaxRegionEndpointBytes) + " characters), not " + Quoted(url));
  };
  if (url.size() > kMaxRegionEndpointBytes || !Printable(url, false)) return bad();
  std::string_view rest;
  if (url.starts_with("https://")) {
    rest = url.substr(8);
  } else if (url.starts_with("http://")) {
    rest = url.substr(7);
  } else {
    return bad();
  }
  if (rest.empty() || rest.find_first_of("/?#@\\") != std::string_view::npos) return bad();
  std::string_view host = rest;
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos && rest.front() != '[') {
    host = rest.substr(0, colon);
    std::string_view port = rest.substr(colon + 1);
    auto n = base::ParseUint64(port);
    if (port.empty() || !n.ok() || *n == 0 || *n > 65535) return bad();
  }
  if (host.empty()) return bad();
  return Status();
}

Status CheckS3Region(std::string_view region) {
  bool ok = !region.empty() && region.size() <= 64;
  for (char c : region) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  if (ok) return Status();
  return base::InvalidArgumentError("must be 1 to 64 characters of a-z, 0-9 and '-', not " +
                                    Quoted(region));
}

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.starts_with("/") || base_dir.empty()) return path;
  return base::JoinPath(base_dir, path);
}

// {"access_key_id": ..., "secret_access_key": ...} from a credentials file; other members are
// ignored, so a sovai server's admin.json works as one.
Status ReadCredentials(base::Env& env, const std::string& path, RegionEndpoint& region) {
  SOVAI_ASSIGN_OR_RETURN(base::FileStat stat, env.Stat(path));
  if ((stat.mode & 077) != 0) {
    return base::FailedPreconditionError("'" + path +
                                         "' holds secrets and is readable by group or others; "
                                         "run 'chmod 600 " +
                                         path + "'");
  }
  auto text = env.ReadFile(path, kMaxCredentialsFileBytes);
  if (!text.ok()) {
    if (text.status().code() == base::StatusCode::kResourceExhausted) {
      return base::InvalidArgumentError("'" + path + "' is larger than " +
                                        std::to_string(kMaxCredentialsFileBytes) + " bytes");
    }
    return text.status();
  }
  auto doc = base::ParseJson(*text);
  if (!doc.ok() || !doc->is_object()) {
    return base::InvalidArgumentError(
        "'" + path + "' must be a JSON object with access_key_id and secret_access_key" +
        (doc.ok() ? "" : " (" + doc.status().message() + ")"));
  }
  for (auto [member, target] : {std::pair{"access_key_id", &region.access_key_id},
                                std::pair{"secret_access_key", &region.secret_access_key}}) {
    auto value = base::GetString(*doc, member);
    if (!value.ok()) {
      return base::InvalidArgumentError("'" + path + "': " + value.status().message());
    }
    *target = std::move(*value);
  }
  if (Status st = CheckAccessKey(region.access_key_id); !st.ok()) {
    return base::InvalidArgumentError("'" + path + "': access_key_id " + st.message());
  }
  if (Status st = CheckSecret(region.secret_access_key); !st.ok()) {
    return base::InvalidArgumentError("'" + path + "': secret_access_key " + st.message());
  }
  return Status();
}

base::Result<RegionEndpoint> ParseEntry(base::Env& env, const Json& j, const std::string& where,
                                        const std::string& base_dir) {
  auto error = [&](std::string_view field, const std::string& message) {
    return base::InvalidArgumentError(where + (field.empty() ? "" : "." + std::string(field)) +
                                      ": " + message);
  };
  if (!j.is_object()) {
    return error("", std::string("must be an object such as {\"name\": \"EU-CENTRAL-2\", ...}, "
                                 "not ") +
                         j.type_name());
  }
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (std::string_view m : kEntryMembers) known = known || key == m;
    if (!known) {
      return error(key,
                   "unknown field; a region has name, s3_endpoint, s3_region, jurisdiction, "
                   "ca_file, and access_key_id with secret_access_key or credentials_file");
    }
  }
  // Every member is a string; required ones must be there.
  auto member = [&](const char* name, bool required) -> base::Result<std::string> {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) {
      if (required) return error(name, "is required");
      return std::string();
    }
    if (!it->is_string())
      return error(name, std::string("must be a string, not ") + it->type_name());
    if (it->get_ref<const std::string&>().empty()) return error(name, "must not be empty");
    return it->get<std::string>();
  };
  RegionEndpoint r;
  SOVAI_ASSIGN_OR_RETURN(r.name, member("name", true));
  if (Status st = ValidateRegionName(r.name); !st.ok()) return error("name", st.message());
  SOVAI_ASSIGN_OR_RETURN(r.s3_endpoint, member("s3_endpoint", true));
  if (Status st = CheckEndpoint(r.s3_endpoint); !st.ok()) return error("s3_endpoint", st.message());
  SOVAI_ASSIGN_OR_RETURN(r.s3_region, member("s3_region", false));
  if (r.s3_region.empty()) {
    r.s3_region = base::AsciiToLower(r.name);
  } else if (Status st = CheckS3Region(r.s3_region); !st.ok()) {
    return error("s3_region", st.message());
  }
  SOVAI_ASSIGN_OR_RETURN(r.jurisdiction, member("jurisdiction", true));
  if (r.jurisdiction.size() > kMaxJurisdictionBytes || !Printable(r.jurisdiction, true)) {
    return error("jurisdiction", "must be 1 to " + std::to_string(kMaxJurisdictionBytes) +
                                     " printable ASCII characters (e.g. \"EU\")");
  }
  SOVAI_ASSIGN_OR_RETURN(std::string ca_file, member("ca_file", false));
  if (!ca_file.empty()) {
    r.ca_file = Resolve(base_dir, ca_file);
    if (!env.FileExists(r.ca_file)) return error("ca_file", "no file at '" + r.ca_file + "'");
  }
  SOVAI_ASSIGN_OR_RETURN(r.access_key_id, member("access_key_id", false));
  SOVAI_ASSIGN_OR_RETURN(r.secret_access_key, member("secret_access_key", false));
  SOVAI_ASSIGN_OR_RETURN(std::string credentials_file, member("credentials_file", false));
  const bool inline_keys = !r.access_key_id.empty() || !r.secret_access_key.empty();
  if (inline_keys && !credentials_file.empty()) {
    return error("credentials_file",
                 "give either credentials_file or access_key_id with secret_access_key, not both");
  }
  if (inline_keys) {
    if (r.access_key_id.empty())
      return error("access_key_id", "is required with secret_access_key");
    if (r.secret_access_key.empty()) {
      return error("secret_access_key", "is required with access_key_id");
    }
    if (Status st = CheckAccessKey(r.access_key_id); !st.ok()) {
      return error("access_key_id", st.message());
    }
    if (Status st = CheckSecret(r.secret_access_key); !st.ok()) {
      return error("secret_access_key", st.message());
    }
  } else if (!credentials_file.empty()) {
    if (Status st = ReadCredentials(env, Resolve(base_dir, credentials_file), r); !st.ok()) {
      return st.WithContext(where + ".credentials_file");
    }
  } else {
    return error("",
                 "needs credentials: access_key_id with secret_access_key, or "
                 "credentials_file");
  }
  return r;
}

}  // namespace

Status ValidateRegionName(std::string_view region) {
  bool ok = region.size() >= 2 && region.size() <= 32 && region[0] >= 'A' && region[0] <= 'Z';
  for (char c : region) ok = ok && ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-');
  if (!ok) {
    return base::InvalidArgumentError("region " + Quoted(region) +
                                      " must be 2 to 32 characters of A-Z, 0-9 and '-', "
                                      "starting with a letter (e.g. EU-WEST-LOCAL)");
  }
  return Status();
}

base::Result<std::vector<RegionEndpoint>> ParseRegionsFile(base::Env& env, std::string_view text,
                                                           const std::string& base_dir,
                                                           std::string_view server_region) {
  if (text.size() > kMaxRegionsFileBytes) {
    return base::InvalidArgumentError("the regions file is " + std::to_string(text.size()) +
                                      " bytes; the limit is " +
                                      std::to_string(kMaxRegionsFileBytes));
  }
  auto doc =
      base::ParseJson(text, base::JsonLimits{.max_bytes = kMaxRegionsFileBytes, .max_depth = 4});
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) {
    return base::InvalidArgumentError(
        std::string("the regions file must be a JSON object {\"regions\": [...]}, not ") +
        doc->type_name());
  }
  for (const auto& [key, value] : doc->items()) {
    if (key != "regions") {
      return base::InvalidArgumentError(key + ": unknown field; the file has only \"regions\"");
    }
  }
  auto list = doc->find("regions");
  if (list == doc->end() || !list->is_array()) {
    return base::InvalidArgumentError("regions: is required and must be an array of regions");
  }
  if (list->size() > kMaxRegions) {
    return base::InvalidArgumentError("regions: lists " + std::to_string(list->size()) +
                                      " regions; the limit is " + std::to_string(kMaxRegions));
  }
  std::vector<RegionEndpoint> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string where = "regions[" + std::to_string(i) + "]";
    SOVAI_ASSIGN_OR_RETURN(RegionEndpoint r, ParseEntry(env, (*list)[i], where, base_dir));
    if (base::EqualsIgnoreCase(r.name, server_region)) {
      return base::InvalidArgumentError(where + ".name: '" + r.name +
                                        "' is this server's own region (--region); the file "
                                        "lists only the others");
    }
    for (size_t k = 0; k < out.size(); ++k) {
      if (base::EqualsIgnoreCase(out[k].name, r.name)) {
        return base::InvalidArgumentError(where + ".name: '" + r.name +
                                          "' is listed twice (also regions[" + std::to_string(k) +
                                          "])");
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

base::Result<std::vector<RegionEndpoint>> LoadRegionsFile(base::Env& env, const std::string& path,
                                                          std::string_view server_region) {
  auto text = env.ReadFile(path, kMaxRegionsFileBytes);
  if (!text.ok()) {
    if (text.status().code() == base::StatusCode::kResourceExhausted) {
      return base::InvalidArgumentError(path + ": larger than " +
                                        std::to_string(kMaxRegionsFileBytes) + " bytes");
    }
    return text.status().WithContext(path);
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
  auto regions = ParseRegionsFile(env, *text, dir, server_region);
  if (!regions.ok()) return regions.status().WithContext(path);
  bool inline_secrets = false;
  auto doc = base::ParseJson(*text);
  if (doc.ok()) {
    for (const Json& entry : doc->value("regions", Json::array())) {
      inline_secrets = inline_secrets || entry.contains("secret_access_key");
    }
  }
  if (inline_secrets) {
    SOVAI_ASSIGN_OR_RETURN(base::FileStat stat, env.Stat(path));
    if ((stat.mode & 077) != 0) {
      return base::FailedPreconditionError(
          path +
          " holds secret_access_key values and is readable by group or others; run "
          "'chmod 600 " +
          path + "' (or move the keys into credentials_file files)");
    }
  }
  return regions;
}

Status ValidateS3Endpoint(std::string_view url) { return CheckEndpoint(url); }

Status ValidateS3SigningRegion(std::string_view region) { return CheckS3Region(region); }

std::vector<std::string> NamesOf(const std::vector<RegionEndpoint>& regions) {
  std::vector<std::string> out;
  for (const RegionEndpoint& r : regions) out.push_back(r.name);
  return out;
}

bool KnownRegions::IsOwn(std::string_view region) const {
  return base::EqualsIgnoreCase(region, own);
}

bool KnownRegions::Knows(std::string_view region) const {
  if (IsOwn(region)) return true;
  for (const std::string& r : others) {
    if (base::EqualsIgnoreCase(region, r)) return true;
  }
  return false;
}

bool KnownRegions::IsDatastore(std::string_view name) const {
  if (Knows(name)) return false;
  for (const std::string& alias : datastores) {
    if (base::EqualsIgnoreCase(name, alias)) return true;
  }
  return false;
}

std::string KnownRegions::List() const {
  std::string out = own;
  for (const std::string& r : others) out += ", " + r;
  return out;
}

Status UnknownRegionError(const KnownRegions& regions, std::string_view what,
                          std::string_view region) {
  const std::string prefix = what.empty() ? "" : std::string(what) + ": ";
  return base::InvalidArgumentError(
      prefix + "region '" + std::string(region) +
      "' is not one this server knows (docs/sovereignty.md); known: " + regions.List() +
      "; the project's datastores (docs/api/datastores.md): " +
      (regions.datastores.empty() ? "none" : base::Join(regions.datastores, ", ")));
}

Status CheckResidency(const KnownRegions& regions, std::string_view project_name,
                      const std::vector<std::string>& allowed_regions, std::string_view what,
                      std::string_view region) {
  if (regions.IsOwn(region)) return Status();
  if (regions.IsDatastore(region)) return Status();
  const std::string prefix = what.empty() ? "" : std::string(what) + ": ";
  if (!regions.Knows(region)) return UnknownRegionError(regions, what, region);
  for (const std::string& allowed : allowed_regions) {
    if (base::EqualsIgnoreCase(allowed, region)) return Status();
  }
  const std::string canonical = base::AsciiToUpper(region);
  std::string mountable = regions.own;
  std::string command = "sovai project update " + std::string(project_name);
  for (const std::string& allowed : allowed_regions) {
    mountable += ", " + allowed;
    command += " --allow-region " + allowed;
  }
  command += " --allow-region " + canonical;
  return base::PermissionDeniedError(
      prefix + "data residency: project '" + std::string(project_name) +
      "' may mount only buckets of region" + (allowed_regions.empty() ? " " : "s ") + mountable +
      "; a project admin can allow " + canonical + " with `" + command + "`");
}

namespace {

void AddSource(std::vector<BucketSource>& out, std::string field, const std::string& location,
               std::string_view kind) {
  auto parsed = exec::ParseVolumeSpec(location + ":/m");
  if (!parsed.ok()) return;
  out.push_back(
      {std::move(field), std::string(kind) + " '" + parsed->SourceName() + "'", parsed->region});
}

}  // namespace

std::vector<BucketSource> SourcesOf(const JobSpec& spec) {
  std::vector<BucketSource> out;
  for (size_t i = 0; i < spec.volumes.size(); ++i) {
    auto parsed = exec::ParseVolumeSpec(spec.volumes[i]);
    if (!parsed.ok()) continue;
    out.push_back({"volumes[" + std::to_string(i) + "]", "volume '" + parsed->SourceName() + "'",
                   parsed->region});
  }
  if (spec.image.starts_with(kOciImagePrefix)) {
    AddSource(out, "image", spec.image.substr(kOciImagePrefix.size()), "image");
  }
  return out;
}

std::vector<BucketSource> SourcesOf(const AppSpec& spec) {
  std::vector<BucketSource> out;
  if (!spec.model.empty()) AddSource(out, "model", spec.model, "model");
  if (!spec.base_model.empty()) AddSource(out, "base_model", spec.base_model, "base model");
  if (spec.image.starts_with(kOciImagePrefix)) {
    AddSource(out, "image", spec.image.substr(kOciImagePrefix.size()), "image");
  }
  return out;
}

Status CheckSpecResidency(const KnownRegions& regions, std::string_view project_name,
                          const std::vector<std::string>& allowed_regions,
                          const std::vector<BucketSource>& sources, std::string* bad_field) {
  for (const BucketSource& source : sources) {
    Status st = CheckResidency(regions, project_name, allowed_regions, source.what, source.region);
    if (!st.ok()) {
      if (bad_field != nullptr) *bad_field = source.field;
      return st;
    }
  }
  return Status();
}

}  // namespace sovai::control
