#include "kernels/cpu/weights.h"

#include <algorithm>

#include "kernels/cpu/inference.h"
#include "kernels/cpu/q8_0_int8.h"
#include "kernels/nf4.h"
#include "tensor/dtype.h"

namespace sovai::kernels::cpu {
namespace {

void DequantizeNf4Range(const Nf4Weight& w, int64_t begin, int64_t end, float* out) {
  constexpr int64_t kBlock = Nf4Weight::kBlockSize;
  for (int64_t block = begin / kBlock; block * kBlock < end; ++block) {
    // Three separately rounded f32 operations, in bitsandbytes' order (this file is compiled
    // with -ffp-contract=off, so none of them is fused).
    const float scaled =
        w.absmax_map[w.absmax_codes[block]] * w.absmax_scales[block / Nf4Weight::kAbsmaxBlockSize];
    const float absmax = scaled + w.absmax_offset;
    float values[16];
    for (int code = 0; code < 16; ++code) values[code] = kNf4Values[code] * absmax;
    const int64_t first = std::max(begin, block * kBlock);
    const int64_t last = std::min(end, (block + 1) * kBlock);
    int64_t e = first;
    if (e % 2 == 1 && e < last) {  // a range starting on a low nibble
      out[e - begin] = values[w.codes[e / 2] & 0x0f];
      ++e;
    }
    for (; e + 1 < last; e += 2) {
      const uint8_t byte = w.codes[e / 2];
      out[e - begin] = values[byte >> 4];
      out[e + 1 - begin] = values[byte & 0x0f];
    }
    if (e < last) out[e - begin] = values[w.codes[e / 2] >> 4];  // ending on a high nibble
  }
}

// Rows per panel of a weight with `cols` columns split `count` ways: enough panels to keep every
// thread busy twice over, each a multiple of 16 rows (sgemm's register blocks), bounded by
// kMaxPanelRows and kPanelFloats.
int64_t PanelSize(int64_t count, int64_t cols, int threads) {
  int64_t size = (count + 2 * threads - 1) / (2 * threads);
  size = (size + 15) / 16 * 16;
  size = std::min(
      {size, kMaxPanelRows, std::max<int64_t>(1, kPanelFloats / std::max<int64_t>(cols, 1))});
  return std::max<int64_t>(size, 1);
}

}  // namespace

void DequantizeRange(const WeightRef& w, int64_t begin, int64_t end, float* out) {
  switch (w.format) {
    case WeightRef::Format::kF32: {
      const float* data = static_cast<const float*>(w.data);
      std::copy(data + begin, data + end, out);
      return;
    }
    case WeightRef::Format::kBF16: {
      const uint16_t* bits = static_cast<const uint16_t*>(w.data) + begin;
      const int64_t count = end - begin;
#pragma omp simd
      for (int64_t e = 0; e < count; ++e) out[e] = tensor::BF16ToFloat(bits[e]);
      return;
    }
    case WeightRef::Format::kNF4:
      DequantizeNf4Range(w.nf4, begin, end, out);
      return;
    case WeightRef::Format::kQ8_0:
      DequantizeQ8_0Range(w, begin, end, out);
      return;
  }
}

void LinearForward(Context& context, float* out, const float* x, const WeightRef& w,
                   const float* bias, int64_t n) {
  const int64_t in = w.cols;
  const int64_t out_features = w.rows;
  if (n <= 0 || out_features <= 0) return;
  if (bias != nullptr) {
    ParallelRanges(context, n, 64, [&](int64_t begin, int64_t end, int) {
      for (int64_t r = begin; r < end; ++r)
        std::copy(bias, bias + out_features, out + r * out_features);
    });
  }
  const float beta = bias != nullptr ? 1.0f : 0.0f;
  if (w.format == WeightRef::Format::kQ8_0) {
    // Its own kernels at every row count, so that each row's result is the same in any batch.
    if (context.q8_0_activations() == Q8_0Activations::kInt8) {
      Q8_0ProductInt8(context, out, x, w, n, beta);
    } else {
      Q8_0Product(context, out, x, w, n, beta);
    }
    return;
  }
  if (w.format == WeightRef::Format::kF32) {
    Sgemm(context, {.trans_b = true,
                    .m = n,
                    .n = out_features,
                    .k = in,
                    .a = x,
                    .lda = in,
                    .b = static_cast<const float*>(w.data),
                    .ldb = in,
                    .beta = beta,
                    .c = out,
                    .ldc = out_features});
    return;
  }
  // Panels of whole rows of w: rows [o0, o1) are elements [o0 * I, o1 * I), one contiguous range.
  const int64_t rows = PanelSize(out_features, in, context.threads());
  context.ReserveThreadScratch(static_cast<size_t>(rows * in));
  ParallelTasks(context, (out_features + rows - 1) / rows, [&](int64_t panel, int thread) {
    const int64_t o0 = panel * rows;
    const int64_t o1 = std::min(out_features, o0 + rows);
    float* dense = context.ThreadScratch(thread);  // [o1 - o0, I]
    DequantizeRange(w, o0 * in, o1 * in, dense);
    SgemmSerial({.trans_b = true,
                 .m = n,
                 .n = o1 - o0,
                 .k = in,
                 .a = x,
                 .lda = in,
                 .b = dense,
                 .ldb = in,
                 .beta = beta,
                 .c = out + o0,
                 .ldc = out_features});
  });
}

void LinearBackwardInput(Context& context, float* dx, const float* dout, const WeightRef& w,
                         int64_t n) {
  const int64_t in = w.cols;
  const int64_t out_features = w.rows;
  if (n <= 0 || in <= 0) return;
  if (w.format == WeightRef::Format::kF32) {
    Sgemm(context, {.m = n,
                    .n = in,
                    .k = out_features,
                    .a = dout,
                    .lda = out_features,
                    .b = static_cast<const float*>(w.data),
                    .ldb = in,
                    .beta = 1,
                    .c = dx,
                    .ldc = in});
    return;
  }
  // Panels of whole columns of w, so that each thread owns a column range of dx and no two
  // threads add into the same element.
  const int64_t cols = PanelSize(in, out_features, context.threads());
  context.ReserveThreadScratch(static_cast<size_t>(cols * out_features));
  ParallelTasks(context, (in + cols - 1) / cols, [&](int64_t panel, int thread) {
    const int64_t i0 = panel * cols;
    const int64_t i1 = std::min(in, i0 + cols);
    float* dense = context.ThreadScratch(thread);  // [O, i1 - i0]
    for (int64_t o = 0; o < out_features; ++o) {
      DequantizeRange(w, o * in + i0, o * in + i1, dense + o * (i1 - i0));
    }
    SgemmSerial({.m = n,
                 .n = i1 - i0,
                 .k = out_features,
                 .a = dout,
                 .lda = out_features,
                 .b = dense,
                 .ldb = i1 - i0,
                 .beta = 1,
                 .c = dx + i0,
                 .ldc = in});
  });
}

}  // namespace sovai::kernels::cpu
