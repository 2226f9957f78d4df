#include "kernels/cuda/matmul_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace sovai::kernels::cuda {
namespace {

using base::StatusCode;
using tensor::DType;

// Addresses as cudaMalloc returns them (256-byte aligned), and offsets from there. Never
// dereferenced: the plan only looks at them.
constexpr uintptr_t kBase = 0x7f0000000000;
const uint16_t* Bf16At(uintptr_t address) { return reinterpret_cast<const uint16_t*>(address); }
void* OutAt(uintptr_t address) { return reinterpret_cast<void*>(address); }

GemmArgs ValidArgs(int64_t m, int64_t n, int64_t k) {
  return GemmArgs{.m = m,
                  .n = n,
                  .k = k,
                  .a = Bf16At(kBase),
                  .b = Bf16At(kBase + 0x10000000),
                  .c = OutAt(kBase + 0x20000000)};
}

// What cuBLASLt computes, by its definition: D = op(A) op(B) with every matrix column-major,
// element (i, j) of a rows x cols matrix at i + j * ld, and op(X) = X or X^T.
void ColumnMajorReference(const ColumnMajorGemm& g, const std::vector<float>& a,
                          const std::vector<float>& b, std::vector<float>& d) {
  auto op_a = [&](int64_t i, int64_t l) {  // op(A) is m x k
    return g.transpose_a ? a[l + i * g.a.ld] : a[i + l * g.a.ld];
  };
  auto op_b = [&](int64_t l, int64_t j) {  // op(B) is k x n
    return g.transpose_b ? b[j + l * g.b.ld] : b[l + j * g.b.ld];
  };
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      double sum = 0;
      for (int64_t l = 0; l < g.k; ++l) sum += double{op_a(i, l)} * op_b(l, j);
      d[i + j * g.d.ld] = static_cast<float>(sum);
    }
  }
}

// The row-major product the engine asks for, straight from the definition at the top of
// matmul_plan.h, element (r, c) of a stored matrix at r * ld + c.
void RowMajorReference(const GemmArgs& args, const std::vector<float>& a,
                       const std::vector<float>& b, std::vector<float>& c) {
  const StoredMatrix sa = StoredA(args);
  const StoredMatrix sb = StoredB(args);
  const int64_t ldc = args.ldc == 0 ? args.n : args.ldc;
  for (int64_t i = 0; i < args.m; ++i) {
    for (int64_t j = 0; j < args.n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < args.k; ++l) {
        const float x = args.transpose_a ? a[l * sa.ld + i] : a[i * sa.ld + l];
        const float w = args.transpose_b ? b[j * sb.ld + l] : b[l * sb.ld + j];
        sum += double{x} * w;
      }
      c[i * ldc + j] = static_cast<float>(sum);
    }
  }
}

TEST(MatmulPlanTest, WeightProductSwapsOperandsAndTransposesTheWeight) {
  // x[M=3, K=5] @ W^T with W [N=7, K=5]: cuBLASLt computes C^T[7, 3] = W (op T) x^T (op N).
  const ColumnMajorGemm g = ToColumnMajor(ValidArgs(3, 7, 5));
  EXPECT_EQ(g.m, 7);
  EXPECT_EQ(g.n, 3);
  EXPECT_EQ(g.k, 5);
  EXPECT_TRUE(g.transpose_a);
  EXPECT_FALSE(g.transpose_b);
  EXPECT_EQ(g.a, (ColumnMajorMatrix{.rows = 5, .cols = 7, .ld = 5}));  // W's buffer
  EXPECT_EQ(g.b, (ColumnMajorMatrix{.rows = 5, .cols = 3, .ld = 5}));  // x's buffer
  EXPECT_EQ(g.d, (ColumnMajorMatrix{.rows = 7, .cols = 3, .ld = 7}));  // C's buffer
}

TEST(MatmulPlanTest, RowStridesBecomeLeadingDimensions) {
  GemmArgs args = ValidArgs(3, 7, 5);
  args.lda = 9;
  args.ldb = 6;
  args.ldc = 11;
  const ColumnMajorGemm g = ToColumnMajor(args);
  EXPECT_EQ(g.a.ld, 6);
  EXPECT_EQ(g.b.ld, 9);
  EXPECT_EQ(g.d.ld, 11);
}

TEST(MatmulPlanTest, MappingComputesTheRowMajorProductForEveryTranspose) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (const bool transpose_a : {false, true}) {
    for (const bool transpose_b : {false, true}) {
      for (const int64_t pad : {0, 3}) {
        GemmArgs args = ValidArgs(4, 6, 5);
        args.transpose_a = transpose_a;
        args.transpose_b = transpose_b;
        if (pad != 0) {
          args.lda = StoredA(args).cols + pad;
          args.ldb = StoredB(args).cols + pad;
          args.ldc = args.n + pad;
        }
        ASSERT_TRUE(ValidateGemm(args).ok());
        const StoredMatrix sa = StoredA(args);
        const StoredMatrix sb = StoredB(args);
        std::vector<float> a(sa.rows * sa.ld), b(sb.rows * sb.ld);
        for (float& v : a) v = dist(rng);
        for (float& v : b) v = dist(rng);
        const int64_t ldc = args.ldc == 0 ? args.n : args.ldc;
        std::vector<float> want(args.m * ldc, 0.0f), got(args.m * ldc, 0.0f);
        RowMajorReference(args, a, b, want);
        // cuBLASLt's A is our B's buffer and its B our A's, unchanged.
        ColumnMajorReference(ToColumnMajor(args), b, a, got);
        for (int64_t i = 0; i < args.m; ++i) {
          for (int64_t j = 0; j < args.n; ++j) {
            EXPECT_NEAR(got[i * ldc + j], want[i * ldc + j], 1e-6)
                << "transpose_a=" << transpose_a << " transpose_b=" << transpose_b << " pad=" << pad
                << " at (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

TEST(MatmulPlanTest, StoredShapesFollowTheTransposeFlags) {
  GemmArgs args = ValidArgs(3, 7, 5);
  EXPECT_EQ(StoredA(args).rows, 3);
  EXPECT_EQ(StoredA(args).cols, 5);
  EXPECT_EQ(StoredB(args).rows, 7);  // [N, K]
  EXPECT_EQ(StoredB(args).cols, 5);
  args.transpose_a = true;
  args.transpose_b = false;
  EXPECT_EQ(StoredA(args).rows, 5);  // [K, M]
  EXPECT_EQ(StoredA(args).cols, 3);
  EXPECT_EQ(StoredB(args).rows, 5);  // [K, N]
  EXPECT_EQ(StoredB(args).cols, 7);
}

TEST(MatmulPlanTest, ValidArgumentsPass) {
  EXPECT_TRUE(ValidateGemm(ValidArgs(1, 4096, 4096)).ok());
  GemmArgs f32 = ValidArgs(3, 7, 5);
  f32.c_type = DType::kF32;
  f32.bias = OutAt(kBase + 0x30000000);
  EXPECT_TRUE(ValidateGemm(f32).ok());
  // Pointers into the middle of a tensor are fine as long as elements are aligned.
  GemmArgs offset = ValidArgs(3, 7, 5);
  offset.a = Bf16At(kBase + 2);
  EXPECT_TRUE(ValidateGemm(offset).ok());
}

TEST(MatmulPlanTest, EmptyBatchIsValidAndEmpty) {
  GemmArgs args = ValidArgs(0, 7, 5);
  args.a = nullptr;  // nothing will be read
  args.c = nullptr;
  EXPECT_TRUE(ValidateGemm(args).ok());
  EXPECT_TRUE(GemmIsEmpty(args));
  EXPECT_TRUE(GemmIsEmpty(ValidArgs(3, 0, 5)));
  EXPECT_FALSE(GemmIsEmpty(ValidArgs(1, 1, 1)));
}

TEST(MatmulPlanTest, RejectsBadArguments) {
  auto code = [](GemmArgs args) { return ValidateGemm(args).code(); };
  EXPECT_EQ(code(ValidArgs(-1, 7, 5)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ValidArgs(3, -7, 5)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ValidArgs(3, 7, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ValidArgs(3, 7, kMaxGemmDim + 1)), StatusCode::kInvalidArgument);
  GemmArgs args = ValidArgs(3, 7, 5);
  args.a = nullptr;
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  args = ValidArgs(3, 7, 5);
  args.b = nullptr;
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  args = ValidArgs(3, 7, 5);
  args.c = nullptr;
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  args = ValidArgs(3, 7, 5);
  args.c_type = DType::kF16;
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  args = ValidArgs(3, 7, 5);
  args.a = Bf16At(kBase + 1);  // not on a bf16 boundary
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  args = ValidArgs(3, 7, 5);
  args.c_type = DType::kF32;
  args.c = OutAt(kBase + 2);
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  args = ValidArgs(3, 7, 5);
  args.c_type = DType::kF32;
  args.bias = OutAt(kBase + 6);
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  // Row strides shorter than the stored rows: A [3, 5], B [7, 5], C [3, 7].
  args = ValidArgs(3, 7, 5);
  args.lda = 4;
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  args = ValidArgs(3, 7, 5);
  args.ldb = 4;
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  args = ValidArgs(3, 7, 5);
  args.ldc = 6;
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  args = ValidArgs(3, 7, 5);
  args.ldc = -1;
  EXPECT_EQ(code(args), StatusCode::kInvalidArgument);
  // Transposed A is stored [K, M] = [5, 3]: lda 3 holds a row, so it is valid then.
  args = ValidArgs(3, 7, 5);
  args.transpose_a = true;
  args.lda = 3;
  EXPECT_TRUE(ValidateGemm(args).ok());
}

TEST(MatmulPlanTest, ErrorsNameTheValue) {
  GemmArgs args = ValidArgs(3, 7, 5);
  args.ldc = 6;
  const base::Status status = ValidateGemm(args);
  EXPECT_NE(status.message().find("ldc = 6"), std::string::npos) << status;
}

TEST(MatmulPlanTest, PointerAlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(PointerAlignment(kBase), 256);
  EXPECT_EQ(PointerAlignment(kBase + 512), 256);
  EXPECT_EQ(PointerAlignment(kBase + 128), 128);
  EXPECT_EQ(PointerAlignment(kBase + 16), 16);
  EXPECT_EQ(PointerAlignment(kBase + 2), 2);
  EXPECT_EQ(PointerAlignment(kBase + 6), 2);
  EXPECT_EQ(PointerAlignment(1), 1);
  EXPECT_EQ(PointerAlignment(0), 256);
}

TEST(MatmulPlanTest, KeyDependsOnShapeTypesTransposesEpilogueAndAlignment) {
  const GemmArgs base_args = ValidArgs(3, 7, 5);
  const GemmKey key = MakeGemmKey(base_args);
  EXPECT_EQ(key.m, 7);  // cuBLASLt's terms
  EXPECT_EQ(key.n, 3);
  EXPECT_EQ(key.alignment_a_bytes, 256);
  EXPECT_EQ(key.alignment_bias_bytes, 0);

  GemmArgs same = base_args;
  same.alpha = 0.5f;  // run-time scalars never change the algorithm
  same.beta = 1.0f;
  same.c = OutAt(kBase + 0x40000000);  // another, equally aligned, buffer
  EXPECT_EQ(MakeGemmKey(same), key);

  std::vector<GemmArgs> different(8, base_args);
  different[0].m = 4;
  different[1].k = 6;
  different[2].transpose_a = true;
  different[3].transpose_b = false;
  different[4].c_type = DType::kF32;
  different[5].bias = OutAt(kBase + 0x30000000);
  different[6].a = Bf16At(kBase + 16);
  different[7].ldc = 8;
  for (size_t i = 0; i < different.size(); ++i) {
    EXPECT_NE(MakeGemmKey(different[i]), key) << "variant " << i;
  }
}

GemmKey KeyOfSize(int64_t m) { return MakeGemmKey(ValidArgs(m, 7, 5)); }
CachedGemmAlgo AlgoTagged(uint64_t tag) {
  CachedGemmAlgo algo;
  algo.algo[0] = tag;
  return algo;
}

TEST(MatmulPlanTest, CacheFindsWhatWasInserted) {
  GemmAlgoCache cache(4);
  EXPECT_EQ(cache.Find(KeyOfSize(1)), nullptr);
  cache.Insert(KeyOfSize(1), AlgoTagged(11));
  cache.Insert(KeyOfSize(2), AlgoTagged(22));
  ASSERT_NE(cache.Find(KeyOfSize(1)), nullptr);
  EXPECT_EQ(cache.Find(KeyOfSize(1))->algo[0], 11u);
  EXPECT_EQ(cache.Find(KeyOfSize(2))->algo[0], 22u);
  cache.Insert(KeyOfSize(1), AlgoTagged(33));  // replaces
  EXPECT_EQ(cache.Find(KeyOfSize(1))->algo[0], 33u);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(MatmulPlanTest, CacheIsBoundedAndForgetsTheLeastRecentlyUsed) {
  GemmAlgoCache cache(3);
  for (int64_t m = 1; m <= 3; ++m) cache.Insert(KeyOfSize(m), AlgoTagged(m));
  ASSERT_NE(cache.Find(KeyOfSize(1)), nullptr);  // 1 is now the most recent; 2 the least
  cache.Insert(KeyOfSize(4), AlgoTagged(4));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.Find(KeyOfSize(2)), nullptr);
  EXPECT_NE(cache.Find(KeyOfSize(1)), nullptr);
  EXPECT_NE(cache.Find(KeyOfSize(3)), nullptr);
  EXPECT_NE(cache.Find(KeyOfSize(4)), nullptr);
  for (int64_t m = 10; m < 100; ++m) cache.Insert(KeyOfSize(m), AlgoTagged(m));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.capacity(), 3u);
  EXPECT_EQ(GemmAlgoCache().capacity(), kMatmulAlgoCacheCapacity);
}

}  // namespace
}  // namespace sovai::kernels::cuda
