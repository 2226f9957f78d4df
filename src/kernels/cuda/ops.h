// The first ops of the GPU engine, on device-resident buffers (built only with SOVAI_CUDA=ON).
//
// The GPU engine keeps weights and activations in bf16 on the device and computes in f32; only
// the trainable LoRA parameters have f32 master copies (with f32 gradients and AdamW moments).
// So here, unlike backend.h's f32 Backend:
// * every pointer is a DEVICE pointer; nothing is copied between host and device by an op, and an
//   op only enqueues work on `stream` (it returns before the work runs);
// * bf16 buffers are `uint16_t*` (the bits of a bfloat16, __nv_bfloat16 on the device), so that
//   this header needs no CUDA types; every sum and every element-wise formula runs in f32, and a
//   bf16 result is rounded to nearest even once, when stored;
// * the formulas are the reference backend's (reference/ops.h), which the tests compare against.
//   Backward ops accumulate (`dx += ...`, in f32, then rounded to bf16) as in backend.h; RoPE
//   works in place.
//
// Shape letters as in backend.h: N token positions, C channels, V vocabulary, H heads, D head
// size, F feed-forward width.
//
// Errors: an op checks what it can see on the host — sizes, null pointers, the shape rules below —
// and returns InvalidArgument without launching anything. A launch that fails is an Internal
// error carrying CUDA's error string. Errors of the kernels themselves (out-of-range token ids) are
// recorded on the device and read back by the caller when it chooses (EmbeddingIdErrors). A size
// of zero (an empty batch) is nothing to do: OK without a launch.
//
// Speed: these are memory-bound ops. Each thread moves 16 bytes per access where the row length
// and the pointers' alignment allow (launch_plan.h decides; buffers from cudaMalloc are aligned),
// scalar accesses otherwise; the row ops run one block per row.
//
// Thread-safety: the functions may be called from any thread; ops on one stream run in order.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/backend.h"
#include "tensor/dtype.h"

namespace sovai::kernels::cuda {

// A cudaStream_t, opaque here; a null handle is CUDA's default stream.
struct Stream {
  void* cuda_stream = nullptr;
};

// --- embedding ------------------------------------------------------------------------------

// Where EmbeddingForward records token ids outside [0, V). It lives in device memory and is sticky:
// ClearEmbeddingIdErrors once (per step, say), run any number of embeddings, then
// CheckEmbeddingIdErrors once, which is the only point where the host waits for the device.
struct EmbeddingIdErrors {
  uint32_t bad_count = 0;               // ids out of range since the last clear
  uint32_t first_bad_row = UINT32_MAX;  // the smallest row n with a bad id; UINT32_MAX if none
};
// Resets *errors (device memory) to no errors, on the stream.
base::Status ClearEmbeddingIdErrors(EmbeddingIdErrors* errors, Stream stream);
// Waits for the stream and reads *errors back: OK when no id was out of range, InvalidArgument
// naming the count and the first row otherwise (a row index from the last call that had one).
base::Status CheckEmbeddingIdErrors(const EmbeddingIdErrors* errors, Stream stream);

// out[N, C] = table[ids[n], :] with table[V, C] (bf16); out is bf16 or f32 (`out_type`). A row
// whose id is outside [0, V) is written as zeros (never read out of bounds) and counted in
// *errors. N is at most 2^31 - 1.
base::Status EmbeddingForward(void* out, tensor::DType out_type, const int32_t* ids,
                              const uint16_t* table, int64_t n, int64_t vocab, int64_t c,
                              EmbeddingIdErrors* errors, Stream stream);

// --- normalization --------------------------------------------------------------------------

// h[N, C] = x + residual (residual may be null: h = x), rounded to bf16, stored in residual_out
// (required when residual is given; may equal x or residual, to update the residual stream in
// place), then out[N, C] = h * rstd * weight[C] and rstd[N] = 1 / sqrt(mean_c(h^2) + eps) (f32,
// for the backward pass). All bf16 but rstd.
base::Status RmsNormForward(uint16_t* out, float* rstd, uint16_t* residual_out, const uint16_t* x,
                            const uint16_t* residual, const uint16_t* weight, int64_t n, int64_t c,
                            float eps, Stream stream);
// dx[N, C] += rstd * weight * dout - h * rstd^3 / C * sum_c(dout * weight * h), with h the
// forward's normalized input (residual_out when it was fused) and its rstd. The norm weight is
// frozen in the GPU engine (bf16, no master copy), so there is no dweight.
base::Status RmsNormBackward(uint16_t* dx, const uint16_t* dout, const uint16_t* h,
                             const uint16_t* weight, const float* rstd, int64_t n, int64_t c,
                             Stream stream);

// --- rotary position embedding --------------------------------------------------------------

// x[N, H, D] = rope(x) in place, rotate-half layout, angle = f32(positions[n]) * inv_freq[i]
// (inv_freq[D/2] from rope.h, f32 on the device), exactly backend.h's formula.
base::Status RopeForward(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t n,
                         int64_t heads, int64_t head_dim, Stream stream);
// d[N, H, D] = rope^-1(d) in place: the gradient with respect to RopeForward's input. (In place,
// so it replaces rather than accumulates, unlike backend.h's RopeBackward.)
base::Status RopeBackward(uint16_t* d, const int32_t* positions, const float* inv_freq, int64_t n,
                          int64_t heads, int64_t head_dim, Stream stream);

// --- feed-forward ---------------------------------------------------------------------------

// out[count] = silu(gate) * up, silu(g) = g / (1 + exp(-g)); bf16 in and out, f32 math.
base::Status SwiGluForward(uint16_t* out, const uint16_t* gate, const uint16_t* up, int64_t count,
                           Stream stream);
// dgate += dout * up * silu'(gate), dup += dout * silu(gate) (all bf16, f32 math).
base::Status SwiGluBackward(uint16_t* dgate, uint16_t* dup, const uint16_t* dout,
                            const uint16_t* gate, const uint16_t* up, int64_t count, Stream stream);

// --- NF4 ------------------------------------------------------------------------------------

// out[numel] (bf16) = the NF4 weight's values, computed in f32 exactly as backend.h's Nf4Weight
// formula (bit-identical to DequantizeNf4 before the rounding to bf16). Every pointer in `w`
// (codes, absmax_codes, absmax_scales, absmax_map) is a device pointer; numel a positive multiple
// of 64.
base::Status Nf4Dequantize(uint16_t* out, const Nf4Weight& w, int64_t numel, Stream stream);

// --- optimizer ------------------------------------------------------------------------------

// backend.h's AdamWStep over f32 param/grad/m/v[count], computed as the reference backend computes
// it (the per-element arithmetic in double, each result rounded to f32 where the reference
// rounds), so the result is the reference's bit for bit.
base::Status AdamWStep(float* param, const float* grad, float* m, float* v, int64_t count,
                       const Backend::AdamWParams& params, Stream stream);

// *result (a device double) = sum of grad[count]^2, accumulated in double. Deterministic: a fixed
// two-pass reduction (launch_plan.h: PlanSumOfSquares), no floating-point atomics, so the same
// input at the same address gives the same bits on every run and every GPU. `workspace` is device
// memory of workspace_bytes >= kSumOfSquaresWorkspaceBytes (launch_plan.h) that no other op uses
// at the same time. count == 0 writes 0.
base::Status SumOfSquares(double* result, const float* grad, int64_t count, void* workspace,
                          int64_t workspace_bytes, Stream stream);

}  // namespace sovai::kernels::cuda
