// What volume_sync.cc and volume_units.cc share: lstat, temporaries, the progress of a sync.
// Private to exec.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/volume_sync.h"

namespace sovai::exec::internal {

// lstat(2). Env::Stat follows symlinks, and a sync must see the link itself: following one could
// read or write outside the volume directory.
struct LinkStat {
  base::FileType type = base::FileType::kOther;
  uint64_t size_bytes = 0;
  int64_t mtime_unix_micros = 0;
};
base::Result<LinkStat> LStat(const std::string& path);

// A fresh name in `dir` for a file that becomes `final_name`, in AtomicFileWriter's temporary
// form, so that every sweep of leftovers (IsAtomicWriteTempName) recognizes it.
std::string TempPathFor(const std::string& dir, std::string_view final_name);

// Collects the report and sends progress lines.
class Progress {
 public:
  Progress(const SyncOptions& options, base::Env& env, SyncReport& report)
      : options_(options), env_(env), report_(report), last_micros_(env.NowMonotonicMicros()) {}

  void Line(std::string_view line) {
    if (options_.progress) options_.progress(line);
  }
  // A skipped key or file: counted always; reported and kept for the first kMaxReportWarnings.
  void Warn(std::string line);
  // A progress line at most every kProgressIntervalMicros.
  void Tick(const std::string& text);

 private:
  const SyncOptions& options_;
  base::Env& env_;
  SyncReport& report_;
  int64_t last_micros_;
};

// For SyncDown: the keys among `objects` it must not write because they belong to a unit (a
// directory with a unit manifest object) that is incomplete or does not match its manifest, or
// are not listed in their unit's manifest. Each unit refused gives one warning. Manifests are
// fetched through a temporary in `scratch_dir`.
base::Result<std::set<std::string>> UntrustedUnitKeys(S3Client& s3, const VolumeSpec& spec,
                                                      const std::vector<S3Object>& objects,
                                                      const std::string& scratch_dir,
                                                      base::Env& env, Progress& progress);

}  // namespace sovai::exec::internal
