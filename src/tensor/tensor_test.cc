#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace sovai::tensor {
namespace {

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kStorageAlignment == 0; }

TEST(StorageTypeTest, NamesAndElementTypes) {
  EXPECT_EQ(StorageTypeName(StorageType::kF32), "f32");
  EXPECT_EQ(StorageTypeName(StorageType::kF16), "f16");
  EXPECT_EQ(StorageTypeName(StorageType::kBF16), "bf16");
  EXPECT_EQ(StorageTypeName(StorageType::kQ8_0), "q8_0");
  EXPECT_EQ(StorageTypeName(StorageType::kNF4), "nf4");
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(ElementTypeOf(StorageTypeOf(d)), d);
    EXPECT_EQ(StorageTypeName(StorageTypeOf(d)), DTypeName(d));
  }
  EXPECT_EQ(ElementTypeOf(StorageType::kQ8_0), std::nullopt);
  EXPECT_EQ(ElementTypeOf(StorageType::kNF4), std::nullopt);
}

TEST(TensorTest, DefaultIsEmpty) {
  Tensor t;
  EXPECT_EQ(t.type(), StorageType::kF32);
  EXPECT_EQ(t.shape(), std::vector<int64_t>{0});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.bytes(), 0u);
  EXPECT_EQ(t.data<float>(), nullptr);
  EXPECT_TRUE(t.ToF32().empty());
  EXPECT_EQ(t.ShapeString(), "[0] f32");
}

TEST(TensorTest, ZerosOfEveryTypeHasItsSizeAndAlignedZeroStorage) {
  struct Case {
    StorageType type;
    std::vector<int64_t> shape;
    size_t bytes;
  };
  const Nf4Layout nf4 = Nf4LayoutOf(3 * 128);
  for (const Case& c :
       {Case{StorageType::kF32, {3, 5}, 60}, Case{StorageType::kF16, {3, 5}, 30},
        Case{StorageType::kBF16, {7}, 14}, Case{StorageType::kF32, {}, 4},
        Case{StorageType::kF32, {4, 0, 2}, 0}, Case{StorageType::kQ8_0, {3, 64}, 3 * 2 * 34},
        Case{StorageType::kNF4, {3, 128}, nf4.bytes}}) {
    SCOPED_TRACE(FormatShape(c.shape) + " " + std::string(StorageTypeName(c.type)));
    auto t = Tensor::Zeros(c.type, c.shape);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->type(), c.type);
    EXPECT_EQ(t->shape(), c.shape);
    EXPECT_EQ(t->rank(), static_cast<int>(c.shape.size()));
    int64_t numel = 1;
    for (int64_t d : c.shape) numel *= d;
    EXPECT_EQ(t->numel(), numel);
    EXPECT_EQ(t->bytes(), c.bytes);
    EXPECT_EQ(StorageBytes(c.type, c.shape).value(), c.bytes);
    if (c.bytes == 0) {
      EXPECT_EQ(t->raw_data(), nullptr);
      continue;
    }
    EXPECT_TRUE(Aligned(t->raw_data()));
    const auto* bytes = static_cast<const unsigned char*>(t->raw_data());
    for (size_t i = 0; i < t->bytes(); ++i) ASSERT_EQ(bytes[i], 0) << i;
  }
}

TEST(TensorTest, ShapesOutsideTheLimitsOrTheBlockFormatsAreRefused) {
  struct Case {
    StorageType type;
    std::vector<int64_t> shape;
    std::string_view message;
  };
  for (const Case& c : {
           Case{StorageType::kF32, {3, -1}, "tensor [3, -1] f32: a dimension is negative"},
           Case{StorageType::kF32, {1, 1, 1, 1, 1, 1, 1, 1, 1}, "more than 8 dimensions"},
           Case{StorageType::kF32, {int64_t{1} << 21, int64_t{1} << 20}, "elements (the limit)"},
           // A zero dimension does not let another one be arbitrarily large.
           Case{StorageType::kBF16, {0, kMaxElements + 1}, "elements (the limit)"},
           Case{StorageType::kQ8_0, {4, 30}, "tensor [4, 30] q8_0: the last dimension must be"},
           Case{StorageType::kQ8_0, {}, "whole Q8_0 blocks of 32 values"},
           Case{StorageType::kNF4, {3, 32}, "tensor [3, 32] nf4: the element count must be"},
           Case{StorageType::kNF4, {}, "whole NF4 blocks of 64 values"},
       }) {
    SCOPED_TRACE(FormatShape(c.shape));
    auto t = Tensor::Zeros(c.type, c.shape);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status();
    EXPECT_FALSE(StorageBytes(c.type, c.shape).ok());
  }
  // The limits themselves are allowed (sized, not allocated).
  EXPECT_EQ(StorageBytes(StorageType::kF32, std::vector<int64_t>{kMaxElements}).value(),
            static_cast<size_t>(kMaxElements) * 4);
  EXPECT_EQ(StorageBytes(StorageType::kF32, std::vector<int64_t>(kMaxRank, 2)).value(),
            size_t{4} << kMaxRank);
  EXPECT_EQ(StorageBytes(StorageType::kQ8_0, std::vector<int64_t>{2, 0, 32}).value(), 0u);
}

TEST(TensorTest, FromF32ConvertsToTheElementType) {
  const std::vector<float> values = {1.0f, -2.5f, 3.140625f, 1e-3f, 65504.0f, -0.0f};
  auto f32 = Tensor::FromF32(values, {2, 3});
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(f32->type(), StorageType::kF32);
  EXPECT_TRUE(Aligned(f32->data<float>()));
  EXPECT_EQ(std::memcmp(f32->data<float>(), values.data(), 24), 0);
  EXPECT_EQ(f32->ToF32(), values);

  auto bf16 = Tensor::FromF32(values, {3, 2}, DType::kBF16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->ShapeString(), "[3, 2] bf16");
  EXPECT_EQ(bf16->bytes(), 12u);
  auto f16 = Tensor::FromF32(values, {6}, DType::kF16);
  ASSERT_TRUE(f16.ok()) << f16.status();
  std::vector<float> from_bf16 = bf16->ToF32(), from_f16 = f16->ToF32();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(bf16->data<uint16_t>()[i], FloatToBF16(values[i])) << i;
    EXPECT_EQ(from_bf16[i], BF16ToFloat(FloatToBF16(values[i]))) << i;
    EXPECT_EQ(f16->data<uint16_t>()[i], FloatToF16(values[i])) << i;
    EXPECT_EQ(from_f16[i], F16ToFloat(FloatToF16(values[i]))) << i;
  }
  EXPECT_NE(from_bf16[3], values[3]) << "1e-3 is not a bf16: the conversion must round";
  EXPECT_TRUE(std::signbit(from_bf16[5]));
}

TEST(TensorTest, FromF32RefusesAValueCountThatIsNotTheShapes) {
  const std::vector<float> values(5, 1.0f);
  auto t = Tensor::FromF32(values, {2, 3});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("[2, 3] f32: given 5 values for 6 elements"),
            std::string::npos)
      << t.status();
  EXPECT_FALSE(Tensor::FromF32(values, {5, -1}).ok());
}

TEST(TensorTest, MovingKeepsTheStorageInPlaceAndCloneCopiesIt) {
  std::vector<float> values(96);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  Tensor t = Tensor::FromF32(values, {3, 32}).value();
  t.set_name("model.norm.weight");
  const float* data = t.data<float>();
  Tensor moved = std::move(t);
  EXPECT_EQ(moved.data<float>(), data) << "views taken before a move must stay valid";
  EXPECT_EQ(moved.name(), "model.norm.weight");

  Tensor copy = moved.Clone();
  EXPECT_NE(copy.data<float>(), moved.data<float>());
  EXPECT_EQ(copy.name(), "model.norm.weight");
  EXPECT_EQ(copy.shape(), moved.shape());
  EXPECT_EQ(copy.ToF32(), values);
  copy.data<float>()[5] = -1.0f;
  EXPECT_EQ(moved.data<float>()[5], 5.0f);
  EXPECT_EQ(moved.dim(0), 3);
  EXPECT_EQ(moved.dim(1), 32);
}

TEST(TensorTest, Nf4PartsFollowTheLayout) {
  // 300 blocks: two absmax scales, the second one partial.
  const int64_t numel = 64 * 300;
  const Nf4Layout layout = Nf4LayoutOf(numel);
  EXPECT_EQ(layout.blocks, 300);
  EXPECT_EQ(layout.scales, 2);
  EXPECT_EQ(layout.codes_offset, 0u);
  EXPECT_EQ(layout.absmax_codes_offset, 9600u);
  EXPECT_EQ(layout.absmax_scales_offset, 9900u);
  EXPECT_EQ(layout.absmax_map_offset, 9908u);
  EXPECT_EQ(layout.absmax_offset_offset, 9908u + 1024u);
  EXPECT_EQ(layout.bytes, 9908u + 1024u + 4u);
  const Nf4Layout padded = Nf4LayoutOf(64 * 3);
  EXPECT_EQ(padded.absmax_scales_offset, 100u) << "96 code bytes + 3 absmax codes, rounded up";

  Tensor t = Tensor::Zeros(StorageType::kNF4, {100, 192}).value();
  ASSERT_EQ(t.bytes(), layout.bytes);
  Nf4Parts parts = t.nf4();
  const auto* base = static_cast<const uint8_t*>(t.raw_data());
  EXPECT_EQ(parts.codes, base);
  EXPECT_EQ(t.data<uint8_t>(), base);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(parts.absmax_codes), base + 9600);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(parts.absmax_scales), base + 9900);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(parts.absmax_map), base + 9908);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(parts.absmax_offset), base + 9908 + 1024);
  parts.absmax_map[255] = 1.0f;
  *parts.absmax_offset = 0.25f;
  const Tensor& view = t;
  EXPECT_EQ(view.nf4().absmax_map[255], 1.0f);
  EXPECT_EQ(*view.nf4().absmax_offset, 0.25f);
}

using TensorDeathTest = ::testing::Test;

TEST(TensorDeathTest, MisuseIsABug) {
  Tensor bf16 = Tensor::Zeros(StorageType::kBF16, {2, 2}).value();
  EXPECT_DEATH((void)bf16.data<float>(), "read with the wrong element type");
  EXPECT_DEATH((void)bf16.data<uint8_t>(), "read with the wrong element type");
  EXPECT_DEATH((void)bf16.nf4(), "read as NF4");
  EXPECT_DEATH((void)bf16.dim(2), "axis 2 of \\[2, 2\\] bf16");
  Tensor q8 = Tensor::Zeros(StorageType::kQ8_0, {1, 32}).value();
  EXPECT_DEATH((void)q8.ToF32(), "block format");
  EXPECT_DEATH((void)q8.data<uint16_t>(), "wrong element type");
  EXPECT_DEATH((void)Nf4LayoutOf(65), "an NF4 tensor of 65 values");
}

}  // namespace
}  // namespace sovai::tensor
