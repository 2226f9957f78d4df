#include "kernels/weight.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "kernels/nf4.h"
#include "kernels/q8_0.h"

namespace sovai::kernels {
namespace {

using tensor::DType;
using tensor::StorageType;
using tensor::Tensor;

std::vector<float> Normal(size_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(gen);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(WeightTest, FormatsMapToStorageTypes) {
  for (WeightRef::Format f : {WeightRef::Format::kF32, WeightRef::Format::kBF16,
                              WeightRef::Format::kNF4, WeightRef::Format::kQ8_0}) {
    EXPECT_EQ(WeightFormatOf(StorageTypeOf(f)), f);
  }
  EXPECT_EQ(WeightFormatOf(StorageType::kF16), std::nullopt);
}

TEST(WeightTest, ElementTypesAreRoundedAndViewedInPlace) {
  const std::vector<float> values = Normal(6 * 10, 1);
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto t = QuantizeTensor(values, {6, 10}, tensor::StorageTypeOf(d));
    ASSERT_TRUE(t.ok()) << t.status();
    const Tensor want = Tensor::FromF32(values, {6, 10}, d).value();
    ASSERT_EQ(t->bytes(), want.bytes());
    EXPECT_EQ(std::memcmp(t->raw_data(), want.raw_data(), want.bytes()), 0);
    EXPECT_TRUE(SameBits(DequantizeToF32(*t), want.ToF32()));
  }
  const Tensor bf16 = QuantizeTensor(values, {6, 10}, StorageType::kBF16).value();
  const WeightRef ref = WeightOf(bf16);
  EXPECT_EQ(ref.format, WeightRef::Format::kBF16);
  EXPECT_EQ(ref.data, bf16.raw_data());
  EXPECT_EQ(ref.rows, 6);
  EXPECT_EQ(ref.cols, 10);
}

TEST(WeightTest, Q8_0QuantizesEachRowOfTheLastDimension) {
  // Rank 3: the ops see rows = 2 * 3.
  const std::vector<float> values = Normal(2 * 3 * 64, 2);
  auto t = QuantizeTensor(values, {2, 3, 64}, StorageType::kQ8_0);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->bytes(), Q8_0Bytes(values.size()));
  std::vector<uint8_t> want(Q8_0Bytes(values.size()));
  for (size_t r = 0; r < 6; ++r) {
    QuantizeRowQ8_0({values.data() + r * 64, 64}, {want.data() + r * Q8_0Bytes(64), Q8_0Bytes(64)});
  }
  EXPECT_EQ(std::memcmp(t->data<uint8_t>(), want.data(), want.size()), 0);
  std::vector<float> back(values.size());
  DequantizeRowQ8_0(want, back);
  EXPECT_TRUE(SameBits(DequantizeToF32(*t), back));
  const WeightRef ref = WeightOf(*t);
  EXPECT_EQ(ref.format, WeightRef::Format::kQ8_0);
  EXPECT_EQ(ref.data, t->raw_data());
  EXPECT_EQ(ref.rows, 6);
  EXPECT_EQ(ref.cols, 64);
}

TEST(WeightTest, Nf4HoldsWhatQuantizeNf4Computes) {
  // 300 blocks of 64: two absmax scales.
  const int64_t rows = 150, cols = 128;
  const std::vector<float> values = Normal(static_cast<size_t>(rows * cols), 3);
  const Nf4Quantized q = QuantizeNf4(values).value();
  Tensor t = QuantizeTensor(values, {rows, cols}, StorageType::kNF4).value();
  const tensor::ConstNf4Parts parts = std::as_const(t).nf4();
  EXPECT_EQ(std::memcmp(parts.codes, q.codes.data(), q.codes.size()), 0);
  EXPECT_EQ(std::memcmp(parts.absmax_codes, q.absmax_codes.data(), q.absmax_codes.size()), 0);
  EXPECT_EQ(std::memcmp(parts.absmax_scales, q.absmax_scales.data(), 2 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(parts.absmax_map, q.absmax_map.data(), sizeof q.absmax_map), 0);
  EXPECT_EQ(*parts.absmax_offset, q.absmax_offset);

  std::vector<float> want(values.size());
  DequantizeNf4(q.View(), rows * cols, want.data());
  EXPECT_TRUE(SameBits(DequantizeToF32(t), want));

  // The view survives a move of the tensor, and the ops read it as they read Nf4Quantized's.
  const WeightRef ref = WeightOf(t);
  const Tensor moved = std::move(t);
  EXPECT_EQ(ref.format, WeightRef::Format::kNF4);
  EXPECT_EQ(ref.rows, rows);
  EXPECT_EQ(ref.cols, cols);
  EXPECT_EQ(ref.nf4.codes, moved.nf4().codes);
  const WeightRef original{
      .format = WeightRef::Format::kNF4, .nf4 = q.View(), .rows = rows, .cols = cols};
  auto backend = NewReferenceBackend();
  const int64_t n = 3;
  const std::vector<float> x = Normal(static_cast<size_t>(n * cols), 4);
  std::vector<float> got(static_cast<size_t>(n * rows)), expected(got.size());
  backend->LinearForward(got.data(), x.data(), ref, nullptr, n);
  backend->LinearForward(expected.data(), x.data(), original, nullptr, n);
  EXPECT_TRUE(SameBits(got, expected));
}

TEST(WeightTest, ShapesAndValuesTheFormatCannotHoldAreRefused) {
  struct Case {
    std::vector<float> values;
    std::vector<int64_t> shape;
    StorageType type;
    std::string_view message;
  };
  std::vector<float> with_nan(128, 1.0f);
  with_nan[70] = std::nanf("");
  for (const Case& c : {
           Case{std::vector<float>(120), {4, 30}, StorageType::kQ8_0, "whole Q8_0 blocks"},
           Case{std::vector<float>(96), {96}, StorageType::kNF4, "whole NF4 blocks"},
           Case{std::vector<float>(64), {2, 64}, StorageType::kNF4, "given 64 values for 128"},
           Case{std::vector<float>(32), {2, 32}, StorageType::kQ8_0, "given 32 values for 64"},
           Case{std::vector<float>(6), {2, 4}, StorageType::kBF16, "given 6 values for 8"},
           Case{std::vector<float>(), {0, 64}, StorageType::kNF4, "multiple of 64"},
           Case{with_nan, {2, 64}, StorageType::kNF4, "element 70"},
       }) {
    auto t = QuantizeTensor(c.values, c.shape, c.type);
    ASSERT_FALSE(t.ok()) << tensor::FormatShape(c.shape);
    EXPECT_EQ(t.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status();
  }
}

TEST(WeightTest, TheTensorOverloadKeepsAndReportsTheName) {
  std::vector<float> values = Normal(64, 5);
  Tensor f32 = Tensor::FromF32(values, {2, 32}).value();
  f32.set_name("model.layers.0.mlp.up_proj.weight");
  auto q8 = QuantizeTensor(f32, StorageType::kQ8_0);
  ASSERT_TRUE(q8.ok()) << q8.status();
  EXPECT_EQ(q8->name(), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(q8->shape(), f32.shape());
  auto nf4 = QuantizeTensor(f32, StorageType::kNF4);  // 64 values: one block
  ASSERT_TRUE(nf4.ok()) << nf4.status();

  f32.data<float>()[3] = INFINITY;
  auto bad = QuantizeTensor(f32, StorageType::kNF4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("'model.layers.0.mlp.up_proj.weight': ", 0), 0u)
      << bad.status();
  Tensor odd = Tensor::FromF32(values, {4, 16}).value();
  odd.set_name("w");
  EXPECT_NE(QuantizeTensor(odd, StorageType::kQ8_0).status().message().find("'w': tensor [4, 16]"),
            std::string::npos);
}

TEST(WeightTest, EmptyTensorsDequantizeToNothing) {
  EXPECT_TRUE(DequantizeToF32(Tensor()).empty());
  const Tensor q8 = QuantizeTensor(std::vector<float>(), {0, 32}, StorageType::kQ8_0).value();
  EXPECT_EQ(q8.bytes(), 0u);
  EXPECT_TRUE(DequantizeToF32(q8).empty());
  EXPECT_EQ(WeightOf(q8).rows, 0);
}

// A weight uploaded to a backend's buffer: the view of the copy reads the same values through
// the backend's ops as the view of the host tensor (every format, NF4's parts at their offsets).
TEST(WeightTest, ViewsOfAnUploadedCopyReadTheCopy) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> values(2 * 64 * 4);
  for (float& v : values) v = normal(rng);
  auto backend = NewStrictBackend(NewReferenceBackend());
  for (StorageType type :
       {StorageType::kF32, StorageType::kBF16, StorageType::kQ8_0, StorageType::kNF4}) {
    SCOPED_TRACE(std::string(tensor::StorageTypeName(type)));
    const Tensor t = QuantizeTensor(values, {8, 64}, type).value();
    auto copy = backend->Allocate(t.bytes());
    ASSERT_TRUE(copy.ok());
    backend->Upload(copy->data(), t.raw_data(), t.bytes());
    const WeightRef ref = WeightOf(t, copy->data());
    EXPECT_EQ(ref.rows, 8);
    EXPECT_EQ(ref.cols, 64);
    if (type == StorageType::kNF4) {
      EXPECT_EQ(ref.nf4.absmax_offset, WeightOf(t).nf4.absmax_offset);
    } else {
      EXPECT_EQ(ref.data, copy->data());
    }
    // The embedding of every row through the strict backend, which refuses host pointers.
    std::vector<int32_t> ids(8);
    std::iota(ids.begin(), ids.end(), 0);
    auto device_ids = UploadNew<int32_t>(*backend, ids);
    auto out = backend->Allocate(values.size() * sizeof(float));
    ASSERT_TRUE(device_ids.ok() && out.ok());
    if (type == StorageType::kNF4) {
      backend->Nf4Dequantize(out->as<float>(), ref.nf4, t.numel());
    } else {
      backend->EmbeddingForward(out->as<float>(), device_ids->as<int32_t>(), ref, 8);
    }
    EXPECT_EQ(DownloadAll<float>(*out), DequantizeToF32(t));
  }
}

using WeightDeathTest = ::testing::Test;

TEST(WeightDeathTest, ViewsOfWhatTheOpsCannotReadAreBugs) {
  const Tensor f16 = Tensor::Zeros(StorageType::kF16, {2, 2}).value();
  EXPECT_DEATH((void)WeightOf(f16), "is not a weight the ops read");
  const Tensor scalar = Tensor::Zeros(StorageType::kF32, {}).value();
  EXPECT_DEATH((void)WeightOf(scalar), "is not a weight the ops read");
  const Tensor bf16 = Tensor::Zeros(StorageType::kBF16, {2, 32}).value();
  EXPECT_DEATH((void)QuantizeTensor(bf16, StorageType::kQ8_0), "the values must be f32");
}

}  // namespace
}  // namespace sovai::kernels
