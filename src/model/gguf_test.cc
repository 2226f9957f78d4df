#include "model/gguf.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/env.h"

namespace sovai::model {
namespace {

using base::StatusCode;

// Builds GGUF bytes field by field, straight from the spec (not from the writer), so that tests
// can check the writer's layout and feed the reader every kind of malformed file.
class Bytes {
 public:
  Bytes& Raw(std::string_view s) {
    data_.append(s);
    return *this;
  }
  template <typename T>
  Bytes& Scalar(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    data_.append(b, sizeof(T));
    return *this;
  }
  Bytes& U8(uint8_t v) { return Scalar(v); }
  Bytes& U32(uint32_t v) { return Scalar(v); }
  Bytes& U64(uint64_t v) { return Scalar(v); }
  Bytes& Str(std::string_view s) {
    U64(s.size());
    return Raw(s);
  }
  Bytes& Header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    Raw("GGUF");
    U32(version);
    U64(tensors);
    return U64(kvs);
  }
  Bytes& KvU32(std::string_view key, uint32_t v) {
    Str(key);
    U32(4);
    return U32(v);
  }
  Bytes& KvString(std::string_view key, std::string_view v) {
    Str(key);
    U32(8);
    return Str(v);
  }
  Bytes& Tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    Str(name);
    U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) U64(n);
    U32(type);
    return U64(offset);
  }
  Bytes& PadTo(size_t alignment) {
    data_.resize((data_.size() + alignment - 1) / alignment * alignment, '\0');
    return *this;
  }
  Bytes& Zeros(size_t n) {
    data_.append(n, '\0');
    return *this;
  }
  const std::string& str() const { return data_; }
  size_t size() const { return data_.size(); }

 private:
  std::string data_;
};

base::Result<std::unique_ptr<GgufReader>> Parse(const std::string& bytes,
                                                const GgufLimits& limits = {}) {
  return GgufReader::Parse(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      limits);
}

// Expects `bytes` to be rejected with `code` and a message containing `needle`.
void ExpectRejected(const std::string& bytes, StatusCode code, std::string_view needle,
                    const GgufLimits& limits = {}) {
  auto reader = Parse(bytes, limits);
  ASSERT_FALSE(reader.ok()) << "accepted";
  EXPECT_EQ(reader.status().code(), code) << reader.status();
  EXPECT_NE(reader.status().message().find(needle), std::string::npos) << reader.status();
}

// A small valid file: two kvs, an F32 tensor of 4 values and a Q8_0 tensor of 2 rows of 32.
Bytes ValidFile() {
  Bytes b;
  b.Header(2, 2).KvString("general.architecture", "llama").KvU32("test.count", 7);
  b.Tensor("a", {4}, 0, 0).Tensor("b", {32, 2}, 8, 32).PadTo(32);
  b.Zeros(16).PadTo(32);                                       // a (data section offset 0)
  for (int i = 0; i < 68; ++i) b.U8(static_cast<uint8_t>(i));  // b (offset 32)
  return b;
}

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/sovai_gguf_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_TRUE(env_.DeleteDirRecursive(dir_).ok()); }
  std::string Path(std::string_view name) const { return base::JoinPath(dir_, name); }
  std::string Read(const std::string& path) { return env_.ReadFile(path).value(); }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
};

// --- Types ---

TEST(GgmlTypeTest, SizesOfTheTypesWeWriteAndSomeWeOnlyRead) {
  std::vector<uint64_t> ne = {64, 3};
  EXPECT_EQ(GgmlTensorBytes(0, ne).value(), 64u * 3 * 4);
  EXPECT_EQ(GgmlTensorBytes(1, ne).value(), 64u * 3 * 2);
  EXPECT_EQ(GgmlTensorBytes(30, ne).value(), 64u * 3 * 2);
  EXPECT_EQ(GgmlTensorBytes(8, ne).value(), 2u * 3 * 34);
  std::vector<uint64_t> k_ne = {256, 2};
  EXPECT_EQ(GgmlTensorBytes(12, k_ne).value(), 2u * 144);  // Q4_K
  EXPECT_EQ(GgmlTensorBytes(14, k_ne).value(), 2u * 210);  // Q6_K
  EXPECT_EQ(GgmlTypeName(GgmlType::kBF16), "BF16");
  EXPECT_EQ(GgmlTypeName(GgmlType::kQ8_0), "Q8_0");
  EXPECT_FALSE(GetGgmlTypeInfo(4).has_value());  // Q4_2: removed
  EXPECT_FALSE(GetGgmlTypeInfo(1000).has_value());
}

TEST(GgmlTypeTest, RejectsPartialBlocksTooManyDimsAndOverflow) {
  std::vector<uint64_t> partial = {33};
  EXPECT_FALSE(GgmlTensorBytes(8, partial).ok());
  std::vector<uint64_t> five = {1, 1, 1, 1, 1};
  EXPECT_FALSE(GgmlTensorBytes(0, five).ok());
  std::vector<uint64_t> huge = {1ull << 40, 1ull << 30};
  EXPECT_FALSE(GgmlTensorBytes(0, huge).ok());
  std::vector<uint64_t> near = {1ull << 61};  // 2^63 bytes of f32: still a u64
  EXPECT_EQ(GgmlTensorBytes(0, near).value(), 1ull << 63);
  std::vector<uint64_t> bytes_overflow = {1ull << 62};
  EXPECT_FALSE(GgmlTensorBytes(0, bytes_overflow).ok());
  std::vector<uint64_t> too_big = {1ull << 63};  // ggml's ne is int64_t
  EXPECT_FALSE(GgmlTensorBytes(24, too_big).ok());
}

// --- Writer ---

TEST_F(GgufTest, WriterLayoutMatchesTheSpecByteForByte) {
  GgufWriter writer;
  ASSERT_TRUE(writer.SetUint32("test.value", 0x01020304).ok());
  const float values[2] = {1.0f, 2.0f};
  ASSERT_TRUE(writer
                  .AddTensorBytes("t", GgmlType::kF32, {2},
                                  std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values),
                                                           sizeof values))
                  .ok());
  const std::string path = Path("layout.gguf");
  ASSERT_TRUE(writer.Write(env_, path).ok());

  Bytes expected;
  expected.Header(1, 2).KvU32("test.value", 0x01020304).KvU32("general.alignment", 32);
  expected.Tensor("t", {2}, 0, 0).PadTo(32);
  expected.Scalar(1.0f).Scalar(2.0f).PadTo(32);
  EXPECT_EQ(Read(path), expected.str());
  EXPECT_EQ(writer.FileBytes(), expected.size());
}

TEST_F(GgufTest, EveryValueTypeRoundTrips) {
  GgufWriter writer;
  ASSERT_TRUE(writer.Set("t.u8", GgufValue::Uint8(200)).ok());
  ASSERT_TRUE(writer.Set("t.i8", GgufValue::Int8(-100)).ok());
  ASSERT_TRUE(writer.Set("t.u16", GgufValue::Uint16(60000)).ok());
  ASSERT_TRUE(writer.Set("t.i16", GgufValue::Int16(-30000)).ok());
  ASSERT_TRUE(writer.Set("t.u32", GgufValue::Uint32(4000000000u)).ok());
  ASSERT_TRUE(writer.Set("t.i32", GgufValue::Int32(-2000000000)).ok());
  ASSERT_TRUE(writer.Set("t.f32", GgufValue::Float32(1.5f)).ok());
  ASSERT_TRUE(writer.Set("t.bool_true", GgufValue::Bool(true)).ok());
  ASSERT_TRUE(writer.Set("t.bool_false", GgufValue::Bool(false)).ok());
  ASSERT_TRUE(writer.Set("t.string", GgufValue::String("h\xc3\xa9llo")).ok());
  ASSERT_TRUE(writer.Set("t.u64", GgufValue::Uint64(1ull << 60)).ok());
  ASSERT_TRUE(writer.Set("t.i64", GgufValue::Int64(-(1ll << 60))).ok());
  ASSERT_TRUE(writer.Set("t.f64", GgufValue::Float64(0.1)).ok());
  ASSERT_TRUE(writer.Set("t.strings", GgufValue::StringArray({"a", "", "Ġthe"})).ok());
  const int32_t ints[] = {1, -2, 3};
  ASSERT_TRUE(writer.Set("t.ints", GgufValue::Int32Array(ints)).ok());
  ASSERT_TRUE(writer.Set("t.empty", GgufValue::Float32Array({})).ok());
  GgufArray nested{GgufValueType::kArray, {GgufValue::Int32Array(ints), GgufValue::Int32Array({})}};
  ASSERT_TRUE(writer.Set("t.nested", GgufValue::Array(nested)).ok());
  const std::string path = Path("values.gguf");
  ASSERT_TRUE(writer.Write(env_, path).ok());

  auto reader = GgufReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const GgufReader& r = **reader;
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.tensors().size(), 0u);
  ASSERT_EQ(r.metadata().size(), 18u);
  EXPECT_EQ(r.metadata().front().key, "t.u8");
  EXPECT_EQ(r.metadata().back().key, "general.alignment");
  EXPECT_EQ(std::get<uint8_t>(r.Find("t.u8")->storage), 200);
  EXPECT_EQ(std::get<int8_t>(r.Find("t.i8")->storage), -100);
  EXPECT_EQ(std::get<uint16_t>(r.Find("t.u16")->storage), 60000);
  EXPECT_EQ(std::get<int16_t>(r.Find("t.i16")->storage), -30000);
  EXPECT_EQ(r.GetUint("t.u32").value(), 4000000000u);
  EXPECT_EQ(std::get<int32_t>(r.Find("t.i32")->storage), -2000000000);
  EXPECT_EQ(r.GetFloat("t.f32").value(), 1.5);
  EXPECT_EQ(std::get<bool>(r.Find("t.bool_true")->storage), true);
  EXPECT_EQ(std::get<bool>(r.Find("t.bool_false")->storage), false);
  EXPECT_EQ(r.GetString("t.string").value(), "h\xc3\xa9llo");
  EXPECT_EQ(r.GetUint("t.u64").value(), 1ull << 60);
  EXPECT_EQ(std::get<int64_t>(r.Find("t.i64")->storage), -(1ll << 60));
  EXPECT_EQ(r.GetFloat("t.f64").value(), 0.1);
  const GgufArray* strings = r.Find("t.strings")->AsArray();
  ASSERT_NE(strings, nullptr);
  ASSERT_EQ(strings->elements.size(), 3u);
  EXPECT_EQ(*strings->elements[2].AsString(), "Ġthe");
  EXPECT_EQ(*strings->elements[1].AsString(), "");
  const GgufArray* empty = r.Find("t.empty")->AsArray();
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->element_type, GgufValueType::kFloat32);
  EXPECT_TRUE(empty->elements.empty());
  const GgufArray* outer = r.Find("t.nested")->AsArray();
  ASSERT_NE(outer, nullptr);
  ASSERT_EQ(outer->elements.size(), 2u);
  EXPECT_EQ(std::get<int32_t>(outer->elements[0].AsArray()->elements[1].storage), -2);
  EXPECT_EQ(r.GetUint("general.alignment").value(), 32u);
  // Typed lookups name the key.
  EXPECT_EQ(r.GetString("t.u32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetUint("t.i8").status().code(), StatusCode::kInvalidArgument);  // negative
  EXPECT_EQ(r.GetUint("missing.key").status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.GetUint("missing.key").status().message().find("missing.key"), std::string::npos);
}

TEST_F(GgufTest, TensorsAreAlignedStreamedAndReadBackWithoutCopies) {
  GgufWriter writer(64);
  std::vector<float> a(5);
  for (int i = 0; i < 5; ++i) a[i] = static_cast<float>(i) - 2.5f;
  ASSERT_TRUE(
      writer
          .AddTensorBytes("a", GgmlType::kF32, {5},
                          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(a.data()), 20))
          .ok());
  // A producer that emits 34-byte blocks one at a time: 3 rows of 64 values = 6 blocks.
  ASSERT_TRUE(writer
                  .AddTensor("blk.0.attn_q.weight", GgmlType::kQ8_0, {64, 3},
                             [](const GgufChunkSink& sink) -> base::Status {
                               for (int block = 0; block < 6; ++block) {
                                 std::string bytes(34, static_cast<char>(block));
                                 SOVAI_RETURN_IF_ERROR(sink(bytes));
                               }
                               return base::Status();
                             })
                  .ok());
  ASSERT_TRUE(writer
                  .AddTensor("c", GgmlType::kBF16, {3, 1, 1, 2},
                             [](const GgufChunkSink& sink) { return sink(std::string(12, 'c')); })
                  .ok());
  const std::string path = Path("tensors.gguf");
  ASSERT_TRUE(writer.Write(env_, path).ok());
  EXPECT_EQ(env_.GetFileSize(path).value(), writer.FileBytes());

  auto reader = GgufReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const GgufReader& r = **reader;
  EXPECT_EQ(r.alignment(), 64u);
  EXPECT_EQ(r.data_offset() % 64, 0u);
  ASSERT_EQ(r.tensors().size(), 3u);
  const GgufTensorInfo& ta = r.tensors()[0];
  EXPECT_EQ(ta.name, "a");
  EXPECT_EQ(ta.offset, 0u);
  EXPECT_EQ(ta.size_bytes, 20u);
  auto data = r.TensorData(ta);
  EXPECT_EQ(std::memcmp(data.data(), a.data(), 20), 0);
  const GgufTensorInfo* tq = r.FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(tq, nullptr);
  EXPECT_EQ(tq->type_id, 8u);
  EXPECT_EQ(tq->ne, (std::vector<uint64_t>{64, 3}));
  EXPECT_EQ(tq->TorchShape(), (std::vector<uint64_t>{3, 64}));
  EXPECT_EQ(tq->offset, 64u);
  EXPECT_EQ(tq->size_bytes, 6u * 34);
  auto q = r.TensorData(*tq);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[34 * 5 + 33], 5);
  const GgufTensorInfo* tc = r.FindTensor("c");
  ASSERT_NE(tc, nullptr);
  EXPECT_EQ(tc->offset, 64u + 256u);  // 204 bytes rounded up to 256
  EXPECT_EQ(tc->ne.size(), 4u);
  EXPECT_EQ(r.TensorData(*tc)[11], 'c');
  // The span points into the mapping, not into a copy.
  EXPECT_EQ(r.TensorData(*tc).data(), r.TensorData(ta).data() + tc->file_offset - ta.file_offset);
  EXPECT_EQ(r.FindTensor("nope"), nullptr);
}

TEST_F(GgufTest, WriterRejectsBadKeysNamesAndShapes) {
  GgufWriter w;
  EXPECT_FALSE(w.SetUint32("", 1).ok());
  EXPECT_FALSE(w.SetUint32("Upper.case", 1).ok());
  EXPECT_FALSE(w.SetUint32("a..b", 1).ok());
  EXPECT_FALSE(w.SetUint32("trailing.", 1).ok());
  EXPECT_FALSE(w.SetUint32("has space", 1).ok());
  EXPECT_FALSE(w.SetUint32("general.alignment", 64).ok());
  ASSERT_TRUE(w.SetUint32("a.b_c.d0", 1).ok());
  base::Status dup = w.SetUint32("a.b_c.d0", 2);
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("already set"), std::string::npos);
  GgufArray mixed{GgufValueType::kInt32, {GgufValue::Int32(1), GgufValue::Uint32(2)}};
  base::Status mixed_status = w.Set("t.mixed", GgufValue::Array(mixed));
  EXPECT_NE(mixed_status.message().find("element 1 is u32 in an array of i32"), std::string::npos)
      << mixed_status;

  auto none = [](const GgufChunkSink&) { return base::Status(); };
  EXPECT_FALSE(w.AddTensor("", GgmlType::kF32, {1}, none).ok());
  EXPECT_FALSE(w.AddTensor(std::string(64, 'n'), GgmlType::kF32, {1}, none).ok());
  EXPECT_TRUE(w.AddTensor(std::string(63, 'n'), GgmlType::kF32, {1}, none).ok());
  EXPECT_FALSE(w.AddTensor("x", GgmlType::kF32, {}, none).ok());
  EXPECT_FALSE(w.AddTensor("x", GgmlType::kF32, {1, 1, 1, 1, 1}, none).ok());
  base::Status partial = w.AddTensor("x", GgmlType::kQ8_0, {48, 2}, none);
  EXPECT_NE(partial.message().find("not a multiple of Q8_0's block of 32"), std::string::npos)
      << partial;
  ASSERT_TRUE(w.AddTensor("x", GgmlType::kF16, {48, 2}, none).ok());
  EXPECT_FALSE(w.AddTensor("x", GgmlType::kF16, {48, 2}, none).ok());
  const uint8_t three[3] = {};
  EXPECT_FALSE(w.AddTensorBytes("y", GgmlType::kF32, {1}, three).ok());
}

TEST_F(GgufTest, ProducerMistakesFailTheWriteAndKeepTheOldFile) {
  const std::string path = Path("keep.gguf");
  ASSERT_TRUE(env_.WriteFileAtomically(path, "old").ok());
  for (int emitted : {7, 9}) {
    GgufWriter w;
    ASSERT_TRUE(w.AddTensor("t", GgmlType::kF16, {4}, [emitted](const GgufChunkSink& sink) {
                   return sink(std::string(emitted, 'x'));
                 }).ok());
    base::Status s = w.Write(env_, path);
    EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
    EXPECT_NE(s.message().find("'t'"), std::string::npos) << s;
    EXPECT_EQ(Read(path), "old");
  }
  GgufWriter failing;
  ASSERT_TRUE(failing
                  .AddTensor("t", GgmlType::kF32, {1},
                             [](const GgufChunkSink&) {
                               return base::DataLossError("source shard is corrupt");
                             })
                  .ok());
  base::Status s = failing.Write(env_, path);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("writing GGUF tensor 't'"), std::string::npos) << s;
  EXPECT_EQ(Read(path), "old");
  // No temporary file is left behind.
  EXPECT_EQ(env_.ListDir(dir_).value(), std::vector<std::string>{"keep.gguf"});
}

TEST_F(GgufTest, AFailedDiskWriteLeavesNoFile) {
  base::FaultInjectionEnv faulty(env_);
  faulty.FailNth(base::FaultOp::kAppend, 2);  // the first tensor chunk
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("t", GgmlType::kF32, {1024}, [](const GgufChunkSink& sink) {
                 return sink(std::string(4096, 'x'));
               }).ok());
  const std::string path = Path("fail.gguf");
  EXPECT_FALSE(w.Write(faulty, path).ok());
  EXPECT_FALSE(env_.FileExists(path));
  EXPECT_TRUE(env_.ListDir(dir_).value().empty());
}

// --- Reader: valid input ---

TEST(GgufReaderTest, ParsesAHandBuiltFile) {
  const std::string bytes = ValidFile().str();
  auto reader = Parse(bytes);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const GgufReader& r = **reader;
  EXPECT_EQ(r.GetString("general.architecture").value(), "llama");
  EXPECT_EQ(r.GetUint("test.count").value(), 7u);
  EXPECT_EQ(r.alignment(), 32u);  // the default: no general.alignment key
  ASSERT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.tensors()[1].file_offset, r.data_offset() + 32);
  EXPECT_EQ(r.TensorData(r.tensors()[1])[67], 67);
}

TEST(GgufReaderTest, AcceptsVersion2WhichHasTheSameLayout) {
  std::string bytes = ValidFile().str();
  bytes[4] = 2;
  EXPECT_TRUE(Parse(bytes).ok());
}

TEST(GgufReaderTest, AcceptsAFileWithoutTensorsThatEndsBeforeThePadding) {
  Bytes b;
  b.Header(0, 1).KvU32("a.b", 1);
  auto reader = Parse(b.str());
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->GetUint("a.b").value(), 1u);
}

// --- Reader: malformed input ---

TEST(GgufReaderTest, EveryTruncationIsAnErrorNotACrash) {
  const std::string bytes = ValidFile().str();
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto reader = Parse(bytes.substr(0, n));
    ASSERT_FALSE(reader.ok()) << "prefix of " << n << " bytes accepted";
    const StatusCode code = reader.status().code();
    if (n < 4) {
      EXPECT_EQ(code, StatusCode::kInvalidArgument) << n;
    } else {
      EXPECT_EQ(code, StatusCode::kDataLoss) << n << ": " << reader.status();
    }
  }
}

TEST(GgufReaderTest, RejectsABadMagic) {
  std::string bytes = ValidFile().str();
  bytes[3] = 'X';
  ExpectRejected(bytes, StatusCode::kInvalidArgument, "not a GGUF file");
  ExpectRejected("", StatusCode::kInvalidArgument, "not a GGUF file");
}

TEST(GgufReaderTest, RejectsVersion1AndUnknownVersionsAndBigEndianFiles) {
  std::string bytes = ValidFile().str();
  bytes[4] = 1;
  ExpectRejected(bytes, StatusCode::kUnimplemented, "version 1");
  bytes[4] = 4;
  ExpectRejected(bytes, StatusCode::kUnimplemented, "version 4");
  bytes[4] = 0;
  bytes[7] = 3;  // 3 as a big-endian u32
  ExpectRejected(bytes, StatusCode::kUnimplemented, "big-endian");
}

TEST(GgufReaderTest, RejectsCountsOverTheLimits) {
  Bytes many_tensors;
  many_tensors.Header(kMaxGgufTensors + 1, 0);
  ExpectRejected(many_tensors.str(), StatusCode::kResourceExhausted, "max_tensors");
  Bytes many_kvs;
  many_kvs.Header(0, kMaxGgufKvPairs + 1);
  ExpectRejected(many_kvs.str(), StatusCode::kResourceExhausted, "max_kv_pairs");
  // Limits are configurable; the defaults are what Open and Parse use without them.
  GgufLimits small;
  small.max_tensors = 1;
  ExpectRejected(ValidFile().str(), StatusCode::kResourceExhausted, "2 tensors exceed", small);
  // A count within the limit but larger than the file is a truncation.
  Bytes lying;
  lying.Header(1000, 0);
  ExpectRejected(lying.str(), StatusCode::kDataLoss, "truncated");
}

TEST(GgufReaderTest, RejectsStringLengthsBeyondTheFileOrTheLimit) {
  Bytes beyond;
  beyond.Header(0, 1).U64(1ull << 62).Raw("key");
  ExpectRejected(beyond.str(), StatusCode::kDataLoss, "beyond the end of the file");
  Bytes value_beyond;
  value_beyond.Header(0, 1).Str("a.key").U32(8).U64(100).Raw("short");
  ExpectRejected(value_beyond.str(), StatusCode::kDataLoss, "metadata key 'a.key'");
  GgufLimits small;
  small.max_string_bytes = 4;
  Bytes long_value;
  long_value.Header(0, 1).KvString("a.key", "five!");
  ExpectRejected(long_value.str(), StatusCode::kResourceExhausted, "max_string_bytes", small);
  Bytes long_name;
  long_name.Header(1, 0).Tensor(std::string(64, 'n'), {1}, 0, 0);
  ExpectRejected(long_name.str(), StatusCode::kResourceExhausted, "kMaxGgufTensorNameBytes");
}

TEST(GgufReaderTest, RejectsBadValueTypesAndBadValues) {
  Bytes bad_type;
  bad_type.Header(0, 1).Str("a.key").U32(13).U32(0);
  ExpectRejected(bad_type.str(), StatusCode::kDataLoss, "unknown value type 13");
  Bytes bad_element;
  bad_element.Header(0, 1).Str("a.key").U32(9).U32(77).U64(0);
  ExpectRejected(bad_element.str(), StatusCode::kDataLoss, "unknown array element type 77");
  Bytes bad_bool;
  bad_bool.Header(0, 1).Str("a.key").U32(7).U8(2);
  ExpectRejected(bad_bool.str(), StatusCode::kDataLoss, "a bool must be 0 or 1");
  Bytes duplicate;
  duplicate.Header(0, 2).KvU32("a.key", 1).KvU32("a.key", 2);
  ExpectRejected(duplicate.str(), StatusCode::kDataLoss, "appears twice");
  Bytes empty_key;
  empty_key.Header(0, 1).KvU32("", 1);
  ExpectRejected(empty_key.str(), StatusCode::kDataLoss, "is empty");
  Bytes control_key;
  control_key.Header(0, 1).KvU32("a\nb", 1);
  ExpectRejected(control_key.str(), StatusCode::kDataLoss, "'a\\x0ab'");
}

TEST(GgufReaderTest, RejectsArraysOverTheLimitsOrLargerThanTheFile) {
  Bytes huge;
  huge.Header(0, 1).Str("a.key").U32(9).U32(4).U64(kMaxGgufArrayElements + 1);
  ExpectRejected(huge.str(), StatusCode::kResourceExhausted, "max_array_elements");
  Bytes larger_than_file;
  larger_than_file.Header(0, 1).Str("a.key").U32(9).U32(8).U64(1000).Str("x");
  ExpectRejected(larger_than_file.str(), StatusCode::kDataLoss, "cannot fit");
  GgufLimits small;
  small.max_total_array_elements = 5;
  Bytes two_arrays;
  two_arrays.Header(0, 2);
  two_arrays.Str("a.one").U32(9).U32(0).U64(3).U8(1).U8(2).U8(3);
  two_arrays.Str("a.two").U32(9).U32(0).U64(3).U8(1).U8(2).U8(3);
  ExpectRejected(two_arrays.str(), StatusCode::kResourceExhausted, "max_total_array_elements",
                 small);
  Bytes deep;
  deep.Header(0, 1).Str("a.key").U32(9);
  for (int i = 0; i < kMaxGgufArrayDepth; ++i) deep.U32(9).U64(1);
  deep.U32(0).U64(0);
  ExpectRejected(deep.str(), StatusCode::kResourceExhausted, "max_array_depth");
}

TEST(GgufReaderTest, RejectsBadAlignments) {
  for (uint32_t alignment : {0u, 24u, 1u << 20}) {
    Bytes b;
    b.Header(0, 1).KvU32("general.alignment", alignment);
    ExpectRejected(b.str(), StatusCode::kDataLoss, "general.alignment");
  }
  Bytes wrong_type;
  wrong_type.Header(0, 1).Str("general.alignment").U32(10).U64(32);
  ExpectRejected(wrong_type.str(), StatusCode::kDataLoss, "must be a u32");
}

TEST(GgufReaderTest, RejectsBadTensorInfos) {
  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    Bytes b;
    b.Header(1, 0).Tensor("w", std::move(ne), type, offset).PadTo(32).Zeros(data_bytes);
    return b.str();
  };
  EXPECT_TRUE(Parse(one_tensor({8}, 0, 0, 32)).ok());
  ExpectRejected(one_tensor({1, 1, 1, 1, 1}, 0, 0, 32), StatusCode::kDataLoss, "5 dimensions");
  ExpectRejected(one_tensor({8}, 77, 0, 32), StatusCode::kUnimplemented, "ggml type 77");
  ExpectRejected(one_tensor({48}, 8, 0, 64), StatusCode::kDataLoss, "not a multiple of Q8_0");
  ExpectRejected(one_tensor({1ull << 62, 1ull << 62}, 0, 0, 32), StatusCode::kDataLoss,
                 "overflows");
  ExpectRejected(one_tensor({8}, 0, 16, 64), StatusCode::kDataLoss, "not a multiple of the");
  ExpectRejected(one_tensor({8}, 0, 32, 32), StatusCode::kDataLoss, "past the end");
  ExpectRejected(one_tensor({9}, 0, 0, 32), StatusCode::kDataLoss, "past the end");
  ExpectRejected(one_tensor({8}, 0, ~uint64_t{0} - 31, 32), StatusCode::kDataLoss, "past the end");

  Bytes overlapping;
  overlapping.Header(2, 0).Tensor("a", {16}, 0, 0).Tensor("b", {8}, 0, 32).PadTo(32).Zeros(96);
  ExpectRejected(overlapping.str(), StatusCode::kDataLoss, "overlap");
  Bytes same_name;
  same_name.Header(2, 0).Tensor("a", {8}, 0, 0).Tensor("a", {8}, 0, 32).PadTo(32).Zeros(64);
  ExpectRejected(same_name.str(), StatusCode::kDataLoss, "appears twice");
  Bytes no_data;
  no_data.Header(1, 0).Tensor("a", {8}, 0, 0);
  ExpectRejected(no_data.str(), StatusCode::kDataLoss, "data section would start");
}

TEST(GgufReaderTest, UsesTheFilesAlignmentForOffsets) {
  Bytes b;
  b.Header(2, 1).KvU32("general.alignment", 8);
  b.Tensor("a", {1}, 0, 0).Tensor("b", {2}, 0, 8).PadTo(8).Zeros(16);
  auto reader = Parse(b.str());
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->alignment(), 8u);
  EXPECT_EQ((*reader)->data_offset() % 8, 0u);
}

TEST_F(GgufTest, OpenNamesThePathInErrors) {
  auto missing = GgufReader::Open(Path("missing.gguf"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(env_.WriteFileAtomically(Path("bad.gguf"), "GGUF\x01").ok());
  auto bad = GgufReader::Open(Path("bad.gguf"));
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("bad.gguf"), std::string::npos) << bad.status();
  ASSERT_TRUE(env_.WriteFileAtomically(Path("empty.gguf"), "").ok());
  EXPECT_EQ(GgufReader::Open(Path("empty.gguf")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GgufReader::Open(dir_).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sovai::model
