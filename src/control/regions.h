// Data residency (docs/sovereignty.md): the regions a server knows, how it reaches the others,
// and the rule that decides which regions a project's workloads may mount buckets of.
//
//   // sovai server --regions FILE (docs/formats/regions.md)
//   SOVAI_ASSIGN_OR_RETURN(std::vector<RegionEndpoint> others,
//                          LoadRegionsFile(env, path, "EU-WEST-LOCAL"));
//   KnownRegions known{"EU-WEST-LOCAL", NamesOf(others)};
//   // admission of a job, an app, a dry run
//   SOVAI_RETURN_IF_ERROR(CheckSpecResidency(known, project.name, project.allowed_regions,
//                                            SourcesOf(spec), &bad_field));
//
// The rule: a workload may mount buckets of the server's own region (--region); buckets of
// another region only when the server knows that region (--regions) and the workload's project
// allows it by name (Project::allowed_regions). Region names compare case-insensitively, as in
// volume specs.
//
// Thread-safety: values and pure functions (LoadRegionsFile reads files through the Env).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "control/app_spec.h"
#include "control/job_spec.h"

namespace sovai::control {

// Region names: 2–32 characters of [A-Z0-9-], starting with a letter ("EU-WEST-LOCAL").
// InvalidArgument otherwise, quoting the name and the rule.
base::Status ValidateRegionName(std::string_view region);

// Another region this server can reach: one entry of a --regions file.
struct RegionEndpoint {
  std::string name;          // "EU-CENTRAL-2" (ValidateRegionName)
  std::string s3_endpoint;   // "https://s3.eu-central-2.example.eu[:port]", no path
  std::string s3_region;     // the S3 signing region; default: `name` in lowercase
  std::string jurisdiction;  // whose law the region is under: "EU", "CH"
  std::string access_key_id;
  std::string secret_access_key;
  std::string ca_file;  // PEM that verifies an https endpoint's certificate; "" = the system's
};

// Parses the text of a --regions file whose directory is `base_dir` (relative credentials_file
// and ca_file paths are relative to it). `server_region` is this server's own region, which the
// file must not list. Errors (InvalidArgument unless said otherwise), each naming the entry and
// field ("regions[1].s3_endpoint: ..."): text over kMaxRegionsFileBytes or not a JSON object;
// a member other than "regions", or "regions" missing or not an array; more than kMaxRegions
// entries; an entry that is not an object, has an unknown member or lacks a required one
// (name, s3_endpoint, jurisdiction, and either access_key_id with secret_access_key or
// credentials_file, never both); a bad region name, the server's own one, or one listed twice
// (case-insensitively); an s3_endpoint that is not http(s)://host[:port] (no path, query,
// user info or spaces; at most kMaxRegionEndpointBytes); an s3_region that is not 1–64 of
// [a-z0-9-]; a jurisdiction that is not 1–kMaxJurisdictionBytes printable ASCII characters;
// keys of the wrong shape (access key 16–128 of [A-Za-z0-9], secret 8–128 printable ASCII
// without spaces); a credentials_file that cannot be read (its error), is larger than
// kMaxCredentialsFileBytes, is readable by group or others (FailedPrecondition, "chmod 600"),
// or is not a JSON object with string members access_key_id and secret_access_key (a sovai
// server's admin.json is one); a ca_file that does not exist.
base::Result<std::vector<RegionEndpoint>> ParseRegionsFile(base::Env& env, std::string_view text,
                                                           const std::string& base_dir,
                                                           std::string_view server_region);

// Reads and parses the --regions file `path` (ParseRegionsFile, errors prefixed with the path).
// A file that holds secrets itself (access_key_id / secret_access_key) must not be readable by
// group or others: FailedPrecondition saying "chmod 600".
base::Result<std::vector<RegionEndpoint>> LoadRegionsFile(base::Env& env, const std::string& path,
                                                          std::string_view server_region);

std::vector<std::string> NamesOf(const std::vector<RegionEndpoint>& regions);

// An S3 endpoint as exec::S3Client takes it: http://HOST[:PORT] or https://HOST[:PORT], without
// a path, query, user info or spaces, at most kMaxRegionEndpointBytes. InvalidArgument quoting it
// otherwise.
base::Status ValidateS3Endpoint(std::string_view url);
// The region S3 requests are signed for: 1–64 of [a-z0-9-]. InvalidArgument quoting it otherwise.
base::Status ValidateS3SigningRegion(std::string_view region);

// The regions a server knows, by name, and the datastores (datastores.h) of the project at hand:
// the names a volume's @NAME may take.
struct KnownRegions {
  std::string own;                  // --region
  std::vector<std::string> others;  // the --regions file's, in its order
  // The aliases of the project's datastores (lowercase, sorted); empty where no project is at
  // hand. A region of the same name wins (aliases are refused at creation when they collide).
  std::vector<std::string> datastores = {};
  bool IsOwn(std::string_view region) const;
  bool Knows(std::string_view region) const;
  // A datastore alias of the project and no region of this server.
  bool IsDatastore(std::string_view name) const;
  // "EU-WEST-LOCAL, EU-CENTRAL-2": the own region first.
  std::string List() const;
};

// The refusal of a name that is neither a region this server knows nor a datastore of the
// project: InvalidArgument "<what>: region 'X' is not one this server knows (docs/sovereignty.md);
// known: A, B; the project's datastores (docs/api/datastores.md): ext | none".
base::Status UnknownRegionError(const KnownRegions& regions, std::string_view what,
                                std::string_view region);

// The rule for one bucket source of a workload of project `project_name` whose allowed other
// regions are `allowed_regions`. `what` names the source in the message ("volume
// 'data@EU-CENTRAL-2/ds'"; "" = no prefix).
//   * the own region, or a known region the project allows: OK;
//   * a datastore of the project (regions.datastores): OK; the project registered it itself,
//     and every handing-out of its keys is audited ("DATASTORE ACCESS");
//   * a name that is neither: UnknownRegionError;
//   * a known region the project does not allow: PermissionDenied "<what>: data residency:
//     project 'nlp' may mount only buckets of region A; a project admin can allow X with
//     `sovai project update nlp --allow-region X`" (the command keeps the regions already
//     allowed: it replaces the list).
base::Status CheckResidency(const KnownRegions& regions, std::string_view project_name,
                            const std::vector<std::string>& allowed_regions, std::string_view what,
                            std::string_view region);

// A bucket a spec mounts or reads: the spec field, how messages name it, its region as written.
struct BucketSource {
  std::string field;   // "volumes[1]", "image", "model", "base_model"
  std::string what;    // "volume 'data@EU-CENTRAL-2/ds'"
  std::string region;  // "EU-CENTRAL-2"
};
// The volumes and an oci: image of a job; the model, base model and an oci: image of an app.
// Entries that do not parse are left out (the spec parsers refuse them).
std::vector<BucketSource> SourcesOf(const JobSpec& spec);
std::vector<BucketSource> SourcesOf(const AppSpec& spec);

// CheckResidency of each source in order: the first refusal ("volume '...': data residency:
// ..."), with `bad_field` (when given) set to its field.
base::Status CheckSpecResidency(const KnownRegions& regions, std::string_view project_name,
                                const std::vector<std::string>& allowed_regions,
                                const std::vector<BucketSource>& sources,
                                std::string* bad_field = nullptr);

}  // namespace sovai::control
