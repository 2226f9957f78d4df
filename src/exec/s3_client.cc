#include "exec/s3_client.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <pugixml.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/crypto.h"
#include "base/log.h"
#include "base/strings.h"
#include "base/time.h"
#include "net/client.h"
#include "net/http.h"
#include "objstore/s3_xml.h"
#include "objstore/sigv4.h"

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;
using base::StatusCode;

// Runs a function when destroyed unless dismissed: cleanup that every early return needs.
class Cleanup {
 public:
  explicit Cleanup(std::function<void()> fn) : fn_(std::move(fn)) {}
  ~Cleanup() {
    if (fn_) fn_();
  }
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;
  void Dismiss() { fn_ = nullptr; }

 private:
  std::function<void()> fn_;
};

// "s3://bucket/key" for messages.
std::string ObjectUri(std::string_view bucket, std::string_view key) {
  std::string out = "s3://" + std::string(bucket);
  if (!key.empty()) out += "/" + std::string(key);
  return out;
}

// The local name of an XML element ("Key" for "s3:Key").
std::string_view LocalName(const pugi::xml_node& node) {
  std::string_view name = node.name();
  const size_t colon = name.find(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

pugi::xml_node Child(const pugi::xml_node& node, std::string_view name) {
  for (pugi::xml_node child : node.children()) {
    if (child.type() == pugi::node_element && LocalName(child) == name) return child;
  }
  return {};
}

std::string ChildText(const pugi::xml_node& node, std::string_view name) {
  return Child(node, name).text().get();
}

Result<pugi::xml_node> ParseXmlRoot(pugi::xml_document& doc, std::string_view body,
                                    std::string_view root_name, std::string_view what) {
  // parse_default expands no DTD entities (pugixml has none), so a hostile body cannot grow.
  pugi::xml_parse_result parsed = doc.load_buffer(body.data(), body.size());
  if (!parsed) {
    return base::InternalError(std::string(what) + ": malformed XML response (" +
                               parsed.description() + " at byte " + std::to_string(parsed.offset) +
                               ")");
  }
  pugi::xml_node root = doc.document_element();
  if (LocalName(root) != root_name) {
    return base::InternalError(std::string(what) + ": expected <" + std::string(root_name) +
                               "> in the response, got <" + std::string(LocalName(root)) + ">");
  }
  return root;
}

std::string_view Unquote(std::string_view etag) {
  etag = base::Trim(etag);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

// Whether an (unquoted) ETag is the plain hex MD5 of the bytes: single-part objects and parts
// without SSE-KMS. Multipart ETags end in "-<parts>".
bool IsMd5Etag(std::string_view etag) {
  if (etag.size() != 2 * base::kMd5Bytes) return false;
  return std::all_of(etag.begin(), etag.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

// The Status for an S3 error answer. `code`/`message` come from the XML body (empty when there
// was none, e.g. for HEAD).
Status S3ErrorStatus(int http_status, std::string_view code, std::string_view message,
                     std::string_view what, const S3ClientOptions& options) {
  StatusCode status_code;
  std::string hint;
  if (code == "NoSuchBucket" || code == "NoSuchKey" || code == "NoSuchUpload" ||
      code == "NoSuchVersion") {
    status_code = StatusCode::kNotFound;
  } else if (code == "AccessDenied" || code == "AllAccessDisabled" || code == "AccountProblem") {
    status_code = StatusCode::kPermissionDenied;
  } else if (code == "SignatureDoesNotMatch") {
    status_code = StatusCode::kUnauthenticated;
    hint = " (check the secret key of access key '" + options.access_key + "')";
  } else if (code == "InvalidAccessKeyId") {
    status_code = StatusCode::kUnauthenticated;
    hint = " (check the access key '" + options.access_key + "')";
  } else if (code == "RequestTimeTooSkewed") {
    status_code = StatusCode::kUnauthenticated;
    hint = " (check this machine's clock)";
  } else if (code == "AuthorizationHeaderMalformed" || code == "ExpiredToken" ||
             code == "InvalidToken") {
    status_code = StatusCode::kUnauthenticated;
    hint = " (the client signs for region '" + options.region + "')";
  } else if (code == "SlowDown" || code == "ServiceUnavailable") {
    status_code = StatusCode::kUnavailable;
  } else if (code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists") {
    status_code = StatusCode::kAlreadyExists;
  } else if (code == "PreconditionFailed" || code == "BucketNotEmpty") {
    status_code = StatusCode::kFailedPrecondition;
  } else if (http_status == 400) {
    status_code = StatusCode::kInvalidArgument;
  } else if (http_status == 401) {
    status_code = StatusCode::kUnauthenticated;
  } else if (http_status == 403) {
    status_code = StatusCode::kPermissionDenied;
  } else if (http_status == 404) {
    status_code = StatusCode::kNotFound;
  } else if (http_status == 409 || http_status == 412) {
    status_code = StatusCode::kFailedPrecondition;
  } else if (http_status == 416) {
    status_code = StatusCode::kOutOfRange;
  } else if (http_status == 429 || http_status == 503) {
    status_code = StatusCode::kUnavailable;
  } else if (http_status == 501) {
    status_code = StatusCode::kUnimplemented;
  } else if (http_status >= 500) {
    status_code = StatusCode::kInternal;
  } else {
    status_code = StatusCode::kUnknown;
  }
  std::string text = std::string(what) + ": ";
  if (code.empty()) {
    text += "HTTP " + std::to_string(http_status);
    if (std::string_view reason = net::HttpReasonPhrase(http_status); !reason.empty()) {
      text += " " + std::string(reason);
    }
  } else {
    text += std::string(code) + ": " + std::string(message);
  }
  return Status(status_code, text + hint);
}

// The S3 error in an <Error> body; nullopt when `body` is not one.
std::optional<std::pair<std::string, std::string>> ParseErrorBody(std::string_view body) {
  pugi::xml_document doc;
  if (body.empty() || !doc.load_buffer(body.data(), body.size())) return std::nullopt;
  pugi::xml_node root = doc.document_element();
  if (LocalName(root) != "Error") return std::nullopt;
  return std::make_pair(ChildText(root, "Code"), ChildText(root, "Message"));
}

bool IsRetryable(const Status& status) {
  return status.code() == StatusCode::kUnavailable ||
         status.code() == StatusCode::kDeadlineExceeded;
}

bool IsRetryableHttpStatus(int status) { return status == 500 || status == 503; }

// Checks the options once, so that every call can fail with the same clear message.
Status ValidateOptions(const S3ClientOptions& o) {
  if (o.region.empty()) return base::InvalidArgumentError("S3 client: empty signing region");
  if (o.access_key.empty() || o.secret_key.empty()) {
    return base::InvalidArgumentError("S3 client: empty access key or secret key");
  }
  if (o.part_size_bytes < kMinPartSizeBytes || o.part_size_bytes > kMaxPartSizeBytes) {
    return base::InvalidArgumentError("S3 client: part size " + std::to_string(o.part_size_bytes) +
                                      " must be between " + std::to_string(kMinPartSizeBytes) +
                                      " and " + std::to_string(kMaxPartSizeBytes) +
                                      " bytes (S3's part size rules)");
  }
  if (o.multipart_threshold_bytes > kMaxSinglePutBytes) {
    return base::InvalidArgumentError(
        "S3 client: multipart threshold above S3's single PUT "
        "limit of " +
        std::to_string(kMaxSinglePutBytes) + " bytes");
  }
  if (o.list_page_keys < 1 || o.list_page_keys > kDefaultListPageKeys) {
    return base::InvalidArgumentError("S3 client: list page size must be 1.." +
                                      std::to_string(kDefaultListPageKeys));
  }
  const size_t scheme_end = o.endpoint.find("://");
  if (scheme_end != std::string::npos) {
    const size_t path = o.endpoint.find('/', scheme_end + 3);
    if (path != std::string::npos && path + 1 != o.endpoint.size()) {
      return base::InvalidArgumentError("S3 client: endpoint '" + o.endpoint +
                                        "' has a path; give scheme://host[:port] only");
    }
  }
  return Status();
}

// The part size for a file: the configured one, grown (to whole MiB) when the file would need
// more than kMaxParts parts.
uint64_t PartSizeFor(uint64_t file_size, uint64_t configured) {
  uint64_t part = configured;
  if (file_size > part * kMaxParts) {
    constexpr uint64_t kMiB = 1 << 20;
    part = (file_size + kMaxParts - 1) / kMaxParts;
    part = (part + kMiB - 1) / kMiB * kMiB;
  }
  return part;
}

}  // namespace

// One logical request; Execute signs and sends it, retrying when the server is busy.
struct S3Client::Call {
  std::string method = "GET";
  std::string bucket;
  std::string key;  // empty for bucket requests
  // Decoded query parameters; an empty value is sent as a bare name ("?uploads").
  std::vector<std::pair<std::string, std::string>> query;
  std::string body;  // a small buffered body (XML), signed with its SHA-256
  std::string content_type;
  // A streamed body of exactly source_length bytes, sent UNSIGNED-PAYLOAD.
  net::BodySource source;
  uint64_t source_length = 0;
  // Receives the body of the answer instead of buffering it (only 2xx bodies matter: an error
  // answer's body is captured for its Code and Message, and the attempt is then discarded).
  net::BodySink sink;
  // Called before every attempt: rewinds a source, reopens a destination.
  std::function<Status()> before_attempt;
  // For messages: "GET s3://bucket/key".
  std::string what;
};

struct S3Client::Response {
  int status = 0;
  net::Headers headers;
  std::string body;  // buffered calls only
};

S3Client::S3Client(S3ClientOptions options)
    : options_(std::move(options)),
      options_status_(ValidateOptions(options_)),
      env_(options_.env != nullptr ? *options_.env : base::Env::Default()) {
  Result<net::ClientOptions> client_options = net::ClientOptionsFromUrl(options_.endpoint);
  if (!client_options.ok()) {
    if (options_status_.ok()) {
      options_status_ = client_options.status().WithContext("S3 client endpoint");
    }
    return;
  }
  client_options->ca_file = options_.ca_file;
  client_options->max_body_bytes = kMaxXmlResponseBytes;
  client_options->user_agent = "sovai-s3-client";
  const bool default_port = client_options->port == (client_options->tls ? 443 : 80);
  host_header_ = client_options->host.find(':') != std::string::npos
                     ? "[" + client_options->host + "]"
                     : client_options->host;
  if (!default_port) host_header_ += ":" + std::to_string(client_options->port);
  http_ = std::make_unique<net::HttpClient>(std::move(*client_options));
}

S3Client::~S3Client() = default;

Result<S3Client::Response> S3Client::Execute(const Call& call) {
  SOVAI_RETURN_IF_ERROR(options_status_);
  std::string target = "/" + call.bucket;
  if (!call.key.empty()) target += "/" + base::UriEncode(call.key, /*encode_slash=*/false);
  for (size_t i = 0; i < call.query.size(); ++i) {
    const auto& [name, value] = call.query[i];
    target += (i == 0 ? "?" : "&") + base::UriEncode(name, true);
    if (!value.empty()) target += "=" + base::UriEncode(value, true);
  }
  const objstore::Credential credential{options_.access_key, options_.secret_key, ""};
  const std::string payload_hash = call.source ? std::string(objstore::kUnsignedPayload)
                                               : base::HexEncode(base::Sha256(call.body));

  Status last;
  for (int attempt = 0; attempt < kMaxRequestAttempts; ++attempt) {
    if (attempt > 0) {
      env_.SleepForMicros(
          std::chrono::duration_cast<std::chrono::microseconds>(kRetryBackoff).count()
          << (attempt - 1));
    }
    if (call.before_attempt) SOVAI_RETURN_IF_ERROR(call.before_attempt());

    net::ClientRequest request;
    request.method = call.method;
    request.target = target;
    request.headers.Set("Host", host_header_);
    if (!call.content_type.empty()) request.headers.Set("Content-Type", call.content_type);
    SOVAI_RETURN_IF_ERROR(objstore::SignV4(call.method, target, request.headers, credential,
                                           options_.region, env_.NowUnixMicros(), payload_hash)
                              .status()
                              .WithContext(call.what));
    if (call.source) {
      request.source = call.source;
      request.source_length = call.source_length;
    } else {
      request.body = call.body;
    }

    // An error answer's body is kept (bounded) for its Code and Message whatever the sink does.
    std::string error_body;
    bool sink_failed = false;
    Result<net::ClientResponse> sent = base::InternalError("not sent");
    if (call.sink) {
      sent = http_->Send(request, [&](std::string_view piece) -> Status {
        if (error_body.size() < kMaxErrorBodyBytes) {
          error_body.append(piece.substr(0, kMaxErrorBodyBytes - error_body.size()));
        }
        Status st = call.sink(piece);
        sink_failed = !st.ok();
        return st;
      });
    } else {
      sent = http_->Send(request);
    }
    if (!sent.ok()) {
      last = sent.status().WithContext(call.what);
      // A local failure (the disk) or a request that cannot succeed is not retried.
      if (sink_failed || !IsRetryable(sent.status())) return last;
      continue;
    }
    net::ClientResponse& res = *sent;
    if (res.status >= 200 && res.status < 300) {
      Response out;
      out.status = res.status;
      out.headers = std::move(res.headers);
      out.body = std::move(res.body);
      return out;
    }
    if (!call.sink) error_body = std::move(res.body);
    auto parsed = ParseErrorBody(error_body);
    last = S3ErrorStatus(res.status, parsed ? parsed->first : "", parsed ? parsed->second : "",
                         call.what, options_);
    if (!IsRetryableHttpStatus(res.status)) return last;
  }
  return last;
}

Result<std::vector<S3Object>> S3Client::ListObjects(std::string_view bucket,
                                                    std::string_view prefix) {
  std::vector<S3Object> objects;
  std::string token;
  for (size_t page = 0;; ++page) {
    if (page >= kMaxListPages) {
      return base::ResourceExhaustedError("LIST " + ObjectUri(bucket, prefix) +
                                          ": the server kept answering truncated pages after " +
                                          std::to_string(kMaxListPages) + " pages");
    }
    Call call;
    call.bucket = std::string(bucket);
    call.what = "LIST " + ObjectUri(bucket, prefix);
    // encoding-type=url: keys with characters XML cannot carry come back intact.
    call.query = {{"list-type", "2"},
                  {"encoding-type", "url"},
                  {"max-keys", std::to_string(options_.list_page_keys)},
                  {"prefix", std::string(prefix)}};
    if (!token.empty()) call.query.emplace_back("continuation-token", token);
    SOVAI_ASSIGN_OR_RETURN(Response res, Execute(call));

    pugi::xml_document doc;
    SOVAI_ASSIGN_OR_RETURN(pugi::xml_node root,
                           ParseXmlRoot(doc, res.body, "ListBucketResult", call.what));
    const bool url_encoded = ChildText(root, "EncodingType") == "url";
    for (pugi::xml_node node : root.children()) {
      if (node.type() != pugi::node_element || LocalName(node) != "Contents") continue;
      if (objects.size() >= kMaxListedObjects) {
        return base::ResourceExhaustedError(call.what + ": more than " +
                                            std::to_string(kMaxListedObjects) +
                                            " objects; narrow the prefix");
      }
      S3Object object;
      object.key = ChildText(node, "Key");
      if (url_encoded) {
        // AWS encodes a space as '+' (and '+' as %2B); Sovai as %20: decoding '+' as a space
        // reads both.
        auto decoded = base::PercentDecode(object.key, /*plus_as_space=*/true);
        if (!decoded.ok()) {
          return base::InternalError(call.what + ": malformed url-encoded key '" + object.key +
                                     "' in the listing");
        }
        object.key = std::move(*decoded);
      }
      auto size = base::ParseUint64(base::Trim(ChildText(node, "Size")));
      if (object.key.empty() || !size.ok()) {
        return base::InternalError(call.what + ": listing entry without a key or a size");
      }
      object.size_bytes = *size;
      object.etag = std::string(Unquote(ChildText(node, "ETag")));
      auto modified = base::ParseRfc3339(base::Trim(ChildText(node, "LastModified")));
      object.last_modified_unix_micros = modified.value_or(0);
      objects.push_back(std::move(object));
    }
    if (ChildText(root, "IsTruncated") != "true") break;
    std::string next = ChildText(root, "NextContinuationToken");
    if (next.empty()) {
      return base::InternalError(call.what + ": truncated listing without a NextContinuationToken");
    }
    token = std::move(next);
  }
  return objects;
}

Result<S3Object> S3Client::GetObjectToFile(std::string_view bucket, std::string_view key,
                                           const std::string& path) {
  std::unique_ptr<base::AtomicFileWriter> writer;
  base::Md5Hasher md5;
  uint64_t received = 0;

  Call call;
  call.bucket = std::string(bucket);
  call.key = std::string(key);
  call.what = "GET " + ObjectUri(bucket, key);
  call.before_attempt = [&]() -> Status {
    writer.reset();  // an earlier attempt's temporary file goes away
    SOVAI_ASSIGN_OR_RETURN(writer, base::AtomicFileWriter::Open(env_, path));
    md5.Reset();
    received = 0;
    return Status();
  };
  call.sink = [&](std::string_view piece) -> Status {
    received += piece.size();
    md5.Update(piece);
    return writer->Append(piece);
  };
  SOVAI_ASSIGN_OR_RETURN(Response res, Execute(call));

  S3Object object;
  object.key = std::string(key);
  object.size_bytes = received;
  object.etag = std::string(Unquote(res.headers.Get("ETag").value_or("")));
  if (auto modified = res.headers.Get("Last-Modified")) {
    object.last_modified_unix_micros = base::ParseHttpDate(*modified).value_or(0);
  }
  if (auto length = res.headers.Get("Content-Length")) {
    auto declared = base::ParseUint64(base::Trim(*length));
    if (!declared.ok() || *declared != received) {
      return base::DataLossError(call.what + ": received " + std::to_string(received) +
                                 " bytes but Content-Length is " + std::string(*length));
    }
  }
  const std::string digest = base::HexEncode(md5.Finish());
  if (options_.verify_md5_etags && IsMd5Etag(object.etag) &&
      !base::EqualsIgnoreCase(object.etag, digest)) {
    return base::DataLossError(call.what + ": the MD5 of the received bytes (" + digest +
                               ") does not match the ETag " + object.etag);
  }
  SOVAI_RETURN_IF_ERROR(writer->Commit().WithContext(call.what + " to '" + path + "'"));
  return object;
}

Result<base::FileStat> S3Client::StatUploadable(std::string_view bucket, std::string_view key,
                                                const std::string& path) {
  SOVAI_RETURN_IF_ERROR(options_status_);
  SOVAI_ASSIGN_OR_RETURN(base::FileStat stat, env_.Stat(path));
  if (stat.type != base::FileType::kRegular) {
    return base::InvalidArgumentError("PUT " + ObjectUri(bucket, key) + ": '" + path +
                                      "' is not a regular file");
  }
  if (stat.size_bytes > kMaxObjectBytes) {
    return base::InvalidArgumentError("PUT " + ObjectUri(bucket, key) + ": '" + path +
                                      "' is larger than S3's largest object (5 TiB)");
  }
  return stat;
}

Result<S3Object> S3Client::PutObjectFromFile(std::string_view bucket, std::string_view key,
                                             const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(base::FileStat stat, StatUploadable(bucket, key, path));
  if (stat.size_bytes > options_.multipart_threshold_bytes) {
    return PutMultipart(bucket, key, path, stat.size_bytes);
  }
  return PutSingle(bucket, key, path, stat.size_bytes);
}

Result<S3Object> S3Client::PutObjectFromFile(std::string_view bucket, std::string_view key,
                                             const std::string& path,
                                             const std::function<Status()>& before_commit) {
  SOVAI_ASSIGN_OR_RETURN(base::FileStat stat, StatUploadable(bucket, key, path));
  const uint64_t in_memory_bytes =
      std::min(kSnapshotInMemoryBytes, options_.multipart_threshold_bytes);
  if (stat.size_bytes > in_memory_bytes) {
    return PutMultipart(bucket, key, path, stat.size_bytes, &before_commit);
  }
  // Read whole (it may have grown since the stat: up to the bound, checked by the caller).
  SOVAI_ASSIGN_OR_RETURN(std::string data, env_.ReadFile(path, in_memory_bytes));
  if (before_commit) SOVAI_RETURN_IF_ERROR(before_commit());
  return PutObject(bucket, key, data);
}

Result<S3Object> S3Client::PutObject(std::string_view bucket, std::string_view key,
                                     std::string_view data) {
  SOVAI_RETURN_IF_ERROR(options_status_);
  Call call;
  call.method = "PUT";
  call.bucket = std::string(bucket);
  call.key = std::string(key);
  call.what = "PUT " + ObjectUri(bucket, key);
  call.content_type = "application/octet-stream";
  call.body = std::string(data);
  SOVAI_ASSIGN_OR_RETURN(Response res, Execute(call));
  S3Object object;
  object.key = std::string(key);
  object.size_bytes = data.size();
  object.etag = std::string(Unquote(res.headers.Get("ETag").value_or("")));
  const std::string digest = base::HexEncode(base::Md5(data));
  if (options_.verify_md5_etags && IsMd5Etag(object.etag) &&
      !base::EqualsIgnoreCase(object.etag, digest)) {
    return base::DataLossError(call.what + ": the server's ETag " + object.etag +
                               " does not match the MD5 of the sent bytes (" + digest + ")");
  }
  return object;
}

namespace {

// A request body that reads [offset, offset + length) of a file and hashes it as it goes.
// Rewind() restarts it for a retry.
class FileRangeSource {
 public:
  FileRangeSource(const base::RandomAccessFile& file, uint64_t offset, uint64_t length,
                  std::string path)
      : file_(file), offset_(offset), length_(length), path_(std::move(path)) {}

  Status Rewind() {
    sent_ = 0;
    md5_.Reset();
    return Status();
  }
  Result<size_t> Read(char* buf, size_t n) {
    const uint64_t want = std::min<uint64_t>(n, length_ - sent_);
    if (want == 0) return size_t{0};
    SOVAI_ASSIGN_OR_RETURN(size_t got, file_.ReadAt(offset_ + sent_, std::span<char>(buf, want)));
    if (got == 0) {
      return base::FailedPreconditionError("'" + path_ + "' shrank while it was being uploaded");
    }
    md5_.Update(std::string_view(buf, got));
    sent_ += got;
    return got;
  }
  // Hex MD5 of what was sent; once, after the body is complete.
  std::string FinishMd5() { return base::HexEncode(md5_.Finish()); }

 private:
  const base::RandomAccessFile& file_;
  uint64_t offset_;
  uint64_t length_;
  std::string path_;
  uint64_t sent_ = 0;
  base::Md5Hasher md5_;
};

}  // namespace

Result<S3Object> S3Client::PutSingle(std::string_view bucket, std::string_view key,
                                     const std::string& path, uint64_t size_bytes) {
  SOVAI_ASSIGN_OR_RETURN(auto file, env_.NewRandomAccessFile(path));
  FileRangeSource source(*file, 0, size_bytes, path);
  Call call;
  call.method = "PUT";
  call.bucket = std::string(bucket);
  call.key = std::string(key);
  call.what = "PUT " + ObjectUri(bucket, key);
  call.content_type = "application/octet-stream";
  call.source = [&](char* buf, size_t n) { return source.Read(buf, n); };
  call.source_length = size_bytes;
  call.before_attempt = [&] { return source.Rewind(); };
  SOVAI_ASSIGN_OR_RETURN(Response res, Execute(call));
  S3Object object;
  object.key = std::string(key);
  object.size_bytes = size_bytes;
  object.etag = std::string(Unquote(res.headers.Get("ETag").value_or("")));
  const std::string digest = source.FinishMd5();
  if (options_.verify_md5_etags && IsMd5Etag(object.etag) &&
      !base::EqualsIgnoreCase(object.etag, digest)) {
    return base::DataLossError(call.what + ": the server's ETag " + object.etag +
                               " does not match the MD5 of the sent bytes (" + digest + ")");
  }
  return object;
}

Result<S3Object> S3Client::PutMultipart(std::string_view bucket, std::string_view key,
                                        const std::string& path, uint64_t size_bytes,
                                        const std::function<Status()>* before_commit) {
  const std::string uri = ObjectUri(bucket, key);
  SOVAI_ASSIGN_OR_RETURN(auto file, env_.NewRandomAccessFile(path));

  Call create;
  create.method = "POST";
  create.bucket = std::string(bucket);
  create.key = std::string(key);
  create.query = {{"uploads", ""}};
  create.what = "CreateMultipartUpload " + uri;
  SOVAI_ASSIGN_OR_RETURN(Response created, Execute(create));
  std::string upload_id;
  {
    pugi::xml_document doc;
    SOVAI_ASSIGN_OR_RETURN(
        pugi::xml_node root,
        ParseXmlRoot(doc, created.body, "InitiateMultipartUploadResult", create.what));
    upload_id = ChildText(root, "UploadId");
  }
  if (upload_id.empty()) return base::InternalError(create.what + ": no UploadId in the answer");

  // From here on, every failure aborts the upload so that its parts do not linger (and count
  // against the bucket) until some lifecycle rule removes them.
  Cleanup abort([&] {
    Call call;
    call.method = "DELETE";
    call.bucket = std::string(bucket);
    call.key = std::string(key);
    call.query = {{"uploadId", upload_id}};
    call.what = "AbortMultipartUpload " + uri;
    Result<Response> aborted = Execute(call);
    if (!aborted.ok()) {
      SOVAI_LOG(WARNING).With("upload_id", upload_id)
          << "could not abort a failed multipart upload: " << aborted.status();
    }
  });

  const uint64_t part_size = PartSizeFor(size_bytes, options_.part_size_bytes);
  objstore::XmlWriter complete_xml;
  complete_xml.Open("CompleteMultipartUpload", objstore::kS3Namespace);
  int part_number = 0;
  for (uint64_t offset = 0; offset < size_bytes; offset += part_size) {
    ++part_number;
    const uint64_t length = std::min(part_size, size_bytes - offset);
    FileRangeSource source(*file, offset, length, path);
    Call part;
    part.method = "PUT";
    part.bucket = std::string(bucket);
    part.key = std::string(key);
    part.query = {{"partNumber", std::to_string(part_number)}, {"uploadId", upload_id}};
    part.what = "UploadPart " + std::to_string(part_number) + " of " + uri;
    part.source = [&](char* buf, size_t n) { return source.Read(buf, n); };
    part.source_length = length;
    part.before_attempt = [&] { return source.Rewind(); };
    SOVAI_ASSIGN_OR_RETURN(Response res, Execute(part));
    const std::string etag(Unquote(res.headers.Get("ETag").value_or("")));
    if (etag.empty()) return base::InternalError(part.what + ": no ETag in the answer");
    const std::string digest = source.FinishMd5();
    if (options_.verify_md5_etags && IsMd5Etag(etag) && !base::EqualsIgnoreCase(etag, digest)) {
      return base::DataLossError(part.what + ": the server's ETag " + etag +
                                 " does not match the MD5 of the sent bytes (" + digest + ")");
    }
    complete_xml.Open("Part");
    complete_xml.Element("PartNumber", part_number);
    complete_xml.Element("ETag", "\"" + etag + "\"");
    complete_xml.Close();
  }
  complete_xml.Close();
  // The caller's last word (the file unchanged since its parts were read): a refusal aborts.
  if (before_commit != nullptr && *before_commit) SOVAI_RETURN_IF_ERROR((*before_commit)());

  Call complete;
  complete.method = "POST";
  complete.bucket = std::string(bucket);
  complete.key = std::string(key);
  complete.query = {{"uploadId", upload_id}};
  complete.what = "CompleteMultipartUpload " + uri;
  complete.content_type = "application/xml";
  complete.body = complete_xml.Finish();
  SOVAI_ASSIGN_OR_RETURN(Response res, Execute(complete));
  // S3 may answer 200 and still fail: the error is then the body.
  if (auto error = ParseErrorBody(res.body)) {
    return S3ErrorStatus(500, error->first, error->second, complete.what, options_);
  }
  pugi::xml_document doc;
  SOVAI_ASSIGN_OR_RETURN(
      pugi::xml_node root,
      ParseXmlRoot(doc, res.body, "CompleteMultipartUploadResult", complete.what));
  abort.Dismiss();
  S3Object object;
  object.key = std::string(key);
  object.size_bytes = size_bytes;
  object.etag = std::string(Unquote(ChildText(root, "ETag")));
  return object;
}

Status S3Client::DeleteObject(std::string_view bucket, std::string_view key) {
  Call call;
  call.method = "DELETE";
  call.bucket = std::string(bucket);
  call.key = std::string(key);
  call.what = "DELETE " + ObjectUri(bucket, key);
  return Execute(call).status();
}

Status S3Client::CreateBucket(std::string_view bucket) {
  objstore::XmlWriter xml;
  xml.Open("CreateBucketConfiguration", objstore::kS3Namespace);
  xml.Element("LocationConstraint", options_.region);
  xml.Close();
  Call call;
  call.method = "PUT";
  call.bucket = std::string(bucket);
  call.what = "CreateBucket " + ObjectUri(bucket, "");
  call.content_type = "application/xml";
  call.body = xml.Finish();
  return Execute(call).status();
}

Result<std::vector<S3Bucket>> S3Client::ListBuckets() {
  Call call;
  call.method = "GET";
  call.what = "ListBuckets " + options_.endpoint;
  SOVAI_ASSIGN_OR_RETURN(Response res, Execute(call));
  pugi::xml_document doc;
  SOVAI_ASSIGN_OR_RETURN(pugi::xml_node root,
                         ParseXmlRoot(doc, res.body, "ListAllMyBucketsResult", call.what));
  std::vector<S3Bucket> buckets;
  for (pugi::xml_node node : root.children()) {
    if (node.type() != pugi::node_element || LocalName(node) != "Buckets") continue;
    for (pugi::xml_node bucket : node.children()) {
      if (bucket.type() != pugi::node_element || LocalName(bucket) != "Bucket") continue;
      S3Bucket info;
      info.name = ChildText(bucket, "Name");
      info.created_unix_micros =
          base::ParseRfc3339(base::Trim(ChildText(bucket, "CreationDate"))).value_or(0);
      buckets.push_back(std::move(info));
    }
  }
  std::sort(buckets.begin(), buckets.end(),
            [](const S3Bucket& a, const S3Bucket& b) { return a.name < b.name; });
  return buckets;
}

Status S3Client::DeleteBucket(std::string_view bucket) {
  if (bucket.empty() || bucket.find('/') != std::string_view::npos) {
    return base::InvalidArgumentError("DeleteBucket: '" + std::string(bucket) +
                                      "' is not a bucket name");
  }
  Call call;
  call.method = "DELETE";
  call.bucket = std::string(bucket);
  call.what = "DeleteBucket " + ObjectUri(bucket, "");
  return Execute(call).status();
}

Status S3Client::HeadBucket(std::string_view bucket) {
  Call call;
  call.method = "HEAD";
  call.bucket = std::string(bucket);
  call.what = "HEAD " + ObjectUri(bucket, "");
  Status st = Execute(call).status();
  // A HEAD answer has no body, so the HTTP status is all there is to go on.
  if (st.code() == StatusCode::kNotFound) {
    return base::NotFoundError("bucket '" + std::string(bucket) + "' does not exist at " +
                               options_.endpoint);
  }
  if (st.code() == StatusCode::kPermissionDenied) {
    return base::PermissionDeniedError("access to bucket '" + std::string(bucket) + "' at " +
                                       options_.endpoint + " is denied for access key '" +
                                       options_.access_key +
                                       "' (or the access key or secret key is wrong)");
  }
  return st;
}

}  // namespace sovai::exec
