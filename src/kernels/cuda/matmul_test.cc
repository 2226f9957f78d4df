// MatmulPlanner::Gemm (matmul.h) against a host reference on random inputs: the decode shape
// (M = 1), odd sizes, K not a multiple of 8, every transpose, f32 and bf16 outputs, beta
// accumulation, the bias epilogue, row strides and pointers into the middle of a buffer, and the
// error cases. Runs on a machine with a GPU; exits 77 (ctest: skipped) where none is visible.
//
// The reference sums in double over the same bf16 inputs the GPU reads (bf16 x bf16 products are
// exact in f32, so only the order and precision of the sums differ). Per element, with
// S = |alpha| sum_k |a b| + |beta c0| + |bias| the size of the terms:
//   f32 out    |got - want| <= 2^-14 S   (f32 sums of K terms in any order are far inside this;
//                                         a bf16 or tf32 accumulation, or a wrong index, is not)
//   bf16 out   the same plus 2^-8 |want|  (one rounding to bf16: half an ulp is 2^-9 relative)
// C is poisoned with NaN before each product (beta = 0 must overwrite it all), and the padding
// of strided rows must come back untouched.
#include "kernels/cuda/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/check.h"
#include "kernels/cuda/gpu_test_util.h"
#include "tensor/dtype.h"

namespace sovai::kernels::cuda {
namespace {

using base::StatusCode;
using tensor::BF16ToFloat;
using tensor::DType;
using tensor::FloatToBF16;
using testing::DeviceArray;
using testing::Report;

// Values of `dtype` as host bytes (bf16 bits or f32), and back.
std::vector<uint8_t> Encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * tensor::DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits = FloatToBF16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}
std::vector<float> Decode(const std::vector<uint8_t>& bytes, DType dtype) {
  const size_t size = tensor::DTypeSize(dtype);
  std::vector<float> values(bytes.size() / size);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = BF16ToFloat(bits);
    }
  }
  return values;
}

// Uniform in [-1, 1), rounded to bf16 (what the GPU will read).
std::vector<float> RandomBf16Values(std::mt19937& rng, size_t count) {
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> out(count);
  for (float& value : out) value = BF16ToFloat(FloatToBF16(dist(rng)));
  return out;
}

struct Case {
  int64_t m = 1, n = 1, k = 1;
  bool transpose_a = false;
  bool transpose_b = true;
  DType c_type = DType::kF32;
  float alpha = 1.0f;
  float beta = 0.0f;
  bool bias = false;
  int64_t pad = 0;     // extra elements at the end of every stored row (0: packed rows)
  int64_t offset = 0;  // elements between each buffer's start and the operand (misalignment)
};

std::string Name(const Case& c) {
  char name[200];
  std::snprintf(name, sizeof name, "M=%lld N=%lld K=%lld%s%s %s alpha=%g beta=%g%s%s%s",
                static_cast<long long>(c.m), static_cast<long long>(c.n),
                static_cast<long long>(c.k), c.transpose_a ? " A^T" : "",
                c.transpose_b ? "" : " B[K,N]", std::string(tensor::DTypeName(c.c_type)).c_str(),
                c.alpha, c.beta, c.bias ? " bias" : "", c.pad ? " padded rows" : "",
                c.offset ? " offset" : "");
  return name;
}

void RunCase(Report& report, MatmulPlanner& planner, std::mt19937& rng, const Case& c,
             Stream stream) {
  GemmArgs args{.m = c.m,
                .n = c.n,
                .k = c.k,
                .transpose_a = c.transpose_a,
                .transpose_b = c.transpose_b,
                .c_type = c.c_type,
                .alpha = c.alpha,
                .beta = c.beta};
  const StoredMatrix sa = StoredA(args);
  const StoredMatrix sb = StoredB(args);
  const int64_t lda = sa.cols + c.pad, ldb = sb.cols + c.pad, ldc = c.n + c.pad;
  if (c.pad != 0) {
    args.lda = lda;
    args.ldb = ldb;
    args.ldc = ldc;
  }
  // Padding and offsets hold random values too: a product that reads them is wrong.
  const std::vector<float> a = RandomBf16Values(rng, c.offset + sa.rows * lda);
  const std::vector<float> b = RandomBf16Values(rng, c.offset + sb.rows * ldb);
  std::vector<float> c0 = RandomBf16Values(rng, c.offset + c.m * ldc);
  const std::vector<float> bias = RandomBf16Values(rng, c.offset + c.n);
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  if (c.beta == 0.0f) {
    for (int64_t i = 0; i < c.m; ++i) {
      std::fill_n(c0.begin() + c.offset + i * ldc, c.n, kNaN);  // must all be overwritten
    }
  }

  const size_t c_size = tensor::DTypeSize(c.c_type);
  DeviceArray<uint8_t> d_a(a.size() * 2), d_b(b.size() * 2), d_c(c0.size() * c_size),
      d_bias(bias.size() * c_size);
  d_a.Upload(Encode(a, DType::kBF16));
  d_b.Upload(Encode(b, DType::kBF16));
  d_c.Upload(Encode(c0, c.c_type));
  d_bias.Upload(Encode(bias, c.c_type));
  args.a = reinterpret_cast<const uint16_t*>(d_a.get()) + c.offset;
  args.b = reinterpret_cast<const uint16_t*>(d_b.get()) + c.offset;
  args.c = d_c.get() + c.offset * c_size;
  if (c.bias) args.bias = d_bias.get() + c.offset * c_size;

  const base::Status status = planner.Gemm(args, stream);
  if (!status.ok()) {
    report.Expect(false, Name(c) + " -> " + status.ToString());
    return;
  }
  const std::vector<float> got = Decode(d_c.Download(), c.c_type);

  const double out_rel = c.c_type == DType::kBF16 ? 1.0 / 256 : 0.0;
  double max_error = 0, error_sq = 0, want_sq = 0;
  int64_t bad = 0;
  std::string first_bad;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = 0, scale = 0;
      for (int64_t l = 0; l < c.k; ++l) {
        const double x = c.transpose_a ? a[c.offset + l * lda + i] : a[c.offset + i * lda + l];
        const double w = c.transpose_b ? b[c.offset + j * ldb + l] : b[c.offset + l * ldb + j];
        sum += x * w;
        scale += std::fabs(x * w);
      }
      double want = double{c.alpha} * sum;
      scale *= std::fabs(c.alpha);
      if (c.beta != 0.0f) {
        want += double{c.beta} * c0[c.offset + i * ldc + j];
        scale += std::fabs(double{c.beta} * c0[c.offset + i * ldc + j]);
      }
      if (c.bias) {
        want += bias[c.offset + j];
        scale += std::fabs(bias[c.offset + j]);
      }
      const double value = got[c.offset + i * ldc + j];
      const double error = std::fabs(value - want);
      max_error = std::max(max_error, std::isnan(error) ? INFINITY : error);
      error_sq += error * error;
      want_sq += want * want;
      if (!(error <= std::ldexp(scale, -14) + out_rel * std::fabs(want))) {
        if (bad++ == 0) {
          first_bad = " first at (" + std::to_string(i) + ", " + std::to_string(j) + "): got " +
                      std::to_string(value) + ", want " + std::to_string(want);
        }
      }
    }
  }
  // Nothing outside the product may change: the offset before it and each row's padding (random
  // bf16 values, so exact in either output type).
  int64_t touched = 0;
  for (int64_t e = 0; e < c.offset; ++e) touched += got[e] != c0[e];
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = c.n; j < ldc; ++j) {
      const size_t e = c.offset + i * ldc + j;
      touched += got[e] != c0[e];
    }
  }
  char detail[200];
  std::snprintf(detail, sizeof detail,
                ": max |error| %.3g, |error|/|ref| %.3g, %lld out of tolerance, %lld padding "
                "values changed",
                max_error, want_sq > 0 ? std::sqrt(error_sq / want_sq) : 0.0,
                static_cast<long long>(bad), static_cast<long long>(touched));
  report.Expect(bad == 0 && touched == 0, Name(c) + detail + first_bad);
}

void TestShapes(Report& report, MatmulPlanner& planner, std::mt19937& rng, Stream stream) {
  // {M, N, K}: decode (M = 1) at a Llama-3-8B projection's size, K not a multiple of 8, odd and
  // prime sizes, a tall one.
  const int64_t shapes[][3] = {{1, 4096, 4096}, {1, 1000, 777},   {7, 13, 5},     {37, 129, 263},
                               {64, 96, 8},     {200, 300, 1030}, {513, 256, 64}, {3, 1, 17}};
  for (const auto& shape : shapes) {
    for (const DType c_type : {DType::kF32, DType::kBF16}) {
      RunCase(report, planner, rng,
              Case{.m = shape[0], .n = shape[1], .k = shape[2], .c_type = c_type}, stream);
    }
  }
}

void TestTransposes(Report& report, MatmulPlanner& planner, std::mt19937& rng, Stream stream) {
  for (const bool transpose_a : {false, true}) {
    for (const bool transpose_b : {false, true}) {
      for (const DType c_type : {DType::kF32, DType::kBF16}) {
        RunCase(report, planner, rng,
                Case{.m = 37,
                     .n = 129,
                     .k = 263,
                     .transpose_a = transpose_a,
                     .transpose_b = transpose_b,
                     .c_type = c_type},
                stream);
      }
      RunCase(
          report, planner, rng,
          Case{.m = 1, .n = 64, .k = 33, .transpose_a = transpose_a, .transpose_b = transpose_b},
          stream);
    }
  }
}

void TestAccumulateAndBias(Report& report, MatmulPlanner& planner, std::mt19937& rng,
                           Stream stream) {
  for (const DType c_type : {DType::kF32, DType::kBF16}) {
    RunCase(report, planner, rng, Case{.m = 45, .n = 70, .k = 300, .c_type = c_type, .beta = 1.0f},
            stream);
    RunCase(report, planner, rng,
            Case{.m = 45, .n = 70, .k = 300, .c_type = c_type, .alpha = 0.5f, .beta = -0.75f},
            stream);
    RunCase(report, planner, rng, Case{.m = 45, .n = 70, .k = 300, .c_type = c_type, .bias = true},
            stream);
    RunCase(report, planner, rng,
            Case{.m = 1,
                 .n = 4096,
                 .k = 512,
                 .c_type = c_type,
                 .alpha = 2.0f,
                 .beta = 1.0f,
                 .bias = true},
            stream);
    // dW += dY^T @ X, the LoRA gradient shape: A transposed, B not, accumulating.
    RunCase(report, planner, rng,
            Case{.m = 16,
                 .n = 96,
                 .k = 257,
                 .transpose_a = true,
                 .transpose_b = false,
                 .c_type = c_type,
                 .beta = 1.0f},
            stream);
  }
}

void TestStridesAndOffsets(Report& report, MatmulPlanner& planner, std::mt19937& rng,
                           Stream stream) {
  for (const DType c_type : {DType::kF32, DType::kBF16}) {
    RunCase(report, planner, rng, Case{.m = 31, .n = 50, .k = 72, .c_type = c_type, .pad = 5},
            stream);
    RunCase(report, planner, rng, Case{.m = 31, .n = 50, .k = 72, .c_type = c_type, .offset = 1},
            stream);
    RunCase(report, planner, rng,
            Case{.m = 9,
                 .n = 64,
                 .k = 128,
                 .transpose_a = true,
                 .c_type = c_type,
                 .beta = 1.0f,
                 .bias = true,
                 .pad = 8,
                 .offset = 3},
            stream);
  }
}

void TestCache(Report& report, MatmulPlanner& planner, std::mt19937& rng, Stream stream) {
  const Case shape{.m = 17, .n = 40, .k = 24};
  RunCase(report, planner, rng, shape, stream);
  const size_t after_first = planner.cached_algorithms();
  RunCase(report, planner, rng, shape, stream);
  report.Expect(planner.cached_algorithms() == after_first,
                "the same problem again reuses its cached algorithm (" +
                    std::to_string(after_first) + " cached)");
  RunCase(report, planner, rng, Case{.m = 18, .n = 40, .k = 24}, stream);
  report.Expect(planner.cached_algorithms() == after_first + 1,
                "another M adds one cached algorithm");
}

void TestErrors(Report& report, MatmulPlanner& planner, Stream stream) {
  DeviceArray<uint8_t> buffer(1 << 16);
  const auto* bf16 = reinterpret_cast<const uint16_t*>(buffer.get());
  const GemmArgs valid{.m = 8, .n = 8, .k = 8, .a = bf16, .b = bf16 + 64, .c = buffer.get() + 1024};
  auto expect_invalid = [&](GemmArgs args, const std::string& what) {
    report.ExpectStatus(planner.Gemm(args, stream), StatusCode::kInvalidArgument, what);
  };
  GemmArgs args = valid;
  args.a = nullptr;
  expect_invalid(args, "null A");
  args = valid;
  args.k = 0;
  expect_invalid(args, "K = 0");
  args = valid;
  args.m = -1;
  expect_invalid(args, "M = -1");
  args = valid;
  args.lda = 7;
  expect_invalid(args, "lda shorter than a row");
  args = valid;
  args.c_type = DType::kF16;
  expect_invalid(args, "f16 output");
  args = valid;
  args.b = reinterpret_cast<const uint16_t*>(buffer.get() + 1);
  expect_invalid(args, "B not on a bf16 boundary");

  // An empty batch launches nothing and leaves C alone.
  std::vector<float> sentinel(8, 3.0f);
  DeviceArray<float> c(sentinel.size());
  c.Upload(sentinel);
  args = valid;
  args.m = 0;
  args.c = c.get();
  args.c_type = DType::kF32;
  report.ExpectStatus(planner.Gemm(args, stream), StatusCode::kOk, "M = 0 is nothing to do");
  report.Expect(c.Download() == sentinel, "M = 0 leaves C unchanged");
}

}  // namespace
}  // namespace sovai::kernels::cuda

int main() {
  using namespace sovai::kernels::cuda;
  std::optional<testing::GpuTestContext> context = testing::OpenFirstDeviceOrSkip();
  if (!context) return testing::kSkippedExitCode;
  const Stream stream = context->stream();

  // Declared after the context, so that it is destroyed before the stream it enqueues on.
  auto planner = MatmulPlanner::Create();
  if (!planner.ok()) {
    std::printf("MatmulPlanner::Create: %s\n", planner.status().ToString().c_str());
    return 1;
  }
  std::mt19937 rng(20240612);
  Report report;
  TestShapes(report, **planner, rng, stream);
  TestTransposes(report, **planner, rng, stream);
  TestAccumulateAndBias(report, **planner, rng, stream);
  TestStridesAndOffsets(report, **planner, rng, stream);
  TestCache(report, **planner, rng, stream);
  TestErrors(report, **planner, stream);

  // Errors inside cuBLASLt's kernels (bad addresses) surface here, not at the launches.
  context->Synchronize();
  return report.Summarize();
}
