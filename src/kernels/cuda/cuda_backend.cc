// The CUDA backend (cuda_backend.h): memory on the CUDA runtime, products through cuBLAS's f32
// GEMM, everything else in cuda_backend_kernels.cu, AdamW and the sum of squares from ops.h.
#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "kernels/cuda/cuda_backend_kernels.h"
#include "kernels/cuda/launch_plan.h"
#include "kernels/cuda/ops.h"

namespace sovai::kernels::cuda {
namespace {

namespace k = internal;

// A CUDA error inside an op: the device is broken (backend.h: ops do not fail), so stop with
// CUDA's message and the op's name.
void CheckCuda(cudaError_t error, const char* what) {
  SOVAI_CHECK(error == cudaSuccess)
      << "cuda backend: " << what << ": " << cudaGetErrorString(error);
}

void CheckCublas(cublasStatus_t status, const char* what) {
  SOVAI_CHECK(status == CUBLAS_STATUS_SUCCESS)
      << "cuda backend: " << what << ": " << cublasGetStatusName(status) << " ("
      << cublasGetStatusString(status) << ")";
}

void CheckStatus(const base::Status& status, const char* what) {
  SOVAI_CHECK(status.ok()) << "cuda backend: " << what << ": " << status.ToString();
}

// RAII for the C handles: each is released by its owner's destructor on every path.
struct StreamDeleter {
  void operator()(CUstream_st* stream) const { cudaStreamDestroy(stream); }
};
struct CublasDeleter {
  void operator()(cublasContext* handle) const { cublasDestroy(handle); }
};
struct DeviceDeleter {
  void operator()(void* data) const { cudaFree(data); }
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;
using CublasPtr = std::unique_ptr<cublasContext, CublasDeleter>;
using DevicePtr = std::unique_ptr<void, DeviceDeleter>;

// Scratch the ops need between kernels (expanded weights, logits, dropout masks). Each slot grows
// to the largest request and is kept, so a training step allocates nothing after its first run.
enum Slot : int { kWeightSlot, kSlotA, kSlotB, kSlotC, kSlotCount };

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, StreamPtr stream, CublasPtr cublas, DevicePtr workspace,
              DevicePtr sum_result)
      : device_(device),
        stream_owner_(std::move(stream)),
        cublas_owner_(std::move(cublas)),
        workspace_owner_(std::move(workspace)),
        sum_result_owner_(std::move(sum_result)),
        stream_(stream_owner_.get()),
        cublas_(cublas_owner_.get()),
        sum_workspace_(workspace_owner_.get()),
        sum_result_(static_cast<double*>(sum_result_owner_.get())) {}

  // Work still queued may use the scratch and the handles, which the members free next.
  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
  }

  std::string_view name() const override { return "cuda"; }
  bool Supports(Op op) const override { return op != Op::kCount; }
  // f32, as the cpu backend: bf16 activation storage is a later step (cuda_backend.h).
  tensor::DType activation_dtype() const override { return tensor::DType::kF32; }

  // --- memory -------------------------------------------------------------------------------

  // Synchronous on purpose: backend.h lets the caller reuse host_src as soon as Upload returns,
  // which an asynchronous copy from pinned memory would not guarantee.
  void Upload(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    Use();
    CheckCuda(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "Upload");
    CheckCuda(cudaStreamSynchronize(stream_), "Upload");
  }
  void Download(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    Use();
    CheckCuda(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "Download");
    CheckCuda(cudaStreamSynchronize(stream_), "Download");
  }
  void Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    Use();
    CheckCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "Copy");
  }
  void Fill(void* dst, uint8_t value, size_t bytes) override {
    if (bytes == 0) return;
    Use();
    CheckCuda(cudaMemsetAsync(dst, value, bytes, stream_), "Fill");
  }
  void Synchronize() override {
    Use();
    CheckCuda(cudaStreamSynchronize(stream_), "Synchronize");
  }

  // --- dense algebra ------------------------------------------------------------------------

  // Row-major C[M, N] is column-major C^T[N, M], and C^T = op(B)^T op(A)^T: so cuBLAS gets B
  // first, A second, each with its own transposition, and the row lengths as leading dimensions.
  // beta == 0 does not read C (cuBLAS's rule, as backend.h's).
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t kk, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    if (m == 0 || n == 0) return;
    Use();
    if (kk == 0) {  // an empty sum: c = beta * c
      if (beta == 0) {
        CheckCuda(cudaMemsetAsync(c, 0, sizeof(float) * m * n, stream_), "Gemm");
      } else {
        CheckCuda(k::Scale(c, beta, m * n, stream_), "Gemm");
      }
      return;
    }
    const int lda = static_cast<int>(trans_a ? m : kk);
    const int ldb = static_cast<int>(trans_b ? kk : n);
    CheckCublas(
        cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                    static_cast<int>(kk), &alpha, b, ldb, a, lda, &beta, c, static_cast<int>(n)),
        "cublasSgemm");
  }

  void LinearForward(float* out, const float* x, const WeightRef& w, const float* bias,
                     int64_t n) override {
    if (n == 0) return;
    const float* weight = F32Weight(w);
    Gemm(false, true, n, w.rows, w.cols, 1.0f, x, weight, 0.0f, out);
    if (bias != nullptr) CheckCuda(k::AddBiasRows(out, bias, n, w.rows, stream_), "linear bias");
  }
  void LinearBackwardInput(float* dx, const float* dout, const WeightRef& w, int64_t n) override {
    if (n == 0) return;
    const float* weight = F32Weight(w);
    Gemm(false, false, n, w.cols, w.rows, 1.0f, dout, weight, 1.0f, dx);
  }
  void LinearBackwardBias(float* dbias, const float* dout, int64_t n, int64_t out) override {
    if (out == 0) return;
    Use();
    CheckCuda(k::SumRowsInto(dbias, dout, n, out, stream_), "LinearBackwardBias");
  }

  // --- embedding ----------------------------------------------------------------------------

  void EmbeddingForward(float* out, const int32_t* ids, const WeightRef& table,
                        int64_t n) override {
    if (n == 0 || table.cols == 0) return;
    Use();
    const void* data = table.data;
    WeightRef::Format format = table.format;
    if (format == WeightRef::Format::kNF4) {  // not a format tables come in; expanded to be safe
      data = F32Weight(table);
      format = WeightRef::Format::kF32;
    }
    CheckCuda(k::Embedding(out, ids, data, format, n, table.cols, stream_), "EmbeddingForward");
  }
  void EmbeddingBackward(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                         int64_t vocab, int64_t c) override {
    (void)vocab;
    if (n == 0 || c == 0) return;
    Use();
    CheckCuda(k::EmbeddingScatter(dtable, dout, ids, n, c, stream_), "EmbeddingBackward");
  }

  // --- normalization, RoPE, feed-forward ------------------------------------------------------

  void RmsNormForward(float* out, float* rstd, const float* x, const float* weight, int64_t n,
                      int64_t c, float eps) override {
    if (n == 0) return;
    Use();
    CheckCuda(k::RmsNormForward(out, rstd, x, weight, n, c, eps, stream_), "RmsNormForward");
  }
  void RmsNormBackward(float* dx, float* dweight, const float* dout, const float* x,
                       const float* weight, const float* rstd, int64_t n, int64_t c) override {
    if (n == 0) return;
    Use();
    CheckCuda(k::RmsNormBackward(dx, dweight, dout, x, weight, rstd, n, c, stream_),
              "RmsNormBackward");
  }
  void RopeForward(float* out, const float* x, const int32_t* positions, const float* inv_freq,
                   int64_t n, int64_t heads, int64_t head_dim) override {
    if (n == 0) return;
    Use();
    CheckCuda(k::Rope(out, x, positions, inv_freq, n, heads, head_dim, 1.0f, stream_),
              "RopeForward");
  }
  void RopeBackward(float* dx, const float* dout, const int32_t* positions, const float* inv_freq,
                    int64_t n, int64_t heads, int64_t head_dim) override {
    if (n == 0) return;
    Use();
    CheckCuda(k::Rope(dx, dout, positions, inv_freq, n, heads, head_dim, -1.0f, stream_),
              "RopeBackward");
  }
  void SwiGluForward(float* out, const float* gate, const float* up, int64_t count) override {
    if (count == 0) return;
    Use();
    CheckCuda(k::SwiGluForward(out, gate, up, count, stream_), "SwiGluForward");
  }
  void SwiGluBackward(float* dgate, float* dup, const float* dout, const float* gate,
                      const float* up, int64_t count) override {
    if (count == 0) return;
    Use();
    CheckCuda(k::SwiGluBackward(dgate, dup, dout, gate, up, count, stream_), "SwiGluBackward");
  }
  void Add(float* out, const float* a, const float* b, int64_t count) override {
    if (count == 0) return;
    Use();
    CheckCuda(k::Add(out, a, b, count, stream_), "Add");
  }

  // --- attention ----------------------------------------------------------------------------

  void AttentionForward(float* out, float* lse, const float* q, const float* kk, const float* v,
                        const int32_t* segment, const AttentionShape& s) override {
    if (s.batch * s.seq_len == 0) return;
    Use();
    CheckCuda(k::AttentionForward(out, lse, q, kk, v, segment, s, stream_), "AttentionForward");
  }
  void AttentionBackward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                         const float* lse, const float* q, const float* kk, const float* v,
                         const int32_t* segment, const AttentionShape& s) override {
    if (s.batch * s.seq_len == 0) return;
    Use();
    auto* delta =
        static_cast<float*>(ScratchBytes(kSlotA, sizeof(float) * s.batch * s.q_heads * s.seq_len));
    CheckCuda(
        k::AttentionBackward(dq, dk, dv, delta, dout, out, lse, q, kk, v, segment, s, stream_),
        "AttentionBackward");
  }
  void KvCacheWrite(float* k_cache, float* v_cache, const float* kk, const float* v,
                    const int32_t* slots, int64_t n, int64_t kv_heads, int64_t head_dim) override {
    if (n == 0) return;
    Use();
    CheckCuda(k::KvCacheWrite(k_cache, v_cache, kk, v, slots, n, kv_heads, head_dim, stream_),
              "KvCacheWrite");
  }
  void PagedAttention(float* out, const float* q, const float* k_cache, const float* v_cache,
                      const int32_t* seq_of, const int32_t* positions, const int32_t* block_tables,
                      int64_t n, const PagedAttentionShape& s) override {
    if (n == 0) return;
    Use();
    CheckCuda(
        k::PagedAttention(out, q, k_cache, v_cache, seq_of, positions, block_tables, n, s, stream_),
        "PagedAttention");
  }

  // --- loss ---------------------------------------------------------------------------------

  // Chunk by chunk: logits = hidden @ W^T (cuBLAS), one block per row turns them into losses and,
  // for the backward pass, dlogits in place, which two more products fold into dhidden and
  // dweight. The per-row losses stay on the device until the end, then are summed in double.
  double CrossEntropy(float* dhidden, float* dweight, const float* hidden, const WeightRef& weight,
                      const int32_t* targets, int64_t n, float grad_scale,
                      int64_t chunk_rows) override {
    if (n == 0) return 0;
    SOVAI_CHECK(chunk_rows >= 1) << chunk_rows;
    const int64_t vocab = weight.rows, c = weight.cols;
    const float* w = F32Weight(weight);
    const int64_t chunk = std::min(chunk_rows, n);
    auto* logits = static_cast<float*>(ScratchBytes(kSlotA, sizeof(float) * chunk * vocab));
    auto* losses = static_cast<double*>(ScratchBytes(kSlotB, sizeof(double) * n));
    const bool backward = dhidden != nullptr;
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
      const int64_t rows = std::min(chunk, n - r0);
      Gemm(false, true, rows, vocab, c, 1.0f, hidden + r0 * c, w, 0.0f, logits);
      CheckCuda(k::CrossEntropyRows(logits, losses + r0, targets + r0, rows, vocab, backward,
                                    grad_scale, stream_),
                "CrossEntropy rows");
      if (!backward) continue;
      Gemm(false, false, rows, c, vocab, 1.0f, logits, w, 1.0f, dhidden + r0 * c);
      if (dweight != nullptr) {
        Gemm(true, false, vocab, c, rows, 1.0f, logits, hidden + r0 * c, 1.0f, dweight);
      }
    }
    std::vector<double> host(static_cast<size_t>(n));
    Download(host.data(), losses, sizeof(double) * n);
    double sum = 0;
    for (double l : host) sum += l;
    return sum;
  }

  // --- LoRA ---------------------------------------------------------------------------------

  void LoraForward(float* y, float* xa, const float* x, const float* a, const float* b, int64_t n,
                   int64_t in, int64_t out, int64_t rank, float scale,
                   const Dropout& dropout) override {
    if (n == 0) return;
    const float* xd = Dropped(kSlotA, x, n * in, dropout);
    Gemm(false, true, n, rank, in, 1.0f, xd, a, 0.0f, xa);
    Gemm(false, true, n, out, rank, scale, xa, b, 1.0f, y);
  }
  void LoraBackward(float* dx, float* da, float* db, const float* dy, const float* x,
                    const float* xa, const float* a, const float* b, int64_t n, int64_t in,
                    int64_t out, int64_t rank, float scale, const Dropout& dropout) override {
    if (n == 0) return;
    Gemm(true, false, out, rank, n, scale, dy, xa, 1.0f, db);
    auto* dxa = static_cast<float*>(ScratchBytes(kSlotB, sizeof(float) * n * rank));
    Gemm(false, false, n, rank, out, scale, dy, b, 0.0f, dxa);
    const float* xd = Dropped(kSlotA, x, n * in, dropout);
    Gemm(true, false, rank, in, n, 1.0f, dxa, xd, 1.0f, da);
    if (dx == nullptr) return;
    if (dropout.probability <= 0) {
      Gemm(false, false, n, in, rank, 1.0f, dxa, a, 1.0f, dx);
      return;
    }
    auto* t = static_cast<float*>(ScratchBytes(kSlotC, sizeof(float) * n * in));
    Gemm(false, false, n, in, rank, 1.0f, dxa, a, 0.0f, t);
    CheckCuda(k::DropoutAccumulate(dx, t, dropout, n * in, stream_), "LoRA dropout backward");
  }

  // --- NF4, optimizer -----------------------------------------------------------------------

  void Nf4Dequantize(float* out, const Nf4Weight& w, int64_t numel) override {
    if (numel == 0) return;
    Use();
    CheckCuda(k::ExpandNf4(out, w, numel, stream_), "Nf4Dequantize");
  }
  void AdamWStep(float* param, const float* grad, float* m, float* v, int64_t count,
                 const AdamWParams& params) override {
    Use();
    CheckStatus(cuda::AdamWStep(param, grad, m, v, count, params, Stream{stream_}), "AdamWStep");
  }
  double SumOfSquares(const float* grad, int64_t count) override {
    Use();
    CheckStatus(cuda::SumOfSquares(sum_result_, grad, count, sum_workspace_,
                                   kSumOfSquaresWorkspaceBytes, Stream{stream_}),
                "SumOfSquares");
    double result = 0;
    Download(&result, sum_result_, sizeof(result));
    return result;
  }
  void Scale(float* x, float factor, int64_t count) override {
    if (count == 0) return;
    Use();
    CheckCuda(k::Scale(x, factor, count, stream_), "Scale");
  }

 protected:
  void* AllocateBytes(size_t bytes) override {
    Use();
    void* data = nullptr;
    if (cudaMalloc(&data, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky out-of-memory so later calls do not see it
      return nullptr;
    }
    return data;
  }
  // cudaFree waits for the device, so a buffer freed while ops that use it are queued is safe.
  void FreeBytes(void* data, size_t bytes) override {
    (void)bytes;
    Use();
    CheckCuda(cudaFree(data), "cudaFree");
  }

 private:
  struct Scratch {
    DevicePtr data;
    size_t bytes = 0;
  };

  void Use() const { CheckCuda(cudaSetDevice(device_), "cudaSetDevice"); }

  // At least `bytes` of scratch slot `slot`, contents undefined. Growing waits for the stream
  // (an op queued before may still read the old memory) and reallocates.
  void* ScratchBytes(Slot slot, size_t bytes) {
    Use();
    Scratch& s = scratch_[slot];
    if (s.bytes < bytes) {
      CheckCuda(cudaStreamSynchronize(stream_), "scratch");
      s = Scratch{};
      void* data = nullptr;
      CheckCuda(cudaMalloc(&data, bytes), "scratch allocation (device memory full?)");
      s.data.reset(data);
      s.bytes = bytes;
    }
    return s.data.get();
  }

  // The weight as f32 device memory: its own data when it is f32, else expanded into the weight
  // slot (so two expanded weights may not be live at once: every op uses one).
  const float* F32Weight(const WeightRef& w) {
    Use();
    const int64_t count = w.rows * w.cols;
    switch (w.format) {
      case WeightRef::Format::kF32:
        return static_cast<const float*>(w.data);
      case WeightRef::Format::kBF16: {
        auto* out = static_cast<float*>(ScratchBytes(kWeightSlot, sizeof(float) * count));
        CheckCuda(k::ExpandBf16(out, static_cast<const uint16_t*>(w.data), count, stream_), "bf16");
        return out;
      }
      case WeightRef::Format::kNF4: {
        auto* out = static_cast<float*>(ScratchBytes(kWeightSlot, sizeof(float) * count));
        CheckCuda(k::ExpandNf4(out, w.nf4, count, stream_), "nf4");
        return out;
      }
      case WeightRef::Format::kQ8_0: {
        auto* out = static_cast<float*>(ScratchBytes(kWeightSlot, sizeof(float) * count));
        CheckCuda(k::ExpandQ8_0(out, static_cast<const uint8_t*>(w.data), count, stream_), "q8_0");
        return out;
      }
    }
    SOVAI_CHECK(false) << "weight format " << static_cast<int>(w.format);
    return nullptr;
  }

  // dropout(x) in `slot`, or x itself without dropout.
  const float* Dropped(Slot slot, const float* x, int64_t count, const Dropout& dropout) {
    if (dropout.probability <= 0) return x;
    auto* out = static_cast<float*>(ScratchBytes(slot, sizeof(float) * count));
    CheckCuda(k::DropoutApply(out, x, dropout, count, stream_), "LoRA dropout");
    return out;
  }

  const int device_;
  StreamPtr stream_owner_;
  CublasPtr cublas_owner_;
  DevicePtr workspace_owner_;
  DevicePtr sum_result_owner_;
  cudaStream_t stream_;
  cublasHandle_t cublas_;
  void* sum_workspace_;  // kSumOfSquaresWorkspaceBytes for cuda::SumOfSquares
  double* sum_result_;   // its device result
  // Declared last, so freed first (while the stream exists).
  std::array<Scratch, kSlotCount> scratch_{};
};

base::Status CudaStatus(cudaError_t error, const std::string& what) {
  return base::InternalError("cuda backend: " + what + ": " + cudaGetErrorString(error));
}

}  // namespace

base::Result<std::unique_ptr<Backend>> NewCudaBackend(int device_index) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice || (error == cudaSuccess && count == 0)) {
    cudaGetLastError();
    return base::UnavailableError(
        "cuda backend: no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  }
  if (error != cudaSuccess) {
    cudaGetLastError();
    return base::UnavailableError(std::string("cuda backend: the CUDA runtime cannot start (") +
                                  cudaGetErrorString(error) +
                                  "); is the NVIDIA driver installed and /dev/nvidia* visible?");
  }
  if (device_index < 0 || device_index >= count) {
    return base::InvalidArgumentError("cuda backend: no CUDA device " +
                                      std::to_string(device_index) + " (" + std::to_string(count) +
                                      " visible)");
  }
  cudaError_t e = cudaSetDevice(device_index);
  if (e != cudaSuccess) return CudaStatus(e, "cudaSetDevice");
  cudaStream_t raw_stream = nullptr;
  if ((e = cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking)) != cudaSuccess) {
    return CudaStatus(e, "cudaStreamCreate");
  }
  StreamPtr stream(raw_stream);
  cublasHandle_t raw_cublas = nullptr;
  if (cublasCreate(&raw_cublas) != CUBLAS_STATUS_SUCCESS) {
    return base::InternalError("cuda backend: cublasCreate failed");
  }
  CublasPtr cublas(raw_cublas);
  // Plain f32 products: no TF32 (its 10-bit mantissa would break the f32 tolerances).
  if (cublasSetStream(raw_cublas, raw_stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(raw_cublas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS) {
    return base::InternalError("cuda backend: cannot configure cuBLAS");
  }
  void* raw = nullptr;
  if ((e = cudaMalloc(&raw, kSumOfSquaresWorkspaceBytes)) != cudaSuccess) {
    return CudaStatus(e, "workspace allocation");
  }
  DevicePtr workspace(raw);
  if ((e = cudaMalloc(&raw, sizeof(double))) != cudaSuccess) {
    return CudaStatus(e, "workspace allocation");
  }
  DevicePtr sum_result(raw);
  return std::unique_ptr<Backend>(
      std::make_unique<CudaBackend>(device_index, std::move(stream), std::move(cublas),
                                    std::move(workspace), std::move(sum_result)));
}

}  // namespace sovai::kernels::cuda
