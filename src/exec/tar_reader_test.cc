#include "exec/tar_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "exec/tar_test_util.h"

namespace sovai::exec {
namespace {

using base::StatusCode;
using testing::Gzip;
using testing::PaxRecord;
using testing::TarBuilder;
using testing::TarHeader;

struct Read {
  std::vector<TarEntry> entries;
  std::vector<std::string> data;
  base::Status status;  // the error that ended the reading, if any
};

// Reads every entry and its data.
Read ReadAll(std::string_view archive, TarLimits limits = {}) {
  StringSource source(archive);
  TarReader tar(source, limits);
  Read out;
  for (;;) {
    auto next = tar.Next();
    if (!next.ok()) {
      out.status = next.status();
      // Sticky: the same error again.
      EXPECT_EQ(tar.Next().status(), out.status);
      return out;
    }
    if (!*next) return out;
    std::string data;
    char buf[7];  // small, to cross block boundaries
    for (;;) {
      auto n = tar.ReadData(buf);
      if (!n.ok()) {
        out.status = n.status();
        return out;
      }
      if (*n == 0) break;
      data.append(buf, *n);
    }
    out.entries.push_back(**next);
    out.data.push_back(data);
  }
}

TEST(TarReaderTest, ReadsEveryEntryType) {
  std::string big(1500, 'x');
  std::string archive = TarBuilder()
                            .Dir("etc/", 0755)
                            .File("etc/passwd", "root:x:0:0\n", 0644, 1'700'000'123)
                            .File("big", big, 04755)
                            .File("empty", "")
                            .Symlink("bin", "usr/bin")
                            .HardLink("big2", "big")
                            .Fifo("run/fifo")
                            .CharDevice("dev/null")
                            .Raw({.typeflag = '4', .name = "dev/sda"})
                            .Raw({.typeflag = '7', .name = "contiguous"}, "c")
                            .Finish();
  Read r = ReadAll(archive);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.entries.size(), 10u);
  EXPECT_EQ(r.entries[0].path, "etc/");
  EXPECT_EQ(r.entries[0].type, TarEntryType::kDirectory);
  EXPECT_EQ(r.entries[1].path, "etc/passwd");
  EXPECT_EQ(r.entries[1].type, TarEntryType::kRegular);
  EXPECT_EQ(r.entries[1].mode, 0644u);
  EXPECT_EQ(r.entries[1].mtime_unix_s, 1'700'000'123);
  EXPECT_EQ(r.entries[1].size_bytes, 11u);
  EXPECT_EQ(r.data[1], "root:x:0:0\n");
  EXPECT_EQ(r.entries[1].header_offset, 512u);
  EXPECT_EQ(r.entries[1].data_offset, 1024u);
  EXPECT_EQ(r.data[2], big);
  EXPECT_EQ(r.entries[2].mode, 04755u);
  EXPECT_EQ(r.data[3], "");
  EXPECT_EQ(r.entries[4].type, TarEntryType::kSymlink);
  EXPECT_EQ(r.entries[4].link_target, "usr/bin");
  EXPECT_EQ(r.entries[5].type, TarEntryType::kHardLink);
  EXPECT_EQ(r.entries[5].link_target, "big");
  EXPECT_EQ(r.entries[6].type, TarEntryType::kFifo);
  EXPECT_EQ(r.entries[7].type, TarEntryType::kCharDevice);
  EXPECT_EQ(r.entries[8].type, TarEntryType::kBlockDevice);
  EXPECT_EQ(r.entries[9].type, TarEntryType::kRegular);
  EXPECT_EQ(r.data[9], "c");
}

TEST(TarReaderTest, SkipsDataThatWasNotRead) {
  std::string archive = TarBuilder()
                            .File("a", std::string(3000, 'a'))
                            .File("b", "bee")
                            .File("c", std::string(600, 'c'))
                            .Finish();
  StringSource source(archive);
  TarReader tar(source);
  auto a = tar.Next();
  ASSERT_TRUE(a.ok() && *a);
  char buf[10];
  ASSERT_EQ(*tar.ReadData(buf), 10u);  // part of a's data only
  auto b = tar.Next();
  ASSERT_TRUE(b.ok() && *b) << b.status();
  EXPECT_EQ((*b)->path, "b");
  auto c = tar.Next();  // b's data not read at all
  ASSERT_TRUE(c.ok() && *c) << c.status();
  EXPECT_EQ((*c)->path, "c");
  auto end = tar.Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(*end);
  EXPECT_FALSE(*tar.Next());  // the end again
  EXPECT_EQ(tar.entries(), 3u);
  EXPECT_EQ(tar.offset(), archive.size());
}

TEST(TarReaderTest, UstarPrefixGnuLongNamesAndV7) {
  std::string long_name = std::string(150, 'd') + "/" + std::string(120, 'f');
  std::string long_link = std::string(200, 'l');
  std::string archive =
      TarBuilder()
          .Raw({.typeflag = '0', .name = "file.txt", .prefix = "some/deep/dir"}, "x")
          .File(long_name, "long")
          .Symlink("link", long_link)
          // GNU magic: the prefix area holds other fields and is not part of the name.
          .Raw({.typeflag = '0', .name = "gnu", .prefix = "ignored", .gnu_magic = true}, "g")
          // V7: a "regular file" whose name ends in '/' is a directory.
          .Raw({.typeflag = '\0', .name = "olddir/", .v7 = true})
          .Raw({.typeflag = '\0', .name = "oldfile", .v7 = true}, "v7")
          .Finish();
  Read r = ReadAll(archive);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.entries.size(), 6u);
  EXPECT_EQ(r.entries[0].path, "some/deep/dir/file.txt");
  EXPECT_EQ(r.entries[1].path, long_name);
  EXPECT_EQ(r.data[1], "long");
  EXPECT_EQ(r.entries[1].header_offset, 1024u);  // the long-name entry's header
  EXPECT_EQ(r.entries[2].link_target, long_link);
  EXPECT_EQ(r.entries[3].path, "gnu");
  EXPECT_EQ(r.entries[4].type, TarEntryType::kDirectory);
  EXPECT_EQ(r.entries[5].type, TarEntryType::kRegular);
  EXPECT_EQ(r.data[5], "v7");
}

TEST(TarReaderTest, PaxOverridesTheHeader) {
  std::string path = std::string(300, 'p') + "/\xc3\xa9t\xc3\xa9";  // long, UTF-8
  std::string archive =
      TarBuilder()
          .Pax({{"path", path},
                {"mtime", "1700000000.25"},
                {"uid", "123456789"},
                {"gid", "42"},
                {"SCHILY.xattr.user.x", "ignored"},
                {"size", "5"}})
          // The header says 0 bytes; PAX says 5 (sizes beyond 8 GiB are written this way).
          .Raw({.typeflag = '0', .name = "short", .size = 0}, "hello")
          .Pax({{"linkpath", "/abs/target"}})
          .Symlink("s", "x")
          .Pax({{"comment", "a global header is ignored"}, {"path", "not/applied"}}, 'g')
          .File("after-global", "z")
          .Pax({{"mtime", "-1.5"}})
          .File("old", "o")
          .Finish();
  Read r = ReadAll(archive);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.entries.size(), 4u);
  EXPECT_EQ(r.entries[0].path, path);
  EXPECT_EQ(r.entries[0].size_bytes, 5u);
  EXPECT_EQ(r.data[0], "hello");
  EXPECT_EQ(r.entries[0].mtime_unix_s, 1'700'000'000);
  EXPECT_EQ(r.entries[0].mtime_nanos, 250'000'000u);
  EXPECT_EQ(r.entries[0].uid, 123456789u);
  EXPECT_EQ(r.entries[0].gid, 42u);
  EXPECT_EQ(r.entries[0].header_offset, 0u);
  EXPECT_EQ(r.entries[1].link_target, "/abs/target");
  EXPECT_EQ(r.entries[2].path, "after-global");
  EXPECT_EQ(r.entries[3].mtime_unix_s, -2);
  EXPECT_EQ(r.entries[3].mtime_nanos, 500'000'000u);
}

TEST(TarReaderTest, Base256Fields) {
  std::string archive = TarBuilder()
                            .Raw({.typeflag = '0', .name = "b256", .base256_size = true}, "abc")
                            .Raw({.typeflag = '0', .name = "before-1970", .mtime = -86400}, "")
                            .Finish();
  Read r = ReadAll(archive);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.entries.size(), 2u);
  EXPECT_EQ(r.data[0], "abc");
  EXPECT_EQ(r.entries[1].mtime_unix_s, -86400);
}

TEST(TarReaderTest, HeaderOnlyTypesCarryNoData) {
  // A directory whose header claims 100 bytes: no data follows (as GNU tar and Go read it).
  std::string archive =
      TarBuilder().Raw({.typeflag = '5', .name = "d/", .size = 100}).File("f", "data").Finish();
  Read r = ReadAll(archive);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.entries.size(), 2u);
  EXPECT_EQ(r.entries[0].size_bytes, 0u);
  EXPECT_EQ(r.data[1], "data");
}

TEST(TarReaderTest, EndOfArchive) {
  // Empty input, a lone zero block, end of stream at a header boundary: all clean ends.
  for (std::string archive :
       {std::string(), std::string(512, '\0'), TarBuilder().File("a", "1").Unterminated()}) {
    Read r = ReadAll(archive);
    EXPECT_TRUE(r.status.ok()) << r.status;
  }
  // What follows two zero blocks is not read.
  Read r = ReadAll(TarBuilder().File("a", "1").Finish() + "garbage");
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.entries.size(), 1u);
  // A zero block and then a header is corruption, not an end.
  r = ReadAll(TarBuilder().Bytes(std::string(512, '\0')).File("a", "1").Finish());
  EXPECT_EQ(r.status.code(), StatusCode::kDataLoss) << r.status;
  EXPECT_NE(r.status.message().find("zero block"), std::string::npos) << r.status;
}

TEST(TarReaderTest, CorruptAndTruncatedArchivesAreDataLoss) {
  std::string good = TarBuilder().File("a", std::string(1000, 'a')).File("b", "bee").Finish();
  struct Case {
    std::string name;
    std::string archive;
    std::string message;
  };
  // A header whose `offset` byte is `c`, with a checksum that matches again.
  auto patched = [](size_t offset, char c) {
    std::string h = TarBuilder::Header({.name = "a"}, 1);
    h[offset] = c;
    std::memset(h.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (char b : h) sum += static_cast<unsigned char>(b);
    std::snprintf(h.data() + 148, 8, "%06o", sum);
    return h + "x" + TarBuilder::Padding(1) + std::string(1024, '\0');
  };
  std::vector<Case> cases = {
      {"checksum", TarBuilder().Raw({.name = "a", .checksum_delta = 1}, "x").Finish(),
       "checksum mismatch"},
      {"not a tar", std::string(512, 'A'), "invalid checksum field"},
      {"inside a header", good.substr(0, 300), "ends inside a tar header"},
      {"inside data", good.substr(0, 512 + 700), "ends inside the data of \"a\""},
      {"inside padding", good.substr(0, 512 + 1010), "truncated"},
      // The size field says more than there is.
      {"size too large", TarBuilder().Raw({.name = "a", .size = 1u << 20}, "x").Finish(),
       "truncated"},
      // The size field says less: the rest of the data is read as a header.
      {"size too small",
       TarBuilder().Raw({.name = "a", .size = 10}, std::string(2000, 'z')).Finish(), "checksum"},
      {"long name without entry", TarBuilder().LongName('L', "x").Finish(),
       "not followed by an entry"},
      {"pax without entry", TarBuilder().Pax({{"path", "x"}}).Unterminated(),
       "not followed by an entry"},
      {"pax no length", TarBuilder().PaxRaw("path=x\n").File("a", "").Finish(), "PAX"},
      {"pax bad length", TarBuilder().PaxRaw("99 path=x\n").File("a", "").Finish(), "PAX"},
      {"pax length zero", TarBuilder().PaxRaw("0 path=x\n").File("a", "").Finish(), "PAX"},
      {"pax no newline", TarBuilder().PaxRaw("10 path=xy").File("a", "").Finish(), "PAX"},
      {"pax no key", TarBuilder().PaxRaw("7 =xyz\n").File("a", "").Finish(), "PAX"},
      {"pax no equals", TarBuilder().PaxRaw("9 pathxy\n").File("a", "").Finish(), "PAX"},
      {"pax NUL in path",
       TarBuilder().PaxRaw(PaxRecord("path", std::string("a\0b", 3))).File("a", "").Finish(),
       "NUL"},
      {"pax bad size", TarBuilder().Pax({{"size", "-1"}}).File("a", "").Finish(), "PAX"},
      {"pax huge size", TarBuilder().Pax({{"size", "99999999999999999999"}}).File("a", "").Finish(),
       "PAX"},
      {"pax bad mtime", TarBuilder().Pax({{"mtime", "12x"}}).File("a", "").Finish(), "PAX"},
      {"empty name", TarBuilder().Raw({.name = ""}, "").Finish(), "empty name"},
      {"size not octal", patched(124, '9'), "invalid size field"},
      {"mode not octal", patched(100, 'x'), "invalid mode field"},
      {"mtime not octal", patched(137, '8'), "invalid mtime field"},
      {"negative size", patched(124, static_cast<char>(0xff)), "invalid size field"},
  };
  for (const Case& c : cases) {
    Read r = ReadAll(c.archive);
    EXPECT_EQ(r.status.code(), StatusCode::kDataLoss) << c.name << ": " << r.status;
    EXPECT_NE(r.status.message().find(c.message), std::string::npos) << c.name << ": " << r.status;
  }
}

TEST(TarReaderTest, LimitsAreResourceExhaustedNamingTheLimit) {
  TarLimits limits{.max_path_bytes = 64, .max_pax_header_bytes = 100, .max_entries = 2};
  struct Case {
    std::string archive;
    std::string limit;
  };
  std::vector<Case> cases = {
      {TarBuilder().File(std::string(65, 'n'), "").Finish(), "max_path_bytes"},
      {TarBuilder().Symlink("s", std::string(65, 't')).Finish(), "max_path_bytes"},
      {TarBuilder().Pax({{"path", std::string(65, 'p')}}).File("a", "").Finish(), "max_path_bytes"},
      {TarBuilder().Pax({{"comment", std::string(200, 'c')}}).File("a", "").Finish(),
       "max_pax_header_bytes"},
      {TarBuilder().File("a", "").File("b", "").File("c", "").Finish(), "max_entries"},
  };
  for (const Case& c : cases) {
    Read r = ReadAll(c.archive, limits);
    EXPECT_EQ(r.status.code(), StatusCode::kResourceExhausted) << r.status;
    EXPECT_NE(r.status.message().find(c.limit), std::string::npos) << r.status;
  }
  // At the limits: fine.
  Read r = ReadAll(TarBuilder().File(std::string(64, 'n'), "").File("b", "").Finish(), limits);
  EXPECT_TRUE(r.status.ok()) << r.status;
}

TEST(TarReaderTest, UnsupportedTypesAreUnimplemented) {
  for (char flag : {'S', 'M', 'V', 'Z', 'D'}) {
    Read r = ReadAll(TarBuilder().Raw({.typeflag = flag, .name = "x"}).Finish());
    EXPECT_EQ(r.status.code(), StatusCode::kUnimplemented) << flag << ": " << r.status;
  }
  Read r = ReadAll(TarBuilder().Pax({{"GNU.sparse.major", "1"}}).File("a", "").Finish());
  EXPECT_EQ(r.status.code(), StatusCode::kUnimplemented) << r.status;
}

// --- Sources ---

TEST(GzipSourceTest, RoundTripsOneAndSeveralMembers) {
  std::string data;
  for (int i = 0; i < 100000; ++i) data += std::to_string(i) + ",";
  for (std::string compressed :
       {Gzip(data), Gzip(data.substr(0, 1000)) + Gzip(data.substr(1000))}) {
    StringSource raw(compressed);
    auto stream = OpenDecompressed(raw);
    ASSERT_TRUE(stream.ok()) << stream.status();
    std::string out(data.size() + 10, '\0');
    auto n = ReadFull(**stream, out);
    ASSERT_TRUE(n.ok()) << n.status();
    out.resize(*n);
    EXPECT_EQ(out, data);
  }
}

TEST(GzipSourceTest, CorruptTruncatedAndTrailingGarbageAreDataLoss) {
  std::string compressed = Gzip(std::string(100000, 'q') + "tail");
  std::string corrupt = compressed;
  corrupt[corrupt.size() / 2] ^= 0x55;
  corrupt[corrupt.size() - 6] ^= 0x55;  // in the CRC-32 too, in case the data survives
  for (std::string bad :
       {compressed.substr(0, compressed.size() / 2), compressed.substr(0, compressed.size() - 1),
        corrupt, compressed + "garbage!!", compressed.substr(0, 2)}) {
    StringSource raw(bad);
    auto stream = OpenDecompressed(raw);
    ASSERT_TRUE(stream.ok()) << stream.status();
    std::string out(200000, '\0');
    auto n = ReadFull(**stream, out);
    EXPECT_EQ(n.status().code(), StatusCode::kDataLoss) << n.status();
    // Sticky.
    EXPECT_EQ((*stream)->Read(std::span<char>(out.data(), 10)).status().code(),
              StatusCode::kDataLoss);
  }
}

TEST(OpenDecompressedTest, DetectsByMagic) {
  struct Case {
    std::string head;
    StatusCode code;
    std::string name;
  };
  std::vector<Case> cases = {
      {std::string("\x28\xb5\x2f\xfd", 4) + "zstd", StatusCode::kUnimplemented, "zstd"},
      {"BZh91AY&SY", StatusCode::kUnimplemented, "bzip2"},
      {std::string("\xfd\x37\x7a\x58\x5a\x00", 6) + "..", StatusCode::kUnimplemented, "xz"},
  };
  for (const Case& c : cases) {
    StringSource raw(c.head);
    auto stream = OpenDecompressed(raw);
    EXPECT_EQ(stream.status().code(), c.code) << stream.status();
    EXPECT_NE(stream.status().message().find(c.name), std::string::npos) << stream.status();
  }
  // Anything else passes through unchanged, however short.
  for (std::string plain : {std::string(), std::string("a"), std::string("\x1f", 1),
                            TarBuilder().File("a", "b").Finish()}) {
    StringSource raw(plain);
    auto stream = OpenDecompressed(raw);
    ASSERT_TRUE(stream.ok()) << stream.status();
    std::string out(plain.size() + 1, '\0');
    auto n = ReadFull(**stream, out);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(out.substr(0, *n), plain);
  }
  EXPECT_EQ(DetectCompression("\x1f\x8b\x08"), Compression::kGzip);
  EXPECT_EQ(CompressionName(Compression::kGzip), "gzip");
}

TEST(FileRangeSourceTest, ReadsARangeAndReportsAShortFile) {
  char path[] = "/tmp/sovai_tar_range_XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(::write(fd, "0123456789", 10), 10);
  FileRangeSource range(fd, 2, 5);
  std::string out(10, '\0');
  EXPECT_EQ(*ReadFull(range, out), 5u);
  EXPECT_EQ(out.substr(0, 5), "23456");
  FileRangeSource skipping(fd, 0, 10);
  EXPECT_EQ(*skipping.Skip(8), 8u);
  EXPECT_EQ(*ReadFull(skipping, out), 2u);
  EXPECT_EQ(out.substr(0, 2), "89");
  FileRangeSource beyond(fd, 8, 10);  // the file ends first
  auto n = ReadFull(beyond, out);
  EXPECT_EQ(n.status().code(), StatusCode::kDataLoss) << n.status();
  ::close(fd);
}

}  // namespace
}  // namespace sovai::exec
