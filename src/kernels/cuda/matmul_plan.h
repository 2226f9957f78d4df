// The host-side half of the cuBLASLt products (matmul.h), without CUDA: the problem as the engine
// states it (row-major GemmArgs), its checks, its mapping onto cuBLASLt's column-major layouts,
// and the bounded cache of chosen algorithms. Kept apart from matmul.cc so that it builds and is
// tested in every build, GPU or not; matmul.cc hands cuBLASLt exactly what these return.
//
// The product, row-major as the engine stores tensors:
//   C[M, N] = alpha * op(A) @ op(B) + beta * C + bias[N] (bias added to every row)
//   op(A) is [M, K]: A stored [M, K], or [K, M] with transpose_a (for dW = dY^T @ X).
//   op(B) is [K, N]: B stored [N, K] with transpose_b (the default: x @ W^T with W [out, in], the
//   way weights are stored), or [K, N] without (for dX = dY @ W).
// A and B are bf16; C (and bias) bf16 or f32; every product and sum is f32 (CUBLAS_COMPUTE_32F),
// C rounded once when stored. `ld*` is a stored row's stride in elements (0: packed rows).
//
// Row-major to column-major (cuBLASLt only knows column-major): a row-major matrix X[r, c] with
// row stride ld is, byte for byte, the column-major matrix X^T (c rows, r columns, ld). So
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T in column-major terms:
//   cuBLASLt's A  = our B's buffer, cuBLASLt's B = our A's buffer (the operands swap),
//   cuBLASLt's m = N, n = M, k = K (the output dimensions swap),
//   each operand keeps its own transpose flag: B stored [N, K] reads as the column-major K x N
//   matrix op(B), so op(B)^T needs CUBLAS_OP_T; A stored [M, K] reads as K x M = op(A)^T already,
//   CUBLAS_OP_N (and the other way round for the other storage),
//   C's buffer is the column-major N x M matrix C^T with leading dimension ldc.
// The bias is a vector over cuBLASLt's rows of D, i.e. over our N columns: added to every row.
//
// Errors: InvalidArgument naming the value, for a negative or too large size, K == 0, a null or
// misaligned pointer, a row stride shorter than its row, or an unsupported output type. M == 0 or
// N == 0 (an empty batch) is valid and nothing to do.
//
// Thread-safety: the functions are pure; a GemmAlgoCache is not synchronized (its owner is).
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>

#include "base/status.h"
#include "tensor/dtype.h"

namespace sovai::kernels::cuda {

// The workspace a MatmulPlanner owns and offers every product: the size cuBLAS's documentation
// recommends for Hopper (cublasSetWorkspace: 32 MiB there, 4 MiB before), enough for the split-K
// and stream-K algorithms the heuristic picks for large products.
inline constexpr int64_t kMatmulWorkspaceBytes = int64_t{32} << 20;
// Chosen algorithms kept per planner. One model has a few dozen distinct shapes (7 projections x
// forward/backward x prefill/decode batch sizes); the bound stops a server that sees every batch
// size from growing without end. The least recently used entry goes first.
inline constexpr size_t kMatmulAlgoCacheCapacity = 1024;
// The largest M, N, K and row stride: cuBLASLt's layouts take 64-bit sizes, but its kernels are
// only promised for 32-bit ones.
inline constexpr int64_t kMaxGemmDim = 2147483647;
// cuBLASLt's default (and largest) pointer alignment assumption; alignments are reported up to it.
inline constexpr int kMaxGemmAlignmentBytes = 256;

// One product, row-major (see the top of this file). Device pointers; c may not overlap a or b.
struct GemmArgs {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  const uint16_t* a = nullptr;  // bf16, [M, K] or with transpose_a [K, M]
  int64_t lda = 0;              // row stride of A as stored; 0: packed
  bool transpose_a = false;
  const uint16_t* b = nullptr;  // bf16, [N, K] with transpose_b (default), or [K, N]
  int64_t ldb = 0;
  bool transpose_b = true;
  void* c = nullptr;  // [M, N] of c_type; read too when beta != 0
  int64_t ldc = 0;
  tensor::DType c_type = tensor::DType::kBF16;  // kBF16 or kF32
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* bias = nullptr;  // optional, N elements of c_type
};

// The stored shape of each operand and its effective row stride.
struct StoredMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // >= cols
};

// One cuBLASLt operand: a column-major matrix of `rows` x `cols` with leading dimension `ld`.
struct ColumnMajorMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
  friend bool operator==(const ColumnMajorMatrix&, const ColumnMajorMatrix&) = default;
};

// D = alpha * op(a) op(b) + beta * C in cuBLASLt's terms; op(a) is m x k, op(b) k x n, D m x n.
struct ColumnMajorGemm {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transpose_a = false;  // CUBLAS_OP_T for cuBLASLt's A (our B's buffer)
  bool transpose_b = false;  // CUBLAS_OP_T for cuBLASLt's B (our A's buffer)
  ColumnMajorMatrix a;       // layout of our B's buffer
  ColumnMajorMatrix b;       // layout of our A's buffer
  ColumnMajorMatrix d;  // layout of our C's buffer (also cuBLASLt's C: the product is in place)
};

// OK, or InvalidArgument naming what is wrong (see the top of this file).
base::Status ValidateGemm(const GemmArgs& args);
// True when there is nothing to compute (M == 0 or N == 0); the arguments must be valid.
bool GemmIsEmpty(const GemmArgs& args);
// A's and B's stored shapes (with the effective row strides), of valid arguments.
StoredMatrix StoredA(const GemmArgs& args);
StoredMatrix StoredB(const GemmArgs& args);
// The column-major problem cuBLASLt computes, of valid arguments.
ColumnMajorGemm ToColumnMajor(const GemmArgs& args);

// The largest power of two dividing `address`, capped at kMaxGemmAlignmentBytes (which a null
// address also gets). cuBLASLt's heuristic must be told it: by default it assumes 256 bytes and
// may pick an algorithm that faults on a pointer into the middle of a tensor.
int PointerAlignment(uintptr_t address);

// What the choice of algorithm depends on: the column-major problem, the types, the epilogue and
// every pointer's alignment (not alpha or beta, which cuBLASLt takes at run time).
struct GemmKey {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t lda = 0;
  int64_t ldb = 0;
  int64_t ldd = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  tensor::DType d_type = tensor::DType::kBF16;
  bool has_bias = false;
  int alignment_a_bytes = 0;
  int alignment_b_bytes = 0;
  int alignment_d_bytes = 0;
  int alignment_bias_bytes = 0;
  friend auto operator<=>(const GemmKey&, const GemmKey&) = default;
};
GemmKey MakeGemmKey(const GemmArgs& args);

// A chosen algorithm: cuBLASLt's cublasLtMatmulAlgo_t, which its documentation calls trivially
// serializable (8 uint64_t), kept as its bytes so that this header needs no CUDA.
struct CachedGemmAlgo {
  std::array<uint64_t, 8> algo{};
  int64_t workspace_bytes = 0;  // what the algorithm needs, <= kMatmulWorkspaceBytes
};

// A map of at most `capacity` entries that forgets the least recently used one when full.
class GemmAlgoCache {
 public:
  explicit GemmAlgoCache(size_t capacity = kMatmulAlgoCacheCapacity);
  // The entry for `key` (now the most recently used), or null. The pointer is valid until the
  // next Insert.
  const CachedGemmAlgo* Find(const GemmKey& key);
  // Adds or replaces the entry for `key`, evicting the least recently used one if full.
  void Insert(const GemmKey& key, const CachedGemmAlgo& value);
  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<GemmKey, CachedGemmAlgo>;
  size_t capacity_;
  std::list<Entry> entries_;  // most recently used first
  std::map<GemmKey, std::list<Entry>::iterator> index_;
};

}  // namespace sovai::kernels::cuda
