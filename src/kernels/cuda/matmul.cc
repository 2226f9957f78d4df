// MatmulPlanner: GemmArgs (row-major) -> matmul_plan.h's column-major problem -> cuBLASLt
// descriptors -> an algorithm (cached per GemmKey) -> cublasLtMatmul on the caller's stream.
#include "kernels/cuda/matmul.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <type_traits>

namespace sovai::kernels::cuda {
namespace {

static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(CachedGemmAlgo::algo),
              "CachedGemmAlgo must hold a cublasLtMatmulAlgo_t byte for byte");

base::Status CublasError(cublasStatus_t status, const std::string& what) {
  return base::InternalError(what + ": " + cublasLtGetStatusName(status) + " (" +
                             cublasLtGetStatusString(status) + ")");
}

base::Status CheckCublas(cublasStatus_t status, const std::string& what) {
  return status == CUBLAS_STATUS_SUCCESS ? base::Status() : CublasError(status, what);
}

std::string Describe(const GemmArgs& args) {
  return "gemm M=" + std::to_string(args.m) + " N=" + std::to_string(args.n) +
         " K=" + std::to_string(args.k) + (args.transpose_a ? " A^T" : " A") +
         (args.transpose_b ? " B^T" : " B") + " -> " + std::string(tensor::DTypeName(args.c_type)) +
         (args.bias != nullptr ? " +bias" : "");
}

cudaDataType_t CudaType(tensor::DType dtype) {
  return dtype == tensor::DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
}

// cuBLASLt's descriptors, destroyed on every exit path.
using MatmulDesc = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>,
                                   decltype(&cublasLtMatmulDescDestroy)>;
using MatrixLayout = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>,
                                     decltype(&cublasLtMatrixLayoutDestroy)>;
using MatmulPreference = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                                         decltype(&cublasLtMatmulPreferenceDestroy)>;

template <typename T>
base::Status SetDescAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                              const T& value) {
  return CheckCublas(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value),
                     "cublasLtMatmulDescSetAttribute " + std::to_string(attribute));
}

template <typename T>
base::Status SetPreference(cublasLtMatmulPreference_t preference,
                           cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  return CheckCublas(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value),
      "cublasLtMatmulPreferenceSetAttribute " + std::to_string(attribute));
}

// f32 products and sums, f32 alpha and beta given by host pointers (cuBLASLt's default mode).
base::Result<MatmulDesc> MakeMatmulDesc(const GemmArgs& args, const ColumnMajorGemm& gemm) {
  cublasLtMatmulDesc_t raw = nullptr;
  SOVAI_RETURN_IF_ERROR(CheckCublas(cublasLtMatmulDescCreate(&raw, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                    "cublasLtMatmulDescCreate"));
  MatmulDesc desc(raw, &cublasLtMatmulDescDestroy);
  const cublasOperation_t transa = gemm.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t transb = gemm.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  SOVAI_RETURN_IF_ERROR(SetDescAttribute(raw, CUBLASLT_MATMUL_DESC_TRANSA, transa));
  SOVAI_RETURN_IF_ERROR(SetDescAttribute(raw, CUBLASLT_MATMUL_DESC_TRANSB, transb));
  if (args.bias != nullptr) {
    // A vector over D's rows (our N), of D's type: cuBLASLt's default bias type for these inputs.
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    SOVAI_RETURN_IF_ERROR(SetDescAttribute(raw, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue));
    SOVAI_RETURN_IF_ERROR(SetDescAttribute(raw, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias));
  }
  return desc;
}

base::Result<MatrixLayout> MakeLayout(cudaDataType_t type, const ColumnMajorMatrix& matrix) {
  cublasLtMatrixLayout_t raw = nullptr;
  SOVAI_RETURN_IF_ERROR(
      CheckCublas(cublasLtMatrixLayoutCreate(&raw, type, static_cast<uint64_t>(matrix.rows),
                                             static_cast<uint64_t>(matrix.cols), matrix.ld),
                  "cublasLtMatrixLayoutCreate"));
  return MatrixLayout(raw, &cublasLtMatrixLayoutDestroy);
}

}  // namespace

base::Result<std::unique_ptr<MatmulPlanner>> MatmulPlanner::Create() {
  cublasLtHandle_t handle = nullptr;
  if (const cublasStatus_t status = cublasLtCreate(&handle); status != CUBLAS_STATUS_SUCCESS) {
    return base::UnavailableError(CublasError(status, "cublasLtCreate").message());
  }
  void* workspace = nullptr;
  if (const cudaError_t error = cudaMalloc(&workspace, kMatmulWorkspaceBytes);
      error != cudaSuccess) {
    cublasLtDestroy(handle);
    cudaGetLastError();  // so that the next cudaGetLastError does not report this failure again
    const std::string message = "matmul workspace of " + std::to_string(kMatmulWorkspaceBytes) +
                                " bytes: " + cudaGetErrorString(error);
    return error == cudaErrorMemoryAllocation ? base::ResourceExhaustedError(message)
                                              : base::UnavailableError(message);
  }
  // The constructor is private (a planner exists only with its handle and workspace), so
  // make_unique cannot reach it.
  return std::unique_ptr<MatmulPlanner>(new MatmulPlanner(handle, workspace));
}

MatmulPlanner::MatmulPlanner(cublasLtContext* handle, void* workspace)
    : handle_(handle), workspace_(workspace) {}

MatmulPlanner::~MatmulPlanner() {
  // cudaFree waits for the device, so no enqueued product still uses the workspace.
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

base::Status MatmulPlanner::Gemm(const GemmArgs& args, Stream stream) {
  SOVAI_RETURN_IF_ERROR(ValidateGemm(args));
  if (GemmIsEmpty(args)) return base::Status();
  const ColumnMajorGemm gemm = ToColumnMajor(args);
  const cudaDataType_t d_type = CudaType(args.c_type);
  SOVAI_ASSIGN_OR_RETURN(MatmulDesc desc, MakeMatmulDesc(args, gemm));
  SOVAI_ASSIGN_OR_RETURN(MatrixLayout a_layout, MakeLayout(CUDA_R_16BF, gemm.a));
  SOVAI_ASSIGN_OR_RETURN(MatrixLayout b_layout, MakeLayout(CUDA_R_16BF, gemm.b));
  SOVAI_ASSIGN_OR_RETURN(MatrixLayout d_layout, MakeLayout(d_type, gemm.d));

  const GemmKey key = MakeGemmKey(args);
  CachedGemmAlgo chosen;
  if (const CachedGemmAlgo* cached = cache_.Find(key); cached != nullptr) {
    chosen = *cached;
  } else {
    cublasLtMatmulPreference_t raw_preference = nullptr;
    SOVAI_RETURN_IF_ERROR(CheckCublas(cublasLtMatmulPreferenceCreate(&raw_preference),
                                      "cublasLtMatmulPreferenceCreate"));
    MatmulPreference preference(raw_preference, &cublasLtMatmulPreferenceDestroy);
    const uint64_t workspace_bytes = kMatmulWorkspaceBytes;
    SOVAI_RETURN_IF_ERROR(
        SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes));
    // The real alignments, or the heuristic may assume 256 bytes (see PointerAlignment).
    const uint32_t alignment_a = key.alignment_a_bytes;
    const uint32_t alignment_b = key.alignment_b_bytes;
    const uint32_t alignment_d = key.alignment_d_bytes;
    SOVAI_RETURN_IF_ERROR(
        SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_a));
    SOVAI_RETURN_IF_ERROR(
        SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_b));
    SOVAI_RETURN_IF_ERROR(
        SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_d));
    SOVAI_RETURN_IF_ERROR(
        SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_d));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle_, desc.get(), a_layout.get(), b_layout.get(), d_layout.get(), d_layout.get(),
        raw_preference, /*requestedAlgoCount=*/1, &result, &returned);
    if (status != CUBLAS_STATUS_SUCCESS) {
      return CublasError(status, "cublasLtMatmulAlgoGetHeuristic for " + Describe(args));
    }
    if (returned == 0) {
      return base::InternalError("cublasLtMatmulAlgoGetHeuristic found no algorithm for " +
                                 Describe(args));
    }
    std::memcpy(chosen.algo.data(), &result.algo, sizeof result.algo);
    chosen.workspace_bytes = static_cast<int64_t>(result.workspaceSize);
    cache_.Insert(key, chosen);
  }

  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, chosen.algo.data(), sizeof algo);
  // cuBLASLt's A is our B and its B our A (matmul_plan.h); C and D are our C, in place.
  return CheckCublas(
      cublasLtMatmul(handle_, desc.get(), &args.alpha, args.b, a_layout.get(), args.a,
                     b_layout.get(), &args.beta, args.c, d_layout.get(), args.c, d_layout.get(),
                     &algo, workspace_, static_cast<size_t>(kMatmulWorkspaceBytes),
                     static_cast<cudaStream_t>(stream.cuda_stream)),
      "cublasLtMatmul for " + Describe(args));
}

}  // namespace sovai::kernels::cuda
