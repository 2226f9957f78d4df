#include "cli/client/progress.h"

#include <algorithm>
#include <cstdio>

#include "base/strings.h"
#include "cli/client/limits.h"
#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

constexpr int kBarCells = 20;
constexpr char kClearToEndOfLine[] = "\x1b[K";

class CountingWritableFile : public base::WritableFile {
 public:
  CountingWritableFile(std::unique_ptr<base::WritableFile> file, Progress& progress)
      : file_(std::move(file)), progress_(progress) {}
  base::Status Append(std::string_view data) override {
    SOVAI_RETURN_IF_ERROR(file_->Append(data));
    progress_.AddBytes(data.size());
    return base::Status();
  }
  base::Status Sync() override { return file_->Sync(); }
  base::Status Close() override { return file_->Close(); }
  const std::string& path() const override { return file_->path(); }

 private:
  std::unique_ptr<base::WritableFile> file_;
  Progress& progress_;
};

class CountingRandomAccessFile : public base::RandomAccessFile {
 public:
  CountingRandomAccessFile(std::unique_ptr<base::RandomAccessFile> file, Progress& progress)
      : file_(std::move(file)), progress_(progress) {}
  base::Result<size_t> ReadAt(uint64_t offset, std::span<char> out) const override {
    SOVAI_ASSIGN_OR_RETURN(size_t got, file_->ReadAt(offset, out));
    progress_.AddBytes(got);
    return got;
  }
  uint64_t size_bytes() const override { return file_->size_bytes(); }

 private:
  std::unique_ptr<base::RandomAccessFile> file_;
  Progress& progress_;
};

}  // namespace

Progress::Progress(Console& console, base::Env& clock, bool enabled)
    : console_(console), clock_(clock), enabled_(enabled) {}

void Progress::Start(uint64_t total_files, uint64_t total_bytes) {
  total_files_ = total_files;
  total_bytes_ = total_bytes;
  start_micros_ = clock_.NowMonotonicMicros();
  Draw(true);
}

void Progress::BeginFile(std::string name, uint64_t size_bytes) {
  file_name_ = std::move(name);
  file_size_ = size_bytes;
  file_bytes_ = 0;
  Draw(false);
}

void Progress::AddBytes(uint64_t n) {
  file_bytes_ = std::min(file_size_, file_bytes_ + n);
  Draw(false);
}

void Progress::EndFile() {
  done_bytes_ += file_size_;
  ++done_files_;
  file_bytes_ = 0;
  file_size_ = 0;
  Draw(done_files_ == total_files_);
}

void Progress::Finish() {
  if (enabled_ && drawn_) console_.Err(std::string("\r") + kClearToEndOfLine);
  drawn_ = false;
}

void Progress::Draw(bool force) {
  if (!enabled_) return;
  const int64_t now = clock_.NowMonotonicMicros();
  if (!force && drawn_ && now - last_draw_micros_ < kProgressRedrawMicros) return;
  last_draw_micros_ = now;
  const double elapsed_s = static_cast<double>(now - start_micros_) / 1e6;
  const uint64_t done = done_bytes_ + file_bytes_;
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0;
  console_.Err("\r" +
               RenderLine(done, total_bytes_, done_files_, total_files_, rate, file_name_,
                          console_.ErrColumns()) +
               kClearToEndOfLine);
  drawn_ = true;
}

std::string Progress::RenderLine(uint64_t done_bytes, uint64_t total_bytes, uint64_t done_files,
                                 uint64_t total_files, double bytes_per_s, const std::string& name,
                                 int columns) {
  const double fraction =
      total_bytes == 0 ? (total_files == 0 ? 1.0 : static_cast<double>(done_files) / total_files)
                       : static_cast<double>(std::min(done_bytes, total_bytes)) / total_bytes;
  const int filled = static_cast<int>(fraction * kBarCells);
  std::string bar = "[";
  for (int i = 0; i < kBarCells; ++i) {
    bar += i < filled ? '=' : (i == filled ? '>' : ' ');
  }
  if (filled >= kBarCells) bar.back() = '=';
  bar += "]";
  char percent[8];
  std::snprintf(percent, sizeof percent, "%3d%%", static_cast<int>(fraction * 100));
  std::string line = bar + " " + percent + "  " + base::HumanBytes(done_bytes) + "/" +
                     base::HumanBytes(total_bytes) + "  " + std::to_string(done_files) + "/" +
                     std::to_string(total_files) + " files  " +
                     base::HumanBytes(static_cast<uint64_t>(bytes_per_s)) + "/s";
  if (!name.empty()) line += "  " + SanitizeCell(name);
  const size_t max_width = columns > 1 ? static_cast<size_t>(columns - 1) : 0;
  if (DisplayWidth(line) > max_width) {
    // Cut by characters, never inside a UTF-8 sequence.
    size_t width = 0;
    size_t cut = 0;
    for (; cut < line.size(); ++cut) {
      if ((static_cast<unsigned char>(line[cut]) & 0xC0) != 0x80) {
        if (width == max_width) break;
        ++width;
      }
    }
    line.resize(cut);
  }
  return line;
}

base::Result<std::unique_ptr<base::WritableFile>> ProgressEnv::NewWritableFile(
    const std::string& path, base::WriteMode mode, uint32_t permissions) {
  SOVAI_ASSIGN_OR_RETURN(auto file, target().NewWritableFile(path, mode, permissions));
  return std::unique_ptr<base::WritableFile>(
      std::make_unique<CountingWritableFile>(std::move(file), progress_));
}

base::Result<std::unique_ptr<base::RandomAccessFile>> ProgressEnv::NewRandomAccessFile(
    const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(auto file, target().NewRandomAccessFile(path));
  return std::unique_ptr<base::RandomAccessFile>(
      std::make_unique<CountingRandomAccessFile>(std::move(file), progress_));
}

}  // namespace sovai::cli::client
