// SigV4 signing (requests, presigned URLs, chunk and trailer signatures) and the PayloadReader
// that verifies a body as it streams.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "base/crypto.h"
#include "base/strings.h"
#include "base/time.h"
#include "objstore/internal/sigv4_internal.h"

namespace sovai::objstore {

using sigv4_internal::CachedSigningKeyV4;
using sigv4_internal::CanonicalQuery;
using sigv4_internal::CanonicalRequest;
using sigv4_internal::CanonicalUri;
using sigv4_internal::HexSha256;
using sigv4_internal::kAlgorithmV4;
using sigv4_internal::kService;
using sigv4_internal::kTerminator;
using sigv4_internal::Scope;
using sigv4_internal::StringToSignV4;

// ---- Signing ---------------------------------------------------------------------------------

namespace sigv4_internal {

std::string CachedSigningKeyV4(std::string_view secret_key, std::string_view date_stamp,
                               std::string_view region) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::string> cache;  // guarded by mu
  std::string id =
      std::string(secret_key) + '\0' + std::string(date_stamp) + '\0' + std::string(region);
  {
    std::lock_guard lock(mu);
    if (auto it = cache.find(id); it != cache.end()) return it->second;
  }
  std::string key = SigningKeyV4(secret_key, date_stamp, region);
  std::lock_guard lock(mu);
  if (cache.size() >= 4096) cache.clear();  // old dates and revoked keys age out
  cache.emplace(std::move(id), key);
  return key;
}

}  // namespace sigv4_internal

std::string SigningKeyV4(std::string_view secret_key, std::string_view date_stamp,
                         std::string_view region) {
  std::string key = "AWS4";
  key += secret_key;
  std::string date_key = base::HmacSha256(key, date_stamp);
  std::string region_key = base::HmacSha256(date_key, region);
  std::string service_key = base::HmacSha256(region_key, kService);
  return base::HmacSha256(service_key, kTerminator);
}

std::string ChunkSignatureV4(std::string_view signing_key, std::string_view amz_date,
                             std::string_view scope, std::string_view previous_signature,
                             std::string_view chunk_sha256_hex) {
  std::string string_to_sign = "AWS4-HMAC-SHA256-PAYLOAD\n";
  string_to_sign += amz_date;
  string_to_sign += '\n';
  string_to_sign += scope;
  string_to_sign += '\n';
  string_to_sign += previous_signature;
  string_to_sign += '\n';
  string_to_sign += kEmptySha256Hex;
  string_to_sign += '\n';
  string_to_sign += chunk_sha256_hex;
  return base::HexEncode(base::HmacSha256(signing_key, string_to_sign));
}

std::string TrailerSignatureV4(std::string_view signing_key, std::string_view amz_date,
                               std::string_view scope, std::string_view previous_signature,
                               std::string_view canonical_trailers) {
  std::string string_to_sign = "AWS4-HMAC-SHA256-TRAILER\n";
  string_to_sign += amz_date;
  string_to_sign += '\n';
  string_to_sign += scope;
  string_to_sign += '\n';
  string_to_sign += previous_signature;
  string_to_sign += '\n';
  string_to_sign += HexSha256(canonical_trailers);
  return base::HexEncode(base::HmacSha256(signing_key, string_to_sign));
}

base::Result<std::string> SignV4(std::string_view method, std::string_view target,
                                 net::Headers& headers, const Credential& credential,
                                 std::string_view region, int64_t now_unix_micros,
                                 std::string_view payload_hash,
                                 const std::vector<std::string>& extra_signed_headers) {
  net::Request req;
  req.set_method(std::string(method));
  SOVAI_RETURN_IF_ERROR(req.SetTarget(target));
  if (!headers.Has("host")) return base::InvalidArgumentError("SignV4: no Host header to sign");
  std::string amz_date = base::FormatAmzDate(now_unix_micros);
  std::string date_stamp = amz_date.substr(0, 8);
  headers.Remove("authorization");
  headers.Set("x-amz-date", amz_date);
  headers.Set("x-amz-content-sha256", std::string(payload_hash));

  std::vector<std::string> extras;
  for (const std::string& name : extra_signed_headers) extras.push_back(base::AsciiToLower(name));
  std::vector<std::string> signed_headers;
  for (const auto& [name, value] : headers) {
    std::string lower = base::AsciiToLower(name);
    bool sign = lower == "host" || lower == "content-md5" || lower == "content-type" ||
                lower.rfind("x-amz-", 0) == 0 ||
                std::find(extras.begin(), extras.end(), lower) != extras.end();
    if (sign) signed_headers.push_back(lower);
    req.mutable_headers().Add(name, value);
  }
  std::sort(signed_headers.begin(), signed_headers.end());
  signed_headers.erase(std::unique(signed_headers.begin(), signed_headers.end()),
                       signed_headers.end());
  std::string signed_text = base::Join(signed_headers, ";");

  std::string canonical =
      CanonicalRequest(req.method(), CanonicalUri(req), CanonicalQuery(req.query_params(), false),
                       req.headers(), signed_headers, signed_text, payload_hash);
  std::string scope = Scope(date_stamp, region);
  std::string key = SigningKeyV4(credential.secret_key, date_stamp, region);
  std::string signature =
      base::HexEncode(base::HmacSha256(key, StringToSignV4(amz_date, scope, canonical)));
  headers.Set("Authorization", std::string(kAlgorithmV4) + " Credential=" + credential.access_key +
                                   "/" + scope + ", SignedHeaders=" + signed_text +
                                   ", Signature=" + signature);
  return signature;
}

base::Result<std::string> PresignV4(const PresignRequest& request, const Credential& credential,
                                    std::string_view region, int64_t now_unix_micros) {
  if (request.host.empty()) return base::InvalidArgumentError("PresignV4: empty host");
  if (request.path.empty() || request.path.front() != '/') {
    return base::InvalidArgumentError("PresignV4: the path must start with '/': '" +
                                      request.path.substr(0, 256) + "'");
  }
  if (request.expires_seconds < 1 || request.expires_seconds > kMaxPresignExpiresSeconds) {
    return base::InvalidArgumentError("PresignV4: expires_seconds must be in 1..604800, got " +
                                      std::to_string(request.expires_seconds));
  }
  std::string amz_date = base::FormatAmzDate(now_unix_micros);
  std::string date_stamp = amz_date.substr(0, 8);
  std::string scope = Scope(date_stamp, region);

  std::vector<std::pair<std::string, std::string>> params = request.query;
  params.emplace_back("X-Amz-Algorithm", std::string(kAlgorithmV4));
  params.emplace_back("X-Amz-Credential", credential.access_key + "/" + scope);
  params.emplace_back("X-Amz-Date", amz_date);
  params.emplace_back("X-Amz-Expires", std::to_string(request.expires_seconds));
  params.emplace_back("X-Amz-SignedHeaders", "host");

  net::Headers headers;
  headers.Add("host", request.host);
  std::string uri = base::UriEncode(request.path, /*encode_slash=*/false);
  std::string canonical = CanonicalRequest(request.method, uri, CanonicalQuery(params, false),
                                           headers, {"host"}, "host", kUnsignedPayload);
  std::string key = SigningKeyV4(credential.secret_key, date_stamp, region);
  std::string signature =
      base::HexEncode(base::HmacSha256(key, StringToSignV4(amz_date, scope, canonical)));

  std::string target = uri;
  char sep = '?';
  for (const auto& [name, value] : params) {
    target += sep;
    sep = '&';
    target += base::UriEncode(name, true);
    target += '=';
    target += base::UriEncode(value, true);
  }
  target += "&X-Amz-Signature=";
  target += signature;
  return target;
}

// ---- PayloadReader ---------------------------------------------------------------------------

namespace {

S3Error MalformedChunked(std::string_view what) {
  return S3Error(S3Code::kInvalidRequest, "malformed aws-chunked encoding: " + std::string(what));
}

}  // namespace

PayloadReader::PayloadReader(net::BodyReader& raw, const AuthResult& auth)
    : raw_(raw), auth_(auth), previous_signature_(auth.seed_signature) {
  if (IsStreaming(auth_.payload)) buffer_.resize(kPayloadReadBufferBytes);
}

PayloadReader::~PayloadReader() = default;

base::Status PayloadReader::Fail(S3Error error) {
  s3_error_ = std::move(error);
  failed_ = base::InvalidArgumentError(s3_error_->ToString());
  return *failed_;
}

base::Result<size_t> PayloadReader::Read(char* buf, size_t n) {
  if (failed_) return *failed_;
  if (n == 0) return size_t{0};
  switch (auth_.payload) {
    case PayloadMode::kUnsigned: {
      base::Result<size_t> r = raw_.Read(buf, n);
      if (!r.ok()) {
        failed_ = r.status();
        return *failed_;
      }
      decoded_bytes_ += *r;
      return r;
    }
    case PayloadMode::kSignedSha256:
      return ReadSigned(buf, n);
    case PayloadMode::kStreamingSigned:
    case PayloadMode::kStreamingSignedTrailer:
    case PayloadMode::kStreamingUnsignedTrailer:
      return ReadStreaming(buf, n);
  }
  return Fail(S3Error(S3Code::kInternalError, "unknown payload mode"));
}

base::Result<size_t> PayloadReader::ReadSigned(char* buf, size_t n) {
  if (finished_) return size_t{0};
  base::Result<size_t> r = raw_.Read(buf, n);
  if (!r.ok()) {
    failed_ = r.status();
    return *failed_;
  }
  if (*r > 0) {
    body_hasher_.Update(std::string_view(buf, *r));
    decoded_bytes_ += *r;
    return r;
  }
  std::string computed = base::HexEncode(body_hasher_.Finish());
  if (computed != auth_.payload_sha256_hex) {
    return Fail(S3Error(S3Code::kXAmzContentSHA256Mismatch,
                        "The provided 'x-amz-content-sha256' header does not match what was "
                        "computed.")
                    .With("ClientComputedContentSHA256", auth_.payload_sha256_hex)
                    .With("S3ComputedContentSHA256", computed));
  }
  finished_ = true;
  return size_t{0};
}

base::Result<size_t> PayloadReader::ReadStreaming(char* buf, size_t n) {
  if (finished_) return size_t{0};
  const bool is_signed = auth_.payload != PayloadMode::kStreamingUnsignedTrailer;
  for (;;) {
    std::string_view input(buffer_.data() + buffer_pos_, buffer_len_ - buffer_pos_);
    // Never more payload than the caller asked for (the decoder hands data out in place).
    if (input.size() > n) input = input.substr(0, n);
    AwsChunkedDecoder::Event event = decoder_.Next(input);
    buffer_pos_ += event.consumed;
    switch (event.kind) {
      case AwsChunkedDecoder::EventKind::kNeedMore: {
        if (buffer_pos_ < buffer_len_) continue;
        if (raw_eof_) {
          if (decoder_.Finish().kind != AwsChunkedDecoder::EventKind::kDone) {
            return Fail(S3Error(S3Code::kIncompleteBody,
                                "The request body ended early: " + decoder_.error()));
          }
          if (auto error = FinishStreaming()) return Fail(std::move(*error));
          finished_ = true;
          return size_t{0};
        }
        base::Result<size_t> r = raw_.Read(buffer_.data(), buffer_.size());
        if (!r.ok()) {
          failed_ = r.status();
          return *failed_;
        }
        buffer_pos_ = 0;
        buffer_len_ = *r;
        if (*r == 0) raw_eof_ = true;
        continue;
      }
      case AwsChunkedDecoder::EventKind::kChunkHeader:
        if (is_signed) {
          if (!decoder_.has_chunk_signature()) {
            return Fail(S3Error(S3Code::kSignatureDoesNotMatch,
                                "chunk " + std::to_string(chunk_index_) +
                                    " of a signed streaming upload has no chunk-signature"));
          }
          chunk_hasher_.Reset();
        }
        continue;
      case AwsChunkedDecoder::EventKind::kData: {
        size_t size = event.data.size();
        if (is_signed) chunk_hasher_.Update(event.data);
        decoded_bytes_ += size;
        if (auth_.decoded_content_length && decoded_bytes_ > *auth_.decoded_content_length) {
          return Fail(S3Error(S3Code::kIncompleteBody,
                              "The decoded body is longer than x-amz-decoded-content-length (" +
                                  std::to_string(*auth_.decoded_content_length) + " bytes)"));
        }
        std::memcpy(buf, event.data.data(), size);
        return size;
      }
      case AwsChunkedDecoder::EventKind::kChunkEnd:
        if (is_signed) {
          if (auto error = VerifyChunk()) return Fail(std::move(*error));
        }
        ++chunk_index_;
        continue;
      case AwsChunkedDecoder::EventKind::kTrailer: {
        const std::string& name = decoder_.trailer_name();
        if (auth_.payload == PayloadMode::kStreamingSigned) {
          return Fail(MalformedChunked("trailer '" + name + "' sent, but x-amz-content-sha256 is " +
                                       std::string(kStreamingSignedPayload) +
                                       " (use the -TRAILER variant)"));
        }
        if (name == "x-amz-trailer-signature") {
          if (!trailer_signature_.empty()) {
            return Fail(MalformedChunked("x-amz-trailer-signature sent twice"));
          }
          trailer_signature_ = decoder_.trailer_value();
          continue;
        }
        for (const auto& [seen, value] : trailers_) {
          if (seen == name) return Fail(MalformedChunked("trailer '" + name + "' sent twice"));
        }
        trailers_.emplace_back(name, decoder_.trailer_value());
        continue;
      }
      case AwsChunkedDecoder::EventKind::kDone: {
        if (buffer_pos_ < buffer_len_) {
          return Fail(MalformedChunked("data after the end of the aws-chunked body"));
        }
        // The raw body must end here too.
        while (!raw_eof_) {
          base::Result<size_t> r = raw_.Read(buffer_.data(), buffer_.size());
          if (!r.ok()) {
            failed_ = r.status();
            return *failed_;
          }
          if (*r > 0) return Fail(MalformedChunked("data after the end of the aws-chunked body"));
          raw_eof_ = true;
        }
        if (auto error = FinishStreaming()) return Fail(std::move(*error));
        finished_ = true;
        return size_t{0};
      }
      case AwsChunkedDecoder::EventKind::kError:
        return Fail(MalformedChunked(decoder_.error()));
    }
  }
}

std::optional<S3Error> PayloadReader::VerifyChunk() {
  std::string chunk_hash = base::HexEncode(chunk_hasher_.Finish());
  std::string expected = ChunkSignatureV4(auth_.signing_key, auth_.amz_date, auth_.scope,
                                          previous_signature_, chunk_hash);
  if (!base::ConstantTimeEquals(expected, decoder_.chunk_signature())) {
    return S3Error(S3Code::kSignatureDoesNotMatch,
                   "The chunk signature of chunk " + std::to_string(chunk_index_) +
                       " does not match the signature we calculated (the chunk data or an "
                       "earlier chunk was changed, or the signing key differs).")
        .With("SignatureProvided", decoder_.chunk_signature());
  }
  previous_signature_ = std::move(expected);
  return std::nullopt;
}

std::optional<S3Error> PayloadReader::FinishStreaming() {
  if (auth_.decoded_content_length && decoded_bytes_ != *auth_.decoded_content_length) {
    return S3Error(S3Code::kIncompleteBody, "The decoded body has " +
                                                std::to_string(decoded_bytes_) +
                                                " bytes but x-amz-decoded-content-length says " +
                                                std::to_string(*auth_.decoded_content_length));
  }
  if (auth_.payload == PayloadMode::kStreamingSigned) return std::nullopt;
  const std::vector<std::string>& declared = auth_.trailer_names;
  for (const auto& [name, value] : trailers_) {
    if (std::find(declared.begin(), declared.end(), name) == declared.end()) {
      return MalformedChunked("trailer '" + name + "' was not declared in x-amz-trailer");
    }
  }
  for (const std::string& name : declared) {
    auto it = std::find_if(trailers_.begin(), trailers_.end(),
                           [&](const auto& field) { return field.first == name; });
    if (it == trailers_.end()) {
      return S3Error(S3Code::kIncompleteBody,
                     "The trailer '" + name + "' declared in x-amz-trailer was not sent");
    }
  }
  if (auth_.payload != PayloadMode::kStreamingSignedTrailer) return std::nullopt;
  if (trailer_signature_.empty()) {
    return S3Error(S3Code::kSignatureDoesNotMatch,
                   "A signed-trailer upload must end with x-amz-trailer-signature");
  }
  std::string canonical;
  for (const auto& [name, value] : trailers_) {
    canonical += name;
    canonical += ':';
    canonical += value;
    canonical += '\n';
  }
  std::string expected = TrailerSignatureV4(auth_.signing_key, auth_.amz_date, auth_.scope,
                                            previous_signature_, canonical);
  if (!base::ConstantTimeEquals(expected, trailer_signature_)) {
    return S3Error(S3Code::kSignatureDoesNotMatch,
                   "The trailer signature does not match the signature we calculated (a trailer "
                   "field was changed).")
        .With("SignatureProvided", trailer_signature_);
  }
  return std::nullopt;
}

}  // namespace sovai::objstore
