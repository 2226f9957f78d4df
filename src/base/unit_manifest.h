// Unit manifests: how a directory written as a unit (a training checkpoint) is known to be
// complete once it has been copied somewhere else (a bucket, a volume synced down from one).
//
// The writer (exec's volume sync) uploads every file of the directory first and then the
// manifest object `<dir>/.sovai-unit.json` listing them, with "complete": true; before the first
// file of a new version of the unit it writes the manifest with "complete": false, so that a
// crash in between leaves a unit every reader refuses. Readers trust a directory that has a
// manifest only when it says complete and every file it lists is there as listed; a directory
// without one is an ordinary directory. docs/formats/volume-spec.md ("Units") has the format and
// the rules that make a directory a unit.
//
// The engine's --resume (train/checkpoint.h) and the volume sync-down (exec/volume_sync.h) are
// the readers; the format lives here because they share nothing higher.
//
// Thread-safety: values and functions over caller-owned values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace sovai::base {

// The manifest object a unit's writer puts last into the unit's directory.
inline constexpr std::string_view kUnitManifestName = ".sovai-unit.json";
// The file a user's script writes last into a directory to make it a unit (any content).
inline constexpr std::string_view kUnitMarkerName = ".sovai-complete";
// Files one unit may hold, and the size of its manifest.
inline constexpr size_t kMaxUnitFiles = 100'000;
inline constexpr size_t kMaxUnitManifestBytes = 32u << 20;

struct UnitFile {
  std::string path;  // relative to the unit's directory, '/'-separated
  uint64_t size_bytes = 0;
  std::string etag;  // the object's, unquoted ("" when unknown)

  bool operator==(const UnitFile&) const = default;
};

struct UnitManifest {
  bool complete = false;
  std::vector<UnitFile> files;  // sorted by path, unique; never the manifest itself

  // The entry for `path`, or nullptr.
  const UnitFile* Find(std::string_view path) const;

  std::string ToJson() const;
  // Errors: InvalidArgument for malformed JSON, a wrong or missing field, another format or
  // version, more than kMaxUnitFiles files or kMaxUnitManifestBytes, a path that is empty,
  // absolute or has an empty, "." or ".." segment, paths not sorted and unique.
  static Result<UnitManifest> FromJson(std::string_view json);

  bool operator==(const UnitManifest&) const = default;
};

// Whether the local directory `dir` may be read as a whole: OK when it holds no unit manifest,
// or a complete one whose every file is present as a regular file of its size. Otherwise
// FailedPrecondition saying what is missing or different (an incomplete unit, a file absent or
// of another size, a manifest that does not parse).
Status CheckLocalUnit(Env& env, const std::string& dir);

}  // namespace sovai::base
