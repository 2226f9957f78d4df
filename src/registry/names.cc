#include "registry/names.h"

#include <algorithm>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/crypto.h"
#include "registry/limits.h"

namespace sovai::registry {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsLowerHex(char c) { return (c >= 'a' && c <= 'f') || (c >= '0' && c <= '9'); }

std::string Quoted(std::string_view text) {
  constexpr size_t kShown = 80;
  std::string out = "'";
  out.append(text.substr(0, kShown));
  if (text.size() > kShown) out += "...";
  return out + "'";
}

// One component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
bool ValidComponent(std::string_view c) {
  if (c.empty() || !IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) return false;
  size_t i = 0;
  while (i < c.size()) {
    if (IsLowerAlnum(c[i])) {
      ++i;
      continue;
    }
    // A separator run: ".", "_", "__" or one or more "-", followed by an alphanumeric.
    size_t start = i;
    if (c[i] == '-') {
      while (i < c.size() && c[i] == '-') ++i;
    } else if (c[i] == '.') {
      ++i;
    } else if (c[i] == '_') {
      ++i;
      if (i < c.size() && c[i] == '_') ++i;
    } else {
      return false;
    }
    if (i == start || i >= c.size() || !IsLowerAlnum(c[i])) return false;
  }
  return true;
}

std::vector<std::string_view> Split(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t slash = s.find('/', start);
    if (slash == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, slash - start));
    start = slash + 1;
  }
}

std::string Join(const std::vector<std::string_view>& parts, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out += '/';
    out.append(parts[i]);
  }
  return out;
}

}  // namespace

base::Result<Digest> ParseDigest(std::string_view text) {
  size_t colon = text.find(':');
  if (colon != std::string_view::npos) {
    std::string_view algorithm = text.substr(0, colon);
    std::string_view hex = text.substr(colon + 1);
    size_t want = algorithm == "sha256" ? 64 : algorithm == "sha512" ? 128 : 0;
    if (want != 0 && hex.size() == want &&
        std::all_of(hex.begin(), hex.end(), [](char c) { return IsLowerHex(c); })) {
      return Digest{std::string(algorithm), std::string(hex)};
    }
  }
  return base::InvalidArgumentError("digest " + Quoted(text) +
                                    " must be sha256:<64 lowercase hex> or "
                                    "sha512:<128 lowercase hex>");
}

Digest DigestOf(std::string_view algorithm, std::string_view bytes) {
  if (algorithm == "sha256") return {"sha256", base::HexEncode(base::Sha256(bytes))};
  SOVAI_CHECK(algorithm == "sha512") << "digest algorithm " << algorithm;
  return {"sha512", base::HexEncode(base::Sha512(bytes))};
}

base::Status ValidateRepositoryName(std::string_view name) {
  if (name.empty() || name.size() > kMaxRepositoryNameBytes) {
    return base::InvalidArgumentError("repository name " + Quoted(name) + " must be 1 to " +
                                      std::to_string(kMaxRepositoryNameBytes) + " characters");
  }
  std::vector<std::string_view> parts = Split(name);
  for (std::string_view part : parts) {
    if (!ValidComponent(part)) {
      return base::InvalidArgumentError(
          "repository name " + Quoted(name) + " has an invalid component " + Quoted(part) +
          ": components are lowercase letters and digits separated by '.', '_', '__' or '-'");
    }
  }
  if (parts.size() < 2) {
    return base::InvalidArgumentError("repository name " + Quoted(name) +
                                      " must start with its project: <project>/<name>");
  }
  return base::Status();
}

std::string_view ProjectOf(std::string_view repository) {
  return repository.substr(0, repository.find('/'));
}

base::Status ValidateTag(std::string_view tag) {
  auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  };
  bool ok = !tag.empty() && tag.size() <= kMaxTagBytes && tag.front() != '.' &&
            tag.front() != '-' && std::all_of(tag.begin(), tag.end(), allowed);
  if (!ok) {
    return base::InvalidArgumentError("tag " + Quoted(tag) + " must be 1 to " +
                                      std::to_string(kMaxTagBytes) +
                                      " characters of A-Z a-z 0-9 _ . -, not starting with . or -");
  }
  return base::Status();
}

base::Result<ImageReference> ParseImageReference(std::string_view text) {
  if (text.empty() || text.size() > kMaxImageReferenceBytes) {
    return base::InvalidArgumentError("image reference " + Quoted(text) + " must be 1 to " +
                                      std::to_string(kMaxImageReferenceBytes) + " characters");
  }
  ImageReference out;
  std::string_view rest = text;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    SOVAI_ASSIGN_OR_RETURN(out.digest, ParseDigest(rest.substr(at + 1)));
    rest = rest.substr(0, at);
  }
  // The host, when the first component looks like one (a '.' or a ':', or localhost).
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    std::string_view first = rest.substr(0, slash);
    if (first.find_first_of(".:") != std::string_view::npos || first == "localhost") {
      if (first.find_first_of(" \t@") != std::string_view::npos) {
        return base::InvalidArgumentError("image reference " + Quoted(text) +
                                          " has an invalid registry host " + Quoted(first));
      }
      out.host = std::string(first);
      rest = rest.substr(slash + 1);
    }
  }
  // A tag is after the last ':' that follows the last '/'.
  const size_t last_slash = rest.rfind('/');
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos &&
      (last_slash == std::string_view::npos || colon > last_slash)) {
    out.tag = std::string(rest.substr(colon + 1));
    SOVAI_RETURN_IF_ERROR(ValidateTag(out.tag));
    rest = rest.substr(0, colon);
  } else if (!out.digest) {
    out.tag = "latest";
  }
  out.repository = std::string(rest);
  out.project_implied = rest.find('/') == std::string_view::npos;
  if (out.project_implied) {
    if (!ValidComponent(rest)) {
      return base::InvalidArgumentError(
          "image reference " + Quoted(text) + " has an invalid repository name " + Quoted(rest) +
          ": lowercase letters and digits separated by '.', '_', '__' or '-'");
    }
    if (!out.host.empty()) {
      return base::InvalidArgumentError("image reference " + Quoted(text) +
                                        " must name <project>/<name> after the registry host");
    }
  } else {
    SOVAI_RETURN_IF_ERROR(ValidateRepositoryName(rest));
  }
  return out;
}

V2Path ParseV2Path(std::string_view path) {
  V2Path out;
  if (path == "/v2" || path == "/v2/") {
    out.kind = V2Path::kBase;
    return out;
  }
  if (!path.starts_with("/v2/")) return out;
  std::string_view rest = path.substr(4);
  if (rest == "_catalog") {
    out.kind = V2Path::kCatalog;
    return out;
  }
  std::vector<std::string_view> parts = Split(rest);
  size_t n = parts.size();
  if (n >= 3 && parts[n - 2] == "tags" && parts[n - 1] == "list") {
    out.kind = V2Path::kTags;
    out.repository = Join(parts, n - 2);
  } else if (n >= 4 && parts[n - 3] == "blobs" && parts[n - 2] == "uploads") {
    // ".../blobs/uploads/" (an empty last part) starts an upload; ".../blobs/uploads/<id>" is one.
    out.kind = parts[n - 1].empty() ? V2Path::kUploadStart : V2Path::kUpload;
    out.repository = Join(parts, n - 3);
    out.reference = std::string(parts[n - 1]);
  } else if (n >= 3 && parts[n - 2] == "blobs" && parts[n - 1] == "uploads") {
    out.kind = V2Path::kUploadStart;  // ".../blobs/uploads" without the trailing slash
    out.repository = Join(parts, n - 2);
  } else if (n >= 3 && parts[n - 2] == "manifests" && !parts[n - 1].empty()) {
    out.kind = V2Path::kManifest;
    out.repository = Join(parts, n - 2);
    out.reference = std::string(parts[n - 1]);
  } else if (n >= 3 && parts[n - 2] == "blobs" && !parts[n - 1].empty()) {
    out.kind = V2Path::kBlob;
    out.repository = Join(parts, n - 2);
    out.reference = std::string(parts[n - 1]);
  }
  return out;
}

}  // namespace sovai::registry
