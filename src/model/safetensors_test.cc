#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "base/env.h"
#include "base/json.h"
#include "model/formats_test_util.h"

namespace sovai::model {
namespace {

using testing::ExpectError;
using testing::TempDir;

using base::StatusCode;

// A fresh directory, removed with everything in it at the end of the test.
// A file image built by hand: the 8-byte little-endian length, the header as given, the data.
std::string Image(std::string_view header, std::string_view data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + std::string(header) + std::string(data);
}

std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::string Str(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

base::Status ParseStatus(std::string_view image, const SafetensorsLimits& limits = {}) {
  return ParseSafetensors(Bytes(image), "t.safetensors", limits).status();
}

void WriteRaw(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadRaw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Expects `status` to have `code` and a message containing every one of `parts`.
std::string F32Bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) {
    char b[4];
    std::memcpy(b, &v, 4);
    out.append(b, 4);
  }
  return out;
}

// --- Reading ---

// The example of the reference library's documentation (SafeTensors::deserialize).
TEST(SafetensorsReadTest, ReadsTheReferenceExample) {
  std::string image =
      Image(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})", std::string(16, 0));
  ASSERT_EQ(image[0], '<');  // the reference example's length byte: 60
  auto file = SafetensorsFile::FromBytes(image, "example.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->tensors().size(), 1u);
  const SafetensorsTensor& t = (*file)->tensors()[0];
  EXPECT_EQ(t.name, "test");
  EXPECT_EQ(t.dtype, SafetensorsDType::kI32);
  EXPECT_EQ(t.dtype_name(), "I32");
  EXPECT_EQ(t.shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(t.num_elements(), 4u);
  EXPECT_EQ(t.bytes.size(), 16u);
  EXPECT_EQ((*file)->header_bytes(), 60u);
  // Readable as bytes, but not as a computable tensor.
  EXPECT_EQ(t.computable_dtype(), std::nullopt);
  ExpectError(RequireComputable(t, "example.safetensors").status(), StatusCode::kUnimplemented,
              {"'test'", "I32", "example.safetensors"});
  ExpectError((*file)->ReadF32("test").status(), StatusCode::kUnimplemented, {"'test'", "I32"});
  ExpectError((*file)->Get("nope").status(), StatusCode::kNotFound,
              {"'nope'", "example.safetensors"});
}

TEST(SafetensorsReadTest, ConvertsComputableDtypesToF32) {
  // Hand-encoded: F16 1.0 = 0x3c00, -2.5 = 0xc100; BF16 1.0 = 0x3f80, -2.5 = 0xc020.
  std::string data = F32Bytes({0.5f, -3.0f}) + std::string("\x00\x3c\x00\xc1", 4) +
                     std::string("\x80\x3f\x20\xc0", 4);
  std::string image = Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},)"
                            R"("c":{"dtype":"BF16","shape":[1,2],"data_offsets":[12,16]}})",
                            data);
  auto file = SafetensorsFile::FromBytes(image, "f.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->ReadF32("a"), (std::vector<float>{0.5f, -3.0f}));
  EXPECT_EQ(*(*file)->ReadF32("b"), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(*(*file)->ReadF32("c"), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ((*file)->Find("c")->computable_dtype(), tensor::DType::kBF16);
  EXPECT_EQ(ComputableDType(SafetensorsDType::kBF16), tensor::DType::kBF16);
}

TEST(SafetensorsReadTest, ReadsUnalignedData) {
  // A header length of 8k + 5 puts the data at an odd file offset: every element is misaligned.
  std::string header = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                       R"("y":{"dtype":"BF16","shape":[1],"data_offsets":[12,14]}})";
  while (header.size() % 8 != 5) header += ' ';
  std::string image = Image(header, F32Bytes({1, 2, 3}) + std::string("\x80\x3f", 2));
  auto file = SafetensorsFile::FromBytes(image, "u.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->ReadF32("x"), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(*(*file)->ReadF32("y"), (std::vector<float>{1}));
}

TEST(SafetensorsReadTest, AcceptsWhatTheReferenceAccepts) {
  // Metadata, unknown fields (ignored), a scalar, empty tensors at one offset, trailing spaces,
  // entries in any order, "__metadata__": null.
  std::string image = Image(
      R"({"z":{"dtype":"U8","shape":[2],"data_offsets":[1,3],"extra":{"deep":[1,{"x":null}]}},)"
      R"("__metadata__":{"format":"pt","note":"h\u00e9"},)"
      R"("s":{"shape":[],"data_offsets":[0,1],"dtype":"I8"},)"
      R"("e1":{"dtype":"F32","shape":[0,5],"data_offsets":[3,3]},)"
      R"("e0":{"dtype":"F64","shape":[0],"data_offsets":[3,3]}}   )",
      "\x07\x01\x02");
  auto contents = ParseSafetensors(Bytes(image), "ok.safetensors");
  ASSERT_TRUE(contents.ok()) << contents.status();
  ASSERT_EQ(contents->tensors.size(), 4u);
  // Data order, ties by name.
  EXPECT_EQ(contents->tensors[0].name, "s");
  EXPECT_EQ(contents->tensors[1].name, "z");
  EXPECT_EQ(contents->tensors[2].name, "e0");
  EXPECT_EQ(contents->tensors[3].name, "e1");
  EXPECT_EQ(Str(contents->tensors[0].bytes), "\x07");
  EXPECT_EQ(Str(contents->tensors[1].bytes), "\x01\x02");
  EXPECT_EQ(contents->tensors[3].bytes.size(), 0u);
  EXPECT_EQ(contents->tensors[0].num_elements(), 1u);
  EXPECT_EQ(contents->metadata,
            (std::map<std::string, std::string>{{"format", "pt"}, {"note", "h\xc3\xa9"}}));

  auto no_metadata = ParseSafetensors(Bytes(Image(R"({"__metadata__":null})")), "n");
  ASSERT_TRUE(no_metadata.ok()) << no_metadata.status();
  EXPECT_TRUE(no_metadata->metadata.empty());
  EXPECT_TRUE(no_metadata->tensors.empty());
  // Sub-byte types in whole bytes.
  EXPECT_TRUE(
      ParseStatus(Image(R"({"q":{"dtype":"F4","shape":[2,2],"data_offsets":[0,2]}})", "ab")).ok());
}

struct BadFile {
  const char* what;
  std::string image;
  StatusCode code;
  std::vector<std::string_view> parts;
};

TEST(SafetensorsReadTest, RefusesMalformedFilesNamingTheProblem) {
  const std::string huge_length = std::string("\x01\x00\x00\x00\x01\x00\x00\x00", 8) + "{}";
  std::vector<BadFile> cases = {
      {"shorter than the length",
       std::string("\x02\x00\x00", 3),
       StatusCode::kDataLoss,
       {"t.safetensors", "truncated", "3 bytes"}},
      {"empty", "", StatusCode::kDataLoss, {"truncated"}},
      {"header over the limit",
       huge_length,
       StatusCode::kResourceExhausted,
       {"header length 4294967297", "100000000"}},
      {"header past the end",
       Image("{}").substr(0, 9),
       StatusCode::kDataLoss,
       {"runs past the end"}},
      {"length of the maximum u64",
       std::string(8, '\xff'),
       StatusCode::kResourceExhausted,
       {"18446744073709551615"}},
      {"not starting with {", Image(" {}"), StatusCode::kDataLoss, {"does not start with '{'"}},
      {"zero-length header", Image(""), StatusCode::kDataLoss, {"does not start with '{'"}},
      {"invalid JSON",
       Image(R"({"a":{"dtype":"F32",}})"),
       StatusCode::kDataLoss,
       {"invalid JSON", "file offset"}},
      {"trailing garbage", Image("{} x"), StatusCode::kDataLoss, {"invalid JSON"}},
      {"invalid UTF-8", Image("{\"\xff\":1}"), StatusCode::kDataLoss, {"invalid JSON"}},
      {"non-object entry",
       Image(R"({"a":5})"),
       StatusCode::kDataLoss,
       {"entry of tensor 'a'", "not an object"}},
      {"non-object metadata",
       Image(R"({"__metadata__":[1]})"),
       StatusCode::kDataLoss,
       {"__metadata__ is an array"}},
      {"non-string metadata value",
       Image(R"({"__metadata__":{"k":1}})"),
       StatusCode::kDataLoss,
       {"value of 'k'", "not a string"}},
      {"unknown dtype",
       Image(R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", "x"),
       StatusCode::kDataLoss,
       {"tensor 'a'", "unknown dtype 'F7'"}},
      {"lower-case dtype",
       Image(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})"),
       StatusCode::kDataLoss,
       {"unknown dtype 'f32'"}},
      {"missing field",
       Image(R"({"a":{"dtype":"F32","shape":[1]}})"),
       StatusCode::kDataLoss,
       {"tensor 'a'", "missing field 'data_offsets'"}},
      {"duplicate tensor names",
       Image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
             R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
             "xy"),
       StatusCode::kDataLoss,
       {"duplicate key 'a'"}},
      {"duplicate field",
       Image(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "x"),
       StatusCode::kDataLoss,
       {"tensor 'a'", "duplicate field 'dtype'"}},
      {"duplicate metadata key",
       Image(R"({"__metadata__":{"k":"1","k":"2"}})"),
       StatusCode::kDataLoss,
       {"duplicate key 'k' in __metadata__"}},
      {"duplicate __metadata__",
       Image(R"({"__metadata__":{},"__metadata__":{}})"),
       StatusCode::kDataLoss,
       {"duplicate key '__metadata__'"}},
      {"empty name",
       Image(R"({"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"),
       StatusCode::kDataLoss,
       {"empty name"}},
      {"negative dimension",
       Image(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})"),
       StatusCode::kDataLoss,
       {"tensor 'a'", "dimension is a negative number"}},
      {"fractional dimension",
       Image(R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}})"),
       StatusCode::kDataLoss,
       {"dimension is a non-integer number"}},
      {"shape not an array",
       Image(R"({"a":{"dtype":"U8","shape":3,"data_offsets":[0,3]}})"),
       StatusCode::kDataLoss,
       {"shape is a number, not an array"}},
      {"three offsets",
       Image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "x"),
       StatusCode::kDataLoss,
       {"data_offsets must hold 2 numbers"}},
      {"one offset",
       Image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "x"),
       StatusCode::kDataLoss,
       {"data_offsets must hold 2 numbers, not 1"}},
      {"shape product overflow",
       Image(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
       StatusCode::kDataLoss,
       {"tensor 'a'", "more elements than fit in 64 bits"}},
      {"byte size overflow",
       Image(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
       StatusCode::kDataLoss,
       {"tensor 'a'", "whole number of bytes"}},
      {"sub-byte size not whole bytes",
       Image(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", "x"),
       StatusCode::kDataLoss,
       {"tensor 'a'", "F4", "whole number of bytes"}},
      {"offsets not matching the shape",
       Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"),
       StatusCode::kDataLoss,
       {"tensor 'a'", "span 4 bytes", "needs 8"}},
      {"offsets reversed",
       Image(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})"),
       StatusCode::kDataLoss,
       {"tensor 'a'", "end before they begin"}},
      {"offsets past the end",
       Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"),
       StatusCode::kDataLoss,
       {"truncated", "tensor 'a'", "[0, 8)", "only 4 data bytes"}},
      {"huge offsets",
       Image(
           R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})"),
       StatusCode::kDataLoss,
       {"truncated", "tensor 'a'"}},
      {"overlap",
       Image(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
             R"("b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
             "xyz"),
       StatusCode::kDataLoss,
       {"tensor 'b'", "overlaps tensor 'a'"}},
      {"same range twice",
       Image(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
             R"("b":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})",
             "xy"),
       StatusCode::kDataLoss,
       {"overlaps"}},
      {"gap at the start",
       Image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", "xy"),
       StatusCode::kDataLoss,
       {"data bytes [0, 1)", "before tensor 'a'", "belong to no tensor"}},
      {"gap between",
       Image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
             R"("b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})",
             "xyz"),
       StatusCode::kDataLoss,
       {"[1, 2)", "before tensor 'b'"}},
      {"trailing bytes",
       Image(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "xy"),
       StatusCode::kDataLoss,
       {"1 bytes after the last tensor"}},
      {"data without tensors", Image("{}", "x"), StatusCode::kDataLoss, {"after the last"}},
      {"too many dimensions",
       Image(
           R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})",
           "x"),
       StatusCode::kResourceExhausted,
       {"tensor 'a'", "more than 16 dimensions"}},
      {"too deep",
       Image(
           R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]}})"),
       StatusCode::kResourceExhausted,
       {"deeper than 16"}},
      {"name too long",
       Image("{\"" + std::string(1025, 'n') +
             R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"),
       StatusCode::kResourceExhausted,
       {"1025 bytes", "1024"}},
      {"header is an array", Image("[]"), StatusCode::kDataLoss, {"does not start with '{'"}},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectError(ParseStatus(c.image), c.code, c.parts);
  }
}

TEST(SafetensorsReadTest, LimitsCanBeLowered) {
  std::string three = Image(
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
      R"("b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
      R"("c":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"__metadata__":{"x":"1","y":"2"}})");
  EXPECT_TRUE(ParseStatus(three).ok());
  ExpectError(ParseStatus(three, {.max_tensors = 2}), StatusCode::kResourceExhausted,
              {"more than 2 tensors"});
  ExpectError(ParseStatus(three, {.max_metadata_entries = 1}), StatusCode::kResourceExhausted,
              {"more than 1 entries in __metadata__"});
  ExpectError(ParseStatus(three, {.max_header_bytes = 64}), StatusCode::kResourceExhausted,
              {"exceeds the limit of 64"});
  ExpectError(ParseStatus(three, {.max_depth = 1}), StatusCode::kResourceExhausted,
              {"deeper than 1"});
}

TEST(SafetensorsFileTest, OpenMapsTheFileAndReportsOsErrors) {
  TempDir dir;
  std::string image =
      Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", F32Bytes({1.5f, -1}));
  WriteRaw(dir.Join("m.safetensors"), image);
  auto file = SafetensorsFile::Open(dir.Join("m.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->size_bytes(), image.size());
  EXPECT_EQ(*(*file)->ReadF32("w"), (std::vector<float>{1.5f, -1}));
  EXPECT_EQ((*file)->path(), dir.Join("m.safetensors"));

  ExpectError(SafetensorsFile::Open(dir.Join("missing.safetensors")).status(),
              StatusCode::kNotFound, {"missing.safetensors"});
  ExpectError(SafetensorsFile::Open(dir.path()).status(), StatusCode::kInvalidArgument,
              {"not a regular file"});
  // A FIFO is refused at once, not waited on.
  ASSERT_EQ(::mkfifo(dir.Join("fifo").c_str(), 0600), 0);
  ExpectError(SafetensorsFile::Open(dir.Join("fifo")).status(), StatusCode::kInvalidArgument,
              {"fifo", "not a regular file"});
  WriteRaw(dir.Join("empty.safetensors"), "");
  ExpectError(SafetensorsFile::Open(dir.Join("empty.safetensors")).status(), StatusCode::kDataLoss,
              {"empty.safetensors", "truncated"});
  WriteRaw(dir.Join("cut.safetensors"), image.substr(0, image.size() - 1));
  ExpectError(SafetensorsFile::Open(dir.Join("cut.safetensors")).status(), StatusCode::kDataLoss,
              {"cut.safetensors", "truncated", "tensor 'w'"});
}

// --- Writing ---

// Byte-exact outputs of the reference writer, from its own test suite (safetensors/src/tensor.rs:
// test_serialization, test_serialization_forced_alignement, test_empty).
TEST(SafetensorsWriteTest, MatchesTheReferenceWriterByteForByte) {
  std::string data = F32Bytes({0, 1, 2, 3, 4, 5});
  {
    SafetensorsWriter w;
    ASSERT_TRUE(w.Add({"attn.0", SafetensorsDType::kF32, {1, 2, 3}, Bytes(data), {}}).ok());
    const unsigned char expected[] = {
        64, 0,  0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 46,  48,
        34, 58, 123, 34,  100, 116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,
        44, 34, 115, 104, 97,  112, 101, 34,  58,  91,  49,  44,  50,  44,  51,  93,
        44, 34, 100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115, 34,  58,
        91, 48, 44,  50,  52,  93,  125, 125, 0,   0,   0,   0,   0,   0,   128, 63,
        0,  0,  0,   64,  0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
    EXPECT_EQ(*w.Serialize(),
              std::string(reinterpret_cast<const char*>(expected), sizeof expected));
  }
  {
    SafetensorsWriter w;
    ASSERT_TRUE(w.Add({"attn0", SafetensorsDType::kF32, {1, 1, 2, 3}, Bytes(data), {}}).ok());
    const unsigned char expected[] = {
        72,  0,   0,   0,   0,   0,   0,   0,   123, 34, 97, 116, 116, 110, 48,  34,  58,  123,
        34,  100, 116, 121, 112, 101, 34,  58,  34,  70, 51, 50,  34,  44,  34,  115, 104, 97,
        112, 101, 34,  58,  91,  49,  44,  49,  44,  50, 44, 51,  93,  44,  34,  100, 97,  116,
        97,  95,  111, 102, 102, 115, 101, 116, 115, 34, 58, 91,  48,  44,  50,  52,  93,  125,
        125, 32,  32,  32,  32,  32,  32,  32,  0,   0,  0,  0,   0,   0,   128, 63,  0,   0,
        0,   64,  0,   0,   64,  64,  0,   0,   128, 64, 0,  0,   160, 64};
    EXPECT_EQ(*w.Serialize(),
              std::string(reinterpret_cast<const char*>(expected), sizeof expected));
  }
  {
    SafetensorsWriter w;
    EXPECT_EQ(*w.Serialize(), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
    ASSERT_TRUE(w.SetMetadata({{"framework", "pt"}}).ok());
    EXPECT_EQ(*w.Serialize(), std::string("\x28\0\0\0\0\0\0\0", 8) +
                                  R"({"__metadata__":{"framework":"pt"}})" + "     ");
  }
}

// docs/formats/safetensors.md's worked example, built there by hand (Python's struct).
TEST(SafetensorsWriteTest, WritesTheDocumentedExample) {
  std::string data = F32Bytes({1.0f, -2.0f});
  SafetensorsWriter w;
  ASSERT_TRUE(w.SetMetadata({{"format", "pt"}}).ok());
  ASSERT_TRUE(w.Add({"w", SafetensorsDType::kF32, {2}, Bytes(data), {}}).ok());
  std::string image = *w.Serialize();
  std::string hex;
  for (unsigned char c : image) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  EXPECT_EQ(hex,
            "5800000000000000"
            "7b225f5f6d657461646174615f5f223a7b22666f726d6174223a227074227d2c2277223a7b226474"
            "797065223a22463332222c227368617065223a5b325d2c22646174615f6f666673657473223a5b30"
            "2c385d7d7d202020"
            "0000803f000000c0");
  std::string shortened = image;
  shortened.replace(shortened.find("[0,8]"), 5, "[0,4]");
  ExpectError(ParseStatus(shortened), StatusCode::kDataLoss,
              {"tensor 'w': data_offsets [0, 4] span 4 bytes, but shape [2] of F32 needs 8"});
  ExpectError(ParseStatus(image.substr(0, image.size() - 1)), StatusCode::kDataLoss,
              {"truncated: tensor 'w' needs data bytes [0, 8) but the file holds only 7 data "
               "bytes"});
}

// Tensors of many dtypes, as TensorToWrite with both spans and fills.
struct Sample {
  std::string name;
  SafetensorsDType dtype;
  std::vector<uint64_t> shape;
  std::string bytes;
};

std::vector<Sample> Samples() {
  auto pattern = [](size_t n, int seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 37 + seed * 11) & 0xff);
    return s;
  };
  return {
      {"model.embed.weight", SafetensorsDType::kBF16, {3, 4}, pattern(24, 1)},
      {"a.f32", SafetensorsDType::kF32, {2, 3}, pattern(24, 2)},
      {"b.f16", SafetensorsDType::kF16, {5}, pattern(10, 3)},
      {"c.i64", SafetensorsDType::kI64, {2}, pattern(16, 4)},
      {"d.u8", SafetensorsDType::kU8, {3}, pattern(3, 5)},
      {"e.bool", SafetensorsDType::kBool, {1, 1}, std::string("\x01", 1)},
      {"f.f8", SafetensorsDType::kF8E4M3, {4}, pattern(4, 6)},
      {"g.f64", SafetensorsDType::kF64, {}, pattern(8, 7)},
      {"h.empty", SafetensorsDType::kI32, {0, 3}, ""},
      {"i.f4", SafetensorsDType::kF4, {2, 3}, pattern(3, 8)},
      {"名前.ü", SafetensorsDType::kU16, {2}, pattern(4, 9)},
      {"quote\"back\\slash\nnl", SafetensorsDType::kI8, {1}, "z"},
  };
}

SafetensorsWriter WriterOf(const std::vector<Sample>& samples, bool use_fill) {
  SafetensorsWriter w;
  for (const Sample& s : samples) {
    TensorToWrite t{s.name, s.dtype, s.shape, {}, {}};
    if (use_fill) {
      // In 1-byte pieces, to exercise the gathering of small writes.
      t.fill = [&s](TensorSink& sink) -> base::Status {
        for (char c : s.bytes) SOVAI_RETURN_IF_ERROR(sink.Write(Bytes(std::string_view(&c, 1))));
        return base::Status();
      };
    } else {
      t.data = Bytes(s.bytes);
    }
    SOVAI_CHECK(w.Add(std::move(t)).ok());
  }
  SOVAI_CHECK(w.SetMetadata({{"format", "pt"}, {"ключ", "значение"}}).ok());
  return w;
}

TEST(SafetensorsWriteTest, RoundTripsEveryDtypeThroughTheMappedReader) {
  TempDir dir;
  std::vector<Sample> samples = Samples();
  for (bool use_fill : {false, true}) {
    SCOPED_TRACE(use_fill ? "fill" : "data");
    std::string path = dir.Join(use_fill ? "fill.safetensors" : "data.safetensors");
    SafetensorsWriter w = WriterOf(samples, use_fill);
    ASSERT_TRUE(w.WriteFile(base::Env::Default(), path).ok());
    EXPECT_EQ(ReadRaw(path), *w.Serialize());
    auto file = SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->header_bytes() % 8, 0u);
    EXPECT_EQ((*file)->metadata(),
              (std::map<std::string, std::string>{{"format", "pt"}, {"ключ", "значение"}}));
    ASSERT_EQ((*file)->tensors().size(), samples.size());
    for (const Sample& s : samples) {
      SCOPED_TRACE(s.name);
      auto t = (*file)->Get(s.name);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ((*t)->dtype, s.dtype);
      EXPECT_EQ((*t)->shape, s.shape);
      EXPECT_EQ(Str((*t)->bytes), s.bytes);
      // Sorted by alignment first, so each tensor is aligned to its element size in the file.
      size_t element_bytes = std::max<size_t>(1, SafetensorsDTypeBits(s.dtype) / 8);
      EXPECT_EQ((8 + (*file)->header_bytes() + (*t)->data_begin) % element_bytes, 0u);
    }
    // Writing what was read gives the same bytes again.
    SafetensorsWriter again;
    for (const SafetensorsTensor& t : (*file)->tensors()) ASSERT_TRUE(again.Add(ToWrite(t)).ok());
    ASSERT_TRUE(again.SetMetadata((*file)->metadata()).ok());
    EXPECT_EQ(*again.Serialize(), ReadRaw(path));
  }
}

// An independent reader (Python's struct and json) checks what the writer wrote: the length, the
// space padding, the JSON, the tiling, the order (by alignment, then name), every byte.
TEST(SafetensorsWriteTest, AnIndependentPythonReaderAgrees) {
  base::Env& env = base::Env::Default();
  if (!env.FileExists("/usr/bin/python3")) GTEST_SKIP() << "python3 is not installed";
  TempDir dir;
  std::vector<Sample> samples = Samples();
  std::string path = dir.Join("py.safetensors");
  ASSERT_TRUE(WriterOf(samples, false).WriteFile(env, path).ok());
  const char* script = R"PY(
import json, struct, sys
data = open(sys.argv[1], 'rb').read()
n, = struct.unpack('<Q', data[:8])
assert n % 8 == 0, 'header length %d is not a multiple of 8' % n
text = data[8:8 + n].decode('utf-8')
assert text.startswith('{') and text.rstrip(' ').endswith('}'), 'padding must be spaces'
header = json.loads(text)
meta = header.pop('__metadata__', {})
bits = {'BOOL': 8, 'F4': 4, 'U8': 8, 'I8': 8, 'F8_E4M3': 8, 'I16': 16, 'U16': 16, 'F16': 16,
        'BF16': 16, 'I32': 32, 'F32': 32, 'F64': 64, 'I64': 64}
buf = data[8 + n:]
out = []
for k in sorted(meta):
    out.append('meta %s %s' % (k, meta[k]))
end = 0
by_offset = sorted(header.items(), key=lambda kv: (kv[1]['data_offsets'], kv[0]))
for name, e in by_offset:
    b, e2 = e['data_offsets']
    assert b == end, name
    count = 1
    for d in e['shape']:
        count *= d
    assert (e2 - b) * 8 == count * bits[e['dtype']], name
    end = e2
assert end == len(buf), 'trailing bytes'
for name, e in sorted(header.items()):
    b, e2 = e['data_offsets']
    out.append('tensor %s %s %s %s' % (json.dumps(name, ensure_ascii=False), e['dtype'],
                                       e['shape'], buf[b:e2].hex()))
nonempty = [name for name, e in by_offset if e['data_offsets'][0] != e['data_offsets'][1]]
out.append('order ' + json.dumps(nonempty, ensure_ascii=False))
sys.stdout.buffer.write(('\n'.join(out) + '\n').encode('utf-8'))
)PY";
  std::string script_path = dir.Join("reader.py");
  WriteRaw(script_path, script);
  base::SpawnOptions options;
  options.argv = {"/usr/bin/python3", script_path, path};
  auto run = base::RunAndCapture(env, options, "", 30'000);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(run->exit.success()) << run->stderr_text;

  // What the script must print, built from the samples alone.
  std::string want = "meta format pt\nmeta ключ значение\n";
  std::vector<const Sample*> by_name;
  for (const Sample& s : samples) by_name.push_back(&s);
  std::sort(by_name.begin(), by_name.end(),
            [](const Sample* a, const Sample* b) { return a->name < b->name; });
  for (const Sample* s : by_name) {
    std::string shape = "[";
    for (size_t i = 0; i < s->shape.size(); ++i) {
      shape += (i > 0 ? ", " : "") + std::to_string(s->shape[i]);
    }
    std::string hex;
    for (unsigned char c : s->bytes) {
      char b[3];
      std::snprintf(b, sizeof b, "%02x", c);
      hex += b;
    }
    want += "tensor " + base::DumpJson(nlohmann::json(s->name)) + " " +
            std::string(SafetensorsDTypeName(s->dtype)) + " " + shape + "] " + hex + "\n";
  }
  // The reference writer's order: descending dtype (the enum is in increasing alignment), then
  // name.
  std::vector<const Sample*> layout = by_name;
  std::stable_sort(layout.begin(), layout.end(),
                   [](const Sample* a, const Sample* b) { return a->dtype > b->dtype; });
  std::string order;
  for (const Sample* s : layout) {
    if (s->bytes.empty()) continue;
    order += (order.empty() ? "" : ", ") + base::DumpJson(nlohmann::json(s->name));
  }
  want += "order [" + order + "]\n";
  EXPECT_EQ(run->stdout_text, want);
}

TEST(SafetensorsWriteTest, RefusesBadTensors) {
  std::string four(4, 'x');
  SafetensorsWriter w;
  ASSERT_TRUE(w.Add({"a", SafetensorsDType::kF32, {1}, Bytes(four), {}}).ok());
  ExpectError(w.Add({"a", SafetensorsDType::kF32, {1}, Bytes(four), {}}),
              StatusCode::kInvalidArgument, {"'a' is added twice"});
  ExpectError(w.Add({"", SafetensorsDType::kF32, {1}, Bytes(four), {}}),
              StatusCode::kInvalidArgument, {"empty name"});
  ExpectError(w.Add({"__metadata__", SafetensorsDType::kF32, {1}, Bytes(four), {}}),
              StatusCode::kInvalidArgument, {"__metadata__"});
  ExpectError(w.Add({"bad\xff", SafetensorsDType::kF32, {1}, Bytes(four), {}}),
              StatusCode::kInvalidArgument, {"UTF-8"});
  ExpectError(w.Add({"b", SafetensorsDType::kF32, {2}, Bytes(four), {}}),
              StatusCode::kInvalidArgument, {"'b'", "4 bytes of data", "needs 8"});
  ExpectError(w.Add({"c", SafetensorsDType::kF4, {3}, Bytes(four), {}}),
              StatusCode::kInvalidArgument, {"'c'", "whole number of bytes"});
  ExpectError(w.Add({"d", SafetensorsDType::kU8, std::vector<uint64_t>(17, 1), {}, {}}),
              StatusCode::kInvalidArgument, {"17 dimensions"});
  ExpectError(w.Add({std::string(1025, 'n'), SafetensorsDType::kU8, {0}, {}, {}}),
              StatusCode::kInvalidArgument, {"1025 bytes"});
  ExpectError(w.SetMetadata({{"k", "\xc0\x80"}}), StatusCode::kInvalidArgument, {"UTF-8"});
  EXPECT_EQ(w.tensor_count(), 1u);
  EXPECT_EQ(w.data_bytes(), 4u);
}

TEST(SafetensorsWriteTest, AFailingFillLeavesNothingBehind) {
  TempDir dir;
  base::Env& env = base::Env::Default();
  std::string path = dir.Join("x.safetensors");
  WriteRaw(path, "old");
  auto write_with = [&](TensorFill fill) {
    SafetensorsWriter w;
    SOVAI_CHECK(w.Add({"t", SafetensorsDType::kU8, {4}, {}, std::move(fill)}).ok());
    return w.WriteFile(env, path);
  };
  ExpectError(write_with([](TensorSink& sink) { return sink.Write(Bytes("ab")); }),
              StatusCode::kInvalidArgument, {"'t'", "wrote 2 bytes, not its 4"});
  ExpectError(write_with([](TensorSink& sink) { return sink.Write(Bytes("abcde")); }),
              StatusCode::kInvalidArgument, {"'t'", "more than its 4 bytes"});
  ExpectError(write_with([](TensorSink&) { return base::DataLossError("source vanished"); }),
              StatusCode::kDataLoss, {"source vanished"});
  EXPECT_EQ(ReadRaw(path), "old");
  auto names = env.ListDir(dir.path());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"x.safetensors"});  // no temporary file left

  // A failing sync (a full disk, an I/O error) also leaves the old file.
  base::FaultInjectionEnv faulty(env);
  faulty.FailNth(base::FaultOp::kSync, 1);
  SafetensorsWriter w;
  ASSERT_TRUE(w.Add({"t", SafetensorsDType::kU8, {2}, Bytes("ok"), {}}).ok());
  EXPECT_FALSE(w.WriteFile(faulty, path).ok());
  EXPECT_EQ(ReadRaw(path), "old");
  EXPECT_EQ(*env.ListDir(dir.path()), std::vector<std::string>{"x.safetensors"});
  ASSERT_TRUE(w.WriteFile(env, path).ok());
  EXPECT_EQ(ReadRaw(path), *w.Serialize());
}

// --- Sharded checkpoints ---

std::vector<TensorToWrite> ShardSamples(const std::vector<std::string>& storage) {
  std::vector<TensorToWrite> out;
  for (size_t i = 0; i < storage.size(); ++i) {
    out.push_back({"t" + std::to_string(i),
                   SafetensorsDType::kU8,
                   {storage[i].size()},
                   Bytes(storage[i]),
                   {}});
  }
  return out;
}

TEST(SafetensorsShardTest, SplitsBySizeAndReadsBack) {
  TempDir dir;
  base::Env& env = base::Env::Default();
  // 40 + 40 fit in 100; the third starts shard 2; 150 is larger than a shard: its own.
  std::vector<std::string> storage = {std::string(40, 'a'), std::string(40, 'b'),
                                      std::string(40, 'c'), std::string(150, 'd'),
                                      std::string(10, 'e')};
  auto written =
      WriteShardedSafetensors(env, dir.path(), ShardSamples(storage), 100, {{"format", "pt"}});
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_TRUE(written->indexed);
  EXPECT_EQ(written->files,
            (std::vector<std::string>{
                "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"}));
  // The index as transformers writes it.
  auto index_text = env.ReadFile(dir.Join("model.safetensors.index.json"));
  ASSERT_TRUE(index_text.ok());
  auto index = nlohmann::json::parse(*index_text);
  EXPECT_EQ(index["metadata"]["total_size"], 280);
  EXPECT_EQ(index["weight_map"], (nlohmann::json{{"t0", "model-00001-of-00004.safetensors"},
                                                 {"t1", "model-00001-of-00004.safetensors"},
                                                 {"t2", "model-00002-of-00004.safetensors"},
                                                 {"t3", "model-00003-of-00004.safetensors"},
                                                 {"t4", "model-00004-of-00004.safetensors"}}));
  EXPECT_EQ(index_text->back(), '\n');
  EXPECT_NE(index_text->find("\n  \"metadata\": {"), std::string::npos);  // indent=2

  auto set = SafetensorsSet::OpenIndex(env, dir.Join("model.safetensors.index.json"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE((*set)->sharded());
  EXPECT_EQ((*set)->files().size(), 4u);
  EXPECT_EQ((*set)->entries().size(), 5u);
  EXPECT_EQ((*set)->total_tensor_bytes(), 280u);
  EXPECT_EQ((*set)->index_metadata()["total_size"], 280);
  for (size_t i = 0; i < storage.size(); ++i) {
    auto e = (*set)->Get("t" + std::to_string(i));
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(Str(e->tensor->bytes), storage[i]);
    EXPECT_EQ(e->file->metadata().at("format"), "pt");
  }
  ExpectError((*set)->Get("t9").status(), StatusCode::kNotFound, {"'t9'", "index.json"});
}

TEST(SafetensorsShardTest, OneShardIsASingleFileWithoutIndex) {
  TempDir dir;
  base::Env& env = base::Env::Default();
  std::vector<std::string> storage = {"abc", "de"};
  auto written = WriteShardedSafetensors(env, dir.path(), ShardSamples(storage), 5, {});
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_FALSE(written->indexed);
  EXPECT_EQ(written->files, std::vector<std::string>{"model.safetensors"});
  EXPECT_FALSE(env.FileExists(dir.Join("model.safetensors.index.json")));
  auto set = SafetensorsSet::OpenFile(dir.Join("model.safetensors"));
  ASSERT_TRUE(set.ok());
  EXPECT_FALSE((*set)->sharded());
  EXPECT_EQ((*set)->entries().size(), 2u);
  EXPECT_TRUE((*set)->index_metadata().empty());
  ExpectError(WriteShardedSafetensors(env, dir.path(), ShardSamples(storage), 0, {}).status(),
              StatusCode::kInvalidArgument, {"max_shard_bytes"});
}

TEST(SafetensorsShardTest, RefusesInconsistentIndexes) {
  TempDir dir;
  base::Env& env = base::Env::Default();
  std::vector<std::string> storage = {"aaaa", "bbbb", "cccc"};
  // Shard 1 holds t0 and t1, shard 2 holds t2.
  ASSERT_TRUE(WriteShardedSafetensors(env, dir.path(), ShardSamples(storage), 8, {}).ok());
  std::string index_path = dir.Join("model.safetensors.index.json");
  std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  auto with_map = [&](const nlohmann::json& map) {
    WriteRaw(index_path,
             nlohmann::json{{"metadata", {{"total_size", 12}}}, {"weight_map", map}}.dump());
    return SafetensorsSet::OpenIndex(env, index_path).status();
  };
  EXPECT_TRUE(with_map({{"t0", s1}, {"t1", s1}, {"t2", s2}}).ok());
  ExpectError(with_map({{"t0", s1}, {"t1", s2}, {"t2", s2}}), StatusCode::kDataLoss,
              {"index.json",
               "tensor 't1' is in shard '" + s1 + "' but weight_map puts it in '" + s2 + "'"});
  ExpectError(with_map({{"t0", s1}, {"t2", s2}}), StatusCode::kDataLoss,
              {"tensor 't1' of shard '" + s1 + "' is not in weight_map"});
  ExpectError(with_map({{"t0", s1}, {"t1", s1}, {"t2", s2}, {"t9", s2}}), StatusCode::kDataLoss,
              {"puts tensor 't9' in shard '" + s2 + "', which does not contain it"});
  // A shard the index does not name is not part of the checkpoint.
  EXPECT_TRUE(with_map({{"t2", s2}}).ok());
  ExpectError(with_map({{"t0", "../" + s1}}), StatusCode::kDataLoss,
              {"'t0'", "not a plain file name"});
  ExpectError(with_map({{"t0", "sub/" + s1}}), StatusCode::kDataLoss, {"not a plain file name"});
  ExpectError(with_map({{"t0", 5}}), StatusCode::kDataLoss, {"'t0'", "not a file name"});
  EXPECT_EQ(with_map({{"t0", "gone.safetensors"}}).code(), StatusCode::kNotFound);
  WriteRaw(index_path, R"({"metadata": {}})");
  ExpectError(SafetensorsSet::OpenIndex(env, index_path).status(), StatusCode::kDataLoss,
              {"index.json", "weight_map"});
  WriteRaw(index_path, "{not json");
  ExpectError(SafetensorsSet::OpenIndex(env, index_path).status(), StatusCode::kDataLoss,
              {"index.json", "invalid JSON"});
  ExpectError(SafetensorsSet::OpenIndex(env, dir.Join("nope.json")).status(), StatusCode::kNotFound,
              {"nope.json"});
}

// The fuzz target's seed corpus (generated by a Python script, independently of this code) says
// in each file's name whether it is valid.
TEST(SafetensorsReadTest, SeedCorpusFilesAreWhatTheirNamesSay) {
  base::Env& env = base::Env::Default();
  auto names = env.ListDir(SOVAI_SAFETENSORS_CORPUS_DIR);
  ASSERT_TRUE(names.ok()) << names.status();
  size_t valid = 0, bad = 0;
  for (const std::string& name : *names) {
    SCOPED_TRACE(name);
    auto bytes = env.ReadFile(base::JoinPath(SOVAI_SAFETENSORS_CORPUS_DIR, name));
    ASSERT_TRUE(bytes.ok());
    base::Status status = ParseStatus(*bytes);
    if (name.starts_with("valid_")) {
      EXPECT_TRUE(status.ok()) << status;
      ++valid;
    } else if (name.starts_with("bad_")) {
      EXPECT_FALSE(status.ok());
      ++bad;
    }
  }
  EXPECT_GE(valid, 5u);
  EXPECT_GE(bad, 5u);
}

TEST(SafetensorsDTypeTest, NamesSizesAndShapes) {
  for (std::string_view name :
       {"BOOL",    "F4",      "F6_E2M3", "F6_E3M2", "U8",  "I8",   "F8_E5M2",
        "F8_E4M3", "F8_E8M0", "I16",     "U16",     "F16", "BF16", "I32",
        "U32",     "F32",     "C64",     "F64",     "I64", "U64"}) {
    auto dtype = ParseSafetensorsDType(name);
    ASSERT_TRUE(dtype.has_value()) << name;
    EXPECT_EQ(SafetensorsDTypeName(*dtype), name);
  }
  EXPECT_EQ(ParseSafetensorsDType("bf16"), std::nullopt);
  EXPECT_EQ(SafetensorsDTypeBits(SafetensorsDType::kF6E3M2), 6u);
  EXPECT_EQ(SafetensorsDTypeBits(SafetensorsDType::kC64), 64u);
  EXPECT_EQ(TensorByteSize(SafetensorsDType::kF6E2M3, std::vector<uint64_t>{4}), 3u);
  EXPECT_EQ(TensorByteSize(SafetensorsDType::kF6E2M3, std::vector<uint64_t>{3}), std::nullopt);
  EXPECT_EQ(TensorByteSize(SafetensorsDType::kF32, std::vector<uint64_t>{}), 4u);
  EXPECT_EQ(ShapeElements(std::vector<uint64_t>{1ull << 32, 1ull << 32}), std::nullopt);
  EXPECT_EQ(ShapeElements(std::vector<uint64_t>{1ull << 32, 0, 1ull << 32}), 0u);
  EXPECT_EQ(ShapeToString(std::vector<uint64_t>{2, 3}), "[2, 3]");
  EXPECT_EQ(ToSafetensorsDType(tensor::DType::kF16), SafetensorsDType::kF16);
}

}  // namespace
}  // namespace sovai::model
