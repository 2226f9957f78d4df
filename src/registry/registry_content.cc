// Registry: the handlers of manifests, blobs and blob uploads (the rest is in registry.cc).
#include <charconv>
#include <string>

#include "registry/internal/http_util.h"
#include "registry/limits.h"
#include "registry/manifest.h"
#include "registry/registry.h"

namespace sovai::registry {
namespace {

using internal::Empty;
using internal::WithApiVersion;

// The /v2/ code of a storage failure, by what the request was about.
net::Response StorageError(const base::Status& st, std::string_view unknown_code) {
  std::string message(st.message());
  switch (st.code()) {
    case base::StatusCode::kNotFound:
      return ErrorResponse(404, unknown_code, message);
    case base::StatusCode::kInvalidArgument:
    case base::StatusCode::kUnimplemented:
      return ErrorResponse(400, "MANIFEST_INVALID", message);
    case base::StatusCode::kFailedPrecondition:
      return ErrorResponse(
          unknown_code == "MANIFEST_UNKNOWN" ? 400 : 409,
          unknown_code == "MANIFEST_UNKNOWN" ? "MANIFEST_BLOB_UNKNOWN" : "BLOB_UPLOAD_INVALID",
          message);
    case base::StatusCode::kDataLoss:
      return ErrorResponse(400, "DIGEST_INVALID", message);
    case base::StatusCode::kAlreadyExists:  // an immutable tag moved (ECR answers the same)
      return ErrorResponse(400, "TAG_INVALID", message);
    case base::StatusCode::kPermissionDenied:  // an immutable tag deleted
      return ErrorResponse(403, "DENIED", message);
    case base::StatusCode::kResourceExhausted:
      return ErrorResponse(413, "SIZE_INVALID", message);
    case base::StatusCode::kUnavailable:
    case base::StatusCode::kDeadlineExceeded:
      return ErrorResponse(400, "BLOB_UPLOAD_INVALID", message);
    default:
      return ErrorResponse(500, "UNKNOWN", message);
  }
}

std::string UploadLocation(const std::string& repository, const std::string& id) {
  return "/v2/" + repository + "/blobs/uploads/" + id;
}

// The upload's progress headers: Location, Range "0-<last byte>" (distribution's "0-0" when
// empty), Docker-Upload-UUID.
net::Response UploadAnswer(int status, const UploadStatus& upload) {
  net::Response res = Empty(status);
  res.headers.Set("Location", UploadLocation(upload.repository, upload.id));
  res.headers.Set("Range", "0-" + std::to_string(upload.offset == 0 ? 0 : upload.offset - 1));
  res.headers.Set("Docker-Upload-UUID", upload.id);
  return res;
}

net::Response BlobCreated(const std::string& repository, const BlobInfo& blob) {
  net::Response res = Empty(201);
  res.headers.Set("Location", "/v2/" + repository + "/blobs/" + blob.digest.ToString());
  res.headers.Set("Docker-Content-Digest", blob.digest.ToString());
  return res;
}

// "<start>-<end>" (also after "bytes " or "bytes="), inclusive. nullopt when malformed.
std::optional<std::pair<uint64_t, uint64_t>> ParseContentRange(std::string_view text) {
  if (text.starts_with("bytes ") || text.starts_with("bytes=")) text.remove_prefix(6);
  size_t dash = text.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  uint64_t a = 0, b = 0;
  auto [e1, c1] = std::from_chars(text.data(), text.data() + dash, a);
  auto [e2, c2] = std::from_chars(text.data() + dash + 1, text.data() + text.size(), b);
  if (c1 != std::errc() || c2 != std::errc() || e1 != text.data() + dash ||
      e2 != text.data() + text.size() || b < a) {
    return std::nullopt;
  }
  return std::make_pair(a, b);
}

// Reads a manifest body, refusing more than kMaxManifestBytes.
base::Result<std::string> ReadManifestBody(net::Request& req) {
  if (req.content_length() && *req.content_length() > kMaxManifestBytes) {
    return base::ResourceExhaustedError("a manifest may have at most " +
                                        std::to_string(kMaxManifestBytes) + " bytes");
  }
  std::string out;
  char buf[64 * 1024];
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, req.body().Read(buf, sizeof buf));
    if (n == 0) return out;
    if (out.size() + n > kMaxManifestBytes) {
      return base::ResourceExhaustedError("a manifest may have at most " +
                                          std::to_string(kMaxManifestBytes) + " bytes");
    }
    out.append(buf, n);
  }
}

}  // namespace

net::Response Registry::HandleManifest(net::Request& req, const V2Path& path) {
  const std::string_view method = req.method();
  if (method == "GET" || method == "HEAD") {
    auto manifest = storage_->GetManifest(path.repository, path.reference);
    if (!manifest.ok()) {
      if (manifest.status().code() == base::StatusCode::kInvalidArgument) {
        return ErrorResponse(400, "MANIFEST_INVALID", std::string(manifest.status().message()));
      }
      return StorageError(manifest.status(), "MANIFEST_UNKNOWN");
    }
    std::string accept;
    for (std::string_view value : req.headers().GetAll("Accept")) {
      if (!accept.empty()) accept += ",";
      accept.append(value);
    }
    if (!AcceptAllows(accept, manifest->media_type)) {
      return ErrorResponse(404, "MANIFEST_UNKNOWN",
                           "manifest " + path.reference + " is a " + manifest->media_type +
                               ", which the request's Accept does not list");
    }
    net::Response res = WithApiVersion(
        net::Response::Text(200, method == "HEAD" ? "" : manifest->bytes, manifest->media_type));
    res.headers.Set("Docker-Content-Digest", manifest->digest.ToString());
    res.headers.Set("ETag", "\"" + manifest->digest.ToString() + "\"");
    if (method == "HEAD") res.headers.Set("Content-Length", std::to_string(manifest->bytes.size()));
    return res;
  }
  if (method == "PUT") {
    if (path.reference.find(':') == std::string::npos) {
      if (base::Status tag = ValidateTag(path.reference); !tag.ok()) {
        return ErrorResponse(400, "TAG_INVALID", std::string(tag.message()));
      }
    }
    auto body = ReadManifestBody(req);
    if (!body.ok()) {
      if (body.status().code() == base::StatusCode::kResourceExhausted) {
        return ErrorResponse(413, "MANIFEST_INVALID", std::string(body.status().message()));
      }
      return ErrorResponse(400, "MANIFEST_INVALID", std::string(body.status().message()));
    }
    auto digest = storage_->PutManifest(path.repository, path.reference,
                                        req.header("Content-Type").value_or(""), *body);
    if (!digest.ok()) return StorageError(digest.status(), "MANIFEST_UNKNOWN");
    net::Response res = Empty(201);
    res.headers.Set("Location", "/v2/" + path.repository + "/manifests/" + digest->ToString());
    res.headers.Set("Docker-Content-Digest", digest->ToString());
    return res;
  }
  if (method == "DELETE") {
    base::Status st;
    if (auto digest = ParseDigest(path.reference); digest.ok()) {
      st = storage_->DeleteManifest(path.repository, *digest);
    } else {
      st = storage_->DeleteTag(path.repository, path.reference);
    }
    if (!st.ok()) {
      if (st.code() == base::StatusCode::kInvalidArgument) {
        return ErrorResponse(400, "TAG_INVALID", std::string(st.message()));
      }
      return StorageError(st, "MANIFEST_UNKNOWN");
    }
    return Empty(202);
  }
  return ErrorResponse(405, "UNSUPPORTED", "manifests take GET, HEAD, PUT and DELETE");
}

net::Response Registry::HandleBlob(net::Request& req, const V2Path& path) {
  auto digest = ParseDigest(path.reference);
  if (!digest.ok())
    return ErrorResponse(400, "DIGEST_INVALID", std::string(digest.status().message()));
  const std::string_view project = ProjectOf(path.repository);
  const std::string_view method = req.method();
  if (method == "DELETE") {
    base::Status st = storage_->DeleteBlob(project, *digest);
    if (!st.ok()) return StorageError(st, "BLOB_UNKNOWN");
    return Empty(202);
  }
  if (method != "GET" && method != "HEAD") {
    return ErrorResponse(405, "UNSUPPORTED", "blobs take GET, HEAD and DELETE");
  }
  auto blob = storage_->StatBlob(project, *digest);
  if (!blob.ok()) return StorageError(blob.status(), "BLOB_UNKNOWN");
  uint64_t offset = 0, length = blob->size;
  int status = 200;
  std::string content_range;
  if (auto range_header = req.header("Range")) {
    auto range = net::ParseRange(*range_header, blob->size);
    if (!range.ok()) {
      net::Response res =
          ErrorResponse(416, "BLOB_UNKNOWN",
                        "range " + std::string(range_header->substr(0, 100)) +
                            " is outside the blob's " + std::to_string(blob->size) + " bytes");
      res.headers.Set("Content-Range", "bytes */" + std::to_string(blob->size));
      return res;
    }
    if (range->has_value()) {
      offset = (*range)->offset;
      length = (*range)->length;
      status = 206;
      content_range = "bytes " + std::to_string(offset) + "-" +
                      std::to_string(offset + length - 1) + "/" + std::to_string(blob->size);
    }
  }
  net::Response res;
  if (method == "HEAD") {
    res = net::Response::Empty(status);
    res.headers.Set("Content-Length", std::to_string(length));
  } else {
    auto reader = storage_->OpenBlob(*blob, offset, length);
    if (!reader.ok()) return StorageError(reader.status(), "BLOB_UNKNOWN");
    std::shared_ptr<objstore::ObjectReader> source(std::move(*reader));
    res = net::Response::Stream(
        status, "application/octet-stream",
        [source](net::BodyWriter& out) -> base::Status {
          std::string buf(256 * 1024, '\0');
          for (;;) {
            SOVAI_ASSIGN_OR_RETURN(size_t n, source->Read(buf.data(), buf.size()));
            if (n == 0) return base::Status();
            SOVAI_RETURN_IF_ERROR(out.Write(std::string_view(buf.data(), n)));
          }
        },
        length);
  }
  res.headers.Set("Content-Type", "application/octet-stream");
  res.headers.Set("Docker-Content-Digest", digest->ToString());
  res.headers.Set("Accept-Ranges", "bytes");
  res.headers.Set("ETag", "\"" + digest->ToString() + "\"");
  if (!content_range.empty()) res.headers.Set("Content-Range", content_range);
  return WithApiVersion(std::move(res));
}

net::Response Registry::HandleUploadStart(net::Request& req, const V2Path& path) {
  if (req.method() != "POST") {
    return ErrorResponse(405, "UNSUPPORTED", "an upload starts with POST .../blobs/uploads/");
  }
  const std::string_view project = ProjectOf(path.repository);
  if (auto mount = req.query("mount")) {
    // Blobs are shared by a project's repositories: a mount succeeds when the project has the
    // blob. Otherwise (another project's repository, an unknown blob) it is an ordinary upload.
    if (auto digest = ParseDigest(*mount); digest.ok()) {
      if (auto blob = storage_->StatBlob(project, *digest); blob.ok()) {
        return BlobCreated(path.repository, *blob);
      }
    }
  }
  std::optional<Digest> digest;
  if (auto text = req.query("digest")) {
    auto parsed = ParseDigest(*text);
    if (!parsed.ok()) {
      return ErrorResponse(400, "DIGEST_INVALID", std::string(parsed.status().message()));
    }
    digest = *parsed;
  }
  auto upload = storage_->StartUpload(path.repository);
  if (!upload.ok()) {
    if (upload.status().code() == base::StatusCode::kResourceExhausted) {
      return ErrorResponse(429, "TOO_MANY_REQUESTS", std::string(upload.status().message()));
    }
    return StorageError(upload.status(), "BLOB_UPLOAD_UNKNOWN");
  }
  if (!digest) return UploadAnswer(202, *upload);
  // A monolithic upload: the whole blob is this request's body.
  auto appended = storage_->AppendUpload(path.repository, upload->id, req.body(), std::nullopt);
  if (!appended.ok()) return StorageError(appended.status(), "BLOB_UPLOAD_UNKNOWN");
  auto blob = storage_->FinishUpload(path.repository, upload->id, *digest);
  if (!blob.ok()) return StorageError(blob.status(), "BLOB_UPLOAD_UNKNOWN");
  return BlobCreated(path.repository, *blob);
}

net::Response Registry::HandleUpload(net::Request& req, const V2Path& path) {
  const std::string_view method = req.method();
  const std::string& id = path.reference;
  if (method == "GET" || method == "HEAD") {
    auto upload = storage_->GetUpload(path.repository, id);
    if (!upload.ok()) return StorageError(upload.status(), "BLOB_UPLOAD_UNKNOWN");
    return UploadAnswer(204, *upload);
  }
  if (method == "DELETE") {
    base::Status st = storage_->CancelUpload(path.repository, id);
    if (!st.ok()) return StorageError(st, "BLOB_UPLOAD_UNKNOWN");
    return Empty(204);
  }
  if (method != "PATCH" && method != "PUT") {
    return ErrorResponse(405, "UNSUPPORTED", "uploads take GET, PATCH, PUT and DELETE");
  }
  std::optional<uint64_t> start;
  if (auto range = req.header("Content-Range")) {
    auto parsed = ParseContentRange(*range);
    if (!parsed) {
      return ErrorResponse(
          400, "BLOB_UPLOAD_INVALID",
          "Content-Range must be <start>-<end>, got '" + std::string(range->substr(0, 100)) + "'");
    }
    if (req.content_length() && *req.content_length() != parsed->second - parsed->first + 1) {
      return ErrorResponse(
          400, "BLOB_UPLOAD_INVALID",
          "Content-Range covers " + std::to_string(parsed->second - parsed->first + 1) +
              " bytes but Content-Length is " + std::to_string(*req.content_length()));
    }
    start = parsed->first;
  }
  std::optional<Digest> digest;
  if (method == "PUT") {
    auto text = req.query("digest");
    if (!text) return ErrorResponse(400, "DIGEST_INVALID", "PUT completes an upload: add ?digest=");
    auto parsed = ParseDigest(*text);
    if (!parsed.ok()) {
      return ErrorResponse(400, "DIGEST_INVALID", std::string(parsed.status().message()));
    }
    digest = *parsed;
  }
  if (method == "PATCH" || req.has_body()) {
    auto appended = storage_->AppendUpload(path.repository, id, req.body(), start);
    if (!appended.ok()) {
      if (appended.status().code() == base::StatusCode::kOutOfRange) {
        auto now = storage_->GetUpload(path.repository, id);
        net::Response res =
            ErrorResponse(416, "BLOB_UPLOAD_INVALID", std::string(appended.status().message()));
        if (now.ok()) {
          res.headers.Set("Location", UploadLocation(path.repository, id));
          res.headers.Set("Range", "0-" + std::to_string(now->offset == 0 ? 0 : now->offset - 1));
        }
        return res;
      }
      return StorageError(appended.status(), "BLOB_UPLOAD_UNKNOWN");
    }
    if (method == "PATCH") return UploadAnswer(202, *appended);
  }
  auto blob = storage_->FinishUpload(path.repository, id, *digest);
  if (!blob.ok()) return StorageError(blob.status(), "BLOB_UPLOAD_UNKNOWN");
  return BlobCreated(path.repository, *blob);
}

}  // namespace sovai::registry
