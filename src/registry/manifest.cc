#include "registry/manifest.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "base/json.h"
#include "registry/limits.h"

namespace sovai::registry {
namespace {

using nlohmann::json;

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return std::string(s.substr(b, e - b));
}

base::Result<Descriptor> ParseDescriptor(const json& value, const std::string& where) {
  if (!value.is_object()) return base::InvalidArgumentError(where + " must be an object");
  Descriptor d;
  auto media_type = base::GetString(value, "mediaType");
  if (!media_type.ok()) {
    return base::InvalidArgumentError(where + ": " + media_type.status().message());
  }
  d.media_type = *media_type;
  auto digest = base::GetString(value, "digest");
  if (!digest.ok()) return base::InvalidArgumentError(where + ": " + digest.status().message());
  auto parsed = ParseDigest(*digest);
  if (!parsed.ok()) return base::InvalidArgumentError(where + ": " + parsed.status().message());
  d.digest = *parsed;
  auto size = base::GetUint(value, "size");
  if (!size.ok()) return base::InvalidArgumentError(where + ": " + size.status().message());
  d.size = *size;
  if (auto platform = value.find("platform"); platform != value.end() && platform->is_object()) {
    d.os = base::GetOptionalString(*platform, "os").value_or(std::nullopt).value_or("");
    d.architecture =
        base::GetOptionalString(*platform, "architecture").value_or(std::nullopt).value_or("");
  }
  return d;
}

base::Result<std::vector<Descriptor>> ParseDescriptors(const json& doc, std::string_view field,
                                                       bool required) {
  std::vector<Descriptor> out;
  auto it = doc.find(field);
  if (it == doc.end() || it->is_null()) {
    if (required) {
      return base::InvalidArgumentError("missing required field '" + std::string(field) + "'");
    }
    return out;
  }
  if (!it->is_array()) {
    return base::InvalidArgumentError("field '" + std::string(field) + "' must be an array");
  }
  if (it->size() > kMaxManifestReferences) {
    return base::InvalidArgumentError("field '" + std::string(field) + "' lists " +
                                      std::to_string(it->size()) + " descriptors; at most " +
                                      std::to_string(kMaxManifestReferences) + " are accepted");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    SOVAI_ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor((*it)[i], std::string(field) + "[" +
                                                                       std::to_string(i) + "]"));
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

bool IsManifestMediaType(std::string_view t) {
  return t == kOciManifestType || t == kOciIndexType || t == kDockerManifestType ||
         t == kDockerListType;
}

bool IsIndexMediaType(std::string_view t) { return t == kOciIndexType || t == kDockerListType; }

std::string BaseMediaType(std::string_view content_type) {
  std::string out = Trim(content_type.substr(0, content_type.find(';')));
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool AcceptAllows(std::string_view accept, std::string_view media_type) {
  if (Trim(accept).empty()) return true;
  size_t start = 0;
  while (start <= accept.size()) {
    size_t comma = accept.find(',', start);
    std::string_view item = accept.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    std::string type = BaseMediaType(item);
    bool refused =
        item.find("q=0") != std::string_view::npos && item.find("q=0.") == std::string_view::npos;
    if (!refused && (type == "*/*" || type == "application/*" || type == media_type)) return true;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return false;
}

std::vector<Descriptor> Manifest::blobs() const {
  std::vector<Descriptor> out;
  if (config) out.push_back(*config);
  out.insert(out.end(), layers.begin(), layers.end());
  return out;
}

base::Result<Manifest> ParseManifest(std::string_view bytes, std::string_view content_type) {
  SOVAI_ASSIGN_OR_RETURN(json doc, base::ParseJson(bytes, {.max_bytes = kMaxManifestBytes,
                                                           .max_depth = kMaxManifestJsonDepth}));
  if (!doc.is_object()) return base::InvalidArgumentError("a manifest must be a JSON object");
  SOVAI_ASSIGN_OR_RETURN(std::optional<int64_t> schema, base::GetOptionalInt(doc, "schemaVersion"));
  SOVAI_ASSIGN_OR_RETURN(std::optional<std::string> declared,
                         base::GetOptionalString(doc, "mediaType"));
  std::string header_type = BaseMediaType(content_type);
  if (schema == 1 || header_type.starts_with("application/vnd.docker.distribution.manifest.v1")) {
    return base::UnimplementedError(
        "Docker schema 1 manifests are not supported: push schema 2 or OCI manifests");
  }
  if (schema != 2) {
    return base::InvalidArgumentError("schemaVersion must be 2");
  }
  Manifest m;
  if (IsManifestMediaType(header_type)) {
    m.media_type = header_type;
    if (declared && *declared != header_type) {
      return base::InvalidArgumentError("mediaType '" + declared->substr(0, 100) +
                                        "' contradicts the Content-Type '" + header_type + "'");
    }
  } else if (declared) {
    if (!IsManifestMediaType(*declared)) {
      return base::InvalidArgumentError("mediaType '" + declared->substr(0, 100) +
                                        "' is not a manifest or index media type");
    }
    m.media_type = *declared;
  } else if (doc.contains("manifests")) {
    m.media_type = kOciIndexType;
  } else if (doc.contains("config")) {
    m.media_type = kOciManifestType;
  } else {
    return base::InvalidArgumentError(
        "the manifest has no media type (Content-Type or mediaType) and neither config nor "
        "manifests");
  }
  m.index = IsIndexMediaType(m.media_type);
  if (m.index) {
    SOVAI_ASSIGN_OR_RETURN(m.manifests, ParseDescriptors(doc, "manifests", true));
  } else {
    auto config = doc.find("config");
    if (config == doc.end()) return base::InvalidArgumentError("missing required field 'config'");
    SOVAI_ASSIGN_OR_RETURN(Descriptor c, ParseDescriptor(*config, "config"));
    m.config = std::move(c);
    // OCI allows an artifact manifest with no layers; Docker schema 2 always has the array.
    SOVAI_ASSIGN_OR_RETURN(m.layers, ParseDescriptors(doc, "layers", true));
  }
  if (auto subject = doc.find("subject"); subject != doc.end() && !subject->is_null()) {
    SOVAI_ASSIGN_OR_RETURN(Descriptor s, ParseDescriptor(*subject, "subject"));
    m.subject = std::move(s);
  }
  return m;
}

}  // namespace sovai::registry
