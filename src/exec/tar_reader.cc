#include "exec/tar_reader.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "base/strings.h"

namespace sovai::exec {
namespace {

using base::Result;
using base::Status;

constexpr size_t kBlockBytes = 512;
// Compressed bytes read from the underlying source at a time.
constexpr size_t kGzipInputBytes = 64u << 10;
// Larger reads are split so that zlib's 32-bit counters cannot overflow.
constexpr size_t kMaxZlibChunkBytes = 1u << 30;

// A name from the archive in an error message: JSON-quoted (so control characters cannot forge
// log lines) and cut to a readable length.
std::string QuoteName(std::string_view name) {
  constexpr size_t kMaxShown = 200;
  if (name.size() <= kMaxShown) return base::JsonQuote(name);
  return base::JsonQuote(name.substr(0, kMaxShown)) + "...";
}

// A NUL-terminated string field of a header (or the whole field when it has no NUL).
std::string_view CString(const char* block, size_t offset, size_t length) {
  std::string_view field(block + offset, length);
  size_t nul = field.find('\0');
  return nul == std::string_view::npos ? field : field.substr(0, nul);
}

// A numeric header field: octal digits surrounded by spaces or NULs (all-blank is 0), or GNU's
// base-256 encoding (high bit of the first byte set; the next bit is the sign). Errors on
// anything else and on values beyond int64_t, as Go's archive/tar does.
std::optional<int64_t> ParseNumeric(const char* block, size_t offset, size_t length) {
  const auto* b = reinterpret_cast<const unsigned char*>(block + offset);
  if (length > 0 && (b[0] & 0x80) != 0) {
    unsigned char inv = (b[0] & 0x40) != 0 ? 0xff : 0x00;
    uint64_t x = 0;
    for (size_t i = 0; i < length; ++i) {
      unsigned char c = b[i] ^ inv;
      if (i == 0) c &= 0x7f;
      if ((x >> 56) != 0) return std::nullopt;
      x = (x << 8) | c;
    }
    if ((x >> 63) != 0) return std::nullopt;
    return inv == 0xff ? ~static_cast<int64_t>(x) : static_cast<int64_t>(x);
  }
  size_t begin = 0;
  size_t end = length;
  while (begin < end && (b[begin] == ' ' || b[begin] == '\0')) ++begin;
  while (end > begin && (b[end - 1] == ' ' || b[end - 1] == '\0')) --end;
  uint64_t x = 0;
  for (size_t i = begin; i < end; ++i) {
    if (b[i] < '0' || b[i] > '7') return std::nullopt;
    if ((x >> 60) != 0) return std::nullopt;
    x = (x << 3) | static_cast<uint64_t>(b[i] - '0');
  }
  if ((x >> 63) != 0) return std::nullopt;
  return static_cast<int64_t>(x);
}

bool IsZeroBlock(const char* block) {
  return std::all_of(block, block + kBlockBytes, [](char c) { return c == '\0'; });
}

std::string TypeflagForMessage(char flag) {
  if (flag >= 0x20 && flag < 0x7f) return std::string("'") + flag + "'";
  static constexpr char kHex[] = "0123456789abcdef";
  auto u = static_cast<unsigned char>(flag);
  return std::string("0x") + kHex[u >> 4] + kHex[u & 15];
}

// Values collected from PAX extended headers and GNU long names for the next real header.
struct PendingExtensions {
  std::optional<std::string> path;
  std::optional<std::string> link;
  std::optional<uint64_t> size;
  std::optional<uint64_t> uid;
  std::optional<uint64_t> gid;
  std::optional<std::pair<int64_t, uint32_t>> mtime;
  bool any = false;
};

// "1234567890", "-12.5", "1700000000.123456789" (digits beyond nanoseconds are dropped).
std::optional<std::pair<int64_t, uint32_t>> ParsePaxTime(std::string_view s) {
  bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? "" : s.substr(dot + 1);
  Result<uint64_t> seconds = base::ParseUint64(whole);
  if (!seconds.ok() || *seconds > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  uint32_t nanos = 0;
  for (size_t i = 0; i < frac.size(); ++i) {
    if (frac[i] < '0' || frac[i] > '9') return std::nullopt;
    if (i < 9) nanos = nanos * 10 + static_cast<uint32_t>(frac[i] - '0');
  }
  for (size_t i = frac.size(); i < 9; ++i) nanos *= 10;
  auto sec = static_cast<int64_t>(*seconds);
  if (negative && nanos > 0) return std::make_pair(-sec - 1, 1'000'000'000 - nanos);
  return std::make_pair(negative ? -sec : sec, nanos);
}

// Applies the records of a PAX extended header ("<length> <key>=<value>\n"...) to `into`.
Status ApplyPaxRecords(std::string_view pax, uint64_t header_offset, PendingExtensions& into) {
  std::string_view rest = pax;
  while (!rest.empty()) {
    auto bad = [&](std::string_view why) {
      return base::DataLossError("tar archive at byte " + std::to_string(header_offset) +
                                 ": malformed PAX record (" + std::string(why) + ")");
    };
    size_t space = rest.find(' ');
    if (space == std::string_view::npos || space == 0 || space > 20) {
      return bad("no length");
    }
    Result<uint64_t> length = base::ParseUint64(rest.substr(0, space));
    if (!length.ok()) return bad("invalid length");
    if (*length < space + 3 || *length > rest.size()) return bad("length out of range");
    std::string_view record = rest.substr(0, static_cast<size_t>(*length));
    if (record.back() != '\n') return bad("no newline at the end");
    std::string_view kv = record.substr(space + 1, record.size() - space - 2);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) return bad("no key");
    std::string_view key = kv.substr(0, eq);
    std::string_view value = kv.substr(eq + 1);
    rest.remove_prefix(record.size());
    if (key.substr(0, 11) == "GNU.sparse.") {
      return base::UnimplementedError("tar archive at byte " + std::to_string(header_offset) +
                                      ": GNU sparse files are not supported");
    }
    // An empty value deletes the keyword (POSIX): fall back to the header's field.
    auto number = [&](std::optional<uint64_t>& field) -> Status {
      if (value.empty()) {
        field.reset();
        return Status();
      }
      Result<uint64_t> v = base::ParseUint64(value);
      if (!v.ok() || *v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return bad("invalid " + std::string(key));
      }
      field = *v;
      return Status();
    };
    if (key == "path" || key == "linkpath") {
      if (value.find('\0') != std::string_view::npos) return bad(std::string(key) + " has NUL");
      std::optional<std::string>& field = key == "path" ? into.path : into.link;
      if (value.empty()) {
        field.reset();
      } else {
        field = std::string(value);
      }
    } else if (key == "size") {
      SOVAI_RETURN_IF_ERROR(number(into.size));
    } else if (key == "uid") {
      SOVAI_RETURN_IF_ERROR(number(into.uid));
    } else if (key == "gid") {
      SOVAI_RETURN_IF_ERROR(number(into.gid));
    } else if (key == "mtime") {
      if (value.empty()) {
        into.mtime.reset();
      } else {
        into.mtime = ParsePaxTime(value);
        if (!into.mtime) return bad("invalid mtime");
      }
    }
  }
  return Status();
}

// The entry type of a ustar typeflag; Unimplemented for the types this reader does not extract.
Result<TarEntryType> EntryTypeOf(char flag, uint64_t header_offset) {
  switch (flag) {
    case '0':
    case '\0':
    case '7':  // contiguous file: a regular file everywhere but on one 1980s system
      return TarEntryType::kRegular;
    case '1':
      return TarEntryType::kHardLink;
    case '2':
      return TarEntryType::kSymlink;
    case '3':
      return TarEntryType::kCharDevice;
    case '4':
      return TarEntryType::kBlockDevice;
    case '5':
      return TarEntryType::kDirectory;
    case '6':
      return TarEntryType::kFifo;
    default: {
      std::string what = TypeflagForMessage(flag);
      if (flag == 'S') what += " (GNU sparse file)";
      if (flag == 'M' || flag == 'V') what += " (multi-volume archive)";
      return base::UnimplementedError("tar header at byte " + std::to_string(header_offset) +
                                      ": entry type " + what + " is not supported");
    }
  }
  return TarEntryType::kRegular;  // not reached: every case returns
}

}  // namespace

// --- Byte sources ---

Result<uint64_t> ByteSource::Skip(uint64_t n) {
  char buf[16 << 10];
  uint64_t skipped = 0;
  while (skipped < n) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof buf, n - skipped));
    SOVAI_ASSIGN_OR_RETURN(size_t got, Read(std::span<char>(buf, want)));
    if (got == 0) break;
    skipped += got;
  }
  return skipped;
}

Result<size_t> ReadFull(ByteSource& source, std::span<char> out) {
  size_t done = 0;
  while (done < out.size()) {
    SOVAI_ASSIGN_OR_RETURN(size_t got, source.Read(out.subspan(done)));
    if (got == 0) break;
    done += got;
  }
  return done;
}

Result<size_t> StringSource::Read(std::span<char> out) {
  size_t n = std::min(out.size(), data_.size() - pos_);
  if (n > 0) std::memcpy(out.data(), data_.data() + pos_, n);
  pos_ += n;
  return n;
}

Result<uint64_t> StringSource::Skip(uint64_t n) {
  size_t k = static_cast<size_t>(std::min<uint64_t>(n, data_.size() - pos_));
  pos_ += k;
  return static_cast<uint64_t>(k);
}

Result<size_t> FileRangeSource::Read(std::span<char> out) {
  size_t want = static_cast<size_t>(std::min<uint64_t>(out.size(), remaining_));
  if (want == 0) return size_t{0};
  for (;;) {
    ssize_t got = ::pread(fd_, out.data(), want, static_cast<off_t>(offset_));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return base::ErrnoToStatus(errno, "read the image archive");
    if (got == 0) {
      return base::DataLossError("the image archive ends at byte " + std::to_string(offset_) +
                                 ", " + std::to_string(remaining_) +
                                 " bytes before the end of the member being read");
    }
    offset_ += static_cast<uint64_t>(got);
    remaining_ -= static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  }
}

Result<uint64_t> FileRangeSource::Skip(uint64_t n) {
  uint64_t k = std::min(n, remaining_);
  offset_ += k;
  remaining_ -= k;
  return k;
}

std::string_view CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "none";
    case Compression::kGzip:
      return "gzip";
    case Compression::kZstd:
      return "zstd";
    case Compression::kBzip2:
      return "bzip2";
    case Compression::kXz:
      return "xz";
  }
  return "unknown";
}

Compression DetectCompression(std::string_view head) {
  auto starts = [&](std::string_view magic) { return head.substr(0, magic.size()) == magic; };
  if (starts(std::string_view("\x1f\x8b", 2))) return Compression::kGzip;
  if (starts(std::string_view("\x28\xb5\x2f\xfd", 4))) return Compression::kZstd;
  if (starts("BZh")) return Compression::kBzip2;
  if (starts(std::string_view("\xfd\x37\x7a\x58\x5a\x00", 6))) return Compression::kXz;
  return Compression::kNone;
}

struct GzipSource::State {
  z_stream z{};
  bool initialized = false;
  bool in_eof = false;
  bool done = false;
  // True between members (and before the first): the end of the input is a clean end there.
  bool at_member_start = true;
  uint64_t in_offset = 0;  // compressed bytes read from the source
  std::unique_ptr<char[]> buf = std::make_unique<char[]>(kGzipInputBytes);
  Status failed;

  uint64_t consumed() const { return in_offset - z.avail_in; }
};

GzipSource::GzipSource(ByteSource& compressed)
    : in_(compressed), state_(std::make_unique<State>()) {
  // 16 + MAX_WBITS: gzip framing only (a zlib or raw deflate stream is not an image layer).
  if (inflateInit2(&state_->z, 16 + MAX_WBITS) == Z_OK) {
    state_->initialized = true;
  } else {
    state_->failed = base::ResourceExhaustedError("cannot initialize zlib (out of memory)");
  }
}

GzipSource::~GzipSource() {
  if (state_->initialized) inflateEnd(&state_->z);
}

Result<size_t> GzipSource::Read(std::span<char> out) {
  State& s = *state_;
  if (!s.failed.ok()) return s.failed;
  if (s.done || out.empty()) return size_t{0};
  size_t want = std::min(out.size(), kMaxZlibChunkBytes);
  s.z.next_out = reinterpret_cast<Bytef*>(out.data());
  s.z.avail_out = static_cast<uInt>(want);
  for (;;) {
    if (s.z.avail_in == 0 && !s.in_eof) {
      Result<size_t> got = in_.Read(std::span<char>(s.buf.get(), kGzipInputBytes));
      if (!got.ok()) return s.failed = got.status();
      if (*got == 0) {
        s.in_eof = true;
      } else {
        s.z.next_in = reinterpret_cast<Bytef*>(s.buf.get());
        s.z.avail_in = static_cast<uInt>(*got);
        s.in_offset += *got;
      }
    }
    size_t produced = want - s.z.avail_out;
    if (s.z.avail_in == 0 && s.in_eof) {
      if (s.at_member_start) {
        s.done = true;
        return produced;
      }
      if (produced > 0) return produced;  // report the error on the next call
      return s.failed = base::DataLossError("gzip stream ends early, after " +
                                            std::to_string(s.in_offset) +
                                            " compressed bytes: the data is truncated");
    }
    int rc = inflate(&s.z, Z_NO_FLUSH);
    produced = want - s.z.avail_out;
    if (rc == Z_STREAM_END) {
      // Another member may follow (gzip(1) and pigz can write several).
      inflateReset(&s.z);
      s.at_member_start = true;
      if (produced > 0) return produced;
      continue;
    }
    if (rc == Z_OK || rc == Z_BUF_ERROR) {
      if (rc == Z_OK) s.at_member_start = false;
      if (produced > 0) return produced;
      continue;  // needs more input
    }
    std::string detail = s.z.msg != nullptr ? s.z.msg : "error " + std::to_string(rc);
    if (rc == Z_MEM_ERROR) {
      s.failed = base::ResourceExhaustedError("gzip: out of memory");
    } else {
      s.failed = base::DataLossError("invalid gzip data near compressed byte " +
                                     std::to_string(s.consumed()) + ": " + detail);
    }
    // What was decompressed before the error is delivered first (the error comes with the next
    // call), so that where the error shows does not depend on how the input was split.
    if (produced > 0) return produced;
    return s.failed;
  }
}

namespace {

// The bytes already read to find the compression, then the rest of the stream.
class PrefixSource : public ByteSource {
 public:
  PrefixSource(std::string prefix, ByteSource& rest) : prefix_(std::move(prefix)), rest_(rest) {}
  Result<size_t> Read(std::span<char> out) override {
    if (pos_ < prefix_.size()) {
      size_t n = std::min(out.size(), prefix_.size() - pos_);
      std::memcpy(out.data(), prefix_.data() + pos_, n);
      pos_ += n;
      return n;
    }
    return rest_.Read(out);
  }
  Result<uint64_t> Skip(uint64_t n) override {
    uint64_t k = std::min<uint64_t>(n, prefix_.size() - pos_);
    pos_ += static_cast<size_t>(k);
    if (k == n) return k;
    SOVAI_ASSIGN_OR_RETURN(uint64_t rest, rest_.Skip(n - k));
    return k + rest;
  }

 private:
  std::string prefix_;
  size_t pos_ = 0;
  ByteSource& rest_;
};

class GunzippedSource : public ByteSource {
 public:
  explicit GunzippedSource(std::unique_ptr<ByteSource> compressed)
      : compressed_(std::move(compressed)), gzip_(*compressed_) {}
  Result<size_t> Read(std::span<char> out) override { return gzip_.Read(out); }

 private:
  std::unique_ptr<ByteSource> compressed_;
  GzipSource gzip_;
};

}  // namespace

Result<std::unique_ptr<ByteSource>> OpenDecompressed(ByteSource& raw) {
  std::string head(6, '\0');
  SOVAI_ASSIGN_OR_RETURN(size_t got, ReadFull(raw, head));
  head.resize(got);
  Compression compression = DetectCompression(head);
  switch (compression) {
    case Compression::kNone:
      return std::unique_ptr<ByteSource>(std::make_unique<PrefixSource>(std::move(head), raw));
    case Compression::kGzip:
      return std::unique_ptr<ByteSource>(
          std::make_unique<GunzippedSource>(std::make_unique<PrefixSource>(std::move(head), raw)));
    case Compression::kZstd:
    case Compression::kBzip2:
    case Compression::kXz:
      break;
  }
  return base::UnimplementedError(
      std::string(CompressionName(compression)) +
      "-compressed data is not supported (only gzip and uncompressed tar); save the image with "
      "gzip layers, e.g. `docker save` or `skopeo copy --dest-compress-format gzip`");
}

// --- Tar ---

std::string_view TarEntryTypeName(TarEntryType type) {
  switch (type) {
    case TarEntryType::kRegular:
      return "file";
    case TarEntryType::kDirectory:
      return "directory";
    case TarEntryType::kSymlink:
      return "symlink";
    case TarEntryType::kHardLink:
      return "hard link";
    case TarEntryType::kCharDevice:
      return "character device";
    case TarEntryType::kBlockDevice:
      return "block device";
    case TarEntryType::kFifo:
      return "fifo";
  }
  return "unknown";
}

TarReader::TarReader(ByteSource& source, TarLimits limits) : source_(source), limits_(limits) {}

Status TarReader::Fail(Status status) {
  if (failed_.ok()) failed_ = std::move(status);
  return failed_;
}

Result<bool> TarReader::ReadExact(std::span<char> out, std::string_view what, bool eof_ok) {
  SOVAI_ASSIGN_OR_RETURN(size_t got, ReadFull(source_, out));
  offset_ += got;
  if (got == out.size()) return true;
  if (got == 0 && eof_ok) return false;
  return base::DataLossError("tar archive ends inside " + std::string(what) + " at byte " +
                             std::to_string(offset_) + ": the archive is truncated");
}

Status TarReader::SkipExact(uint64_t n, std::string_view what) {
  SOVAI_ASSIGN_OR_RETURN(uint64_t got, source_.Skip(n));
  offset_ += got;
  if (got == n) return Status();
  return base::DataLossError("tar archive ends inside " + std::string(what) + " at byte " +
                             std::to_string(offset_) + ": the archive is truncated");
}

Result<std::string> TarReader::ReadExtension(uint64_t size, size_t max_bytes, std::string_view what,
                                             std::string_view limit_name, uint64_t header_offset) {
  if (size > max_bytes) {
    return base::ResourceExhaustedError("tar archive at byte " + std::to_string(header_offset) +
                                        ": " + std::string(what) + " of " + std::to_string(size) +
                                        " bytes is larger than " + std::string(limit_name) + " (" +
                                        std::to_string(max_bytes) + ")");
  }
  std::string data(static_cast<size_t>(size), '\0');
  SOVAI_RETURN_IF_ERROR(ReadExact(data, what, false));
  SOVAI_RETURN_IF_ERROR(SkipExact((kBlockBytes - size % kBlockBytes) % kBlockBytes, what));
  return data;
}

Result<std::optional<TarEntry>> TarReader::Next() {
  if (!failed_.ok()) return failed_;
  Result<std::optional<TarEntry>> next = NextImpl();
  if (!next.ok()) return Fail(next.status());
  return next;
}

Result<std::optional<TarEntry>> TarReader::NextImpl() {
  if (ended_) return std::optional<TarEntry>();
  if (data_remaining_ + padding_ > 0) {
    SOVAI_RETURN_IF_ERROR(
        SkipExact(data_remaining_ + padding_, "the data of " + QuoteName(current_path_)));
    data_remaining_ = 0;
    padding_ = 0;
  }
  PendingExtensions ext;
  const uint64_t first_header = offset_;
  char block[kBlockBytes];
  for (;;) {
    const uint64_t header_offset = offset_;
    SOVAI_ASSIGN_OR_RETURN(bool have, ReadExact(block, "a tar header", /*eof_ok=*/true));
    if (!have || IsZeroBlock(block)) {
      if (ext.any) {
        return base::DataLossError("tar archive at byte " + std::to_string(header_offset) +
                                   ": an extended header is not followed by an entry");
      }
      if (have) {
        SOVAI_ASSIGN_OR_RETURN(bool second, ReadExact(block, "the end-of-archive marker", true));
        if (second && !IsZeroBlock(block)) {
          return base::DataLossError(
              "tar archive at byte " + std::to_string(header_offset) +
              ": a zero block is followed by a header; the archive is corrupt");
        }
      }
      ended_ = true;
      return std::optional<TarEntry>();
    }

    auto header_error = [&](std::string_view what) {
      return base::DataLossError("tar header at byte " + std::to_string(header_offset) + ": " +
                                 std::string(what) +
                                 "; the archive is corrupt or not a tar archive");
    };
    std::optional<int64_t> stored_sum = ParseNumeric(block, 148, 8);
    if (!stored_sum) return header_error("invalid checksum field");
    int64_t unsigned_sum = 0;
    int64_t signed_sum = 0;
    for (size_t i = 0; i < kBlockBytes; ++i) {
      bool in_field = i >= 148 && i < 156;
      unsigned_sum += in_field ? ' ' : static_cast<unsigned char>(block[i]);
      signed_sum += in_field ? ' ' : static_cast<signed char>(block[i]);
    }
    if (*stored_sum != unsigned_sum && *stored_sum != signed_sum) {
      return header_error("checksum mismatch (stored " + std::to_string(*stored_sum) +
                          ", computed " + std::to_string(unsigned_sum) + ")");
    }
    std::optional<int64_t> header_size = ParseNumeric(block, 124, 12);
    if (!header_size || *header_size < 0) return header_error("invalid size field");
    const char flag = block[156];

    if (flag == 'x' || flag == 'g') {
      SOVAI_ASSIGN_OR_RETURN(
          std::string pax,
          ReadExtension(static_cast<uint64_t>(*header_size), limits_.max_pax_header_bytes,
                        "a PAX extended header", "max_pax_header_bytes", header_offset));
      PendingExtensions ignored;  // a global header's values are not applied (see the .h)
      SOVAI_RETURN_IF_ERROR(ApplyPaxRecords(pax, header_offset, flag == 'x' ? ext : ignored));
      if (flag == 'x') ext.any = true;
      continue;
    }
    if (flag == 'L' || flag == 'K') {
      SOVAI_ASSIGN_OR_RETURN(
          std::string name,
          ReadExtension(static_cast<uint64_t>(*header_size), limits_.max_path_bytes + 1,
                        flag == 'L' ? "a GNU long name" : "a GNU long link name", "max_path_bytes",
                        header_offset));
      size_t nul = name.find('\0');
      if (nul != std::string::npos) name.resize(nul);
      (flag == 'L' ? ext.path : ext.link) = std::move(name);
      ext.any = true;
      continue;
    }

    TarEntry entry;
    entry.header_offset = first_header;
    SOVAI_ASSIGN_OR_RETURN(entry.type, EntryTypeOf(flag, header_offset));

    const std::string_view magic(block + 257, 6);
    const bool posix_ustar = magic == std::string_view("ustar\0", 6);
    if (ext.path) {
      entry.path = std::move(*ext.path);
    } else {
      std::string_view name = CString(block, 0, 100);
      std::string_view prefix = posix_ustar ? CString(block, 345, 155) : std::string_view();
      entry.path =
          prefix.empty() ? std::string(name) : std::string(prefix) + "/" + std::string(name);
    }
    entry.link_target = ext.link ? std::move(*ext.link) : std::string(CString(block, 157, 100));
    // A V7-style "regular file" whose name ends in '/' is a directory (GNU tar and Go agree).
    if (flag == '\0' && !entry.path.empty() && entry.path.back() == '/') {
      entry.type = TarEntryType::kDirectory;
    }
    if (entry.path.empty()) return header_error("empty name");
    if (entry.path.size() > limits_.max_path_bytes ||
        entry.link_target.size() > limits_.max_path_bytes) {
      return base::ResourceExhaustedError(
          "tar header at byte " + std::to_string(header_offset) + ": a name of " +
          std::to_string(std::max(entry.path.size(), entry.link_target.size())) +
          " bytes is longer than max_path_bytes (" + std::to_string(limits_.max_path_bytes) + ")");
    }

    std::optional<int64_t> mode = ParseNumeric(block, 100, 8);
    std::optional<int64_t> uid = ParseNumeric(block, 108, 8);
    std::optional<int64_t> gid = ParseNumeric(block, 116, 8);
    std::optional<int64_t> mtime = ParseNumeric(block, 136, 12);
    if (!mode || *mode < 0) return header_error("invalid mode field");
    if ((!uid || *uid < 0) && !ext.uid) return header_error("invalid uid field");
    if ((!gid || *gid < 0) && !ext.gid) return header_error("invalid gid field");
    if (!mtime && !ext.mtime) return header_error("invalid mtime field");
    entry.mode = static_cast<uint32_t>(*mode & 07777);
    entry.uid = ext.uid ? *ext.uid : static_cast<uint64_t>(*uid);
    entry.gid = ext.gid ? *ext.gid : static_cast<uint64_t>(*gid);
    if (ext.mtime) {
      entry.mtime_unix_s = ext.mtime->first;
      entry.mtime_nanos = ext.mtime->second;
    } else {
      entry.mtime_unix_s = *mtime;
    }
    uint64_t size = ext.size ? *ext.size : static_cast<uint64_t>(*header_size);

    if (entries_ >= limits_.max_entries) {
      return base::ResourceExhaustedError("tar archive has more than " +
                                          std::to_string(limits_.max_entries) +
                                          " entries (max_entries)");
    }
    ++entries_;
    entry.data_offset = offset_;
    if (entry.type == TarEntryType::kRegular) {
      entry.size_bytes = size;
      data_remaining_ = size;
      padding_ = (kBlockBytes - size % kBlockBytes) % kBlockBytes;
    }
    current_path_ = entry.path;
    return std::optional<TarEntry>(std::move(entry));
  }
}

Result<size_t> TarReader::ReadData(std::span<char> out) {
  if (!failed_.ok()) return failed_;
  size_t want = static_cast<size_t>(std::min<uint64_t>(out.size(), data_remaining_));
  if (want == 0) return size_t{0};
  Result<size_t> got = source_.Read(out.first(want));
  if (!got.ok()) return Fail(got.status());
  if (*got == 0) {
    return Fail(base::DataLossError(
        "tar archive ends inside the data of " + QuoteName(current_path_) + " at byte " +
        std::to_string(offset_) + " (" + std::to_string(data_remaining_) +
        " bytes missing): the archive is truncated"));
  }
  offset_ += *got;
  data_remaining_ -= *got;
  return *got;
}

}  // namespace sovai::exec
