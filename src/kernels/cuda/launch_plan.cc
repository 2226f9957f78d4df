#include "kernels/cuda/launch_plan.h"

#include <algorithm>
#include <limits>
#include <string>

#include "kernels/backend.h"
#include "kernels/rope.h"
#include "tensor/dtype.h"

namespace sovai::kernels::cuda {
namespace {

base::Status RequirePositive(int64_t value, const char* what) {
  if (value > 0) return base::Status();
  return base::InvalidArgumentError(std::string(what) + " must be positive, got " +
                                    std::to_string(value));
}

base::Status CheckLimits(const LaunchLimits& limits) {
  if (limits.max_threads_per_block < kWarpThreads ||
      limits.max_threads_per_block % kWarpThreads != 0 || limits.max_blocks < 1) {
    return base::InvalidArgumentError(
        "launch limits need at least one block and a positive multiple of 32 threads per block, "
        "got " +
        std::to_string(limits.max_blocks) + " blocks of " +
        std::to_string(limits.max_threads_per_block) + " threads");
  }
  return base::Status();
}

// a * b for positive a and b, or an error when it does not fit in int64_t.
base::Result<int64_t> CheckedProduct(int64_t a, int64_t b, const char* what) {
  if (a > std::numeric_limits<int64_t>::max() / b) {
    return base::InvalidArgumentError(std::string(what) + " overflows: " + std::to_string(a) +
                                      " x " + std::to_string(b));
  }
  return a * b;
}

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

base::Result<ElementwisePlan> GridFor(int64_t vectors, int vector_width, int64_t max_blocks,
                                      const LaunchLimits& limits) {
  ElementwisePlan plan;
  plan.vector_width = vector_width;
  plan.threads = std::min(kElementwiseThreads, limits.max_threads_per_block);
  plan.vectors = vectors;
  plan.blocks = std::min({CeilDiv(vectors, plan.threads), max_blocks, limits.max_blocks});
  return plan;
}

}  // namespace

base::Result<int> ChooseVectorWidth(int64_t row_len, std::span<const Operand> operands) {
  SOVAI_RETURN_IF_ERROR(RequirePositive(row_len, "row length"));
  int narrowest_bytes = kMaxAccessBytes;
  for (const Operand& operand : operands) {
    const int bytes = operand.element_bytes;
    if (bytes <= 0 || bytes > kMaxAccessBytes || (bytes & (bytes - 1)) != 0) {
      return base::InvalidArgumentError(
          "operand element size must be 1, 2, 4, 8 or 16 bytes, got " + std::to_string(bytes));
    }
    narrowest_bytes = std::min(narrowest_bytes, bytes);
  }
  for (int width = kMaxAccessBytes / narrowest_bytes; width > 1; width /= 2) {
    if (row_len % width != 0) continue;
    const bool aligned = std::all_of(operands.begin(), operands.end(), [&](const Operand& op) {
      const uintptr_t alignment =
          static_cast<uintptr_t>(std::min(width * op.element_bytes, kMaxAccessBytes));
      return op.address % alignment == 0;
    });
    if (aligned) return width;
  }
  return 1;
}

base::Result<RowPlan> PlanRows(int64_t rows, int64_t row_len, std::span<const Operand> operands,
                               const LaunchLimits& limits) {
  SOVAI_RETURN_IF_ERROR(CheckLimits(limits));
  SOVAI_RETURN_IF_ERROR(RequirePositive(rows, "row count"));
  SOVAI_RETURN_IF_ERROR(
      CheckedProduct(rows, std::max<int64_t>(row_len, 1), "rows x row length").status());
  RowPlan plan;
  SOVAI_ASSIGN_OR_RETURN(plan.vector_width, ChooseVectorWidth(row_len, operands));
  const int64_t vectors = row_len / plan.vector_width;
  const int64_t warps = std::min<int64_t>(CeilDiv(vectors, kWarpThreads),
                                          limits.max_threads_per_block / kWarpThreads);
  plan.threads = static_cast<int>(warps) * kWarpThreads;
  plan.blocks = std::min(rows, limits.max_blocks);
  return plan;
}

base::Result<ElementwisePlan> PlanElementwise(int64_t count, std::span<const Operand> operands,
                                              const LaunchLimits& limits) {
  SOVAI_RETURN_IF_ERROR(CheckLimits(limits));
  SOVAI_ASSIGN_OR_RETURN(int width, ChooseVectorWidth(count, operands));
  return GridFor(count / width, width, limits.max_blocks, limits);
}

base::Result<ElementwisePlan> PlanRope(int64_t n, int64_t heads, int64_t head_dim, Operand x,
                                       const LaunchLimits& limits) {
  SOVAI_RETURN_IF_ERROR(CheckLimits(limits));
  SOVAI_RETURN_IF_ERROR(RequirePositive(n, "token count"));
  SOVAI_RETURN_IF_ERROR(RequirePositive(heads, "head count"));
  if (head_dim < 2 || head_dim % 2 != 0 || head_dim > kMaxRopeHeadDim) {
    return base::InvalidArgumentError("RoPE head size must be even and in [2, " +
                                      std::to_string(kMaxRopeHeadDim) + "], got " +
                                      std::to_string(head_dim));
  }
  const int64_t half = head_dim / 2;
  SOVAI_ASSIGN_OR_RETURN(int64_t head_rows, CheckedProduct(n, heads, "tokens x heads"));
  SOVAI_ASSIGN_OR_RETURN(int64_t pairs, CheckedProduct(head_rows, half, "RoPE pairs"));
  SOVAI_RETURN_IF_ERROR(CheckedProduct(pairs, 2, "RoPE elements").status());
  const Operand operands[] = {x};
  SOVAI_ASSIGN_OR_RETURN(int width, ChooseVectorWidth(half, operands));
  return GridFor(pairs / width, width, limits.max_blocks, limits);
}

base::Result<ElementwisePlan> PlanNf4Dequantize(int64_t numel, Operand codes, Operand out,
                                                const LaunchLimits& limits) {
  SOVAI_RETURN_IF_ERROR(CheckLimits(limits));
  SOVAI_RETURN_IF_ERROR(RequirePositive(numel, "NF4 element count"));
  if (numel % Nf4Weight::kBlockSize != 0) {
    return base::InvalidArgumentError("NF4 element count must be a multiple of 64, got " +
                                      std::to_string(numel));
  }
  const Operand operands[] = {codes, out};
  // A multiple of 64 values is a multiple of 32 code bytes, so every width up to 16 divides it
  // and a unit of at most 32 values never crosses a block of 64.
  SOVAI_ASSIGN_OR_RETURN(int width, ChooseVectorWidth(numel / 2, operands));
  return GridFor(numel / 2 / width, width, limits.max_blocks, limits);
}

base::Result<SumOfSquaresPlan> PlanSumOfSquares(int64_t count, Operand grad,
                                                const LaunchLimits& limits) {
  SOVAI_RETURN_IF_ERROR(CheckLimits(limits));
  const Operand operands[] = {grad};
  SOVAI_ASSIGN_OR_RETURN(int width, ChooseVectorWidth(count, operands));
  SumOfSquaresPlan plan;
  SOVAI_ASSIGN_OR_RETURN(plan.first_pass,
                         GridFor(count / width, width, kSumOfSquaresMaxPartials, limits));
  plan.workspace_bytes = plan.first_pass.blocks * static_cast<int64_t>(sizeof(double));
  return plan;
}

base::Status ConvertToBF16(std::span<const float> from, std::span<uint16_t> to) {
  if (from.size() != to.size()) {
    return base::InvalidArgumentError("bf16 conversion of " + std::to_string(from.size()) +
                                      " values into room for " + std::to_string(to.size()));
  }
  tensor::ConvertElements(tensor::DType::kF32, from.data(), tensor::DType::kBF16, to.data(),
                          from.size());
  return base::Status();
}

}  // namespace sovai::kernels::cuda
