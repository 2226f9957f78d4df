// Live sync: the rw/rwd volumes of a running workload reach their buckets while it runs.
//
//   LiveSync live(env, spec, say);        // after the volumes were synced down
//   ... the sandbox runs; live.SyncNow() for a push request; live.Report() for the API ...
//   live.Stop();                          // then StageVolumesOut uploads only what is pending
//
// Each volume whose spec has live_sync() (":sync=30s", the default) is followed on one thread
// of the LiveSync's own: changed files are found by inotify (a watch per directory, added as
// directories appear; IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE and removals) with a full scan as
// the safety net (at the start, every kScanEveryRounds rounds, and when the kernel's queue
// overflows). Every interval a round uploads the files that changed since the last one, each
// once it is closed and unchanged for the settle time (min(kMaxSyncSettleMicros, interval)):
// a file closed at t is in the bucket by about t + interval + settle. Units (checkpoint
// directories, volume_sync.h) go up whole, manifest last, once none of their files changed for
// the settle time. What was stored is written into the volume's manifest file
// (WorkloadManifestPath) after each round, so the final sync-up, also after a crash of the
// platform, uploads only what is still pending. Deletions (rwd) wait for the final sync-up.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "exec/executor.h"

namespace sovai::exec {

struct LiveSyncOptions {
  // The settle time; < 0 = min(kMaxSyncSettleMicros, the volume's interval).
  int64_t settle_micros = -1;
};

class LiveSync {
 public:
  // Follows the live volumes of `spec` (already synced down into spec.dir) until Stop. `say`
  // adds a line to the workload's log (from the LiveSync's thread). With no live volume, no
  // thread is started and Report().active is false.
  LiveSync(base::Env& env, const WorkloadSpec& spec, std::function<void(std::string_view)> say,
           LiveSyncOptions options = {});
  ~LiveSync();  // Stop()
  LiveSync(const LiveSync&) = delete;
  LiveSync& operator=(const LiveSync&) = delete;

  // Uploads every changed file now, settled or not (but one being written this very moment:
  // open, changed within the settle time), and returns when done: OK, or the first error
  // (naming its volume). OK at once when nothing is followed or it stopped.
  base::Status SyncNow();
  // Ends the thread after the upload in progress; the manifests hold everything stored.
  void Stop();
  LiveSyncStatus Report() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sovai::exec
