// The transfer progress bar of `bucket cp` and `bucket sync`, on stderr when it is a terminal:
//
//   [==========>         ]  52%  13.1 MiB/25.0 MiB  3/7 files  4.2 MiB/s  data/part-3.bin
//
// Bytes are counted as the S3 client reads the files it uploads and writes the files it
// downloads, through ProgressEnv (a base::EnvWrapper given to exec::S3Client as its Env), so no
// hook into the client is needed. A retried request reads its bytes again; the count of a file
// is capped at its size, so the bar never goes backwards or past 100%.
//
// Thread-safety: not thread-safe (the S3 client and the command run on one thread).
#pragma once

#include <cstdint>
#include <string>

#include "base/env.h"
#include "cli/client/console.h"

namespace sovai::cli::client {

class Progress {
 public:
  // Draws nothing unless `enabled` (stderr is a terminal and the user did not ask for quiet).
  Progress(Console& console, base::Env& clock, bool enabled);

  void Start(uint64_t total_files, uint64_t total_bytes);
  // A file of `size_bytes` starts transferring.
  void BeginFile(std::string name, uint64_t size_bytes);
  // Bytes of the current file moved (called by ProgressEnv).
  void AddBytes(uint64_t n);
  // The current file is done (or failed and was skipped).
  void EndFile();
  // Clears the bar; the command prints its summary after.
  void Finish();

  // One line of the bar, at most `columns` - 1 characters (pure; for tests).
  static std::string RenderLine(uint64_t done_bytes, uint64_t total_bytes, uint64_t done_files,
                                uint64_t total_files, double bytes_per_s, const std::string& name,
                                int columns);

 private:
  void Draw(bool force);

  Console& console_;
  base::Env& clock_;
  bool enabled_;
  bool drawn_ = false;
  uint64_t total_files_ = 0;
  uint64_t total_bytes_ = 0;
  uint64_t done_files_ = 0;
  uint64_t done_bytes_ = 0;  // of finished files
  uint64_t file_bytes_ = 0;  // of the current file so far
  uint64_t file_size_ = 0;
  std::string file_name_;
  int64_t start_micros_ = 0;
  int64_t last_draw_micros_ = 0;
};

// Forwards to `target`, counting the bytes appended to writable files and read from
// random-access files into `progress`.
class ProgressEnv : public base::EnvWrapper {
 public:
  ProgressEnv(base::Env& target, Progress& progress) : EnvWrapper(target), progress_(progress) {}

  using Env::NewWritableFile;
  base::Result<std::unique_ptr<base::WritableFile>> NewWritableFile(const std::string& path,
                                                                    base::WriteMode mode,
                                                                    uint32_t permissions) override;
  base::Result<std::unique_ptr<base::RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override;

 private:
  Progress& progress_;
};

}  // namespace sovai::cli::client
