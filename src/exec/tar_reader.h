// Streaming readers for image archives: byte sources (memory, a byte range of a file, gzip) and
// a tar reader for the formats that `docker save`, OCI tooling, GNU tar and Go's archive/tar
// write: ustar (with its 155-byte name prefix), GNU long names and link names (`././@LongLink`,
// types 'L' and 'K'), and PAX extended headers (`path`, `linkpath`, `size`, `mtime`, `uid`,
// `gid`; other keys are ignored), base-256 numeric fields, and V7 headers.
//
//   FileRangeSource raw(fd, offset, length);
//   SOVAI_ASSIGN_OR_RETURN(auto stream, OpenDecompressed(raw));   // gzip or plain, by magic
//   TarReader tar(*stream, {.max_path_bytes = 4096});
//   for (;;) {
//     SOVAI_ASSIGN_OR_RETURN(std::optional<TarEntry> entry, tar.Next());
//     if (!entry) break;                       // end of the archive
//     ... tar.ReadData(buffer) until it returns 0 for a regular file ...
//   }
//
// Every byte comes from untrusted input, so nothing is believed before it is checked: each
// header's checksum, each numeric field (octal or base-256, no overflow, no negative size), each
// PAX record's length, the name lengths against TarLimits. The reader never seeks backwards and
// holds at most one PAX header (max_pax_header_bytes) or long name in memory.
//
// What the reader returns is the archive's own description: paths are as stored (they may be
// absolute or contain ".."; the caller decides what to do with them), but never empty and never
// containing a NUL byte. Entries of types that carry no data (directories, links, devices,
// fifos) report size_bytes 0 whatever their header says, as GNU tar and Go do.
//
// PAX global headers (type 'g') are checked for syntax and otherwise ignored: a path that applies
// to every later entry has no use in an image layer.
//
// End of the archive: two zero blocks, or the end of the stream where a header would start (Go's
// archive/tar accepts that too; layer digests catch a truncation there). A zero block followed by
// a non-zero one, and the end of the stream inside a header or an entry's data, are errors.
//
// Errors (sticky: after one, every call returns it again): DataLoss for a corrupt or truncated
// archive (bad checksum, malformed numeric field or PAX record, early end), naming the byte
// offset; ResourceExhausted when a limit of TarLimits is exceeded, naming the limit;
// Unimplemented for GNU sparse files, multi-volume archives and unknown entry types.
//
// Thread-safety: none; one reader (and its sources) per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "exec/image_limits.h"

namespace sovai::exec {

// A stream of bytes read in order.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to out.size() bytes (at least 1 when out is not empty, unless the stream has
  // ended) and returns how many; 0 only at the end of the stream.
  virtual base::Result<size_t> Read(std::span<char> out) = 0;
  // Skips up to `n` bytes; returns how many were skipped (fewer only at the end). The default
  // reads and discards.
  virtual base::Result<uint64_t> Skip(uint64_t n);
};

// Reads until `out` is full or the stream ends; returns how many bytes were read.
base::Result<size_t> ReadFull(ByteSource& source, std::span<char> out);

// Bytes in memory (not owned: they must outlive the source).
class StringSource : public ByteSource {
 public:
  explicit StringSource(std::string_view data) : data_(data) {}
  base::Result<size_t> Read(std::span<char> out) override;
  base::Result<uint64_t> Skip(uint64_t n) override;

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// The byte range [offset, offset + length) of an open file (the fd is borrowed, read with
// pread, so several sources may share it). A file that ends before the range does is DataLoss.
class FileRangeSource : public ByteSource {
 public:
  FileRangeSource(int fd, uint64_t offset, uint64_t length)
      : fd_(fd), offset_(offset), remaining_(length) {}
  base::Result<size_t> Read(std::span<char> out) override;
  base::Result<uint64_t> Skip(uint64_t n) override;

 private:
  int fd_;
  uint64_t offset_;
  uint64_t remaining_;
};

// What a stream starts with.
enum class Compression : uint8_t { kNone, kGzip, kZstd, kBzip2, kXz };
// "none", "gzip", "zstd", "bzip2", "xz".
std::string_view CompressionName(Compression compression);
// By magic bytes (the first 6 bytes of the stream suffice; fewer mean kNone).
Compression DetectCompression(std::string_view head);

// Decompresses a gzip stream (RFC 1952), including several concatenated members, as gzip(1)
// does. Errors: DataLoss for corrupt data, a bad CRC or a stream that ends early, naming the
// compressed byte offset.
class GzipSource : public ByteSource {
 public:
  explicit GzipSource(ByteSource& compressed);
  ~GzipSource() override;
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;

  base::Result<size_t> Read(std::span<char> out) override;

 private:
  struct State;  // zlib's stream and the input buffer (keeps zlib.h out of this header)
  ByteSource& in_;
  std::unique_ptr<State> state_;
};

// The content of `raw`, decompressed according to its first bytes: gzip is decompressed, an
// uncompressed stream is passed through. `raw` must outlive the result. Errors: Unimplemented for
// zstd, bzip2 and xz (naming the compression), or the error of reading `raw`.
base::Result<std::unique_ptr<ByteSource>> OpenDecompressed(ByteSource& raw);

enum class TarEntryType : uint8_t {
  kRegular,
  kDirectory,
  kSymlink,
  kHardLink,
  kCharDevice,
  kBlockDevice,
  kFifo,
};
// "file", "directory", "symlink", "hard link", "character device", "block device", "fifo".
std::string_view TarEntryTypeName(TarEntryType type);

struct TarEntry {
  std::string path;  // as stored (after long names and PAX); never empty, no NUL
  TarEntryType type = TarEntryType::kRegular;
  // kSymlink: the link's content; kHardLink: the archive path of the entry linked to.
  std::string link_target;
  uint64_t size_bytes = 0;  // data bytes that follow (regular files only; 0 for the others)
  uint32_t mode = 0;        // permission bits, 07777
  uint64_t uid = 0;
  uint64_t gid = 0;
  int64_t mtime_unix_s = 0;    // may be negative (before 1970)
  uint32_t mtime_nanos = 0;    // from a PAX mtime; 0 otherwise
  uint64_t header_offset = 0;  // stream offset of the entry's first header (PAX, long name)
  uint64_t data_offset = 0;    // stream offset of its data
};

struct TarLimits {
  size_t max_path_bytes = kMaxImagePathBytes;  // paths and link targets
  size_t max_pax_header_bytes = kMaxTarPaxHeaderBytes;
  size_t max_entries = kMaxImageEntries;  // entries Next returns
};

class TarReader {
 public:
  // `source` must outlive the reader; it is read sequentially from its current position.
  explicit TarReader(ByteSource& source, TarLimits limits = {});

  // The next entry, or std::nullopt at the end of the archive (then again on later calls).
  // Whatever data of the previous entry was not read is skipped first.
  base::Result<std::optional<TarEntry>> Next();

  // Reads the current entry's data into `out`; returns how many bytes, 0 once all of it was read
  // (or when there is no current entry). Errors: DataLoss when the stream ends first.
  base::Result<size_t> ReadData(std::span<char> out);

  // Bytes consumed from the source so far.
  uint64_t offset() const { return offset_; }
  // Entries returned so far.
  size_t entries() const { return entries_; }

 private:
  base::Status Fail(base::Status status);
  // Reads exactly `out.size()` bytes; `what` names them in the error. Returns false (and no
  // error) when the stream ends before the first byte and `eof_ok`.
  base::Result<bool> ReadExact(std::span<char> out, std::string_view what, bool eof_ok);
  base::Status SkipExact(uint64_t n, std::string_view what);
  // Reads the data of an extension entry (PAX, long name), up to `max_bytes`.
  base::Result<std::string> ReadExtension(uint64_t size, size_t max_bytes, std::string_view what,
                                          std::string_view limit_name, uint64_t header_offset);
  base::Result<std::optional<TarEntry>> NextImpl();

  ByteSource& source_;
  const TarLimits limits_;
  uint64_t offset_ = 0;
  size_t entries_ = 0;
  uint64_t data_remaining_ = 0;  // of the current entry
  uint64_t padding_ = 0;         // after the current entry's data
  std::string current_path_;     // for error messages
  bool ended_ = false;
  base::Status failed_;
};

}  // namespace sovai::exec
