// Test-only helpers: tar archives and gzip streams written byte by byte, so that tests control
// every field (and can break any of them). Used by tar_reader_test.cc and oci_image_test.cc.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/check.h"

namespace sovai::exec::testing {

inline constexpr int64_t kTestMtime = 1'600'000'000;

// One PAX record, "<length> <key>=<value>\n", its length counting itself.
inline std::string PaxRecord(std::string_view key, std::string_view value) {
  size_t body = 1 + key.size() + 1 + value.size() + 1;  // " key=value\n"
  size_t length = body + 1;
  while (std::to_string(length).size() + body != length) ++length;
  return std::to_string(length) + " " + std::string(key) + "=" + std::string(value) + "\n";
}

// Fields of one raw header.
struct TarHeader {
  char typeflag = '0';
  std::string name;
  std::string linkname;
  std::string prefix;  // ustar prefix field
  uint32_t mode = 0644;
  uint64_t uid = 0;
  uint64_t gid = 0;
  int64_t mtime = kTestMtime;
  std::optional<uint64_t> size;       // default: the data's size
  bool base256_size = false;          // write the size in GNU base-256 form
  bool gnu_magic = false;             // "ustar  \0" instead of "ustar\0" "00"
  bool v7 = false;                    // no magic at all
  std::optional<int> checksum_delta;  // added to the correct checksum (to break it)
};

class TarBuilder {
 public:
  // A header block for `h` (the data size given separately).
  static std::string Header(const TarHeader& h, uint64_t data_size) {
    std::string b(512, '\0');
    auto put = [&](size_t offset, size_t length, std::string_view s) {
      SOVAI_CHECK_LE(s.size(), length) << s;
      std::memcpy(b.data() + offset, s.data(), s.size());
    };
    auto octal = [&](size_t offset, size_t length, uint64_t v) {
      char tmp[32];
      std::snprintf(tmp, sizeof tmp, "%0*llo", static_cast<int>(length - 1),
                    static_cast<unsigned long long>(v));
      put(offset, length, tmp);
    };
    put(0, 100, h.name);
    octal(100, 8, h.mode);
    octal(108, 8, h.uid);
    octal(116, 8, h.gid);
    uint64_t size = h.size.value_or(data_size);
    if (h.base256_size) {
      b[124] = static_cast<char>(0x80);
      for (int i = 0; i < 8; ++i) b[135 - i] = static_cast<char>((size >> (8 * i)) & 0xff);
    } else {
      octal(124, 12, size);
    }
    if (h.mtime >= 0) {
      octal(136, 12, static_cast<uint64_t>(h.mtime));
    } else {  // base-256, negative
      // Two's complement over the 12 bytes; the first byte (0xff) also marks base-256.
      auto v = static_cast<uint64_t>(h.mtime);
      for (int i = 0; i < 8; ++i) b[147 - i] = static_cast<char>((v >> (8 * i)) & 0xff);
      for (int i = 8; i < 12; ++i) b[147 - i] = static_cast<char>(0xff);
    }
    b[156] = h.typeflag;
    put(157, 100, h.linkname);
    if (h.gnu_magic) {
      put(257, 8, std::string_view("ustar  \0", 8));
    } else if (!h.v7) {
      put(257, 6, std::string_view("ustar\0", 6));
      put(263, 2, "00");
    }
    put(345, 155, h.prefix);
    std::memset(b.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (char c : b) sum += static_cast<unsigned char>(c);
    sum += h.checksum_delta.value_or(0);
    char tmp[16];
    std::snprintf(tmp, sizeof tmp, "%06o", sum);
    std::memcpy(b.data() + 148, tmp, 6);
    b[154] = '\0';
    b[155] = ' ';
    return b;
  }

  static std::string Padding(uint64_t size) { return std::string((512 - size % 512) % 512, '\0'); }

  // A header and its data (padded). Names over 100 bytes get a GNU long-name entry first.
  TarBuilder& Raw(TarHeader h, std::string_view data = "") {
    if (h.name.size() > 100) {
      LongName('L', h.name);
      h.name = h.name.substr(0, 100);
    }
    if (h.linkname.size() > 100) {
      LongName('K', h.linkname);
      h.linkname = h.linkname.substr(0, 100);
    }
    out_ += Header(h, data.size());
    out_ += data;
    out_ += Padding(data.size());
    return *this;
  }
  TarBuilder& File(std::string path, std::string_view data, uint32_t mode = 0644,
                   int64_t mtime = kTestMtime) {
    return Raw({.typeflag = '0', .name = std::move(path), .mode = mode, .mtime = mtime}, data);
  }
  TarBuilder& Dir(std::string path, uint32_t mode = 0755, int64_t mtime = kTestMtime) {
    return Raw({.typeflag = '5', .name = std::move(path), .mode = mode, .mtime = mtime});
  }
  TarBuilder& Symlink(std::string path, std::string target) {
    return Raw(
        {.typeflag = '2', .name = std::move(path), .linkname = std::move(target), .mode = 0777});
  }
  TarBuilder& HardLink(std::string path, std::string target) {
    return Raw({.typeflag = '1', .name = std::move(path), .linkname = std::move(target)});
  }
  TarBuilder& Fifo(std::string path) { return Raw({.typeflag = '6', .name = std::move(path)}); }
  TarBuilder& CharDevice(std::string path) {
    return Raw({.typeflag = '3', .name = std::move(path)});
  }
  // A PAX extended header ('x', or 'g' for a global one) with these records.
  TarBuilder& Pax(const std::vector<std::pair<std::string, std::string>>& records,
                  char typeflag = 'x') {
    std::string data;
    for (const auto& [k, v] : records) data += PaxRecord(k, v);
    return PaxRaw(data, typeflag);
  }
  TarBuilder& PaxRaw(std::string_view data, char typeflag = 'x') {
    out_ += Header({.typeflag = typeflag, .name = "././@PaxHeader"}, data.size());
    out_ += data;
    out_ += Padding(data.size());
    return *this;
  }
  TarBuilder& LongName(char typeflag, std::string_view name) {
    std::string data = std::string(name) + '\0';
    out_ += Header({.typeflag = typeflag, .name = "././@LongLink", .gnu_magic = true}, data.size());
    out_ += data;
    out_ += Padding(data.size());
    return *this;
  }
  TarBuilder& Bytes(std::string_view raw) {
    out_ += raw;
    return *this;
  }

  // The archive so far, without and with the end-of-archive marker.
  const std::string& Unterminated() const { return out_; }
  std::string Finish() const { return out_ + std::string(1024, '\0'); }

 private:
  std::string out_;
};

// `data` as one gzip member (level 6).
inline std::string Gzip(std::string_view data) {
  z_stream z{};
  SOVAI_CHECK_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  SOVAI_CHECK_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace sovai::exec::testing
