// OCI image manifests and indexes, and Docker's schema 2 manifests and manifest lists: the media
// types a registry negotiates, and a parser of the untrusted bytes a client PUTs that extracts
// what the registry must check (the blobs or manifests referenced).
//
//   SOVAI_ASSIGN_OR_RETURN(Manifest m, ParseManifest(body, request_content_type));
//   for (const Descriptor& d : m.blobs()) ... StatBlob(d.digest) ...
//
// Errors are InvalidArgument naming the field (the registry answers MANIFEST_INVALID), or
// Unimplemented for Docker's schema 1 (MANIFEST_INVALID too, saying to push schema 2).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "registry/names.h"

namespace sovai::registry {

inline constexpr char kOciManifestType[] = "application/vnd.oci.image.manifest.v1+json";
inline constexpr char kOciIndexType[] = "application/vnd.oci.image.index.v1+json";
inline constexpr char kDockerManifestType[] =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr char kDockerListType[] =
    "application/vnd.docker.distribution.manifest.list.v2+json";

// Whether `media_type` is one of the four manifest types above, and whether it is an index.
bool IsManifestMediaType(std::string_view media_type);
bool IsIndexMediaType(std::string_view media_type);
// "application/json; charset=utf-8" → "application/json" (parameters and spaces dropped,
// lowercased).
std::string BaseMediaType(std::string_view content_type);
// Whether an Accept header admits `media_type`: absent or empty, "*/*", "application/*", or the
// type listed (parameters and q-values ignored, q=0 excepted).
bool AcceptAllows(std::string_view accept, std::string_view media_type);

struct Descriptor {
  std::string media_type;
  Digest digest;
  uint64_t size = 0;
  // An index entry's `platform` (empty when it names none).
  std::string os;
  std::string architecture;
};

struct Manifest {
  std::string media_type;  // one of the four types
  bool index = false;
  // An image manifest: its config and layers (the blobs it references).
  std::optional<Descriptor> config;
  std::vector<Descriptor> layers;
  // An index: the manifests it lists (in the same repository).
  std::vector<Descriptor> manifests;
  // The OCI 1.1 `subject` (a referrer's target), when present; not required to exist.
  std::optional<Descriptor> subject;

  // The config followed by the layers; empty for an index.
  std::vector<Descriptor> blobs() const;
};

// Parses `bytes` (at most kMaxManifestBytes, JSON nesting kMaxManifestJsonDepth). The media type
// is the request's Content-Type when it names a manifest type, else the document's `mediaType`;
// OCI documents without either are told apart by `manifests` (an index) or `config`. A
// `mediaType` that contradicts the Content-Type is an error, as the spec asks. Requires
// schemaVersion 2, descriptors with a mediaType, a valid digest and a size, at most
// kMaxManifestReferences layers or manifests.
base::Result<Manifest> ParseManifest(std::string_view bytes, std::string_view content_type);

}  // namespace sovai::registry
