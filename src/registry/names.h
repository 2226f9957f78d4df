// Names of the OCI distribution spec: repositories, tags, digests, and the /v2/ paths built
// from them. Pure functions over untrusted text; errors are InvalidArgument saying what is
// allowed.
//
// Sovai namespaces repositories by project: "<project>/<name>[/<more>]", so a repository has at
// least two components and its first one is the project's name.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace sovai::registry {

// An OCI digest "<algorithm>:<hex>". Only the registered algorithms sha256 (64 lowercase hex)
// and sha512 (128 lowercase hex) are accepted.
struct Digest {
  std::string algorithm;  // "sha256" or "sha512"
  std::string hex;        // lowercase
  std::string ToString() const { return algorithm + ":" + hex; }
  friend bool operator==(const Digest&, const Digest&) = default;
};

// InvalidArgument for any other form (uppercase hex, another algorithm, wrong length).
base::Result<Digest> ParseDigest(std::string_view text);
// The digest of `bytes` with `algorithm` ("sha256" or "sha512"; anything else is a bug).
Digest DigestOf(std::string_view algorithm, std::string_view bytes);

// Repository names: components [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* joined by '/', at least two
// (project and name), at most kMaxRepositoryNameBytes in all.
base::Status ValidateRepositoryName(std::string_view name);
// The project of a valid repository name: its first component.
std::string_view ProjectOf(std::string_view repository);
// Tags: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}.
base::Status ValidateTag(std::string_view tag);

// An image reference as jobs, apps and notebooks name an image of this server's registry:
//   HOST[:PORT]/<project>/<name>[:<tag>|@<digest>]   by the registry's address
//   <project>/<name>[:<tag>|@<digest>]               the registry implied
//   <name>[:<tag>|@<digest>]                         the submitting project implied too
// A first component with '.' or ':', or "localhost", is a host (Docker's rule); with neither a
// tag nor a digest the tag is "latest"; with both, the digest decides (the tag is kept for
// messages). At most kMaxImageReferenceBytes.
struct ImageReference {
  std::string host;        // "" when the reference names none
  std::string repository;  // "<project>/<name>...", or "<name>" when project_implied
  bool project_implied = false;
  std::string tag;               // "" when only a digest was given
  std::optional<Digest> digest;  // set: pulled by digest
  // The manifest reference of the /v2/ API: the digest, else the tag.
  std::string reference() const { return digest ? digest->ToString() : tag; }
};
// InvalidArgument saying which part is wrong.
base::Result<ImageReference> ParseImageReference(std::string_view text);

// What a /v2/ path asks for. The repository name may hold slashes, so the path is read from its
// end: ".../manifests/<ref>", ".../blobs/uploads/", ".../blobs/uploads/<id>", ".../blobs/<digest>",
// ".../tags/list"; "/v2/" and "/v2/_catalog" stand alone.
struct V2Path {
  enum Kind { kBase, kCatalog, kManifest, kBlob, kUploadStart, kUpload, kTags, kUnknown };
  Kind kind = kUnknown;
  std::string repository;
  std::string reference;  // manifest tag or digest, blob digest, upload id
};
// `path` is the decoded request path ("/v2/..."). kUnknown for anything else (the name is not
// validated here: the handlers answer NAME_INVALID with the reason).
V2Path ParseV2Path(std::string_view path);

}  // namespace sovai::registry
