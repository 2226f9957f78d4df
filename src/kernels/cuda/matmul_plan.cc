#include "kernels/cuda/matmul_plan.h"

#include <bit>
#include <string>

#include "base/check.h"

namespace sovai::kernels::cuda {
namespace {

base::Status CheckDim(const char* name, int64_t value) {
  if (value < 0 || value > kMaxGemmDim) {
    return base::InvalidArgumentError(std::string("gemm: ") + name + " = " + std::to_string(value) +
                                      " is outside [0, " + std::to_string(kMaxGemmDim) + "]");
  }
  return base::Status();
}

// ld == 0 means packed; otherwise it must hold a whole row.
base::Status CheckStride(const char* name, int64_t ld, int64_t row_len) {
  if (ld == 0) return base::Status();
  if (ld < row_len || ld > kMaxGemmDim) {
    return base::InvalidArgumentError(std::string("gemm: ") + name + " = " + std::to_string(ld) +
                                      " must be 0 (packed) or in [" + std::to_string(row_len) +
                                      ", " + std::to_string(kMaxGemmDim) + "], the row length");
  }
  return base::Status();
}

base::Status CheckPointer(const char* name, const void* pointer, size_t element_bytes) {
  if (pointer == nullptr) {
    return base::InvalidArgumentError(std::string("gemm: ") + name + " is null");
  }
  if (reinterpret_cast<uintptr_t>(pointer) % element_bytes != 0) {
    return base::InvalidArgumentError(std::string("gemm: ") + name +
                                      " is not aligned to its element size (" +
                                      std::to_string(element_bytes) + " bytes)");
  }
  return base::Status();
}

int64_t EffectiveStride(int64_t ld, int64_t row_len) { return ld == 0 ? row_len : ld; }

ColumnMajorMatrix AsColumnMajor(const StoredMatrix& stored) {
  return ColumnMajorMatrix{.rows = stored.cols, .cols = stored.rows, .ld = stored.ld};
}

}  // namespace

base::Status ValidateGemm(const GemmArgs& args) {
  SOVAI_RETURN_IF_ERROR(CheckDim("M", args.m));
  SOVAI_RETURN_IF_ERROR(CheckDim("N", args.n));
  SOVAI_RETURN_IF_ERROR(CheckDim("K", args.k));
  if (args.k == 0) {
    return base::InvalidArgumentError("gemm: K = 0: a product needs at least one term");
  }
  if (args.c_type != tensor::DType::kBF16 && args.c_type != tensor::DType::kF32) {
    return base::InvalidArgumentError(std::string("gemm: output type ") +
                                      std::string(tensor::DTypeName(args.c_type)) +
                                      " is not supported (bf16 or f32)");
  }
  SOVAI_RETURN_IF_ERROR(CheckStride("lda", args.lda, args.transpose_a ? args.m : args.k));
  SOVAI_RETURN_IF_ERROR(CheckStride("ldb", args.ldb, args.transpose_b ? args.k : args.n));
  SOVAI_RETURN_IF_ERROR(CheckStride("ldc", args.ldc, args.n));
  if (GemmIsEmpty(args)) return base::Status();
  const size_t c_bytes = tensor::DTypeSize(args.c_type);
  SOVAI_RETURN_IF_ERROR(CheckPointer("A", args.a, sizeof(uint16_t)));
  SOVAI_RETURN_IF_ERROR(CheckPointer("B", args.b, sizeof(uint16_t)));
  SOVAI_RETURN_IF_ERROR(CheckPointer("C", args.c, c_bytes));
  if (args.bias != nullptr) SOVAI_RETURN_IF_ERROR(CheckPointer("bias", args.bias, c_bytes));
  return base::Status();
}

bool GemmIsEmpty(const GemmArgs& args) { return args.m == 0 || args.n == 0; }

StoredMatrix StoredA(const GemmArgs& args) {
  StoredMatrix stored = args.transpose_a ? StoredMatrix{.rows = args.k, .cols = args.m}
                                         : StoredMatrix{.rows = args.m, .cols = args.k};
  stored.ld = EffectiveStride(args.lda, stored.cols);
  return stored;
}

StoredMatrix StoredB(const GemmArgs& args) {
  StoredMatrix stored = args.transpose_b ? StoredMatrix{.rows = args.n, .cols = args.k}
                                         : StoredMatrix{.rows = args.k, .cols = args.n};
  stored.ld = EffectiveStride(args.ldb, stored.cols);
  return stored;
}

ColumnMajorGemm ToColumnMajor(const GemmArgs& args) {
  // See the top of matmul_plan.h: C^T = op(B)^T op(A)^T, each buffer read as its transpose.
  return ColumnMajorGemm{
      .m = args.n,
      .n = args.m,
      .k = args.k,
      .transpose_a = args.transpose_b,
      .transpose_b = args.transpose_a,
      .a = AsColumnMajor(StoredB(args)),
      .b = AsColumnMajor(StoredA(args)),
      .d =
          ColumnMajorMatrix{
              .rows = args.n, .cols = args.m, .ld = EffectiveStride(args.ldc, args.n)},
  };
}

int PointerAlignment(uintptr_t address) {
  if (address == 0) return kMaxGemmAlignmentBytes;
  const int trailing_zeros = std::countr_zero(address);
  return trailing_zeros >= std::countr_zero(static_cast<unsigned>(kMaxGemmAlignmentBytes))
             ? kMaxGemmAlignmentBytes
             : 1 << trailing_zeros;
}

GemmKey MakeGemmKey(const GemmArgs& args) {
  const ColumnMajorGemm gemm = ToColumnMajor(args);
  return GemmKey{
      .m = gemm.m,
      .n = gemm.n,
      .k = gemm.k,
      .lda = gemm.a.ld,
      .ldb = gemm.b.ld,
      .ldd = gemm.d.ld,
      .transpose_a = gemm.transpose_a,
      .transpose_b = gemm.transpose_b,
      .d_type = args.c_type,
      .has_bias = args.bias != nullptr,
      .alignment_a_bytes = PointerAlignment(reinterpret_cast<uintptr_t>(args.b)),
      .alignment_b_bytes = PointerAlignment(reinterpret_cast<uintptr_t>(args.a)),
      .alignment_d_bytes = PointerAlignment(reinterpret_cast<uintptr_t>(args.c)),
      .alignment_bias_bytes =
          args.bias == nullptr ? 0 : PointerAlignment(reinterpret_cast<uintptr_t>(args.bias)),
  };
}

GemmAlgoCache::GemmAlgoCache(size_t capacity) : capacity_(capacity) {
  SOVAI_CHECK(capacity > 0) << "a GemmAlgoCache needs room for one entry";
}

const CachedGemmAlgo* GemmAlgoCache::Find(const GemmKey& key) {
  auto found = index_.find(key);
  if (found == index_.end()) return nullptr;
  entries_.splice(entries_.begin(), entries_, found->second);
  return &found->second->second;
}

void GemmAlgoCache::Insert(const GemmKey& key, const CachedGemmAlgo& value) {
  if (auto found = index_.find(key); found != index_.end()) {
    found->second->second = value;
    entries_.splice(entries_.begin(), entries_, found->second);
    return;
  }
  if (index_.size() == capacity_) {
    index_.erase(entries_.back().first);
    entries_.pop_back();
  }
  entries_.emplace_front(key, value);
  index_.emplace(key, entries_.begin());
}

}  // namespace sovai::kernels::cuda
