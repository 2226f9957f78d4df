#include "cli/client/bucket_ops.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <pugixml.hpp>

#include "base/crypto.h"
#include "base/strings.h"
#include "base/time.h"
#include "cli/client/limits.h"
#include "exec/volume_spec.h"
#include "net/client.h"
#include "objstore/sigv4.h"

namespace sovai::cli::client {
namespace {

namespace fs = std::filesystem;
using base::Status;
using base::StatusCode;

constexpr std::string_view kS3Scheme = "s3://";
// ListBuckets answers are small XML documents; a bigger one is not S3.
constexpr uint64_t kMaxBucketXmlBytes = 16 * 1024 * 1024;

std::string_view LocalName(const pugi::xml_node& node) {
  std::string_view name = node.name();
  size_t colon = name.find(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

std::string ChildText(const pugi::xml_node& node, std::string_view name) {
  for (pugi::xml_node child : node.children()) {
    if (child.type() == pugi::node_element && LocalName(child) == name) {
      return child.text().as_string();
    }
  }
  return "";
}

Status S3Error(int http_status, std::string_view body, std::string_view what) {
  std::string code;
  std::string message;
  pugi::xml_document doc;
  if (!body.empty() && doc.load_buffer(body.data(), body.size())) {
    pugi::xml_node root = doc.document_element();
    if (LocalName(root) == "Error") {
      code = ChildText(root, "Code");
      message = ChildText(root, "Message");
    }
  }
  StatusCode status_code = StatusCode::kUnknown;
  if (code == "NoSuchBucket" || http_status == 404) {
    status_code = StatusCode::kNotFound;
  } else if (code == "BucketNotEmpty" || http_status == 409) {
    status_code = StatusCode::kFailedPrecondition;
  } else if (code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
             code == "RequestTimeTooSkewed") {
    status_code = StatusCode::kUnauthenticated;
  } else if (http_status == 403) {
    status_code = StatusCode::kPermissionDenied;
  } else if (http_status == 503 || http_status == 429) {
    status_code = StatusCode::kUnavailable;
  } else if (http_status >= 500) {
    status_code = StatusCode::kInternal;
  } else if (http_status >= 400) {
    status_code = StatusCode::kInvalidArgument;
  }
  std::string text = std::string(what) + ": ";
  if (code.empty()) {
    text += "HTTP " + std::to_string(http_status);
  } else {
    text += code + ": " + message;
  }
  if (status_code == StatusCode::kUnauthenticated) {
    text += " (the S3 key in the config may have been revoked: run 'sovai login' again)";
  }
  return Status(status_code, text);
}

}  // namespace

base::Result<std::optional<S3Location>> ParseS3Uri(std::string_view text) {
  if (!text.starts_with(kS3Scheme)) return std::optional<S3Location>();
  std::string_view rest = text.substr(kS3Scheme.size());
  size_t slash = rest.find('/');
  S3Location location;
  location.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) location.key = std::string(rest.substr(slash + 1));
  if (location.bucket.empty()) {
    return base::InvalidArgumentError("'" + std::string(text) +
                                      "' names no bucket; write s3://bucket/key");
  }
  return std::optional<S3Location>(std::move(location));
}

base::Result<S3Location> ParseBucketPath(std::string_view text) {
  SOVAI_ASSIGN_OR_RETURN(std::optional<S3Location> uri, ParseS3Uri(text));
  if (uri) return *uri;
  SOVAI_ASSIGN_OR_RETURN(uri, ParseS3Uri(std::string(kS3Scheme) + std::string(text)));
  return *uri;
}

std::string S3Uri(const S3Location& location) {
  return std::string(kS3Scheme) + location.bucket + "/" + location.key;
}

base::Result<SyncListing> ListLocalFiles(const std::string& root,
                                         std::vector<std::string>* warnings) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return base::InvalidArgumentError("'" + root + "' is not a directory");
  }
  SyncListing files;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) return base::ErrnoToStatus(ec.value(), "listing '" + root + "'");
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return base::ErrnoToStatus(ec.value(), "listing '" + root + "'");
    const fs::path& path = it->path();
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0)
      return base::ErrnoToStatus(errno, "lstat '" + path.string() + "'");
    if (S_ISDIR(st.st_mode)) continue;
    const std::string relative = path.lexically_relative(root).generic_string();
    if (!S_ISREG(st.st_mode)) {
      warnings->push_back("skipped " + path.string() + ": not a regular file");
      continue;
    }
    if (base::IsAtomicWriteTempName(path.filename().string())) continue;  // an unfinished download
    if (files.size() >= kMaxLocalFiles) {
      return base::ResourceExhaustedError("'" + root + "' holds more than " +
                                          std::to_string(kMaxLocalFiles) +
                                          " files; copy a subdirectory at a time");
    }
    files[relative] =
        SyncEntry{static_cast<uint64_t>(st.st_size),
                  int64_t{st.st_mtim.tv_sec} * base::kMicrosPerSecond + st.st_mtim.tv_nsec / 1000};
  }
  return files;
}

SyncListing RelativeObjects(std::string_view bucket, std::string_view prefix,
                            const std::vector<exec::S3Object>& objects,
                            std::vector<std::string>* warnings) {
  exec::VolumeSpec spec;
  spec.bucket = std::string(bucket);
  spec.prefix = std::string(prefix);
  while (!spec.prefix.empty() && spec.prefix.back() == '/') spec.prefix.pop_back();
  SyncListing listing;
  for (const exec::S3Object& object : objects) {
    if (object.key.ends_with('/')) continue;  // a directory marker
    auto relative = exec::RelativePathForKey(spec, object.key);
    if (!relative.ok()) {
      warnings->push_back("skipped " + S3Uri({std::string(bucket), object.key}) + ": " +
                          relative.status().message());
      continue;
    }
    listing[*relative] = SyncEntry{object.size_bytes, object.last_modified_unix_micros};
  }
  return listing;
}

SyncPlan PlanSync(const SyncListing& source, const SyncListing& destination, bool delete_extra) {
  // Whole seconds: S3 listings may give Last-Modified in seconds, and a file uploaded within the
  // second it was written must not look newer than its copy.
  auto seconds = [](int64_t micros) { return micros / base::kMicrosPerSecond; };
  SyncPlan plan;
  for (const auto& [path, entry] : source) {
    auto it = destination.find(path);
    if (it != destination.end() && it->second.size_bytes == entry.size_bytes &&
        seconds(entry.mtime_unix_micros) <= seconds(it->second.mtime_unix_micros)) {
      ++plan.unchanged;
      continue;
    }
    plan.copy.push_back(path);
    plan.copy_bytes += entry.size_bytes;
  }
  if (delete_extra) {
    for (const auto& [path, entry] : destination) {
      if (!source.contains(path)) plan.remove.push_back(path);
    }
  }
  return plan;
}

BucketAdmin::BucketAdmin(exec::S3ClientOptions options)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? *options_.env : base::Env::Default()) {
  auto client_options = net::ClientOptionsFromUrl(options_.endpoint);
  if (!client_options.ok()) {
    options_status_ = client_options.status().WithContext("S3 endpoint");
    return;
  }
  client_options->ca_file = options_.ca_file;
  client_options->max_body_bytes = kMaxBucketXmlBytes;
  client_options->user_agent = "sovai-cli";
  const bool default_port = client_options->port == (client_options->tls ? 443 : 80);
  host_header_ = client_options->host.find(':') != std::string::npos
                     ? "[" + client_options->host + "]"
                     : client_options->host;
  if (!default_port) host_header_ += ":" + std::to_string(client_options->port);
  http_ = std::make_unique<net::HttpClient>(std::move(*client_options));
}

BucketAdmin::~BucketAdmin() = default;

base::Result<BucketAdmin::Answer> BucketAdmin::Send(std::string_view method, std::string target,
                                                    std::string_view what) {
  SOVAI_RETURN_IF_ERROR(options_status_);
  net::ClientRequest request;
  request.method = std::string(method);
  request.target = target;
  request.headers.Set("Host", host_header_);
  const objstore::Credential credential{options_.access_key, options_.secret_key, ""};
  SOVAI_RETURN_IF_ERROR(objstore::SignV4(method, target, request.headers, credential,
                                         options_.region, env_.NowUnixMicros(),
                                         base::HexEncode(base::Sha256("")))
                            .status()
                            .WithContext(what));
  auto sent = http_->Send(request);
  if (!sent.ok()) return sent.status().WithContext(std::string(what) + " at " + options_.endpoint);
  if (sent->status < 200 || sent->status >= 300) return S3Error(sent->status, sent->body, what);
  return Answer{sent->status, std::move(sent->body)};
}

base::Result<std::vector<BucketInfo>> BucketAdmin::ListBuckets() {
  const std::string what = "LIST BUCKETS";
  SOVAI_ASSIGN_OR_RETURN(Answer answer, Send("GET", "/", what));
  pugi::xml_document doc;
  if (!doc.load_buffer(answer.body.data(), answer.body.size()) ||
      LocalName(doc.document_element()) != "ListAllMyBucketsResult") {
    return base::InternalError(what + ": the answer is not a ListAllMyBucketsResult");
  }
  std::vector<BucketInfo> buckets;
  for (pugi::xml_node node : doc.document_element().children()) {
    if (node.type() != pugi::node_element || LocalName(node) != "Buckets") continue;
    for (pugi::xml_node bucket : node.children()) {
      if (bucket.type() != pugi::node_element || LocalName(bucket) != "Bucket") continue;
      BucketInfo info;
      info.name = ChildText(bucket, "Name");
      info.created_unix_micros =
          base::ParseRfc3339(base::Trim(ChildText(bucket, "CreationDate"))).value_or(0);
      buckets.push_back(std::move(info));
    }
  }
  std::sort(buckets.begin(), buckets.end(),
            [](const BucketInfo& a, const BucketInfo& b) { return a.name < b.name; });
  return buckets;
}

Status BucketAdmin::DeleteBucket(std::string_view bucket) {
  const std::string what = "DELETE s3://" + std::string(bucket);
  if (bucket.empty() || bucket.find('/') != std::string_view::npos) {
    return base::InvalidArgumentError(what + ": not a bucket name");
  }
  SOVAI_ASSIGN_OR_RETURN(Answer answer, Send("DELETE", "/" + base::UriEncode(bucket, true), what));
  (void)answer;
  return Status();
}

}  // namespace sovai::cli::client
