#include "kernels/cuda/launch_plan.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace sovai::kernels::cuda {
namespace {

// Addresses as cudaMalloc returns them (256-byte aligned), and offsets from there.
constexpr uintptr_t kBase = 0x7f0000000000;

Operand Bf16At(uintptr_t address) { return Operand{address, 2}; }
Operand F32At(uintptr_t address) { return Operand{address, 4}; }

int Width(int64_t row_len, std::vector<Operand> operands) {
  auto width = ChooseVectorWidth(row_len, operands);
  EXPECT_TRUE(width.ok()) << width.status();
  return width.value_or(-1);
}

TEST(LaunchPlanTest, VectorWidthIsSixteenBytesOfTheNarrowestOperandWhenAligned) {
  EXPECT_EQ(Width(4096, {Bf16At(kBase)}), 8);
  EXPECT_EQ(Width(4096, {F32At(kBase)}), 4);
  EXPECT_EQ(Width(4096, {Operand{kBase, 1}}), 16);
  // bf16 in, f32 out: 8 elements per access (16 bytes of bf16, two 16-byte f32 accesses).
  EXPECT_EQ(Width(4096, {Bf16At(kBase), F32At(kBase + 4096)}), 8);
}

TEST(LaunchPlanTest, VectorWidthHalvesForOddRowLengths) {
  EXPECT_EQ(Width(4100, {Bf16At(kBase)}), 4);  // 4100 = 4 * 1025
  EXPECT_EQ(Width(4098, {Bf16At(kBase)}), 2);
  EXPECT_EQ(Width(4097, {Bf16At(kBase)}), 1);
  EXPECT_EQ(Width(1, {Bf16At(kBase)}), 1);
  EXPECT_EQ(Width(6, {F32At(kBase)}), 2);
}

TEST(LaunchPlanTest, VectorWidthHalvesForMisalignedOperands) {
  EXPECT_EQ(Width(4096, {Bf16At(kBase + 8)}), 4);
  EXPECT_EQ(Width(4096, {Bf16At(kBase + 4)}), 2);
  EXPECT_EQ(Width(4096, {Bf16At(kBase + 2)}), 1);
  EXPECT_EQ(Width(4096, {F32At(kBase + 8)}), 2);
  // One misaligned operand decides for all.
  EXPECT_EQ(Width(4096, {Bf16At(kBase), Bf16At(kBase + 2), Bf16At(kBase)}), 1);
  // f32 beside bf16 needs 16 bytes (not 32) for width 8: its accesses are 16 bytes each.
  EXPECT_EQ(Width(4096, {Bf16At(kBase), F32At(kBase + 16)}), 8);
  EXPECT_EQ(Width(4096, {Bf16At(kBase), F32At(kBase + 8)}), 2);
}

TEST(LaunchPlanTest, NullOperandsImposeNothing) {
  EXPECT_EQ(Width(4096, {Bf16At(kBase), Bf16At(0)}), 8);
}

TEST(LaunchPlanTest, VectorWidthRejectsBadInput) {
  const Operand bf16[] = {Bf16At(kBase)};
  EXPECT_EQ(ChooseVectorWidth(0, bf16).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChooseVectorWidth(-8, bf16).status().code(), base::StatusCode::kInvalidArgument);
  for (int bytes : {0, -2, 3, 32}) {
    const Operand bad[] = {Operand{kBase, bytes}};
    auto width = ChooseVectorWidth(64, bad);
    EXPECT_EQ(width.status().code(), base::StatusCode::kInvalidArgument) << bytes;
  }
}

TEST(LaunchPlanTest, RowsGetOneBlockEachWithAThreadPerVector) {
  const Operand operands[] = {Bf16At(kBase), Bf16At(kBase + (1 << 20))};
  auto plan = PlanRows(8192, 4096, operands);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->vector_width, 8);
  EXPECT_EQ(plan->threads, 512);  // 4096 / 8 vectors
  EXPECT_EQ(plan->blocks, 8192);
}

TEST(LaunchPlanTest, RowThreadsAreWholeWarpsAndCapped) {
  const Operand bf16[] = {Bf16At(kBase)};
  auto small = PlanRows(3, 24, bf16);  // 3 vectors of 8: still one whole warp
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->vector_width, 8);
  EXPECT_EQ(small->threads, 32);
  EXPECT_EQ(small->blocks, 3);

  auto odd = PlanRows(5, 1001, bf16);  // scalar: 1001 vectors -> 32 warps
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(odd->vector_width, 1);
  EXPECT_EQ(odd->threads, 1024);

  auto wide = PlanRows(2, 1 << 20, bf16);  // 131072 vectors: capped, threads stride the row
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->threads, 1024);

  auto capped = PlanRows(2, 1 << 20, bf16, {.max_threads_per_block = 256, .max_blocks = 100});
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->threads, 256);
}

TEST(LaunchPlanTest, RowBlocksAreCappedByTheGridLimit) {
  const Operand bf16[] = {Bf16At(kBase)};
  auto plan = PlanRows(int64_t{3} << 31, 64, bf16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->blocks, 2147483647);
  auto limited = PlanRows(1000, 64, bf16, {.max_threads_per_block = 1024, .max_blocks = 7});
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_EQ(limited->blocks, 7);
}

TEST(LaunchPlanTest, RowsRejectBadSizesAndLimits) {
  const Operand bf16[] = {Bf16At(kBase)};
  EXPECT_EQ(PlanRows(0, 64, bf16).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanRows(-1, 64, bf16).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanRows(4, 0, bf16).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanRows(4, -64, bf16).status().code(), base::StatusCode::kInvalidArgument);
  auto overflow = PlanRows(int64_t{1} << 40, int64_t{1} << 30, bf16);
  EXPECT_EQ(overflow.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(overflow.status().message().find("overflows"), std::string::npos) << overflow.status();
  for (LaunchLimits bad :
       {LaunchLimits{.max_threads_per_block = 0}, LaunchLimits{.max_threads_per_block = 100},
        LaunchLimits{.max_threads_per_block = 1024, .max_blocks = 0}}) {
    auto plan = PlanRows(4, 64, bf16, bad);
    EXPECT_EQ(plan.status().code(), base::StatusCode::kInvalidArgument) << plan.status();
  }
  auto zero = PlanRows(0, 64, bf16);
  EXPECT_NE(zero.status().message().find("row count must be positive, got 0"), std::string::npos)
      << zero.status();
}

TEST(LaunchPlanTest, ElementwiseCoversEveryVectorWithAGridStride) {
  const Operand operands[] = {Bf16At(kBase), Bf16At(kBase + 256), Bf16At(kBase + 512)};
  auto plan = PlanElementwise(1000, operands);  // 125 vectors of 8
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->vector_width, 8);
  EXPECT_EQ(plan->vectors, 125);
  EXPECT_EQ(plan->threads, kElementwiseThreads);
  EXPECT_EQ(plan->blocks, 1);

  auto big = PlanElementwise(int64_t{1} << 30, operands);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->vectors, int64_t{1} << 27);
  EXPECT_EQ(big->blocks, (int64_t{1} << 27) / kElementwiseThreads);

  auto odd = PlanElementwise(1001, operands);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(odd->vector_width, 1);
  EXPECT_EQ(odd->vectors, 1001);
  EXPECT_EQ(odd->blocks, 4);  // ceil(1001 / 256)

  auto capped = PlanElementwise(int64_t{1} << 30, operands,
                                {.max_threads_per_block = 128, .max_blocks = 1000});
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->threads, 128);
  EXPECT_EQ(capped->blocks, 1000);  // the threads stride over the other vectors

  EXPECT_EQ(PlanElementwise(0, operands).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanElementwise(-5, operands).status().code(), base::StatusCode::kInvalidArgument);
}

TEST(LaunchPlanTest, RopeVectorsArePairsOfOneHead) {
  auto plan = PlanRope(16, 32, 128, Bf16At(kBase));  // half = 64: 8 pairs per access
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->vector_width, 8);
  EXPECT_EQ(plan->vectors, 16 * 32 * 64 / 8);

  auto odd_half = PlanRope(3, 5, 6, Bf16At(kBase));  // half = 3: scalar
  ASSERT_TRUE(odd_half.ok()) << odd_half.status();
  EXPECT_EQ(odd_half->vector_width, 1);
  EXPECT_EQ(odd_half->vectors, 3 * 5 * 3);

  auto misaligned = PlanRope(2, 2, 64, Bf16At(kBase + 4));
  ASSERT_TRUE(misaligned.ok()) << misaligned.status();
  EXPECT_EQ(misaligned->vector_width, 2);
}

TEST(LaunchPlanTest, RopeRejectsBadShapes) {
  for (int64_t head_dim : {int64_t{0}, int64_t{-2}, int64_t{7}, int64_t{1}, int64_t{8192}}) {
    auto plan = PlanRope(4, 4, head_dim, Bf16At(kBase));
    EXPECT_EQ(plan.status().code(), base::StatusCode::kInvalidArgument) << head_dim;
  }
  EXPECT_EQ(PlanRope(0, 4, 64, Bf16At(kBase)).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanRope(4, 0, 64, Bf16At(kBase)).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanRope(4, -1, 64, Bf16At(kBase)).status().code(), base::StatusCode::kInvalidArgument);
}

TEST(LaunchPlanTest, Nf4UnitsAreCodeBytesInsideOneBlock) {
  const Operand codes{kBase, 1};
  const Operand out{kBase + (1 << 20), 4};
  auto plan = PlanNf4Dequantize(4096, codes, out);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->vector_width, 16);  // one 16-byte load of codes, 32 values
  EXPECT_EQ(plan->vectors, 4096 / 2 / 16);

  auto small = PlanNf4Dequantize(64, Operand{kBase + 8, 1}, out);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->vector_width, 8);
  // A bf16 output at an odd 2-byte offset: one code byte (two separate bf16 stores) per thread.
  auto misaligned_out = PlanNf4Dequantize(64, codes, Operand{kBase + 2, 4});
  ASSERT_TRUE(misaligned_out.ok()) << misaligned_out.status();
  EXPECT_EQ(misaligned_out->vector_width, 1);

  for (int64_t numel : {int64_t{0}, int64_t{-64}, int64_t{32}, int64_t{100}}) {
    auto bad = PlanNf4Dequantize(numel, codes, out);
    EXPECT_EQ(bad.status().code(), base::StatusCode::kInvalidArgument) << numel;
  }
}

TEST(LaunchPlanTest, SumOfSquaresHasAFixedNumberOfPartials) {
  auto small = PlanSumOfSquares(1000, F32At(kBase));
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->first_pass.vector_width, 4);
  EXPECT_EQ(small->first_pass.blocks, 1);  // 250 vectors
  EXPECT_EQ(small->workspace_bytes, 8);

  auto big = PlanSumOfSquares(int64_t{1} << 32, F32At(kBase));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->first_pass.blocks, kSumOfSquaresMaxPartials);
  EXPECT_EQ(big->workspace_bytes, kSumOfSquaresWorkspaceBytes);

  // The plan depends on the count and alignment only, never on a device's size.
  auto again = PlanSumOfSquares(int64_t{1} << 32, F32At(kBase + 4096));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->first_pass.blocks, big->first_pass.blocks);
  EXPECT_EQ(again->first_pass.vector_width, big->first_pass.vector_width);

  auto odd = PlanSumOfSquares(7, F32At(kBase));
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(odd->first_pass.vector_width, 1);
  EXPECT_EQ(odd->first_pass.vectors, 7);

  EXPECT_EQ(PlanSumOfSquares(0, F32At(kBase)).status().code(), base::StatusCode::kInvalidArgument);
}

uint32_t Bits(float value) { return std::bit_cast<uint32_t>(value); }
float FromBits(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(LaunchPlanTest, Bf16ConversionRoundsToNearestEven) {
  const std::vector<float> from = {
      1.0f,
      FromBits(0x3f808000),  // exactly halfway between 0x3f80 and 0x3f81: to even, 0x3f80
      FromBits(0x3f818000),  // halfway between 0x3f81 and 0x3f82: to even, 0x3f82
      FromBits(0x3f808001),  // just above halfway: up
      FromBits(0x3f807fff),  // just below: down
      -2.5f,
      0.0f,
      -0.0f,
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      FromBits(0x7f7fffff),  // the largest float rounds up to infinity, as PyTorch does
      FromBits(0x00000001),  // the smallest subnormal rounds to zero
  };
  const std::vector<uint16_t> want = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x3f80, 0xc020,
                                      0x0000, 0x8000, 0x7f80, 0xff80, 0x7f80, 0x0000};
  std::vector<uint16_t> to(from.size());
  ASSERT_TRUE(ConvertToBF16(from, to).ok());
  EXPECT_EQ(to, want);
}

TEST(LaunchPlanTest, Bf16ConversionKeepsNaNANaN) {
  // A NaN whose payload sits only in the low 16 bits would truncate to infinity; it must not.
  const std::vector<float> from = {std::numeric_limits<float>::quiet_NaN(), FromBits(0x7f800001),
                                   FromBits(0xff800001), FromBits(0x7fc00000)};
  std::vector<uint16_t> to(from.size());
  ASSERT_TRUE(ConvertToBF16(from, to).ok());
  for (size_t i = 0; i < to.size(); ++i) {
    EXPECT_EQ(to[i] & 0x7f80, 0x7f80) << i;
    EXPECT_NE(to[i] & 0x007f, 0) << "NaN " << i << " became infinity: " << std::hex << to[i];
    EXPECT_EQ(to[i] >> 15, Bits(from[i]) >> 31) << "sign of NaN " << i;
  }
}

TEST(LaunchPlanTest, Bf16ConversionRejectsMismatchedSizes) {
  const std::vector<float> from(10, 1.0f);
  std::vector<uint16_t> to(9);
  const base::Status status = ConvertToBF16(from, to);
  EXPECT_EQ(status.code(), base::StatusCode::kInvalidArgument);
  std::vector<uint16_t> empty;
  EXPECT_TRUE(ConvertToBF16({}, empty).ok());
}

}  // namespace
}  // namespace sovai::kernels::cuda
