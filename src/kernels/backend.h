// The ops of the ML engine, forward and backward, behind one interface that every backend
// implements.
//
// Conventions (the same for every backend, so that the consistency test can compare them):
// * Every array is contiguous and row-major; pointers address the backend's memory (host memory for
//   the reference and cpu backends, device memory for cuda). Shapes are written in comments as in
//   llm.c: `x[N, C]` is N rows of C floats. N is the number of token positions in a step (B*T).
//   Shape letters: B batch, T sequence length, C channels, V vocabulary, H heads, D head size,
//   I/O a linear layer's input/output features, R LoRA rank, F feed-forward width.
// * Activations and gradients are f32. Weights may be stored f32, bf16 or NF4 (see WeightRef): the
//   backends dequantize on the fly and compute in f32.
// * Backward ops ACCUMULATE into every gradient they produce (`dx += ...`): callers zero gradient
//   buffers once per step, which lets residual branches and gradient accumulation share buffers.
//   A gradient pointer documented as "may be null" skips that gradient.
// * Ops do not fail: shapes, indices (token ids, targets) and pointers are the caller's contract.
//   The reference backend checks them with SOVAI_CHECK (it is the test oracle, so a violated
//   contract should stop it loudly); the fast backends may not check at all.
// * Nothing allocates inside an op of a fast backend except the cpu backend's per-thread scratch.
//   The reference backend allocates temporaries freely: it is written to be read, not to be fast.
// * Reductions: the reference backend accumulates every sum in double; other backends may
//   accumulate in f32, which is why the consistency tests compare with tolerances that grow with
//   the reduction length.
//
// Memory (the device seam, after ggml-backend's buffers): a backend allocates the buffers its ops
// read and write (Allocate -> DeviceBuffer, freed by that backend), and host data crosses only
// through it: Upload (host -> backend), Download (backend -> host), Copy (backend -> backend),
// Fill, and Synchronize. The model, the trainer and the inference engine keep every weight,
// activation, gradient, optimizer moment and KV block in such buffers, so the same orchestration
// runs where the backend's memory is a GPU's. Ops, Copy and Fill are enqueued in order (a device
// backend returns before they run); Download and Synchronize wait for everything enqueued before
// them. The reference and cpu backends use 64-byte aligned host memory and memcpy (HostMemory
// below); NewStrictBackend checks that every pointer an op is given lies in one of its own live
// buffers (strict_backend.cc), which proves on a CPU that no op reads host memory behind the
// caller's back.
//
// Thread-safety: a Backend's ops, Copy, Fill and Synchronize may be used from one thread at a
// time; the cpu backend parallelizes inside each op. Allocate, freeing a DeviceBuffer, Upload and
// Download of buffers no op is using, and memory_stats may be called from any thread (the
// inference engine loads adapters from API threads while its loop runs ops).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace sovai::kernels {

// NF4 (4-bit NormalFloat, the QLoRA paper) storage of a weight, bit-compatible with bitsandbytes'
// quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=True); docs/formats/nf4.md
// has the full layout and nf4.h the quantizer. Element e of the weight (row-major) is
//   absmax[b] = absmax_map[absmax_codes[b]] * absmax_scales[b / 256] + absmax_offset  (f32 ops)
//   w[e]      = kNf4Values[code(e)] * absmax[e / 64]                                  (f32 op)
// where b = e / 64 and code(e) is the high nibble of codes[e / 2] for even e, the low nibble for
// odd e. numel must be a multiple of 64.
struct Nf4Weight {
  static constexpr int64_t kBlockSize = 64;
  static constexpr int64_t kAbsmaxBlockSize = 256;
  static constexpr int kAbsmaxMapSize = 256;
  const uint8_t* codes = nullptr;         // [numel / 2]
  const uint8_t* absmax_codes = nullptr;  // [numel / 64]
  const float* absmax_scales = nullptr;   // [ceil(numel / 64 / 256)]
  // The 256 values an absmax code stands for (bitsandbytes' signed dynamic map). bitsandbytes
  // stores it with every weight (`nested_quant_map`) because PyTorch computes it with slightly
  // different rounding on different machines; pass the stored one for bit-exact dequantization.
  const float* absmax_map = nullptr;  // [256]
  float absmax_offset = 0;            // the mean subtracted before double quantization
};

// A frozen or trainable weight matrix w[rows, cols] in one of the storage formats. Q8_0 (ggml's
// 8-bit blocks, q8_0.h) is the inference format: cols is a multiple of 32 and each row is
// cols / 32 blocks of 34 bytes; only LinearForward and EmbeddingForward read it.
struct WeightRef {
  enum class Format : uint8_t { kF32, kBF16, kNF4, kQ8_0 };
  Format format = Format::kF32;
  const void* data = nullptr;  // f32, bf16 (uint16_t bits) or Q8_0 blocks; unused for NF4
  Nf4Weight nf4;               // for kNF4 (rows * cols a multiple of 64)
  int64_t rows = 0;
  int64_t cols = 0;
};

// Which ops a backend implements; the engine refuses to run a model on a backend that lacks one.
enum class Op : uint8_t {
  kGemm,
  kLinear,
  kEmbedding,
  kRmsNorm,
  kRope,
  kAttention,
  kSwiGlu,
  kAdd,
  kCrossEntropy,
  kLora,
  kNf4,
  kAdamW,
  kQ8_0,            // Q8_0 weights in LinearForward and EmbeddingForward
  kPagedAttention,  // KvCacheWrite and PagedAttention (inference)
  kCount,
};
// "gemm", "linear", ...; "unknown" for a value outside the enum.
std::string_view OpName(Op op);

// How a LoRA branch drops inputs during training: element i of x[N, I] (flat index n * I + i) is
// kept iff DropoutKeep(seed, i, p), and kept elements are scaled by 1 / (1 - p). p == 0 disables
// dropout; p must be in [0, 1). The decision is a counter-based hash, so every backend and the
// backward pass agree without storing a mask. Every backend computes it exactly so:
//   mix(z)  = splitmix64's finalizer of z + 0x9E3779B97F4A7C15 (all arithmetic mod 2^64)
//   h       = mix(seed ^ mix(index))
//   u       = (h >> 40) * 2^-24          (a float in [0, 1) with 24 random bits, exact in f32)
//   keep    = u >= p                      (compared in f32)
// Callers draw a fresh seed per step and per layer.
struct Dropout {
  float probability = 0;
  uint64_t seed = 0;
};
bool DropoutKeep(uint64_t seed, uint64_t index, float probability);

// splitmix64's output function (Steele, Lea, Flood 2014): a bijection on 64-bit values whose every
// output bit depends on every input bit. The engine derives every seeded stream from it (dropout
// masks, data order, initialisation), so they are the same on every platform and library.
uint64_t SplitMix64(uint64_t z);

class Backend;

// Every buffer's address is a multiple of this (the widest SIMD load of the cpu backend and a
// cache line; cudaMalloc's 256 is a multiple of it).
inline constexpr size_t kBufferAlignment = 64;

// `bytes` bytes of a backend's memory, owned: the backend that allocated it frees it when the
// buffer is destroyed, reset or assigned to (a unique_ptr to memory the host may not be able to
// dereference). An empty buffer (default, moved-from, or of 0 bytes) has null data. The pointer
// is stable for the buffer's life and moves with it. The backend must outlive its buffers
// (checked when it is destroyed).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  // Frees the memory now (nothing for an empty buffer).
  void Reset();
  bool empty() const { return data_ == nullptr; }
  size_t bytes() const { return bytes_; }
  // The backend's address, for ops and copies of that backend only.
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // The number of T the buffer holds.
  template <typename T>
  int64_t count() const {
    return static_cast<int64_t>(bytes_ / sizeof(T));
  }
  Backend* backend() const { return backend_; }

 private:
  friend class Backend;
  DeviceBuffer(Backend* backend, void* data, size_t bytes)
      : backend_(backend), data_(data), bytes_(bytes) {}

  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// What a backend's buffers hold now (every backend counts them the same way, in Allocate).
struct MemoryStats {
  int64_t live_buffers = 0;
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;  // the most live_bytes has been
};

class Backend {
 public:
  // Checks that no buffer of this backend is still alive: freeing it later would call into a
  // destroyed backend (a bug in the order its owner destroys things).
  virtual ~Backend();
  virtual std::string_view name() const = 0;
  virtual bool Supports(Op op) const = 0;

  // --- memory ---------------------------------------------------------------------------------
  // A buffer of `bytes` in this backend's memory, kBufferAlignment-aligned, contents undefined
  // (as cudaMalloc's: clear it with Fill where zeros are meant). 0 bytes gives an empty buffer.
  // ResourceExhausted, naming the size and the backend, when the memory cannot hold it.
  base::Result<DeviceBuffer> Allocate(size_t bytes);
  // dst[bytes] (this backend's memory) = host_src[bytes] (host memory), after every op enqueued
  // before it; host_src may be reused as soon as Upload returns.
  virtual void Upload(void* dst, const void* host_src, size_t bytes) = 0;
  // host_dst[bytes] = src[bytes] (this backend's memory) once every op enqueued before it has
  // run: a synchronization point. Returns when host_dst holds the bytes.
  virtual void Download(void* host_dst, const void* src, size_t bytes) = 0;
  // dst[bytes] = src[bytes], both in this backend's memory (device to device), enqueued. The
  // ranges must not overlap unless dst == src (nothing to do).
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  // Every byte of dst[bytes] (this backend's memory) = value (cudaMemsetAsync), enqueued.
  virtual void Fill(void* dst, uint8_t value, size_t bytes) = 0;
  void Zero(void* dst, size_t bytes) { Fill(dst, 0, bytes); }
  // Returns when every op, Copy and Fill enqueued so far has run.
  virtual void Synchronize() = 0;
  // The element type activations are stored in between ops. The ops of this interface read and
  // write f32 activations, which is what the cpu and reference backends store; a backend that
  // stores bf16 (cuda, PEFT's regime: bf16 storage, f32 accumulation) says so here, and the
  // consistency tests take their tolerances from it (ActivationTolerance).
  virtual tensor::DType activation_dtype() const = 0;
  MemoryStats memory_stats() const;

  // --- dense algebra --------------------------------------------------------------------------
  // c[M, N] = alpha * op(a) @ op(b) + beta * c, where op(a) is a[M, K] (or a[K, M] transposed when
  // trans_a) and op(b) is b[K, N] (or b[N, K] transposed when trans_b). As in BLAS, beta == 0
  // overwrites c without reading it (so c may hold garbage or NaN).
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, const float* b, float beta, float* c) = 0;

  // out[N, O] = x[N, I] @ w[O, I]^T (+ bias[O] when not null). w may be f32, bf16, NF4 or Q8_0.
  virtual void LinearForward(float* out, const float* x, const WeightRef& w, const float* bias,
                             int64_t n) = 0;
  // dx[N, I] += dout[N, O] @ w[O, I]. (The weight gradient of an f32 weight is a Gemm:
  // dw[O, I] += dout^T @ x.)
  virtual void LinearBackwardInput(float* dx, const float* dout, const WeightRef& w, int64_t n) = 0;
  // dbias[O] += sum over rows of dout[N, O] (Qwen-style q/k/v biases when they are trained).
  virtual void LinearBackwardBias(float* dbias, const float* dout, int64_t n, int64_t out) = 0;

  // --- embedding ------------------------------------------------------------------------------
  // out[N, C] = table[ids[n], :]; table is f32, bf16 or Q8_0 (WeightRef with rows = V, cols = C);
  // every id is in [0, V).
  virtual void EmbeddingForward(float* out, const int32_t* ids, const WeightRef& table,
                                int64_t n) = 0;
  // dtable[V, C] += scatter of dout[N, C] by ids (f32 table only; a repeated id sums its rows).
  virtual void EmbeddingBackward(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                                 int64_t vocab, int64_t c) = 0;

  // --- normalization --------------------------------------------------------------------------
  // out[N, C] = x * rstd * weight, rstd[N] = 1 / sqrt(mean(x^2) + eps) (saved for backward).
  virtual void RmsNormForward(float* out, float* rstd, const float* x, const float* weight,
                              int64_t n, int64_t c, float eps) = 0;
  // dx[N, C] += rstd * weight * dout - x * rstd^3 / C * sum_c(dout * weight * x),
  // dweight[C] += sum_n(dout * x * rstd) (dweight may be null when the norm is frozen).
  virtual void RmsNormBackward(float* dx, float* dweight, const float* dout, const float* x,
                               const float* weight, const float* rstd, int64_t n, int64_t c) = 0;

  // --- rotary position embedding --------------------------------------------------------------
  // In Hugging Face's rotate-half layout: for each head, element i < D/2 pairs with i + D/2:
  //   out[i]       = x[i] * cos(a_i) - x[i + D/2] * sin(a_i)
  //   out[i + D/2] = x[i + D/2] * cos(a_i) + x[i] * sin(a_i),   a_i = positions[n] * inv_freq[i]
  // out[N, H, D] = rope(x[N, H, D]) at positions[N] with inv_freq[D/2] (see rope.h for how the
  // frequencies follow `rope_theta` and `rope_scaling`). The angle a_i is the f32 product, as
  // Hugging Face computes it, so long positions round the same way. out may equal x.
  virtual void RopeForward(float* out, const float* x, const int32_t* positions,
                           const float* inv_freq, int64_t n, int64_t heads, int64_t head_dim) = 0;
  // dx[N, H, D] += rope^-1(dout) (the rotation by the opposite angle).
  virtual void RopeBackward(float* dx, const float* dout, const int32_t* positions,
                            const float* inv_freq, int64_t n, int64_t heads, int64_t head_dim) = 0;

  // --- attention ------------------------------------------------------------------------------
  // Causal scaled-dot-product attention with grouped-query heads over B sequences of T positions
  // (N = B*T): query head h reads key/value head h / (Hq / Hkv) (Hq a multiple of Hkv, as
  // Hugging Face's repeat_kv). Position i attends to j (both in the same sequence) iff j <= i,
  // segment[b*T + j] == segment[b*T + i] (packed samples do not see each other; segment[N] may be
  // null), and i - j < window when window > 0 (sliding window). Every row attends at least to
  // itself. scale is usually 1 / sqrt(D).
  struct AttentionShape {
    int64_t batch = 0;
    int64_t seq_len = 0;
    int64_t q_heads = 0;
    int64_t kv_heads = 0;
    int64_t head_dim = 0;
    int64_t window = 0;
    float scale = 0;
  };
  // q[N, Hq, D], k[N, Hkv, D], v[N, Hkv, D] -> out[N, Hq, D]; lse[B, Hq, T] = the natural
  // log-sum-exp of each row's scaled, masked scores, kept for the backward pass (which recomputes
  // the probabilities instead of storing a T x T matrix).
  virtual void AttentionForward(float* out, float* lse, const float* q, const float* k,
                                const float* v, const int32_t* segment,
                                const AttentionShape& shape) = 0;
  // dq[N, Hq, D] += ..., dk[N, Hkv, D] += ..., dv[N, Hkv, D] += ... from dout[N, Hq, D] and the
  // forward's out and lse.
  virtual void AttentionBackward(float* dq, float* dk, float* dv, const float* dout,
                                 const float* out, const float* lse, const float* q, const float* k,
                                 const float* v, const int32_t* segment,
                                 const AttentionShape& shape) = 0;

  // --- inference over a paged KV cache -------------------------------------------------------
  // The KV cache of one layer is k_cache/v_cache[num_blocks, block_size, Hkv, D] (f32): a
  // sequence's positions live in the blocks its block table lists, position p at block
  // table[p / block_size], offset p % block_size. Slot s stands for block s / block_size, offset
  // s % block_size.
  // k_cache[slots[n]] = k[n, Hkv, D] and v_cache[slots[n]] = v[n] for each of the N new tokens.
  virtual void KvCacheWrite(float* k_cache, float* v_cache, const float* k, const float* v,
                            const int32_t* slots, int64_t n, int64_t kv_heads,
                            int64_t head_dim) = 0;
  struct PagedAttentionShape {
    int64_t q_heads = 0;
    int64_t kv_heads = 0;
    int64_t head_dim = 0;
    int64_t block_size = 0;
    int64_t max_blocks = 0;  // the row length of block_tables
    int64_t window = 0;      // > 0: position i sees j only when i - j < window
    float scale = 0;
  };
  // out[N, Hq, D] = attention of q[N, Hq, D] over the cache: token n belongs to sequence
  // seq_of[n], whose block table is block_tables[seq_of[n] * max_blocks ...], and sits at
  // position positions[n]; it attends to that sequence's positions j <= positions[n] (and inside
  // the window), whose keys and values must already be in the cache (KvCacheWrite first). GQA as
  // in AttentionForward.
  virtual void PagedAttention(float* out, const float* q, const float* k_cache,
                              const float* v_cache, const int32_t* seq_of, const int32_t* positions,
                              const int32_t* block_tables, int64_t n,
                              const PagedAttentionShape& shape) = 0;

  // --- feed-forward ---------------------------------------------------------------------------
  // out[N, F] = silu(gate[N, F]) * up[N, F], silu(x) = x / (1 + exp(-x)).
  virtual void SwiGluForward(float* out, const float* gate, const float* up, int64_t count) = 0;
  // dgate += dout * up * silu'(gate); dup += dout * silu(gate).
  virtual void SwiGluBackward(float* dgate, float* dup, const float* dout, const float* gate,
                              const float* up, int64_t count) = 0;
  // out[i] = a[i] + b[i] (out may equal a or b).
  virtual void Add(float* out, const float* a, const float* b, int64_t count) = 0;

  // --- loss -----------------------------------------------------------------------------------
  // Cross-entropy of logits = hidden[N, C] @ weight[V, C]^T against targets[N] (a target < 0 is
  // ignored, as PyTorch's ignore_index=-100; others are in [0, V)), computed in chunks of
  // chunk_rows >= 1 rows so that at most chunk_rows x V logits exist at a time. The loss of a
  // position is logsumexp(logits) - logits[target]. Returns the SUM of the per-position losses
  // (callers divide by the number of counted positions). When dhidden is not null the backward
  // pass runs too, with the loss of every position multiplied by grad_scale (1 / counted
  // positions for a mean): dlogits = grad_scale * (softmax(logits) - onehot(target)) (zero for an
  // ignored position), dhidden[N, C] += dlogits @ weight, and dweight[V, C] += dlogits^T @ hidden
  // when dweight is not null (a trainable f32 head). The returned sum is a host value: on a
  // device backend it is downloaded, so the call is a synchronization point.
  virtual double CrossEntropy(float* dhidden, float* dweight, const float* hidden,
                              const WeightRef& weight, const int32_t* targets, int64_t n,
                              float grad_scale, int64_t chunk_rows) = 0;

  // --- LoRA -----------------------------------------------------------------------------------
  // y[N, O] += scale * (dropout(x)[N, I] @ a[R, I]^T) @ b[O, R]^T; xa[N, R] = dropout(x) @ a^T is
  // saved for the backward pass. scale is PEFT's lora_alpha / r.
  virtual void LoraForward(float* y, float* xa, const float* x, const float* a, const float* b,
                           int64_t n, int64_t in, int64_t out, int64_t rank, float scale,
                           const Dropout& dropout) = 0;
  // With dxa = scale * dy @ b:  db[O, R] += scale * dy^T @ xa, da[R, I] += dxa^T @ dropout(x),
  // dx[N, I] += dropout'(dxa @ a) (the same mask and 1 / (1 - p)). dx may be null (the frozen
  // base model's input needs no gradient when nothing below it trains).
  virtual void LoraBackward(float* dx, float* da, float* db, const float* dy, const float* x,
                            const float* xa, const float* a, const float* b, int64_t n, int64_t in,
                            int64_t out, int64_t rank, float scale, const Dropout& dropout) = 0;

  // --- NF4 ------------------------------------------------------------------------------------
  // out[numel] = the f32 values an NF4 weight stands for (numel a multiple of 64), exactly as
  // written at Nf4Weight (bit-identical to bitsandbytes' dequantize_4bit in f32).
  virtual void Nf4Dequantize(float* out, const Nf4Weight& w, int64_t numel) = 0;

  // --- optimizer ------------------------------------------------------------------------------
  // One AdamW step with PyTorch's semantics (torch.optim.AdamW, not amsgrad, not maximize) over
  // param/grad/m/v[count], with the 1-based step number t:
  //   param *= 1 - lr * weight_decay                    (decoupled weight decay, applied first)
  //   m = beta1 * m + (1 - beta1) * grad;  v = beta2 * v + (1 - beta2) * grad^2
  //   param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
  struct AdamWParams {
    float learning_rate = 0;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0;
    int64_t step = 1;
  };
  virtual void AdamWStep(float* param, const float* grad, float* m, float* v, int64_t count,
                         const AdamWParams& params) = 0;
  // Sum of squares of grad[count] (the global norm for clipping is the root of the sum over all
  // parameters); accumulated in double. A host value, downloaded (a synchronization point).
  virtual double SumOfSquares(const float* grad, int64_t count) = 0;
  // x[count] *= factor.
  virtual void Scale(float* x, float factor, int64_t count) = 0;

 protected:
  // The allocation behind Allocate: `bytes` > 0 of this backend's memory, kBufferAlignment
  // aligned; null when it does not fit.
  virtual void* AllocateBytes(size_t bytes) = 0;
  // Frees what AllocateBytes returned (with the same size). May run on any thread.
  virtual void FreeBytes(void* data, size_t bytes) = 0;

 private:
  friend class DeviceBuffer;
  void Release(void* data, size_t bytes);

  std::atomic<int64_t> live_buffers_{0};
  std::atomic<int64_t> live_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
};

// A backend whose memory is host memory (reference, cpu): 64-byte aligned allocations, memcpy
// and memset, nothing to wait for, f32 activations. The host may also read its buffers directly,
// but the model, trainer and engine do not: they go through Upload and Download as they would on
// a device.
class HostMemoryBackend : public Backend {
 public:
  void Upload(void* dst, const void* host_src, size_t bytes) override;
  void Download(void* host_dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Fill(void* dst, uint8_t value, size_t bytes) override;
  void Synchronize() override {}
  tensor::DType activation_dtype() const override { return tensor::DType::kF32; }

 protected:
  void* AllocateBytes(size_t bytes) override;
  void FreeBytes(void* data, size_t bytes) override;
};

// The relative rounding error of one stored activation of `dtype` (half a unit in the last
// place: 2^-24 for f32, 2^-8 for bf16, 2^-11 for f16). Consistency tests scale their
// tolerances by it, so a bf16-storing backend is held to bf16's precision and no looser.
double ActivationTolerance(tensor::DType dtype);

// --- typed transfers through a buffer's backend ------------------------------------------------
// A new buffer of backend's memory holding `values`. Errors: Allocate's.
template <typename T>
base::Result<DeviceBuffer> UploadNew(Backend& backend, std::span<const T> values) {
  base::Result<DeviceBuffer> buffer = backend.Allocate(values.size_bytes());
  if (buffer.ok() && !values.empty()) {
    backend.Upload(buffer->data(), values.data(), values.size_bytes());
  }
  return buffer;
}
// A new buffer of `count` T, every byte zero. Errors: Allocate's.
template <typename T>
base::Result<DeviceBuffer> AllocateZeros(Backend& backend, int64_t count) {
  base::Result<DeviceBuffer> buffer = backend.Allocate(static_cast<size_t>(count) * sizeof(T));
  if (buffer.ok() && !buffer->empty()) backend.Zero(buffer->data(), buffer->bytes());
  return buffer;
}
// The buffer's contents as T, downloaded (a synchronization point). Empty for an empty buffer.
template <typename T>
std::vector<T> DownloadAll(const DeviceBuffer& buffer) {
  std::vector<T> out(static_cast<size_t>(buffer.count<T>()));
  if (!out.empty()) buffer.backend()->Download(out.data(), buffer.data(), out.size() * sizeof(T));
  return out;
}
// Makes `buffer` hold at least `bytes` (reallocating, contents undefined, when it is smaller or
// belongs to another backend); a buffer that is large enough is kept with its contents.
base::Status Reserve(Backend& backend, DeviceBuffer& buffer, size_t bytes);

// The plain-loop backend (reference/): single thread, every sum in double. Supports every Op.
std::unique_ptr<Backend> NewReferenceBackend();
// The fast CPU backend (cpu/), parallel over `threads` threads.
std::unique_ptr<Backend> NewCpuBackend(int threads);
// `inner` (a host-memory backend) behind a check of every pointer its ops are given: each must
// lie, with the whole extent the op reads or writes, inside one live buffer that this backend
// allocated; a pointer elsewhere (host memory, a freed buffer, past a buffer's end) stops the
// process naming the op and the argument. Fresh buffers are poisoned (every byte 0xFF: NaN as
// f32, -1 as int32) so that reading memory nobody wrote shows. Its name is "strict:<inner>".
// For tests: run the trainer and the inference engine on it to prove they hand ops only backend
// memory.
std::unique_ptr<Backend> NewStrictBackend(std::unique_ptr<Backend> inner);

}  // namespace sovai::kernels
