// Limits of the OCI distribution registry (docs/api/registry.md). Every request body, name,
// list and open upload is bounded; going over a limit is a clear error, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sovai::registry {

// A manifest or index body (the spec suggests accepting at least 4 MiB).
inline constexpr size_t kMaxManifestBytes = 4u << 20;
// JSON nesting of a manifest: descriptors are shallow; annotations are flat maps.
inline constexpr int kMaxManifestJsonDepth = 16;
// Layers of an image manifest, or manifests of an index.
inline constexpr size_t kMaxManifestReferences = 1024;
// A repository name, "<project>/<name>[/<more>]" (the spec's 255-character suggestion).
inline constexpr size_t kMaxRepositoryNameBytes = 255;
// An image reference (ParseImageReference): a host, a repository name and a tag or digest.
inline constexpr size_t kMaxImageReferenceBytes = 512;
// A tag: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}.
inline constexpr size_t kMaxTagBytes = 128;
// One blob (the sum of an upload's chunks).
inline constexpr uint64_t kMaxBlobBytes = 64ull << 30;
// One request's body (a chunk, or a monolithic blob): the HTTP layer's ceiling. Clients that
// stream a blob in one PATCH (podman, skopeo) push blobs up to this size.
inline constexpr uint64_t kMaxChunkBytes = uint64_t{6} << 30;  // = net::kMaxBodyBytesCeiling
// Chunks (PATCH requests) of one upload: each is an object-store multipart part.
inline constexpr int kMaxUploadChunks = 10000;
// Uploads open at once, all projects together (each holds a multipart upload and two hashers).
inline constexpr size_t kMaxOpenUploads = 1024;
// An upload without a request for this long is cancelled and its chunks reclaimed.
inline constexpr int64_t kDefaultUploadTimeoutS = 3600;
// Tags list and catalog: the largest `n`, and the page when `n` is absent.
inline constexpr int kMaxListPage = 1000;
inline constexpr int kDefaultListPage = 100;
// Registry bearer tokens issued by the token endpoint live this long.
inline constexpr int64_t kDefaultTokenLifetimeS = 300;
// An Authorization header, a scope parameter.
inline constexpr size_t kMaxAuthorizationBytes = 8192;
// Garbage collection leaves blobs younger than this alone by default (a push writes its blobs
// before the manifest that references them).
inline constexpr int64_t kDefaultGcMinAgeS = 3600;
// Manifests a garbage collection reads (all repositories of the projects it covers).
inline constexpr size_t kMaxGcManifests = 100000;

}  // namespace sovai::registry
