// The layer half of UnpackImage (oci_layers.cc) and what it shares with the archive half
// (oci_image.cc). Private to exec.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/crypto.h"
#include "base/status.h"
#include "exec/image_limits.h"
#include "exec/oci_image.h"
#include "exec/tar_reader.h"

namespace sovai::exec::oci_internal {

// Directories of the rootfs: readable and traversable by the workload uid, writable only by the
// platform (see oci_image.h).
inline constexpr mode_t kDirMode = 0755;

// A name from the archive in a message: JSON-quoted, so that control characters in it cannot
// forge log lines, and cut to a readable length.
std::string Quote(std::string_view name);

// base::ErrnoToStatus of the current errno.
base::Status Errno(std::string_view what);

// The names in the directory `fd` (not "." or "..").
base::Result<std::vector<std::string>> ListDirFd(int fd);

// Reads and counts (and optionally hashes) what passes through; fails once more than *budget
// bytes passed, the budget being shared by every layer.
class MeteredSource : public ByteSource {
 public:
  MeteredSource(ByteSource& inner, bool hash, uint64_t* budget, std::string over_budget)
      : inner_(inner), budget_(budget), over_budget_(std::move(over_budget)) {
    if (hash) hasher_.emplace();
  }
  base::Result<size_t> Read(std::span<char> out) override {
    SOVAI_ASSIGN_OR_RETURN(size_t got, inner_.Read(out));
    if (budget_ != nullptr) {
      if (got > *budget_) return base::ResourceExhaustedError(over_budget_);
      *budget_ -= got;
    }
    if (hasher_) hasher_->Update(std::string_view(out.data(), got));
    return got;
  }
  // Reads the rest of the stream (so that the digest covers all of it).
  base::Status Drain() {
    auto buf = std::make_unique<char[]>(kImageReadChunkBytes);
    for (;;) {
      SOVAI_ASSIGN_OR_RETURN(size_t got, Read(std::span<char>(buf.get(), kImageReadChunkBytes)));
      if (got == 0) return base::Status();
    }
  }
  std::string HexDigest() { return base::HexEncode(hasher_->Finish()); }

 private:
  ByteSource& inner_;
  uint64_t* budget_;
  std::string over_budget_;
  std::optional<base::Sha256Hasher> hasher_;
};

// Where a layer's blob is: `size_bytes` bytes at `offset` of the open file `fd` (gzip or plain
// tar), and the sha256 it must hash to ("" = not checked).
struct LayerBlob {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t size_bytes = 0;
  std::string_view blob_hex;
};

// Writes layers, in order, into the directory `root_fd`, never outside it. The budget of
// uncompressed bytes (max_layer_stream_bytes) is shared by every layer it applies.
class LayerUnpacker {
 public:
  LayerUnpacker(const UnpackOptions& o, int root_fd);
  ~LayerUnpacker();
  LayerUnpacker(const LayerUnpacker&) = delete;
  LayerUnpacker& operator=(const LayerUnpacker&) = delete;

  // Applies one layer; with `diff_id_hex` its uncompressed stream must hash to it. DataLoss
  // when a digest does not match, InvalidArgument or ResourceExhausted for a layer the limits
  // or the rules refuse.
  base::Status ApplyLayer(const LayerBlob& layer, std::string_view diff_id_hex);
  // Sets the directories' modification times, after the last layer.
  base::Status Finish();

  uint64_t files() const;
  uint64_t bytes() const;
  uint64_t whiteouts() const;
  uint64_t skipped_special() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sovai::exec::oci_internal
