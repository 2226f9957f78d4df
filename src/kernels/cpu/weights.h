// Private to the cpu backend: weights stored f32, bf16 or NF4 (backend.h's WeightRef) and the
// linear-layer products over them.
//
// An f32 weight goes straight to sgemm. A bf16 or NF4 weight is never expanded whole (a 7B model's
// weights would take 28 GB in f32): each thread dequantizes a bounded panel of it (at most
// kPanelFloats floats) into its scratch and multiplies that panel with sgemm.
//
// Thread-safety: as Context (one op at a time).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/context.h"

namespace sovai::kernels::cpu {

// The most floats of a dequantized weight panel one thread holds (2 MiB: it stays in a core's L2
// cache while sgemm streams activations past it).
inline constexpr int64_t kPanelFloats = int64_t{1} << 21;
// A panel has at most this many rows: enough for sgemm to run at full speed.
inline constexpr int64_t kMaxPanelRows = 1024;

// out[end - begin] = elements [begin, end) of w in row-major order, as f32. Bit-identical to the
// reference backend's expansion (bf16 widening; NF4 by the formula at backend.h's Nf4Weight).
void DequantizeRange(const WeightRef& w, int64_t begin, int64_t end, float* out);

// out[N, O] = x[N, I] @ w[O, I]^T (+ bias[O]).
void LinearForward(Context& context, float* out, const float* x, const WeightRef& w,
                   const float* bias, int64_t n);
// dx[N, I] += dout[N, O] @ w[O, I].
void LinearBackwardInput(Context& context, float* dx, const float* dout, const WeightRef& w,
                         int64_t n);

}  // namespace sovai::kernels::cpu
