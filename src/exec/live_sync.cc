#include "exec/live_sync.h"

#include <errno.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "base/strings.h"
#include "base/unit_manifest.h"
#include "exec/internal/sync_common.h"
#include "exec/local_executor.h"
#include "exec/volume_sync.h"

namespace sovai::exec {
namespace {

using base::Result;
using Status = base::Status;

constexpr uint32_t kWatchMask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                IN_DELETE | IN_DELETE_SELF | IN_ONLYDIR;
// The longest the thread sleeps between looks at a stop or a push request.
constexpr int kPollSliceMs = 100;

// lstat(2) as the volume sync sees files, or nullopt when it fails (gone meanwhile).
std::optional<internal::LinkStat> LStatPath(const std::string& path) {
  base::Result<internal::LinkStat> st = internal::LStat(path);
  if (!st.ok()) return std::nullopt;
  return *st;
}
bool IsRegular(const internal::LinkStat& st) { return st.type == base::FileType::kRegular; }
bool IsDirectory(const internal::LinkStat& st) { return st.type == base::FileType::kDirectory; }

std::string Join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

bool Under(const std::string& path, const std::string& dir) {
  return path == dir ||
         (path.size() > dir.size() && path.starts_with(dir) && path[dir.size()] == '/');
}

// A changed file waiting for its upload.
struct Dirty {
  bool open = false;  // created or written and not yet closed (as inotify last told)
  bool due = false;   // a round has started since it changed: upload once settled
  uint64_t size_bytes = 0;
  int64_t mtime_unix_micros = 0;
};

struct Followed {
  size_t index = 0;
  const WorkloadVolume* volume = nullptr;
  std::string dir;
  std::string manifest_path;
  SyncManifest state;
  std::map<std::string, Dirty> dirty;
  int64_t interval_micros = 0;
  int64_t settle_micros = 0;
  int64_t next_round = 0;       // monotonic
  int64_t next_check_unix = 0;  // when a due file not yet settled may have settled; 0 = none
  int rounds = 0;
  bool scans_only = false;  // out of inotify watches
};

}  // namespace

struct LiveSync::Impl {
  Impl(base::Env& env, const WorkloadSpec& spec, std::function<void(std::string_view)> say,
       LiveSyncOptions options)
      : env(env), spec(spec), say(std::move(say)), options(options), stores(this->spec) {}

  base::Env& env;
  const WorkloadSpec spec;
  std::function<void(std::string_view)> say;
  LiveSyncOptions options;
  WorkloadStores stores;  // the thread's own clients (an S3Client is single-threaded)
  std::vector<Followed> volumes;
  int inotify_fd = -1;
  std::map<int, std::pair<size_t, std::string>> watches;  // wd → (volume, relative dir)
  int64_t next_scan = 0;                                  // monotonic

  mutable std::mutex mu;  // guards everything below
  std::condition_variable cv;
  bool stop = false;
  uint64_t now_requested = 0;
  uint64_t now_done = 0;
  Status now_result;
  LiveSyncStatus status;
  int64_t last_round_unix_micros = 0;
  std::thread thread;

  // --- on the thread ---

  void Run() {
    for (;;) {
      {
        std::unique_lock lock(mu);
        if (stop) break;
      }
      Wait();
      ReadEvents();
      uint64_t ticket = 0;
      {
        std::lock_guard lock(mu);
        if (stop) break;
        if (now_requested > now_done) ticket = now_requested;
      }
      const int64_t now = env.NowMonotonicMicros();
      if (ticket != 0 || now >= next_scan) {
        for (Followed& v : volumes) Scan(v, "");
        next_scan = now + ScanInterval();
        // The kernel queued the events of every file the scan saw before the scan saw it: a
        // file created and not yet closed is known open.
        ReadEvents();
      }
      Status first;
      bool ran = false;
      for (Followed& v : volumes) {
        bool round = ticket != 0;
        if (now >= v.next_round) {
          for (auto& [path, d] : v.dirty) d.due = true;
          v.next_round = now + v.interval_micros;
          if (++v.rounds % kScanEveryRounds == 0) Scan(v, "");
          round = true;
        }
        if (!round && (v.next_check_unix == 0 || env.NowUnixMicros() < v.next_check_unix)) {
          continue;
        }
        ran = true;
        Status st = Upload(v, /*force=*/ticket != 0);
        if (!st.ok() && first.ok()) first = st;
      }
      if (ran) {
        {
          std::lock_guard lock(mu);
          last_round_unix_micros = env.NowUnixMicros();
        }
        Publish();
      }
      if (ticket != 0) {
        std::lock_guard lock(mu);
        now_done = ticket;
        now_result = first;
        cv.notify_all();
      }
    }
    if (inotify_fd >= 0) ::close(inotify_fd);
    inotify_fd = -1;
    Publish();
  }

  int64_t ScanInterval() const {
    int64_t interval = kMaxScanIntervalMicros;
    for (const Followed& v : volumes) {
      interval = std::min(interval, v.interval_micros * kScanEveryRounds);
    }
    return interval;
  }

  void Setup() {
    inotify_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd < 0) {
      say("live sync: inotify is unavailable (" + std::string(std::strerror(errno)) +
          "); changes are found by scans");
    }
    const int64_t now = env.NowMonotonicMicros();
    for (Followed& v : volumes) {
      auto text = env.ReadFile(v.manifest_path);
      auto manifest =
          text.ok() ? SyncManifest::FromJson(*text) : Result<SyncManifest>(text.status());
      if (manifest.ok()) {
        v.state = std::move(*manifest);
      } else {
        v.state.bucket = v.volume->spec.bucket;
        v.state.prefix = v.volume->spec.prefix;
      }
      v.next_round = now + v.interval_micros;
      Scan(v, "");
      say("live sync " + v.volume->spec.SourceName() + ": every " +
          std::to_string(v.interval_micros / 1'000'000) + " s, files settle for " +
          std::to_string(v.settle_micros / 1000) + " ms");
    }
    next_scan = now + ScanInterval();
  }

  void Wait() {
    int64_t until = env.NowMonotonicMicros() + kPollSliceMs * 1000;
    for (const Followed& v : volumes) until = std::min(until, v.next_round);
    const int64_t timeout_ms = std::max<int64_t>(0, (until - env.NowMonotonicMicros()) / 1000);
    {
      std::unique_lock lock(mu);
      if (stop || now_requested > now_done) return;
    }
    if (inotify_fd < 0) {
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                  [&] { return stop || now_requested > now_done; });
      return;
    }
    struct pollfd p = {inotify_fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(timeout_ms));
  }

  void Watch(Followed& v, const std::string& relative) {
    if (inotify_fd < 0 || v.scans_only) return;
    if (watches.size() >= kMaxSyncWatches) {
      v.scans_only = true;
      say("live sync " + v.volume->spec.SourceName() + ": more than " +
          std::to_string(kMaxSyncWatches) + " directories; changes are found by scans");
      return;
    }
    const std::string path = relative.empty() ? v.dir : base::JoinPath(v.dir, relative);
    const int wd = ::inotify_add_watch(inotify_fd, path.c_str(), kWatchMask);
    if (wd >= 0) watches[wd] = {v.index, relative};
  }

  // Walks `relative` (a directory of `v`), watching its directories and marking files that
  // differ from what is stored.
  void Scan(Followed& v, const std::string& relative) {
    std::vector<std::pair<std::string, int>> pending = {{relative, 0}};
    while (!pending.empty()) {
      auto [dir, depth] = std::move(pending.back());
      pending.pop_back();
      if (!dir.empty() && IsStagingPath(dir + "/")) continue;
      Watch(v, dir);
      auto names = env.ListDir(dir.empty() ? v.dir : base::JoinPath(v.dir, dir));
      if (!names.ok()) continue;
      for (const std::string& name : *names) {
        if (base::IsAtomicWriteTempName(name) || name == base::kUnitManifestName) continue;
        const std::string rel = Join(dir, name);
        std::optional<internal::LinkStat> st = LStatPath(base::JoinPath(v.dir, rel));
        if (!st) continue;
        if (IsDirectory(*st) && depth + 1 < kMaxSyncDirDepth) {
          pending.emplace_back(rel, depth + 1);
        } else if (IsRegular(*st)) {
          const ManifestEntry* known = v.state.Find(rel);
          if (known != nullptr && known->size_bytes == st->size_bytes &&
              known->mtime_unix_micros == st->mtime_unix_micros) {
            continue;
          }
          Dirty& d = v.dirty[rel];
          d.size_bytes = st->size_bytes;
          d.mtime_unix_micros = st->mtime_unix_micros;
        }
      }
    }
  }

  void ReadEvents() {
    if (inotify_fd < 0) return;
    alignas(struct inotify_event) char buffer[64 << 10];
    for (;;) {
      const ssize_t n = ::read(inotify_fd, buffer, sizeof buffer);
      if (n <= 0) return;
      for (char* at = buffer; at < buffer + n;) {
        const auto* e = reinterpret_cast<const struct inotify_event*>(at);
        at += sizeof(struct inotify_event) + e->len;
        if (e->mask & IN_Q_OVERFLOW) {
          say("live sync: the kernel's event queue overflowed; scanning the volumes");
          for (Followed& v : volumes) Scan(v, "");
          continue;
        }
        auto it = watches.find(e->wd);
        if (it == watches.end()) continue;
        if (e->mask & IN_IGNORED) {
          watches.erase(it);
          continue;
        }
        if (e->len == 0) continue;
        Followed& v = volumes[it->second.first];
        const std::string rel = Join(it->second.second, e->name);
        if (e->mask & IN_ISDIR) {
          if (e->mask & (IN_CREATE | IN_MOVED_TO)) Scan(v, rel);
          if (e->mask & (IN_MOVED_FROM | IN_DELETE)) Forget(v, rel);
          continue;
        }
        if (base::IsAtomicWriteTempName(e->name) || e->name == base::kUnitManifestName) {
          continue;
        }
        if (e->mask & (IN_MOVED_FROM | IN_DELETE)) {
          v.dirty.erase(rel);
        } else if (e->mask & IN_CREATE) {
          v.dirty[rel].open = true;
        } else if (e->mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) {
          Dirty& d = v.dirty[rel];
          d.open = false;
          // For the status: what is pending, and since when.
          if (std::optional<internal::LinkStat> st = LStatPath(base::JoinPath(v.dir, rel))) {
            d.size_bytes = st->size_bytes;
            d.mtime_unix_micros = st->mtime_unix_micros;
          }
        }
      }
    }
  }

  // A directory moved away or removed: its watches and pending files go.
  void Forget(Followed& v, const std::string& rel) {
    for (auto it = watches.begin(); it != watches.end();) {
      if (it->second.first == v.index && Under(it->second.second, rel)) {
        ::inotify_rm_watch(inotify_fd, it->first);
        it = watches.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = v.dirty.begin(); it != v.dirty.end();) {
      it = Under(it->first, rel) ? v.dirty.erase(it) : std::next(it);
    }
  }

  // Takes out of `ready` the files of units that still have an open file: a unit goes up whole.
  // Whether it took any out.
  bool HoldOpenUnits(Followed& v, std::vector<std::string>& ready) {
    std::vector<std::string> open;
    for (const auto& [path, d] : v.dirty) {
      if (d.open) open.push_back(path);
    }
    if (open.empty()) return false;
    const size_t before = ready.size();
    auto has_marker = [&](const std::string& dir) {
      return env.FileExists(
          base::JoinPath(base::JoinPath(v.dir, dir), std::string(base::kUnitMarkerName)));
    };
    std::erase_if(ready, [&](const std::string& path) {
      const std::string unit = UnitDirFor(path, has_marker);
      return !unit.empty() && std::any_of(open.begin(), open.end(),
                                          [&](const std::string& o) { return Under(o, unit); });
    });
    return ready.size() != before;
  }

  // Uploads the due files of `v` that settled (all of them with `force`).
  Status Upload(Followed& v, bool force) {
    const int64_t now = env.NowUnixMicros();
    std::vector<std::string> ready;
    v.next_check_unix = 0;
    for (auto it = v.dirty.begin(); it != v.dirty.end();) {
      std::optional<internal::LinkStat> st = LStatPath(base::JoinPath(v.dir, it->first));
      const ManifestEntry* known = st ? v.state.Find(it->first) : nullptr;
      if (!st || !IsRegular(*st) ||
          (known != nullptr && known->size_bytes == st->size_bytes &&
           known->mtime_unix_micros == st->mtime_unix_micros)) {
        it = v.dirty.erase(it);
        continue;
      }
      it->second.size_bytes = st->size_bytes;
      it->second.mtime_unix_micros = st->mtime_unix_micros;
      const bool settled = now - st->mtime_unix_micros >= v.settle_micros;
      // A push takes every changed file but one being written this very moment (open, and
      // changed within the settle time): `echo x > f` must not go up as the empty file it is
      // between its create and its write.
      if ((force && (!it->second.open || settled)) ||
          (it->second.due && !it->second.open && settled)) {
        ready.push_back(it->first);
      } else if (it->second.due) {
        // Closed: settled at mtime + settle; open: looked at again a settle time from now.
        const int64_t at =
            it->second.open ? now + v.settle_micros : st->mtime_unix_micros + v.settle_micros;
        if (v.next_check_unix == 0 || at < v.next_check_unix) v.next_check_unix = at;
      }
      ++it;
    }
    if (!force && !ready.empty() && HoldOpenUnits(v, ready)) {
      const int64_t at = now + v.settle_micros;
      if (v.next_check_unix == 0 || at < v.next_check_unix) v.next_check_unix = at;
    }
    if (ready.empty()) return Status();
    SyncOptions o;
    o.env = &env;
    o.progress = [&](std::string_view line) { say(line); };
    o.unit_settled_before_unix_micros = force ? 0 : now - v.settle_micros;
    auto s3 = stores.ForVolume(*v.volume);
    Result<SyncReport> report = s3.ok()
                                    ? SyncUpPaths(**s3, v.volume->spec, v.dir, ready, v.state, o)
                                    : Result<SyncReport>(s3.status());
    // Whatever was stored is recorded, also after an error.
    if (Status saved = env.WriteFileAtomically(v.manifest_path, v.state.ToJson()); !saved.ok()) {
      say("live sync " + v.volume->spec.SourceName() + ": saving its manifest: " + saved.message());
    }
    for (const std::string& path : ready) {
      auto it = v.dirty.find(path);
      const ManifestEntry* known = v.state.Find(path);
      if (it != v.dirty.end() && known != nullptr && known->size_bytes == it->second.size_bytes &&
          known->mtime_unix_micros == it->second.mtime_unix_micros) {
        v.dirty.erase(it);
      }
    }
    for (const std::string& path : ready) {
      // Still pending (a unit not settled as a whole, a file that changed while read).
      if (v.dirty.count(path) != 0) {
        const int64_t at = now + v.settle_micros;
        if (v.next_check_unix == 0 || at < v.next_check_unix) v.next_check_unix = at;
      }
    }
    std::lock_guard lock(mu);
    if (!report.ok()) {
      ++status.errors;
      status.last_error =
          "volume " + v.volume->spec.SourceName() + ": " + report.status().message();
      say("live sync failed: " + status.last_error + " (tried again next round)");
      return Status(report.status().code(), status.last_error);
    }
    status.uploaded_files += report->files;
    status.uploaded_bytes += report->bytes;
    status.units += report->units;
    status.retried += report->retried;
    if (report->files > 0) {
      say("live sync " + v.volume->spec.SourceName() + ": " + std::to_string(report->files) +
          " files, " + base::HumanBytes(report->bytes) + " uploaded" +
          (report->units > 0 ? ", " + std::to_string(report->units) + " units complete" : "") +
          "; " + std::to_string(v.dirty.size()) + " files pending");
    }
    return Status();
  }

  void Publish() {
    LiveSyncStatus s;
    s.active = !volumes.empty();
    for (const Followed& v : volumes) {
      for (const auto& [path, d] : v.dirty) {
        ++s.pending_files;
        s.pending_bytes += d.size_bytes;
        if (s.oldest_pending_unix_micros == 0 ||
            d.mtime_unix_micros < s.oldest_pending_unix_micros) {
          s.oldest_pending_unix_micros = d.mtime_unix_micros;
        }
      }
    }
    std::lock_guard lock(mu);
    s.last_sync_unix_micros = last_round_unix_micros;
    s.uploaded_files = status.uploaded_files;
    s.uploaded_bytes = status.uploaded_bytes;
    s.units = status.units;
    s.retried = status.retried;
    s.errors = status.errors;
    s.last_error = status.last_error;
    status = std::move(s);
  }
};

LiveSync::LiveSync(base::Env& env, const WorkloadSpec& spec,
                   std::function<void(std::string_view)> say, LiveSyncOptions options)
    : impl_(std::make_unique<Impl>(env, spec, std::move(say), options)) {
  Impl& i = *impl_;
  for (size_t n = 0; n < i.spec.volumes.size(); ++n) {
    const WorkloadVolume& volume = i.spec.volumes[n];
    if (!volume.spec.live_sync()) continue;
    Followed v;
    v.index = i.volumes.size();
    v.volume = &volume;
    v.dir = WorkloadVolumeDir(i.spec.dir, n);
    v.manifest_path = WorkloadManifestPath(i.spec.dir, n);
    v.interval_micros = volume.spec.sync_interval_s * 1'000'000;
    v.settle_micros = options.settle_micros >= 0
                          ? options.settle_micros
                          : std::min(kMaxSyncSettleMicros, v.interval_micros);
    i.volumes.push_back(std::move(v));
  }
  if (i.volumes.empty()) return;
  i.status.active = true;
  // Watches and the first scan before returning: whatever the workload writes from now on is
  // seen.
  i.Setup();
  i.thread = std::thread([&i] { i.Run(); });
}

LiveSync::~LiveSync() { Stop(); }

Status LiveSync::SyncNow() {
  Impl& i = *impl_;
  std::unique_lock lock(i.mu);
  if (!i.thread.joinable() || i.stop) return Status();
  const uint64_t ticket = ++i.now_requested;
  i.cv.notify_all();
  i.cv.wait(lock, [&] { return i.now_done >= ticket || i.stop; });
  return i.now_done >= ticket ? i.now_result : Status();
}

void LiveSync::Stop() {
  Impl& i = *impl_;
  {
    std::lock_guard lock(i.mu);
    i.stop = true;
    i.cv.notify_all();
  }
  if (i.thread.joinable()) i.thread.join();
}

LiveSyncStatus LiveSync::Report() const {
  std::lock_guard lock(impl_->mu);
  return impl_->status;
}

}  // namespace sovai::exec
