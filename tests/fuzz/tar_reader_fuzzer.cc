// libFuzzer target for the tar reader and the gzip source under it (src/exec/tar_reader.h): the
// input is a layer as stored in an image, plain or gzip-compressed (detected by magic, as image
// unpacking does). It is read twice, once through a source that hands out 1..16-byte pieces
// (seeded by the input) and once whole, and the two readings must agree: the same entries, the
// same data (hashed), the same error (the stream is read to its end after the archive's end, as
// image unpacking does). Invariants: every path is non-empty and NUL-free and within
// max_path_bytes, a regular entry's data is exactly its size_bytes, other entries carry none,
// offsets only grow, ReadData never returns more than asked, and errors are sticky.
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/check.h"
#include "exec/tar_reader.h"

namespace {

using sovai::exec::ByteSource;
using sovai::exec::TarEntry;
using sovai::exec::TarEntryType;
using sovai::exec::TarLimits;
using sovai::exec::TarReader;

constexpr TarLimits kLimits{
    .max_path_bytes = 1024, .max_pax_header_bytes = 4096, .max_entries = 256};
// Decompressed bytes looked at per input (a gzip input of 8 KiB can inflate to ~8 MiB).
constexpr size_t kMaxDataBytes = 16u << 20;

// The input in small pieces whose sizes come from a PRNG.
class PieceSource : public ByteSource {
 public:
  PieceSource(std::string_view data, uint64_t seed) : data_(data), state_(seed | 1) {}
  sovai::base::Result<size_t> Read(std::span<char> out) override {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    size_t n = std::min({out.size(), static_cast<size_t>(1 + state_ % 16), data_.size() - pos_});
    if (n > 0) std::memcpy(out.data(), data_.data() + pos_, n);
    pos_ += n;
    return n;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  uint64_t state_;
};

// What one reading saw: the entries with a hash of their data, and how it ended.
struct Outcome {
  std::string entries;
  std::optional<sovai::base::Status> error;
  bool stopped = false;  // kMaxDataBytes reached
};

uint64_t Fnv1a(uint64_t h, std::string_view data) {
  for (char c : data) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

Outcome ReadAll(ByteSource& raw, size_t chunk) {
  Outcome out;
  auto stream = sovai::exec::OpenDecompressed(raw);
  if (!stream.ok()) {
    out.error = stream.status();
    return out;
  }
  TarReader tar(**stream, kLimits);
  uint64_t last_offset = 0;
  size_t data_total = 0;
  std::string buf(chunk, '\0');
  for (;;) {
    auto next = tar.Next();
    SOVAI_CHECK_GE(tar.offset(), last_offset);
    last_offset = tar.offset();
    if (!next.ok()) {
      SOVAI_CHECK(tar.Next().status() == next.status()) << "errors are sticky";
      out.error = next.status();
      return out;
    }
    if (!*next) {
      SOVAI_CHECK(!*tar.Next()) << "the end stays the end";
      // As image unpacking does (for the layer digest): read the stream to its end, so that
      // what follows the archive (the gzip trailer) is checked whatever the read sizes were.
      for (;;) {
        auto n = (*stream)->Read(buf);
        if (!n.ok()) {
          out.error = n.status();
          return out;
        }
        if (*n == 0) return out;
        data_total += *n;
        if (data_total > kMaxDataBytes) {
          out.stopped = true;
          return out;
        }
      }
    }
    const TarEntry& e = **next;
    SOVAI_CHECK(!e.path.empty());
    SOVAI_CHECK(e.path.find('\0') == std::string::npos);
    SOVAI_CHECK(e.link_target.find('\0') == std::string::npos);
    SOVAI_CHECK_LE(e.path.size(), kLimits.max_path_bytes);
    SOVAI_CHECK_LE(e.link_target.size(), kLimits.max_path_bytes);
    SOVAI_CHECK_LE(e.mode, 07777u);
    SOVAI_CHECK_LE(e.mtime_nanos, 999'999'999u);
    SOVAI_CHECK_LE(e.header_offset, e.data_offset);
    SOVAI_CHECK_LE(tar.entries(), kLimits.max_entries);
    if (e.type != TarEntryType::kRegular) SOVAI_CHECK_EQ(e.size_bytes, 0u);
    out.entries += std::to_string(static_cast<int>(e.type)) + " " + e.path + " -> " +
                   e.link_target + " " + std::to_string(e.size_bytes) + " " +
                   std::to_string(e.mode) + " " + std::to_string(e.mtime_unix_s) + "." +
                   std::to_string(e.mtime_nanos) + " @" + std::to_string(e.data_offset);
    uint64_t got_bytes = 0;
    uint64_t hash = 0xcbf29ce484222325ull;
    for (;;) {
      auto n = tar.ReadData(buf);
      if (!n.ok()) {
        SOVAI_CHECK(tar.ReadData(buf).status() == n.status()) << "errors are sticky";
        out.error = n.status();
        return out;
      }
      SOVAI_CHECK_LE(*n, buf.size());
      if (*n == 0) break;
      got_bytes += *n;
      data_total += *n;
      hash = Fnv1a(hash, std::string_view(buf.data(), *n));
      if (data_total > kMaxDataBytes) {
        out.stopped = true;
        return out;
      }
    }
    SOVAI_CHECK_EQ(got_bytes, e.size_bytes);
    out.entries += " #" + std::to_string(hash) + "\n";
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(bytes), size);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) seed = seed * 131 + bytes[i];

  sovai::exec::StringSource whole(input);
  Outcome a = ReadAll(whole, 64 << 10);
  PieceSource pieces(input, seed);
  Outcome b = ReadAll(pieces, 1 + seed % 700);
  if (!a.stopped && !b.stopped) {
    SOVAI_CHECK_EQ(a.entries, b.entries);
    SOVAI_CHECK_EQ(a.error.has_value(), b.error.has_value());
    if (a.error) {
      SOVAI_CHECK(a.error->code() == b.error->code()) << *a.error << " vs " << *b.error;
      // zlib may notice corrupt data a few compressed bytes later or earlier depending on how
      // the input arrives, so gzip messages (which name that offset) may differ.
      if (a.error->message().find("gzip") == std::string::npos) {
        SOVAI_CHECK_EQ(a.error->message(), b.error->message());
      }
    }
  }
  return 0;
}
