// The engine's matrix products on the GPU, through cuBLASLt (built only with SOVAI_CUDA=ON).
//
// Every linear layer of a transformer is one of these: y[M, N] = x[M, K] @ W^T with W stored
// [N, K] (PyTorch's layout), plus the backward products dx = dy @ W and dW = dy^T @ x. GemmArgs
// (matmul_plan.h) states them row-major, as the engine stores tensors; matmul_plan.h also says
// how they map onto cuBLASLt's column-major layouts. Operands are bf16, products and sums f32
// (CUBLAS_COMPUTE_32F), the output bf16 or f32, rounded once; beta != 0 accumulates into C (for
// gradients and residuals) and an optional bias[N] is added to every row in cuBLASLt's epilogue.
//
// A MatmulPlanner owns what cuBLASLt needs across calls: its handle, a workspace of
// kMatmulWorkspaceBytes, and the algorithm chosen for each distinct problem
// (cublasLtMatmulAlgoGetHeuristic's first answer, asked once per GemmKey and kept in a bounded
// cache). It belongs to the device that was current when it was created; call Gemm with that
// device current.
//
// Like ops.h: pointers are device pointers, Gemm only enqueues work on `stream` and returns before
// it runs, bf16 buffers are uint16_t*. Errors: InvalidArgument from ValidateGemm (nothing is
// launched); Internal naming the cuBLAS status (cublasLtGetStatusName and its description) when
// cuBLASLt refuses a descriptor, finds no algorithm or fails to launch.
//
// Thread-safety: a MatmulPlanner is not thread-safe, and every product it enqueues uses the one
// workspace, so all of its products must go to one stream (or to streams ordered with each
// other). Use one planner per stream.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/cuda/matmul_plan.h"
#include "kernels/cuda/ops.h"

struct cublasLtContext;  // cublasLtHandle_t is a cublasLtContext*

namespace sovai::kernels::cuda {

class MatmulPlanner {
 public:
  // Creates the cuBLASLt handle and allocates the workspace on the current device. Unavailable
  // when cuBLASLt cannot start (no driver, no device); ResourceExhausted when the workspace does
  // not fit.
  static base::Result<std::unique_ptr<MatmulPlanner>> Create();
  ~MatmulPlanner();
  MatmulPlanner(const MatmulPlanner&) = delete;
  MatmulPlanner& operator=(const MatmulPlanner&) = delete;

  // Enqueues C = alpha * op(A) @ op(B) + beta * C (+ bias) on `stream`; see matmul_plan.h for the
  // shapes. M == 0 or N == 0 is nothing to do (OK, no launch).
  base::Status Gemm(const GemmArgs& args, Stream stream);

  // Distinct problems whose algorithm is cached (at most kMatmulAlgoCacheCapacity).
  size_t cached_algorithms() const { return cache_.size(); }

 private:
  MatmulPlanner(cublasLtContext* handle, void* workspace);

  cublasLtContext* handle_;
  void* workspace_;  // kMatmulWorkspaceBytes of device memory
  GemmAlgoCache cache_;
};

}  // namespace sovai::kernels::cuda
