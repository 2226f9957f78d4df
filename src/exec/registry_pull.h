// A registry image (executor.h RegistryImage) as a cached root filesystem: its manifest and blobs
// fetched from the registry's bucket of the platform's store, every one verified against its
// digest, the config and layers kept once by digest in <cache_dir>/layers/sha256/<hex> (shared by
// every image of the cache that has them), then unpacked by CachedRootfs (oci_image.h) from an
// OCI image layout laid out beside them, once per manifest digest.
//
//   SOVAI_ASSIGN_OR_RETURN(CachedImage image, PullRegistryImage(env, *spec.registry_image,
//                                                               spec.image_cache_dir, say));
//
// Errors: NotFound for an object deleted since the submission (the image was deleted or
// collected); DataLoss for bytes that do not match their digest (nothing is cached then);
// InvalidArgument for a digest that is not sha256; those of the S3 client and of UnpackImage.
// Thread-safety: concurrent calls (threads or processes) for the same images are safe: a blob
// is renamed into the cache only whole and verified, and CachedRootfs serializes an unpack.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "base/env.h"
#include "base/status.h"
#include "exec/executor.h"
#include "exec/oci_image.h"

namespace sovai::exec {

base::Result<CachedImage> PullRegistryImage(base::Env& env, const RegistryImage& image,
                                            const std::string& cache_dir,
                                            const std::function<void(std::string_view)>& say);

// Where PullRegistryImage keeps the blob of `hex` (a sha256): <cache_dir>/layers/sha256/<hex>.
std::string CachedLayerPath(const std::string& cache_dir, std::string_view hex);

}  // namespace sovai::exec
