// The kernels behind ops.h and their launchers. Each launcher checks its arguments, asks
// launch_plan.h for the shape and vector width, and launches the kernel instantiated for that
// width (W elements per access: a template parameter, so the per-thread arrays stay in registers).
//
// Legend as in ops.h: N token positions, C channels, V vocabulary, H heads, D head size.
// bf16 buffers are uint16_t bits; Bf16ToFloat / FloatToBf16 convert through __nv_bfloat16
// (round to nearest even, NaN stays NaN).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/cuda/launch_plan.h"
#include "kernels/cuda/ops.h"
#include "kernels/nf4.h"

namespace sovai::kernels::cuda {
namespace {

// --- device helpers -------------------------------------------------------------------------

__device__ __forceinline__ float Bf16ToFloat(uint16_t bits) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
__device__ __forceinline__ uint16_t FloatToBf16(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

// W consecutive elements of type T, moved as 16-byte (or, when smaller, one narrower) accesses.
template <typename T, int W>
struct Vec {
  static constexpr int kBytes = static_cast<int>(sizeof(T)) * W;
  using Chunk = std::conditional_t<
      (kBytes >= 16), uint4,
      std::conditional_t<(kBytes == 8), uint2,
                         std::conditional_t<(kBytes == 4), uint32_t,
                                            std::conditional_t<(kBytes == 2), uint16_t, uint8_t>>>>;
  static constexpr int kChunks = kBytes >= 16 ? kBytes / 16 : 1;
  union {
    T v[W];
    Chunk chunk[kChunks];
  };
};

// p must be aligned to min(W * sizeof(T), 16) bytes (launch_plan.h's rule).
template <int W, typename T>
__device__ __forceinline__ Vec<T, W> Load(const T* p) {
  using V = Vec<T, W>;
  V out;
  const auto* chunks = reinterpret_cast<const typename V::Chunk*>(p);
#pragma unroll
  for (int k = 0; k < V::kChunks; ++k) out.chunk[k] = chunks[k];
  return out;
}
template <int W, typename T>
__device__ __forceinline__ void Store(T* p, const Vec<T, W>& value) {
  using V = Vec<T, W>;
  auto* chunks = reinterpret_cast<typename V::Chunk*>(p);
#pragma unroll
  for (int k = 0; k < V::kChunks; ++k) chunks[k] = value.chunk[k];
}

// The sum of `value` over the block, returned to every thread. blockDim.x is a multiple of 32
// (launch_plan.h). The order of additions is fixed by the thread layout, so it is deterministic;
// every thread gets the same bits (lane 0's sum, broadcast). `scratch` holds 32 values.
template <typename T>
__device__ T BlockSum(T value, T* scratch) {
  const int lane = threadIdx.x % kWarpThreads;
  const int warp = threadIdx.x / kWarpThreads;
#pragma unroll
  for (int offset = kWarpThreads / 2; offset > 0; offset /= 2) {
    value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / kWarpThreads;
  value = lane < warps ? scratch[lane] : T(0);
#pragma unroll
  for (int offset = kWarpThreads / 2; offset > 0; offset /= 2) {
    value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  value = __shfl_sync(0xffffffffu, value, 0);
  __syncthreads();  // the next call may overwrite scratch
  return value;
}

__device__ __forceinline__ int64_t GlobalThread() {
  return blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() { return int64_t{gridDim.x} * blockDim.x; }

// --- kernels --------------------------------------------------------------------------------
//
// __launch_bounds__ holds each kernel to the most threads its plan can ask for (LaunchLimits'
// default for the row ops, kElementwiseThreads for the others), so that the compiler never uses
// more registers than such a block can get.

constexpr int kMaxRowThreads = LaunchLimits{}.max_threads_per_block;

// out[N, C] = table[ids[n]] or zeros for a bad id (counted in *errors). One block per row.
template <int W, typename OutT>
__global__ void __launch_bounds__(kMaxRowThreads)
    EmbeddingKernel(OutT* out, const int32_t* ids, const uint16_t* table, int64_t n, int64_t vocab,
                    int64_t c, EmbeddingIdErrors* errors) {
  const int64_t vectors = c / W;
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const int32_t id = ids[row];
    const bool valid = id >= 0 && id < vocab;
    if (!valid && threadIdx.x == 0) {
      atomicAdd(&errors->bad_count, 1u);
      atomicMin(&errors->first_bad_row, static_cast<uint32_t>(row));
    }
    const uint16_t* src = table + (valid ? id : 0) * c;
    OutT* dst = out + row * c;
    for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
      Vec<OutT, W> result;
      if (valid) {
        const Vec<uint16_t, W> in = Load<W>(src + j * W);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          if constexpr (std::is_same_v<OutT, float>) {
            result.v[k] = Bf16ToFloat(in.v[k]);
          } else {
            result.v[k] = in.v[k];
          }
        }
      } else {
#pragma unroll
        for (int k = 0; k < W; ++k) result.v[k] = OutT(0);
      }
      Store<W>(dst + j * W, result);
    }
  }
}

template <int W>
__global__ void __launch_bounds__(kMaxRowThreads)
    RmsNormForwardKernel(uint16_t* out, float* rstd, uint16_t* residual_out, const uint16_t* x,
                         const uint16_t* residual, const uint16_t* weight, int64_t n, int64_t c,
                         float eps) {
  __shared__ float scratch[kWarpThreads];
  const int64_t vectors = c / W;
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const int64_t base = row * c;
    float sum_sq = 0;
    for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
      Vec<uint16_t, W> h = Load<W>(x + base + j * W);
      if (residual != nullptr) {
        const Vec<uint16_t, W> r = Load<W>(residual + base + j * W);
#pragma unroll
        for (int k = 0; k < W; ++k) h.v[k] = FloatToBf16(Bf16ToFloat(h.v[k]) + Bf16ToFloat(r.v[k]));
        Store<W>(residual_out + base + j * W, h);
      }
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float value = Bf16ToFloat(h.v[k]);  // the rounded sum: what backward will see
        sum_sq += value * value;
      }
    }
    const float inv_rms = 1.0f / sqrtf(BlockSum(sum_sq, scratch) / static_cast<float>(c) + eps);
    if (threadIdx.x == 0) rstd[row] = inv_rms;
    // Each thread re-reads the vectors it wrote above, so residual_out needs no fence.
    const uint16_t* h_row = (residual != nullptr ? residual_out : x) + base;
    for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
      const Vec<uint16_t, W> h = Load<W>(h_row + j * W);
      const Vec<uint16_t, W> w = Load<W>(weight + j * W);
      Vec<uint16_t, W> result;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        result.v[k] = FloatToBf16(Bf16ToFloat(h.v[k]) * inv_rms * Bf16ToFloat(w.v[k]));
      }
      Store<W>(out + base + j * W, result);
    }
  }
}

template <int W>
__global__ void __launch_bounds__(kMaxRowThreads)
    RmsNormBackwardKernel(uint16_t* dx, const uint16_t* dout, const uint16_t* h,
                          const uint16_t* weight, const float* rstd, int64_t n, int64_t c) {
  __shared__ float scratch[kWarpThreads];
  const int64_t vectors = c / W;
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const int64_t base = row * c;
    float dot = 0;  // sum_c dout * weight * h
    for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
      const Vec<uint16_t, W> d = Load<W>(dout + base + j * W);
      const Vec<uint16_t, W> hv = Load<W>(h + base + j * W);
      const Vec<uint16_t, W> w = Load<W>(weight + j * W);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        dot += Bf16ToFloat(d.v[k]) * Bf16ToFloat(w.v[k]) * Bf16ToFloat(hv.v[k]);
      }
    }
    dot = BlockSum(dot, scratch);
    const float rs = rstd[row];
    const float h_scale = rs * rs * rs / static_cast<float>(c) * dot;
    for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
      const Vec<uint16_t, W> d = Load<W>(dout + base + j * W);
      const Vec<uint16_t, W> hv = Load<W>(h + base + j * W);
      const Vec<uint16_t, W> w = Load<W>(weight + j * W);
      Vec<uint16_t, W> acc = Load<W>(dx + base + j * W);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float grad =
            rs * Bf16ToFloat(w.v[k]) * Bf16ToFloat(d.v[k]) - Bf16ToFloat(hv.v[k]) * h_scale;
        acc.v[k] = FloatToBf16(Bf16ToFloat(acc.v[k]) + grad);
      }
      Store<W>(dx + base + j * W, acc);
    }
  }
}

// A unit is W pairs (i, i + D/2) of one head; `inverse` rotates by the opposite angle (the
// backward pass: the same formula with sin negated).
template <int W>
__global__ void __launch_bounds__(kElementwiseThreads)
    RopeKernel(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t vectors,
               int64_t heads, int64_t half, bool inverse) {
  const int64_t units_per_head = half / W;
  for (int64_t u = GlobalThread(); u < vectors; u += GridThreads()) {
    const int64_t head_row = u / units_per_head;  // n * H + h
    const int64_t i0 = (u % units_per_head) * W;
    const float position = static_cast<float>(positions[head_row / heads]);
    uint16_t* first = x + head_row * 2 * half + i0;
    uint16_t* second = first + half;
    Vec<uint16_t, W> a = Load<W>(first);
    Vec<uint16_t, W> b = Load<W>(second);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float angle = __fmul_rn(position, inv_freq[i0 + k]);  // the f32 product, as HF
      float sin_a, cos_a;
      sincosf(angle, &sin_a, &cos_a);
      if (inverse) sin_a = -sin_a;
      const float x1 = Bf16ToFloat(a.v[k]);
      const float x2 = Bf16ToFloat(b.v[k]);
      a.v[k] = FloatToBf16(x1 * cos_a - x2 * sin_a);
      b.v[k] = FloatToBf16(x2 * cos_a + x1 * sin_a);
    }
    Store<W>(first, a);
    Store<W>(second, b);
  }
}

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <int W>
__global__ void __launch_bounds__(kElementwiseThreads)
    SwiGluForwardKernel(uint16_t* out, const uint16_t* gate, const uint16_t* up, int64_t vectors) {
  for (int64_t u = GlobalThread(); u < vectors; u += GridThreads()) {
    const Vec<uint16_t, W> g = Load<W>(gate + u * W);
    const Vec<uint16_t, W> p = Load<W>(up + u * W);
    Vec<uint16_t, W> result;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float gv = Bf16ToFloat(g.v[k]);
      result.v[k] = FloatToBf16(gv * Sigmoid(gv) * Bf16ToFloat(p.v[k]));
    }
    Store<W>(out + u * W, result);
  }
}

template <int W>
__global__ void __launch_bounds__(kElementwiseThreads)
    SwiGluBackwardKernel(uint16_t* dgate, uint16_t* dup, const uint16_t* dout, const uint16_t* gate,
                         const uint16_t* up, int64_t vectors) {
  for (int64_t u = GlobalThread(); u < vectors; u += GridThreads()) {
    const Vec<uint16_t, W> d = Load<W>(dout + u * W);
    const Vec<uint16_t, W> g = Load<W>(gate + u * W);
    const Vec<uint16_t, W> p = Load<W>(up + u * W);
    Vec<uint16_t, W> dg = Load<W>(dgate + u * W);
    Vec<uint16_t, W> du = Load<W>(dup + u * W);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float dv = Bf16ToFloat(d.v[k]);
      const float gv = Bf16ToFloat(g.v[k]);
      const float sig = Sigmoid(gv);
      const float dsilu = sig * (1.0f + gv * (1.0f - sig));
      dg.v[k] = FloatToBf16(Bf16ToFloat(dg.v[k]) + dv * Bf16ToFloat(p.v[k]) * dsilu);
      du.v[k] = FloatToBf16(Bf16ToFloat(du.v[k]) + dv * gv * sig);
    }
    Store<W>(dgate + u * W, dg);
    Store<W>(dup + u * W, du);
  }
}

// The 16 NF4 values, passed by value so the kernel reads them from its parameter space.
struct Nf4Table {
  float values[16];
};

// A unit is W code bytes = 2W values inside one block of 64. Every product and sum is a separate
// IEEE f32 operation (the _rn intrinsics are never fused), as DequantizeNf4 computes them.
template <int W>
__global__ void __launch_bounds__(kElementwiseThreads)
    Nf4DequantizeKernel(uint16_t* out, const uint8_t* codes, const uint8_t* absmax_codes,
                        const float* absmax_scales, const float* absmax_map, float absmax_offset,
                        Nf4Table table, int64_t vectors) {
  __shared__ float values[16];
  if (threadIdx.x < 16) values[threadIdx.x] = table.values[threadIdx.x];
  __syncthreads();
  for (int64_t u = GlobalThread(); u < vectors; u += GridThreads()) {
    const int64_t first_value = u * W * 2;
    const int64_t block = first_value / Nf4Weight::kBlockSize;
    const float scaled = __fmul_rn(absmax_map[absmax_codes[block]],
                                   absmax_scales[block / Nf4Weight::kAbsmaxBlockSize]);
    const float absmax = __fadd_rn(scaled, absmax_offset);
    const Vec<uint8_t, W> packed = Load<W>(codes + u * W);
    Vec<uint16_t, 2 * W> result;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      result.v[2 * k] = FloatToBf16(__fmul_rn(values[packed.v[k] >> 4], absmax));
      result.v[2 * k + 1] = FloatToBf16(__fmul_rn(values[packed.v[k] & 0x0f], absmax));
    }
    if constexpr (W == 1) {
      // The scalar path makes no alignment promise beyond a bf16's 2 bytes.
      out[first_value] = result.v[0];
      out[first_value + 1] = result.v[1];
    } else {
      Store<2 * W>(out + first_value, result);
    }
  }
}

// The reference's scalars (ops.h: AdamWStep), computed on the host in double as it does.
struct AdamWScalars {
  double decay;  // 1 - lr * weight_decay
  double beta1;
  double one_minus_beta1;
  double beta2;
  double one_minus_beta2;
  double step_size;  // lr / (1 - beta1^t)
  double bias_correction2_sqrt;
  double eps;
};

// The reference's expression order, each operation an explicit IEEE double op so that nothing is
// fused; every f32 store rounds where the reference's does.
template <int W>
__global__ void __launch_bounds__(kElementwiseThreads)
    AdamWKernel(float* param, const float* grad, float* m, float* v, int64_t vectors,
                AdamWScalars s) {
  for (int64_t u = GlobalThread(); u < vectors; u += GridThreads()) {
    Vec<float, W> p = Load<W>(param + u * W);
    const Vec<float, W> g = Load<W>(grad + u * W);
    Vec<float, W> mv = Load<W>(m + u * W);
    Vec<float, W> vv = Load<W>(v + u * W);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const double gk = g.v[k];
      const float decayed = __double2float_rn(__dmul_rn(p.v[k], s.decay));
      mv.v[k] = __double2float_rn(
          __dadd_rn(__dmul_rn(s.beta1, mv.v[k]), __dmul_rn(s.one_minus_beta1, gk)));
      vv.v[k] = __double2float_rn(
          __dadd_rn(__dmul_rn(s.beta2, vv.v[k]), __dmul_rn(__dmul_rn(s.one_minus_beta2, gk), gk)));
      const double denom =
          __dadd_rn(__ddiv_rn(__dsqrt_rn(vv.v[k]), s.bias_correction2_sqrt), s.eps);
      p.v[k] =
          __double2float_rn(__dsub_rn(decayed, __ddiv_rn(__dmul_rn(s.step_size, mv.v[k]), denom)));
    }
    Store<W>(param + u * W, p);
    Store<W>(m + u * W, mv);
    Store<W>(v + u * W, vv);
  }
}

// partials[blockIdx.x] = this block's sum of squares (grid-stride, then BlockSum).
template <int W>
__global__ void __launch_bounds__(kElementwiseThreads)
    SumOfSquaresPartialKernel(double* partials, const float* grad, int64_t vectors) {
  __shared__ double scratch[kWarpThreads];
  double sum = 0;
  for (int64_t u = GlobalThread(); u < vectors; u += GridThreads()) {
    const Vec<float, W> g = Load<W>(grad + u * W);
#pragma unroll
    for (int k = 0; k < W; ++k) sum += static_cast<double>(g.v[k]) * g.v[k];
  }
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// One block: *result = the sum of partials[count] in a fixed order.
__global__ void __launch_bounds__(kElementwiseThreads)
    SumOfSquaresFinalKernel(double* result, const double* partials, int64_t count) {
  __shared__ double scratch[kWarpThreads];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) *result = sum;
}

// --- host helpers ---------------------------------------------------------------------------

cudaStream_t ToCuda(Stream stream) { return static_cast<cudaStream_t>(stream.cuda_stream); }

base::Status CudaError(cudaError_t error, const char* what) {
  return base::InternalError(std::string(what) + ": " + cudaGetErrorString(error));
}

// The status of the launch just made (launch errors only; errors inside the kernel surface at the
// next synchronizing call on the stream).
base::Status LaunchStatus(const char* kernel) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return CudaError(error, kernel);
  return base::Status();
}

base::Status RequireNonNull(const void* pointer, const char* what) {
  if (pointer != nullptr) return base::Status();
  return base::InvalidArgumentError(std::string(what) + " must not be null");
}

base::Status RequireNonNegative(int64_t value, const char* what) {
  if (value >= 0) return base::Status();
  return base::InvalidArgumentError(std::string(what) + " must not be negative, got " +
                                    std::to_string(value));
}

// Calls launch(std::integral_constant<int, W>{}) for the plan's width W, instantiating only the
// widths up to kMaxWidth (16 bytes of the narrowest operand).
template <int kMaxWidth, typename Launch>
void DispatchWidth(int width, Launch&& launch) {
  static_assert(kMaxWidth == 16 || kMaxWidth == 8 || kMaxWidth == 4);
  SOVAI_CHECK(width >= 1 && width <= kMaxWidth && (width & (width - 1)) == 0)
      << "vector width " << width << " from the launch plan";
  switch (width) {
    case 16:
      if constexpr (kMaxWidth >= 16) launch(std::integral_constant<int, 16>{});
      break;
    case 8:
      if constexpr (kMaxWidth >= 8) launch(std::integral_constant<int, 8>{});
      break;
    case 4:
      launch(std::integral_constant<int, 4>{});
      break;
    case 2:
      launch(std::integral_constant<int, 2>{});
      break;
    default:
      launch(std::integral_constant<int, 1>{});
      break;
  }
}

unsigned int GridSize(int64_t blocks) { return static_cast<unsigned int>(blocks); }

}  // namespace

// --- embedding ------------------------------------------------------------------------------

base::Status ClearEmbeddingIdErrors(EmbeddingIdErrors* errors, Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNull(errors, "embedding id error record"));
  // bad_count = 0, first_bad_row = UINT32_MAX (all bits set).
  cudaError_t error = cudaMemsetAsync(&errors->bad_count, 0, sizeof(uint32_t), ToCuda(stream));
  if (error == cudaSuccess) {
    error = cudaMemsetAsync(&errors->first_bad_row, 0xff, sizeof(uint32_t), ToCuda(stream));
  }
  if (error != cudaSuccess) return CudaError(error, "clearing the embedding id errors");
  return base::Status();
}

base::Status CheckEmbeddingIdErrors(const EmbeddingIdErrors* errors, Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNull(errors, "embedding id error record"));
  EmbeddingIdErrors host;
  cudaError_t error =
      cudaMemcpyAsync(&host, errors, sizeof host, cudaMemcpyDeviceToHost, ToCuda(stream));
  if (error == cudaSuccess) error = cudaStreamSynchronize(ToCuda(stream));
  if (error != cudaSuccess) return CudaError(error, "reading the embedding id errors");
  if (host.bad_count == 0) return base::Status();
  return base::InvalidArgumentError(
      std::to_string(host.bad_count) + " token ids outside the vocabulary, the first at row " +
      std::to_string(host.first_bad_row) + "; their embeddings were zeroed");
}

base::Status EmbeddingForward(void* out, tensor::DType out_type, const int32_t* ids,
                              const uint16_t* table, int64_t n, int64_t vocab, int64_t c,
                              EmbeddingIdErrors* errors, Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNegative(n, "embedding token count"));
  if (vocab <= 0 || c <= 0) {
    return base::InvalidArgumentError("embedding table must be non-empty, got " +
                                      std::to_string(vocab) + " x " + std::to_string(c));
  }
  if (out_type != tensor::DType::kF32 && out_type != tensor::DType::kBF16) {
    return base::InvalidArgumentError("embedding output must be f32 or bf16, got " +
                                      std::string(tensor::DTypeName(out_type)));
  }
  if (n > INT32_MAX) {
    return base::InvalidArgumentError("embedding of " + std::to_string(n) +
                                      " tokens; at most 2^31 - 1 per call");
  }
  if (n == 0) return base::Status();
  SOVAI_RETURN_IF_ERROR(RequireNonNull(out, "embedding output"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(ids, "token ids"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(table, "embedding table"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(errors, "embedding id error record"));
  const bool f32 = out_type == tensor::DType::kF32;
  const Operand operands[] = {
      OperandOf(table),
      {reinterpret_cast<uintptr_t>(out), f32 ? 4 : 2},
  };
  SOVAI_ASSIGN_OR_RETURN(RowPlan plan, PlanRows(n, c, operands));
  DispatchWidth<8>(plan.vector_width, [&](auto width) {
    constexpr int W = decltype(width)::value;
    if (f32) {
      EmbeddingKernel<W><<<GridSize(plan.blocks), plan.threads, 0, ToCuda(stream)>>>(
          static_cast<float*>(out), ids, table, n, vocab, c, errors);
    } else {
      EmbeddingKernel<W><<<GridSize(plan.blocks), plan.threads, 0, ToCuda(stream)>>>(
          static_cast<uint16_t*>(out), ids, table, n, vocab, c, errors);
    }
  });
  return LaunchStatus("EmbeddingKernel");
}

// --- normalization --------------------------------------------------------------------------

base::Status RmsNormForward(uint16_t* out, float* rstd, uint16_t* residual_out, const uint16_t* x,
                            const uint16_t* residual, const uint16_t* weight, int64_t n, int64_t c,
                            float eps, Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNegative(n, "RMSNorm row count"));
  if (c <= 0) return base::InvalidArgumentError("RMSNorm width must be positive");
  if (!(eps >= 0) || !std::isfinite(eps)) {
    return base::InvalidArgumentError("RMSNorm eps must be finite and >= 0, got " +
                                      std::to_string(eps));
  }
  if (n == 0) return base::Status();
  SOVAI_RETURN_IF_ERROR(RequireNonNull(out, "RMSNorm output"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(rstd, "RMSNorm rstd"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(x, "RMSNorm input"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(weight, "RMSNorm weight"));
  if (residual != nullptr) {
    SOVAI_RETURN_IF_ERROR(RequireNonNull(residual_out, "RMSNorm residual output (with residual)"));
  }
  const Operand operands[] = {OperandOf(out), OperandOf(x), OperandOf(weight),
                              OperandOf(residual != nullptr ? residual : nullptr),
                              OperandOf(residual != nullptr ? residual_out : nullptr)};
  SOVAI_ASSIGN_OR_RETURN(RowPlan plan, PlanRows(n, c, operands));
  DispatchWidth<8>(plan.vector_width, [&](auto width) {
    RmsNormForwardKernel<decltype(width)::value>
        <<<GridSize(plan.blocks), plan.threads, 0, ToCuda(stream)>>>(out, rstd, residual_out, x,
                                                                     residual, weight, n, c, eps);
  });
  return LaunchStatus("RmsNormForwardKernel");
}

base::Status RmsNormBackward(uint16_t* dx, const uint16_t* dout, const uint16_t* h,
                             const uint16_t* weight, const float* rstd, int64_t n, int64_t c,
                             Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNegative(n, "RMSNorm row count"));
  if (c <= 0) return base::InvalidArgumentError("RMSNorm width must be positive");
  if (n == 0) return base::Status();
  SOVAI_RETURN_IF_ERROR(RequireNonNull(dx, "RMSNorm dx"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(dout, "RMSNorm dout"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(h, "RMSNorm input"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(weight, "RMSNorm weight"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(rstd, "RMSNorm rstd"));
  const Operand operands[] = {OperandOf(dx), OperandOf(dout), OperandOf(h), OperandOf(weight)};
  SOVAI_ASSIGN_OR_RETURN(RowPlan plan, PlanRows(n, c, operands));
  DispatchWidth<8>(plan.vector_width, [&](auto width) {
    RmsNormBackwardKernel<decltype(width)::value>
        <<<GridSize(plan.blocks), plan.threads, 0, ToCuda(stream)>>>(dx, dout, h, weight, rstd, n,
                                                                     c);
  });
  return LaunchStatus("RmsNormBackwardKernel");
}

// --- rotary position embedding --------------------------------------------------------------

namespace {

base::Status Rope(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t n,
                  int64_t heads, int64_t head_dim, bool inverse, Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNegative(n, "RoPE token count"));
  if (n == 0) return base::Status();
  SOVAI_RETURN_IF_ERROR(RequireNonNull(x, "RoPE input"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(positions, "RoPE positions"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(inv_freq, "RoPE inv_freq"));
  SOVAI_ASSIGN_OR_RETURN(ElementwisePlan plan, PlanRope(n, heads, head_dim, OperandOf(x)));
  DispatchWidth<8>(plan.vector_width, [&](auto width) {
    RopeKernel<decltype(width)::value><<<GridSize(plan.blocks), plan.threads, 0, ToCuda(stream)>>>(
        x, positions, inv_freq, plan.vectors, heads, head_dim / 2, inverse);
  });
  return LaunchStatus("RopeKernel");
}

}  // namespace

base::Status RopeForward(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t n,
                         int64_t heads, int64_t head_dim, Stream stream) {
  return Rope(x, positions, inv_freq, n, heads, head_dim, /*inverse=*/false, stream);
}

base::Status RopeBackward(uint16_t* d, const int32_t* positions, const float* inv_freq, int64_t n,
                          int64_t heads, int64_t head_dim, Stream stream) {
  return Rope(d, positions, inv_freq, n, heads, head_dim, /*inverse=*/true, stream);
}

// --- feed-forward ---------------------------------------------------------------------------

base::Status SwiGluForward(uint16_t* out, const uint16_t* gate, const uint16_t* up, int64_t count,
                           Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNegative(count, "SwiGLU element count"));
  if (count == 0) return base::Status();
  SOVAI_RETURN_IF_ERROR(RequireNonNull(out, "SwiGLU output"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(gate, "SwiGLU gate"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(up, "SwiGLU up"));
  const Operand operands[] = {OperandOf(out), OperandOf(gate), OperandOf(up)};
  SOVAI_ASSIGN_OR_RETURN(ElementwisePlan plan, PlanElementwise(count, operands));
  DispatchWidth<8>(plan.vector_width, [&](auto width) {
    SwiGluForwardKernel<decltype(width)::value>
        <<<GridSize(plan.blocks), plan.threads, 0, ToCuda(stream)>>>(out, gate, up, plan.vectors);
  });
  return LaunchStatus("SwiGluForwardKernel");
}

base::Status SwiGluBackward(uint16_t* dgate, uint16_t* dup, const uint16_t* dout,
                            const uint16_t* gate, const uint16_t* up, int64_t count,
                            Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNegative(count, "SwiGLU element count"));
  if (count == 0) return base::Status();
  SOVAI_RETURN_IF_ERROR(RequireNonNull(dgate, "SwiGLU dgate"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(dup, "SwiGLU dup"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(dout, "SwiGLU dout"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(gate, "SwiGLU gate"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(up, "SwiGLU up"));
  const Operand operands[] = {OperandOf(dgate), OperandOf(dup), OperandOf(dout), OperandOf(gate),
                              OperandOf(up)};
  SOVAI_ASSIGN_OR_RETURN(ElementwisePlan plan, PlanElementwise(count, operands));
  DispatchWidth<8>(plan.vector_width, [&](auto width) {
    SwiGluBackwardKernel<decltype(width)::value>
        <<<GridSize(plan.blocks), plan.threads, 0, ToCuda(stream)>>>(dgate, dup, dout, gate, up,
                                                                     plan.vectors);
  });
  return LaunchStatus("SwiGluBackwardKernel");
}

// --- NF4 ------------------------------------------------------------------------------------

base::Status Nf4Dequantize(uint16_t* out, const Nf4Weight& w, int64_t numel, Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNegative(numel, "NF4 element count"));
  if (numel % Nf4Weight::kBlockSize != 0) {
    return base::InvalidArgumentError("NF4 element count must be a multiple of 64, got " +
                                      std::to_string(numel));
  }
  if (numel == 0) return base::Status();
  SOVAI_RETURN_IF_ERROR(RequireNonNull(out, "NF4 output"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(w.codes, "NF4 codes"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(w.absmax_codes, "NF4 absmax codes"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(w.absmax_scales, "NF4 absmax scales"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(w.absmax_map, "NF4 absmax map"));
  SOVAI_ASSIGN_OR_RETURN(
      ElementwisePlan plan,
      PlanNf4Dequantize(numel, OperandOf(w.codes),
                        Operand{reinterpret_cast<uintptr_t>(out), /*two bf16 per code byte*/ 4}));
  Nf4Table table;
  for (int i = 0; i < 16; ++i) table.values[i] = kNf4Values[i];
  DispatchWidth<16>(plan.vector_width, [&](auto width) {
    Nf4DequantizeKernel<decltype(width)::value>
        <<<GridSize(plan.blocks), plan.threads, 0, ToCuda(stream)>>>(
            out, w.codes, w.absmax_codes, w.absmax_scales, w.absmax_map, w.absmax_offset, table,
            plan.vectors);
  });
  return LaunchStatus("Nf4DequantizeKernel");
}

// --- optimizer ------------------------------------------------------------------------------

base::Status AdamWStep(float* param, const float* grad, float* m, float* v, int64_t count,
                       const Backend::AdamWParams& p, Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNegative(count, "AdamW element count"));
  if (p.step < 1) {
    return base::InvalidArgumentError("AdamW step numbers start at 1, got " +
                                      std::to_string(p.step));
  }
  if (count == 0) return base::Status();
  SOVAI_RETURN_IF_ERROR(RequireNonNull(param, "AdamW param"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(grad, "AdamW grad"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(m, "AdamW m"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(v, "AdamW v"));
  // As reference::AdamWStep computes them.
  const double lr = p.learning_rate;
  const double beta1 = p.beta1;
  const double beta2 = p.beta2;
  const AdamWScalars scalars{
      .decay = 1 - lr * p.weight_decay,
      .beta1 = beta1,
      .one_minus_beta1 = 1 - beta1,
      .beta2 = beta2,
      .one_minus_beta2 = 1 - beta2,
      .step_size = lr / (1 - std::pow(beta1, static_cast<double>(p.step))),
      .bias_correction2_sqrt = std::sqrt(1 - std::pow(beta2, static_cast<double>(p.step))),
      .eps = p.eps,
  };
  const Operand operands[] = {OperandOf(param), OperandOf(grad), OperandOf(m), OperandOf(v)};
  SOVAI_ASSIGN_OR_RETURN(ElementwisePlan plan, PlanElementwise(count, operands));
  DispatchWidth<4>(plan.vector_width, [&](auto width) {
    AdamWKernel<decltype(width)::value><<<GridSize(plan.blocks), plan.threads, 0, ToCuda(stream)>>>(
        param, grad, m, v, plan.vectors, scalars);
  });
  return LaunchStatus("AdamWKernel");
}

base::Status SumOfSquares(double* result, const float* grad, int64_t count, void* workspace,
                          int64_t workspace_bytes, Stream stream) {
  SOVAI_RETURN_IF_ERROR(RequireNonNegative(count, "SumOfSquares element count"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(result, "SumOfSquares result"));
  if (count == 0) {
    const cudaError_t error = cudaMemsetAsync(result, 0, sizeof(double), ToCuda(stream));
    if (error != cudaSuccess) return CudaError(error, "SumOfSquares of nothing");
    return base::Status();
  }
  SOVAI_RETURN_IF_ERROR(RequireNonNull(grad, "SumOfSquares input"));
  SOVAI_RETURN_IF_ERROR(RequireNonNull(workspace, "SumOfSquares workspace"));
  SOVAI_ASSIGN_OR_RETURN(SumOfSquaresPlan plan, PlanSumOfSquares(count, OperandOf(grad)));
  if (workspace_bytes < plan.workspace_bytes ||
      reinterpret_cast<uintptr_t>(workspace) % alignof(double) != 0) {
    return base::InvalidArgumentError(
        "SumOfSquares needs an 8-byte aligned workspace of at least " +
        std::to_string(plan.workspace_bytes) + " bytes (kSumOfSquaresWorkspaceBytes), got " +
        std::to_string(workspace_bytes));
  }
  auto* partials = static_cast<double*>(workspace);
  const ElementwisePlan& first = plan.first_pass;
  DispatchWidth<4>(first.vector_width, [&](auto width) {
    SumOfSquaresPartialKernel<decltype(width)::value>
        <<<GridSize(first.blocks), first.threads, 0, ToCuda(stream)>>>(partials, grad,
                                                                       first.vectors);
  });
  SOVAI_RETURN_IF_ERROR(LaunchStatus("SumOfSquaresPartialKernel"));
  SumOfSquaresFinalKernel<<<1, first.threads, 0, ToCuda(stream)>>>(result, partials, first.blocks);
  return LaunchStatus("SumOfSquaresFinalKernel");
}

}  // namespace sovai::kernels::cuda
