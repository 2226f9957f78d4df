// Every op of ops.h against the reference backend (reference/ops.h) on random inputs: forward and
// backward, the vector and scalar paths (pointers offset so that launch_plan.h falls back to
// narrower accesses), and the error cases. Runs on a machine with a GPU; exits 77 (ctest:
// skipped) where none is visible.
//
// The reference runs in f32 (sums in double) on the same bf16-rounded inputs the GPU reads, so the
// tolerances only cover the GPU's f32 sums and its rounding of results to bf16:
//   Embedding, NF4 dequantization   bit-exact (a copy; the same f32 operations, then one rounding)
//   RMSNorm residual sum            bit-exact (one f32 add, one rounding)
//   RMSNorm out, RoPE, SwiGLU       2^-8 relative (bf16 keeps 8 significant bits: half an ulp is
//                                   2^-9, the rest covers f32 sums and cosf/expf in the last ulps)
//   backward ops (accumulating)     2^-8 of |result| + |initial value|, plus 1e-3 absolute for
//                                   RMSNorm (its f32 row sum cancels) and RoPE (x1 cos - x2 sin)
//   rstd                            1e-5 relative (an f32 sum of C squares against a double one)
//   AdamW                           bit-exact (the reference's double arithmetic, in its order)
//   SumOfSquares                    1e-12 relative (double sums in another order), and the same
//                                   bits on every run
#include "kernels/cuda/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/check.h"
#include "kernels/backend.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/launch_plan.h"
#include "kernels/nf4.h"
#include "kernels/rope.h"
#include "tensor/dtype.h"

namespace sovai::kernels::cuda {
namespace {

using base::StatusCode;
using tensor::BF16ToFloat;
using tensor::FloatToBF16;
using testing::DeviceArray;
using testing::Report;

constexpr double kBf16Rel = 1.0 / 256;

std::vector<float> RandomFloats(std::mt19937& rng, size_t count, float low, float high) {
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> out(count);
  for (float& value : out) value = dist(rng);
  return out;
}
std::vector<uint16_t> ToBf16(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  SOVAI_CHECK(ConvertToBF16(values, out).ok());
  return out;
}
std::vector<float> FromBf16(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = BF16ToFloat(bits[i]);
  return out;
}
// Random values already rounded to bf16: the bits to upload and the f32 values the reference
// reads.
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
Bf16Data RandomBf16(std::mt19937& rng, size_t count, float low, float high) {
  Bf16Data data;
  data.bits = ToBf16(RandomFloats(rng, count, low, high));
  data.values = FromBf16(data.bits);
  return data;
}

// --- embedding ------------------------------------------------------------------------------

void TestEmbedding(Report& report, Backend& reference, std::mt19937& rng, Stream stream) {
  for (const int64_t c : {int64_t{4096}, int64_t{100}, int64_t{77}}) {
    const int64_t vocab = 1000;
    const int64_t n = 257;
    const Bf16Data table = RandomBf16(rng, vocab * c, -2, 2);
    std::vector<int32_t> ids(n);
    std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
    for (int32_t& id : ids) id = pick(rng);
    DeviceArray<uint16_t> d_table(vocab * c);
    d_table.Upload(table.bits);
    DeviceArray<int32_t> d_ids(n);
    d_ids.Upload(ids);
    DeviceArray<EmbeddingIdErrors> d_errors(1);
    report.ExpectOk(ClearEmbeddingIdErrors(d_errors.get(), stream), "clear embedding errors");

    std::vector<float> want(n * c);
    const WeightRef ref_table{
        .format = WeightRef::Format::kBF16, .data = table.bits.data(), .rows = vocab, .cols = c};
    reference.EmbeddingForward(want.data(), ids.data(), ref_table, n);
    const std::string shape = " C=" + std::to_string(c);

    // f32 out, aligned and offset by one element (scalar path).
    for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
      DeviceArray<float> d_out(n * c + offset);
      report.ExpectOk(EmbeddingForward(d_out.get() + offset, tensor::DType::kF32, d_ids.get(),
                                       d_table.get(), n, vocab, c, d_errors.get(), stream),
                      "embedding f32" + shape);
      report.ExpectNear("embedding f32" + shape + " offset " + std::to_string(offset),
                        d_out.Download(offset, n * c), want, 0, 0);
    }
    // bf16 out: the table's bits.
    for (const int64_t offset : {int64_t{0}, int64_t{3}}) {
      DeviceArray<uint16_t> d_out(n * c + offset);
      report.ExpectOk(EmbeddingForward(d_out.get() + offset, tensor::DType::kBF16, d_ids.get(),
                                       d_table.get(), n, vocab, c, d_errors.get(), stream),
                      "embedding bf16" + shape);
      report.ExpectNear("embedding bf16" + shape + " offset " + std::to_string(offset),
                        FromBf16(d_out.Download(offset, n * c)), want, 0, 0);
    }
    report.ExpectOk(CheckEmbeddingIdErrors(d_errors.get(), stream), "no bad ids" + shape);

    // Out-of-range ids: zero rows, counted, the first row named; the others still right.
    std::vector<int32_t> bad_ids = ids;
    bad_ids[9] = static_cast<int32_t>(vocab);
    bad_ids[5] = -1;
    bad_ids[200] = INT32_MAX;
    d_ids.Upload(bad_ids);
    DeviceArray<float> d_out(n * c);
    report.ExpectOk(EmbeddingForward(d_out.get(), tensor::DType::kF32, d_ids.get(), d_table.get(),
                                     n, vocab, c, d_errors.get(), stream),
                    "embedding with bad ids launches");
    const base::Status bad = CheckEmbeddingIdErrors(d_errors.get(), stream);
    report.ExpectStatus(bad, StatusCode::kInvalidArgument, "bad ids reported" + shape);
    report.Expect(bad.message().find("3 token ids") != std::string::npos &&
                      bad.message().find("row 5") != std::string::npos,
                  "bad ids message names the count and first row: " + bad.message());
    std::vector<float> want_bad = want;
    for (const int64_t row : {5, 9, 200}) {
      std::fill(want_bad.begin() + row * c, want_bad.begin() + (row + 1) * c, 0.0f);
    }
    report.ExpectNear("embedding bad rows zeroed" + shape, d_out.Download(), want_bad, 0, 0);
    // Sticky until cleared.
    report.ExpectStatus(CheckEmbeddingIdErrors(d_errors.get(), stream),
                        StatusCode::kInvalidArgument, "bad ids stay recorded");
    report.ExpectOk(ClearEmbeddingIdErrors(d_errors.get(), stream), "clear");
    report.ExpectOk(CheckEmbeddingIdErrors(d_errors.get(), stream), "cleared");
  }

  DeviceArray<uint16_t> table(64);
  DeviceArray<int32_t> ids(4);
  DeviceArray<float> out(64);
  DeviceArray<EmbeddingIdErrors> errors(1);
  report.ExpectOk(EmbeddingForward(out.get(), tensor::DType::kF32, ids.get(), table.get(), 0, 4, 16,
                                   errors.get(), stream),
                  "embedding of no tokens");
  report.ExpectStatus(EmbeddingForward(out.get(), tensor::DType::kF32, ids.get(), table.get(), -1,
                                       4, 16, errors.get(), stream),
                      StatusCode::kInvalidArgument, "embedding of -1 tokens");
  report.ExpectStatus(EmbeddingForward(out.get(), tensor::DType::kF32, ids.get(), table.get(), 4, 0,
                                       16, errors.get(), stream),
                      StatusCode::kInvalidArgument, "embedding of an empty vocabulary");
  report.ExpectStatus(EmbeddingForward(out.get(), tensor::DType::kF16, ids.get(), table.get(), 4, 4,
                                       16, errors.get(), stream),
                      StatusCode::kInvalidArgument, "embedding into f16");
  report.ExpectStatus(EmbeddingForward(out.get(), tensor::DType::kF32, ids.get(), table.get(), 4, 4,
                                       16, nullptr, stream),
                      StatusCode::kInvalidArgument, "embedding without an error record");
  report.ExpectStatus(EmbeddingForward(out.get(), tensor::DType::kF32, nullptr, table.get(), 4, 4,
                                       16, errors.get(), stream),
                      StatusCode::kInvalidArgument, "embedding without ids");
}

// --- RMSNorm --------------------------------------------------------------------------------

void TestRmsNorm(Report& report, Backend& reference, std::mt19937& rng, Stream stream) {
  const float eps = 1e-6f;
  // 4096 and 1000: 16-byte accesses; 4098: 4-byte; 77: scalar.
  for (const int64_t c : {int64_t{4096}, int64_t{1000}, int64_t{4098}, int64_t{77}}) {
    for (const bool fused : {false, true}) {
      const int64_t n = 64;
      const std::string name =
          std::string(fused ? "rmsnorm+residual" : "rmsnorm") + " C=" + std::to_string(c);
      const Bf16Data x = RandomBf16(rng, n * c, -1, 1);
      const Bf16Data residual = RandomBf16(rng, n * c, -1, 1);
      const Bf16Data weight = RandomBf16(rng, c, 0.5f, 1.5f);
      DeviceArray<uint16_t> d_x(n * c), d_residual(n * c), d_weight(c), d_out(n * c), d_sum(n * c);
      DeviceArray<float> d_rstd(n);
      d_x.Upload(x.bits);
      d_residual.Upload(residual.bits);
      d_weight.Upload(weight.bits);
      report.ExpectOk(
          RmsNormForward(d_out.get(), d_rstd.get(), fused ? d_sum.get() : nullptr, d_x.get(),
                         fused ? d_residual.get() : nullptr, d_weight.get(), n, c, eps, stream),
          name + " forward");

      // h: the bf16 sum the norm reads.
      std::vector<uint16_t> h_bits = x.bits;
      if (fused) {
        for (int64_t i = 0; i < n * c; ++i) {
          h_bits[i] = FloatToBF16(x.values[i] + residual.values[i]);
        }
        report.Expect(d_sum.Download() == h_bits, name + " residual sum bit-exact");
      }
      const std::vector<float> h = FromBf16(h_bits);
      std::vector<float> want(n * c), want_rstd(n);
      reference.RmsNormForward(want.data(), want_rstd.data(), h.data(), weight.values.data(), n, c,
                               eps);
      report.ExpectNear(name + " out", FromBf16(d_out.Download()), want, kBf16Rel, 1e-6);
      const std::vector<float> rstd = d_rstd.Download();
      report.ExpectNear(name + " rstd", rstd, want_rstd, 1e-5, 0);

      // Backward: dx (initially random) += ..., with the forward's rstd.
      const Bf16Data dout = RandomBf16(rng, n * c, -1, 1);
      const Bf16Data dx0 = RandomBf16(rng, n * c, -1, 1);
      DeviceArray<uint16_t> d_dout(n * c), d_dx(n * c), d_h(n * c);
      d_dout.Upload(dout.bits);
      d_dx.Upload(dx0.bits);
      d_h.Upload(h_bits);
      report.ExpectOk(RmsNormBackward(d_dx.get(), d_dout.get(), d_h.get(), d_weight.get(),
                                      d_rstd.get(), n, c, stream),
                      name + " backward");
      std::vector<float> want_dx = dx0.values;
      reference.RmsNormBackward(want_dx.data(), nullptr, dout.values.data(), h.data(),
                                weight.values.data(), rstd.data(), n, c);
      report.ExpectNear(name + " dx", FromBf16(d_dx.Download()), want_dx, kBf16Rel, 1e-3,
                        dx0.values);
    }
  }

  // Misaligned rows (the whole batch offset by one element): scalar path, same results.
  {
    const int64_t n = 8, c = 512;
    const Bf16Data x = RandomBf16(rng, n * c, -1, 1);
    const Bf16Data weight = RandomBf16(rng, c, 0.5f, 1.5f);
    DeviceArray<uint16_t> d_x(n * c + 1), d_weight(c), d_out(n * c + 1);
    DeviceArray<float> d_rstd(n);
    d_x.Upload(x.bits, 1);
    d_weight.Upload(weight.bits);
    report.ExpectOk(RmsNormForward(d_out.get() + 1, d_rstd.get(), nullptr, d_x.get() + 1, nullptr,
                                   d_weight.get(), n, c, eps, stream),
                    "rmsnorm misaligned forward");
    std::vector<float> want(n * c), want_rstd(n);
    reference.RmsNormForward(want.data(), want_rstd.data(), x.values.data(), weight.values.data(),
                             n, c, eps);
    report.ExpectNear("rmsnorm misaligned out", FromBf16(d_out.Download(1, n * c)), want, kBf16Rel,
                      1e-6);
  }

  DeviceArray<uint16_t> buf(64);
  DeviceArray<float> rstd(4);
  report.ExpectOk(RmsNormForward(buf.get(), rstd.get(), nullptr, buf.get(), nullptr, buf.get(), 0,
                                 16, eps, stream),
                  "rmsnorm of no rows");
  report.ExpectStatus(RmsNormForward(buf.get(), rstd.get(), nullptr, buf.get(), nullptr, buf.get(),
                                     4, 0, eps, stream),
                      StatusCode::kInvalidArgument, "rmsnorm of width 0");
  report.ExpectStatus(RmsNormForward(buf.get(), rstd.get(), nullptr, buf.get(), nullptr, buf.get(),
                                     -4, 16, eps, stream),
                      StatusCode::kInvalidArgument, "rmsnorm of -4 rows");
  report.ExpectStatus(RmsNormForward(buf.get(), rstd.get(), nullptr, buf.get(), buf.get(),
                                     buf.get(), 4, 16, eps, stream),
                      StatusCode::kInvalidArgument, "rmsnorm with residual but no residual_out");
  report.ExpectStatus(RmsNormForward(buf.get(), rstd.get(), nullptr, buf.get(), nullptr, buf.get(),
                                     4, 16, -1.0f, stream),
                      StatusCode::kInvalidArgument, "rmsnorm with negative eps");
  report.ExpectStatus(
      RmsNormBackward(buf.get(), buf.get(), buf.get(), buf.get(), nullptr, 4, 16, stream),
      StatusCode::kInvalidArgument, "rmsnorm backward without rstd");
}

// --- RoPE -----------------------------------------------------------------------------------

void TestRope(Report& report, Backend& reference, std::mt19937& rng, Stream stream) {
  // head_dim 128 and 64: 16-byte accesses; 20 (half 10): 4-byte; 6 (half 3): scalar.
  for (const int64_t head_dim : {int64_t{128}, int64_t{64}, int64_t{20}, int64_t{6}}) {
    const int64_t n = 33, heads = 4;
    const int64_t numel = n * heads * head_dim;
    const std::string name = "rope D=" + std::to_string(head_dim);
    auto inv_freq = RopeInverseFrequencies(head_dim, 10000, {});
    SOVAI_CHECK(inv_freq.ok()) << inv_freq.status();
    std::vector<int32_t> positions(n);
    std::uniform_int_distribution<int32_t> pick(0, 8191);
    for (int32_t& p : positions) p = pick(rng);
    positions[0] = 0;
    positions[1] = 131071;  // a long context: sincosf's slow argument reduction
    const Bf16Data x = RandomBf16(rng, numel, -1, 1);
    DeviceArray<uint16_t> d_x(numel);
    DeviceArray<int32_t> d_positions(n);
    DeviceArray<float> d_inv_freq(head_dim / 2);
    d_x.Upload(x.bits);
    d_positions.Upload(positions);
    d_inv_freq.Upload(*inv_freq);

    report.ExpectOk(
        RopeForward(d_x.get(), d_positions.get(), d_inv_freq.get(), n, heads, head_dim, stream),
        name + " forward");
    std::vector<float> want(numel);
    reference.RopeForward(want.data(), x.values.data(), positions.data(), inv_freq->data(), n,
                          heads, head_dim);
    const std::vector<uint16_t> rotated = d_x.Download();
    report.ExpectNear(name + " forward", FromBf16(rotated), want, kBf16Rel, 1e-3);

    // Backward in place from a fresh gradient: d = rope^-1(d), the reference's dx from zero.
    const Bf16Data d = RandomBf16(rng, numel, -1, 1);
    d_x.Upload(d.bits);
    report.ExpectOk(
        RopeBackward(d_x.get(), d_positions.get(), d_inv_freq.get(), n, heads, head_dim, stream),
        name + " backward");
    std::vector<float> want_d(numel, 0.0f);
    reference.RopeBackward(want_d.data(), d.values.data(), positions.data(), inv_freq->data(), n,
                           heads, head_dim);
    report.ExpectNear(name + " backward", FromBf16(d_x.Download()), want_d, kBf16Rel, 1e-3);

    // Backward undoes forward (up to two bf16 roundings).
    d_x.Upload(rotated);
    report.ExpectOk(
        RopeBackward(d_x.get(), d_positions.get(), d_inv_freq.get(), n, heads, head_dim, stream),
        name + " inverse");
    report.ExpectNear(name + " backward(forward(x)) = x", FromBf16(d_x.Download()), x.values,
                      2 * kBf16Rel, 4e-3);
  }

  // The whole tensor offset by one element: scalar path.
  {
    const int64_t n = 5, heads = 2, head_dim = 64;
    auto inv_freq = RopeInverseFrequencies(head_dim, 500000, {});
    SOVAI_CHECK(inv_freq.ok()) << inv_freq.status();
    const std::vector<int32_t> positions = {0, 1, 7, 100, 4000};
    const Bf16Data x = RandomBf16(rng, n * heads * head_dim, -1, 1);
    DeviceArray<uint16_t> d_x(x.bits.size() + 1);
    DeviceArray<int32_t> d_positions(n);
    DeviceArray<float> d_inv_freq(head_dim / 2);
    d_x.Upload(x.bits, 1);
    d_positions.Upload(positions);
    d_inv_freq.Upload(*inv_freq);
    report.ExpectOk(
        RopeForward(d_x.get() + 1, d_positions.get(), d_inv_freq.get(), n, heads, head_dim, stream),
        "rope misaligned forward");
    std::vector<float> want(x.values.size());
    reference.RopeForward(want.data(), x.values.data(), positions.data(), inv_freq->data(), n,
                          heads, head_dim);
    report.ExpectNear("rope misaligned forward", FromBf16(d_x.Download(1, x.bits.size())), want,
                      kBf16Rel, 1e-3);
  }

  DeviceArray<uint16_t> x(64);
  DeviceArray<int32_t> positions(4);
  DeviceArray<float> inv_freq(8);
  report.ExpectOk(RopeForward(x.get(), positions.get(), inv_freq.get(), 0, 1, 16, stream),
                  "rope of no tokens");
  report.ExpectStatus(RopeForward(x.get(), positions.get(), inv_freq.get(), 4, 1, 15, stream),
                      StatusCode::kInvalidArgument, "rope with an odd head size");
  report.ExpectStatus(RopeForward(x.get(), positions.get(), inv_freq.get(), 4, 0, 16, stream),
                      StatusCode::kInvalidArgument, "rope with no heads");
  report.ExpectStatus(RopeBackward(x.get(), nullptr, inv_freq.get(), 4, 1, 16, stream),
                      StatusCode::kInvalidArgument, "rope without positions");
  report.ExpectStatus(RopeForward(x.get(), positions.get(), inv_freq.get(), -1, 1, 16, stream),
                      StatusCode::kInvalidArgument, "rope of -1 tokens");
}

// --- SwiGLU ---------------------------------------------------------------------------------

void TestSwiGlu(Report& report, Backend& reference, std::mt19937& rng, Stream stream) {
  for (const int64_t count : {int64_t{3 * 4096}, int64_t{1001}}) {
    for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
      const std::string name =
          "swiglu count=" + std::to_string(count) + " offset " + std::to_string(offset);
      const Bf16Data gate = RandomBf16(rng, count, -8, 8);
      const Bf16Data up = RandomBf16(rng, count, -2, 2);
      DeviceArray<uint16_t> d_gate(count + offset), d_up(count + offset), d_out(count + offset);
      d_gate.Upload(gate.bits, offset);
      d_up.Upload(up.bits, offset);
      report.ExpectOk(SwiGluForward(d_out.get() + offset, d_gate.get() + offset,
                                    d_up.get() + offset, count, stream),
                      name + " forward");
      std::vector<float> want(count);
      reference.SwiGluForward(want.data(), gate.values.data(), up.values.data(), count);
      report.ExpectNear(name + " forward", FromBf16(d_out.Download(offset, count)), want, kBf16Rel,
                        1e-6);

      const Bf16Data dout = RandomBf16(rng, count, -1, 1);
      const Bf16Data dgate0 = RandomBf16(rng, count, -1, 1);
      const Bf16Data dup0 = RandomBf16(rng, count, -1, 1);
      DeviceArray<uint16_t> d_dout(count + offset), d_dgate(count + offset), d_dup(count + offset);
      d_dout.Upload(dout.bits, offset);
      d_dgate.Upload(dgate0.bits, offset);
      d_dup.Upload(dup0.bits, offset);
      report.ExpectOk(
          SwiGluBackward(d_dgate.get() + offset, d_dup.get() + offset, d_dout.get() + offset,
                         d_gate.get() + offset, d_up.get() + offset, count, stream),
          name + " backward");
      std::vector<float> want_dgate = dgate0.values, want_dup = dup0.values;
      reference.SwiGluBackward(want_dgate.data(), want_dup.data(), dout.values.data(),
                               gate.values.data(), up.values.data(), count);
      report.ExpectNear(name + " dgate", FromBf16(d_dgate.Download(offset, count)), want_dgate,
                        kBf16Rel, 1e-6, dgate0.values);
      report.ExpectNear(name + " dup", FromBf16(d_dup.Download(offset, count)), want_dup, kBf16Rel,
                        1e-6, dup0.values);
    }
  }
  DeviceArray<uint16_t> buf(16);
  report.ExpectOk(SwiGluForward(buf.get(), buf.get(), buf.get(), 0, stream), "swiglu of nothing");
  report.ExpectStatus(SwiGluForward(buf.get(), buf.get(), buf.get(), -3, stream),
                      StatusCode::kInvalidArgument, "swiglu of -3");
  report.ExpectStatus(
      SwiGluBackward(buf.get(), nullptr, buf.get(), buf.get(), buf.get(), 16, stream),
      StatusCode::kInvalidArgument, "swiglu backward without dup");
}

// --- NF4 ------------------------------------------------------------------------------------

void TestNf4(Report& report, Backend& reference, std::mt19937& rng, Stream stream) {
  // 1000 blocks: four groups of 256 absmax codes, the last one partial.
  const int64_t numel = 64 * 1000;
  std::vector<float> weights = RandomFloats(rng, numel, -1, 1);
  for (int64_t i = 0; i < numel; i += 997) weights[i] *= 20;      // spread the absmaxes
  std::fill(weights.begin() + 640, weights.begin() + 704, 0.0f);  // an all-zero block
  auto quantized = QuantizeNf4(weights);
  SOVAI_CHECK(quantized.ok()) << quantized.status();
  const Nf4Quantized& q = *quantized;

  std::vector<float> want(numel);
  reference.Nf4Dequantize(want.data(), q.View(), numel);
  const std::vector<uint16_t> want_bits = ToBf16(want);

  // codes_offset 0 / out_offset 0: 16-byte accesses; 8: 8-byte code loads; out offset 1: scalar.
  struct Layout {
    int64_t codes_offset;
    int64_t out_offset;
  };
  for (const Layout layout : {Layout{0, 0}, Layout{8, 0}, Layout{0, 1}}) {
    DeviceArray<uint8_t> d_codes(q.codes.size() + layout.codes_offset);
    DeviceArray<uint8_t> d_absmax_codes(q.absmax_codes.size());
    DeviceArray<float> d_scales(q.absmax_scales.size());
    DeviceArray<float> d_map(Nf4Weight::kAbsmaxMapSize);
    DeviceArray<uint16_t> d_out(numel + layout.out_offset);
    d_codes.Upload(q.codes, layout.codes_offset);
    d_absmax_codes.Upload(q.absmax_codes);
    d_scales.Upload(q.absmax_scales);
    d_map.Upload(std::vector<float>(q.absmax_map.begin(), q.absmax_map.end()));
    Nf4Weight device_weight{.codes = d_codes.get() + layout.codes_offset,
                            .absmax_codes = d_absmax_codes.get(),
                            .absmax_scales = d_scales.get(),
                            .absmax_map = d_map.get(),
                            .absmax_offset = q.absmax_offset};
    const std::string name = "nf4 codes offset " + std::to_string(layout.codes_offset) +
                             ", out offset " + std::to_string(layout.out_offset);
    report.ExpectOk(Nf4Dequantize(d_out.get() + layout.out_offset, device_weight, numel, stream),
                    name);
    const std::vector<uint16_t> got = d_out.Download(layout.out_offset, numel);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < numel; ++i) mismatches += got[i] != want_bits[i];
    report.Expect(mismatches == 0, name + " bit-exact (" + std::to_string(mismatches) + " of " +
                                       std::to_string(numel) + " differ)");

    report.ExpectStatus(Nf4Dequantize(d_out.get(), device_weight, 100, stream),
                        StatusCode::kInvalidArgument, "nf4 of 100 values");
    report.ExpectOk(Nf4Dequantize(d_out.get(), device_weight, 0, stream), "nf4 of no values");
    Nf4Weight no_map = device_weight;
    no_map.absmax_map = nullptr;
    report.ExpectStatus(Nf4Dequantize(d_out.get(), no_map, numel, stream),
                        StatusCode::kInvalidArgument, "nf4 without its absmax map");
  }
}

// --- AdamW ----------------------------------------------------------------------------------

void TestAdamW(Report& report, Backend& reference, std::mt19937& rng, Stream stream) {
  for (const int64_t count : {int64_t{10000}, int64_t{1001}}) {
    std::vector<float> param = RandomFloats(rng, count, -1, 1);
    std::vector<float> m = RandomFloats(rng, count, -0.01f, 0.01f);
    std::vector<float> v = RandomFloats(rng, count, 0, 1e-4f);
    DeviceArray<float> d_param(count), d_grad(count), d_m(count), d_v(count);
    d_param.Upload(param);
    d_m.Upload(m);
    d_v.Upload(v);
    Backend::AdamWParams params{.learning_rate = 1e-3f, .weight_decay = 0.01f};
    for (int64_t step = 1; step <= 3; ++step) {
      params.step = step;
      const std::vector<float> grad = RandomFloats(rng, count, -0.1f, 0.1f);
      d_grad.Upload(grad);
      report.ExpectOk(
          AdamWStep(d_param.get(), d_grad.get(), d_m.get(), d_v.get(), count, params, stream),
          "adamw step " + std::to_string(step));
      reference.AdamWStep(param.data(), grad.data(), m.data(), v.data(), count, params);
    }
    const std::string name = "adamw count=" + std::to_string(count) + " after 3 steps";
    report.ExpectNear(name + " param", d_param.Download(), param, 0, 0);
    report.ExpectNear(name + " m", d_m.Download(), m, 0, 0);
    report.ExpectNear(name + " v", d_v.Download(), v, 0, 0);
  }
  DeviceArray<float> buf(16);
  report.ExpectStatus(AdamWStep(buf.get(), buf.get(), buf.get(), buf.get(), 16,
                                Backend::AdamWParams{.step = 0}, stream),
                      StatusCode::kInvalidArgument, "adamw step 0");
  report.ExpectStatus(
      AdamWStep(buf.get(), buf.get(), buf.get(), nullptr, 16, Backend::AdamWParams{}, stream),
      StatusCode::kInvalidArgument, "adamw without v");
  report.ExpectOk(
      AdamWStep(buf.get(), buf.get(), buf.get(), buf.get(), 0, Backend::AdamWParams{}, stream),
      "adamw of nothing");
}

// --- SumOfSquares ---------------------------------------------------------------------------

void TestSumOfSquares(Report& report, Backend& reference, std::mt19937& rng, Stream stream) {
  DeviceArray<uint8_t> workspace(kSumOfSquaresWorkspaceBytes);
  DeviceArray<double> d_result(1);
  for (const int64_t count : {int64_t{1} << 22, (int64_t{1} << 20) + 3, int64_t{1}}) {
    const std::vector<float> grad = RandomFloats(rng, count, -1, 1);
    DeviceArray<float> d_grad(count);
    d_grad.Upload(grad);
    const double want = reference.SumOfSquares(grad.data(), count);
    std::vector<double> runs;
    for (int run = 0; run < 3; ++run) {
      report.ExpectOk(SumOfSquares(d_result.get(), d_grad.get(), count, workspace.get(),
                                   kSumOfSquaresWorkspaceBytes, stream),
                      "sum of squares");
      runs.push_back(d_result.Download()[0]);
    }
    char detail[160];
    std::snprintf(detail, sizeof detail, "sum of squares count=%lld: got %.17g, want %.17g",
                  static_cast<long long>(count), runs[0], want);
    report.Expect(std::fabs(runs[0] - want) <= 1e-12 * want, detail);
    report.Expect(std::memcmp(&runs[0], &runs[1], sizeof(double)) == 0 &&
                      std::memcmp(&runs[0], &runs[2], sizeof(double)) == 0,
                  "sum of squares is the same bits on every run");
  }
  DeviceArray<float> buf(1 << 20);
  report.ExpectOk(SumOfSquares(d_result.get(), buf.get(), 0, workspace.get(),
                               kSumOfSquaresWorkspaceBytes, stream),
                  "sum of squares of nothing");
  report.Expect(d_result.Download()[0] == 0.0, "sum of squares of nothing is 0");
  report.ExpectStatus(SumOfSquares(d_result.get(), buf.get(), 1 << 20, workspace.get(), 8, stream),
                      StatusCode::kInvalidArgument, "sum of squares with a small workspace");
  report.ExpectStatus(SumOfSquares(d_result.get(), buf.get(), 1 << 20, nullptr,
                                   kSumOfSquaresWorkspaceBytes, stream),
                      StatusCode::kInvalidArgument, "sum of squares without workspace");
  report.ExpectStatus(SumOfSquares(d_result.get(), buf.get(), -1, workspace.get(),
                                   kSumOfSquaresWorkspaceBytes, stream),
                      StatusCode::kInvalidArgument, "sum of squares of -1");
}

}  // namespace
}  // namespace sovai::kernels::cuda

int main() {
  using namespace sovai::kernels::cuda;
  std::optional<testing::GpuTestContext> context = testing::OpenFirstDeviceOrSkip();
  if (!context) return testing::kSkippedExitCode;
  const Stream stream = context->stream();

  auto reference = sovai::kernels::NewReferenceBackend();
  std::mt19937 rng(20240611);
  Report report;
  TestEmbedding(report, *reference, rng, stream);
  TestRmsNorm(report, *reference, rng, stream);
  TestRope(report, *reference, rng, stream);
  TestSwiGlu(report, *reference, rng, stream);
  TestNf4(report, *reference, rng, stream);
  TestAdamW(report, *reference, rng, stream);
  TestSumOfSquares(report, *reference, rng, stream);

  // Errors inside kernels (bad addresses) surface here, not at the launches.
  context->Synchronize();
  return report.Summarize();
}
