// Every op of the reference backend on small cases computed by hand (the arithmetic is in the
// comments). Gradients of larger random cases are gradcheck_test.cc's job, and agreement with
// PyTorch is tests/reference/ops_golden.py's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "kernels/backend.h"
#include "kernels/nf4.h"
#include "tensor/dtype.h"

namespace sovai::kernels {
namespace {

using Vec = std::vector<float>;
// The hand-computed values below are exact or written to 7+ digits; the reference rounds each
// output once from a double sum, so 1e-6 relative (plus 1e-7 absolute near 0) covers both.
constexpr float kTol = 1e-6f;

void ExpectClose(const Vec& expected, const Vec& actual, float tol = kTol) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tol * std::max(1.0f, std::fabs(expected[i]))) << i;
  }
}

WeightRef F32(const Vec& w, int64_t rows, int64_t cols) {
  return WeightRef{.format = WeightRef::Format::kF32, .data = w.data(), .rows = rows, .cols = cols};
}

class ReferenceBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = NewReferenceBackend();
};

TEST_F(ReferenceBackendTest, SupportsEveryOpAndNamesThem) {
  EXPECT_EQ(backend_->name(), "reference");
  std::set<std::string_view> names;
  for (int op = 0; op < static_cast<int>(Op::kCount); ++op) {
    EXPECT_TRUE(backend_->Supports(static_cast<Op>(op))) << OpName(static_cast<Op>(op));
    EXPECT_NE(OpName(static_cast<Op>(op)), "unknown");
    names.insert(OpName(static_cast<Op>(op)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(Op::kCount));
  EXPECT_EQ(OpName(Op::kCount), "unknown");
  EXPECT_FALSE(backend_->Supports(Op::kCount));
}

TEST(DropoutTest, KeepIsTheDocumentedSplitmixHash) {
  // splitmix64's first output from state 0 is the published constant 0xE220A8397B1DCDAF, i.e.
  // mix(0). With seed = mix(0), h = mix(seed ^ mix(0)) = mix(0), so u = 0xE220A8 / 2^24 =
  // 14819496 / 16777216 = 0.88331079...: kept for p up to u, dropped above.
  const uint64_t seed = 0xE220A8397B1DCDAFull;
  const float u = 14819496.0f / 16777216.0f;
  EXPECT_TRUE(DropoutKeep(seed, 0, u));
  EXPECT_FALSE(DropoutKeep(seed, 0, std::nextafter(u, 1.0f)));
  // p = 0 keeps everything, whatever the hash.
  EXPECT_TRUE(DropoutKeep(seed, 0, 0.0f));
}

TEST(DropoutTest, KeepsAboutOneMinusPAndDependsOnSeedAndIndex) {
  int kept = 0;
  int same_as_other_seed = 0;
  const int count = 100000;
  for (int i = 0; i < count; ++i) {
    const bool keep = DropoutKeep(1234, static_cast<uint64_t>(i), 0.3f);
    EXPECT_EQ(keep, DropoutKeep(1234, static_cast<uint64_t>(i), 0.3f));  // deterministic
    kept += keep;
    same_as_other_seed += keep == DropoutKeep(1235, static_cast<uint64_t>(i), 0.3f);
  }
  // Binomial(100000, 0.7): standard deviation 145; 1% is ~7 of them.
  EXPECT_NEAR(kept, 70000, 1000);
  // Independent seeds agree with probability 0.7^2 + 0.3^2 = 0.58.
  EXPECT_NEAR(same_as_other_seed, 58000, 1000);
}

TEST_F(ReferenceBackendTest, GemmAllTransposesAndBeta) {
  // a = [[1, 2, 3], [4, 5, 6]] (2x3), b = [[1, 0], [0, 1], [1, 1]] (3x2):
  // a @ b = [[1 + 3, 2 + 3], [4 + 6, 5 + 6]] = [[4, 5], [10, 11]].
  const Vec a = {1, 2, 3, 4, 5, 6};
  const Vec b = {1, 0, 0, 1, 1, 1};
  const Vec a_t = {1, 4, 2, 5, 3, 6};  // a^T stored 3x2
  const Vec b_t = {1, 0, 1, 0, 1, 1};  // b^T stored 2x3
  const Vec expected = {4, 5, 10, 11};
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Vec c(4, std::numeric_limits<float>::quiet_NaN());  // beta = 0 must not read c
      backend_->Gemm(ta, tb, 2, 2, 3, 1.0f, (ta ? a_t : a).data(), (tb ? b_t : b).data(), 0.0f,
                     c.data());
      ExpectClose(expected, c);
    }
  }
  // alpha = 2, beta = 0.5 on c = [1, 1, 1, 1]: 2 * ab + 0.5.
  Vec c = {1, 1, 1, 1};
  backend_->Gemm(false, false, 2, 2, 3, 2.0f, a.data(), b.data(), 0.5f, c.data());
  ExpectClose({8.5f, 10.5f, 20.5f, 22.5f}, c);
}

TEST_F(ReferenceBackendTest, LinearForwardInF32AndBf16WithBias) {
  // x = [[1, 2]], w = [[1, 0], [0.5, -1], [2, 2]] (O=3, I=2), bias = [0, 1, -1]:
  // out = [1, 0.5 - 2 + 1, 2 + 4 - 1] = [1, -0.5, 5].
  const Vec x = {1, 2};
  const Vec w = {1, 0, 0.5f, -1, 2, 2};
  const Vec bias = {0, 1, -1};
  Vec out(3);
  backend_->LinearForward(out.data(), x.data(), F32(w, 3, 2), bias.data(), 1);
  ExpectClose({1, -0.5f, 5}, out);
  backend_->LinearForward(out.data(), x.data(), F32(w, 3, 2), nullptr, 1);
  ExpectClose({1, -1.5f, 6}, out);
  // The same weights in bf16 (all exact there).
  std::vector<uint16_t> w_bf16;
  for (float v : w) w_bf16.push_back(tensor::FloatToBF16(v));
  WeightRef bf16{.format = WeightRef::Format::kBF16, .data = w_bf16.data(), .rows = 3, .cols = 2};
  backend_->LinearForward(out.data(), x.data(), bf16, bias.data(), 1);
  ExpectClose({1, -0.5f, 5}, out);
}

TEST_F(ReferenceBackendTest, LinearForwardDequantizesNf4) {
  // One block of 64 weights equal to 2 * kNf4Values[e % 16] (absmax 2, dequantized exactly), as
  // w[1, 64]; x = 1 everywhere, so out = 2 * 4 * sum(kNf4Values).
  Vec w(64);
  for (int e = 0; e < 64; ++e) w[e] = 2.0f * kNf4Values[e % 16];
  auto q = QuantizeNf4(w);
  ASSERT_TRUE(q.ok()) << q.status();
  WeightRef nf4{.format = WeightRef::Format::kNF4, .nf4 = q->View(), .rows = 1, .cols = 64};
  double table_sum = 0;
  for (float v : kNf4Values) table_sum += v;
  const Vec x(64, 1.0f);
  Vec out(1);
  backend_->LinearForward(out.data(), x.data(), nf4, nullptr, 1);
  ExpectClose({static_cast<float>(8 * table_sum)}, out);
  // Two rows of 32 from the same 64 values: row 0 holds e = 0..31 (each table value twice).
  nf4.rows = 2;
  nf4.cols = 32;
  Vec out2(2);
  backend_->LinearForward(out2.data(), x.data(), nf4, nullptr, 1);
  ExpectClose({static_cast<float>(4 * table_sum), static_cast<float>(4 * table_sum)}, out2);
}

TEST_F(ReferenceBackendTest, LinearBackwardAccumulates) {
  // dout = [[1, -1, 2]] with w as above: dx = [1 - 0.5 + 4, 0 + 1 + 4] = [4.5, 5], added to 1.
  const Vec w = {1, 0, 0.5f, -1, 2, 2};
  const Vec dout = {1, -1, 2};
  Vec dx = {1, 1};
  backend_->LinearBackwardInput(dx.data(), dout.data(), F32(w, 3, 2), 1);
  ExpectClose({5.5f, 6}, dx);
  // dbias sums rows: two rows [1, -1, 2] and [3, 0, 1] -> [4, -1, 3], added to [1, 1, 1].
  const Vec dout2 = {1, -1, 2, 3, 0, 1};
  Vec dbias = {1, 1, 1};
  backend_->LinearBackwardBias(dbias.data(), dout2.data(), 2, 3);
  ExpectClose({5, 0, 4}, dbias);
}

TEST_F(ReferenceBackendTest, EmbeddingGathersAndScattersWithRepeats) {
  const Vec table = {0, 1, 10, 11, 20, 21};  // V = 3, C = 2
  const std::vector<int32_t> ids = {2, 0, 2};
  Vec out(6);
  backend_->EmbeddingForward(out.data(), ids.data(), F32(table, 3, 2), 3);
  ExpectClose({20, 21, 0, 1, 20, 21}, out);
  std::vector<uint16_t> bf16;
  for (float v : table) bf16.push_back(tensor::FloatToBF16(v));
  WeightRef bf16_table{
      .format = WeightRef::Format::kBF16, .data = bf16.data(), .rows = 3, .cols = 2};
  backend_->EmbeddingForward(out.data(), ids.data(), bf16_table, 3);
  ExpectClose({20, 21, 0, 1, 20, 21}, out);

  const Vec dout = {1, 2, 3, 4, 5, 6};
  Vec dtable(6, 1.0f);
  backend_->EmbeddingBackward(dtable.data(), dout.data(), ids.data(), 3, 3, 2);
  // Row 2 receives rows 0 and 2 of dout: [1 + 5, 2 + 6]; row 0 receives [3, 4]; all plus 1.
  ExpectClose({4, 5, 1, 1, 7, 9}, dtable);
}

TEST_F(ReferenceBackendTest, RmsNormForwardAndBackward) {
  // x = [3, 4], weight = [1, 2], eps = 0: mean(x^2) = 12.5, rstd = 1 / sqrt(12.5) = 0.28284271,
  // out = [3 r, 8 r] = [0.84852814, 2.26274170].
  const Vec x = {3, 4};
  const Vec weight = {1, 2};
  Vec out(2), rstd(1);
  backend_->RmsNormForward(out.data(), rstd.data(), x.data(), weight.data(), 1, 2, 0.0f);
  const float r = 0.28284271f;
  ExpectClose({r}, rstd);
  ExpectClose({0.84852814f, 2.26274170f}, out);
  // dout = [1, 0]: dot = sum dout * w * x = 3; dx_j = r w_j dout_j - x_j r^3 / 2 * 3:
  // r^3 = 0.02262742; dx = [r - 3 * 0.02262742 * 1.5, -4 * 0.02262742 * 1.5]
  //    = [0.28284271 - 0.10182338, -0.13576450] = [0.18101933, -0.13576450].
  // dweight = dout * x * r = [0.84852814, 0].
  const Vec dout = {1, 0};
  Vec dx = {0, 0}, dweight = {1, 1};
  backend_->RmsNormBackward(dx.data(), dweight.data(), dout.data(), x.data(), weight.data(),
                            rstd.data(), 1, 2);
  ExpectClose({0.18101933f, -0.13576450f}, dx);
  ExpectClose({1.84852814f, 1}, dweight);
  // A frozen norm (dweight null) still gives dx.
  Vec dx2 = {0, 0};
  backend_->RmsNormBackward(dx2.data(), nullptr, dout.data(), x.data(), weight.data(), rstd.data(),
                            1, 2);
  ExpectClose(dx, dx2);
  // eps is added to the mean square: x = [0, 0] with eps = 0.25 gives rstd 2 and out 0.
  const Vec zeros = {0, 0};
  backend_->RmsNormForward(out.data(), rstd.data(), zeros.data(), weight.data(), 1, 2, 0.25f);
  ExpectClose({2}, rstd);
  ExpectClose({0, 0}, out);
}

TEST_F(ReferenceBackendTest, RopeRotatesPairsHalfADimensionApart) {
  // D = 4, inv_freq = [1, 0.5]: pair (0, 2) turns by p radians, pair (1, 3) by p / 2.
  // x = [1, 1, 0, 0] at p = 2: pair (0, 2) -> (cos 2, sin 2); pair (1, 3) -> (cos 1, sin 1).
  const Vec inv_freq = {1.0f, 0.5f};
  const Vec x = {1, 1, 0, 0};
  const std::vector<int32_t> pos = {2};
  Vec out(4);
  backend_->RopeForward(out.data(), x.data(), pos.data(), inv_freq.data(), 1, 1, 4);
  ExpectClose({std::cos(2.0f), std::cos(1.0f), std::sin(2.0f), std::sin(1.0f)}, out);
  // Position 0 is the identity; in place works.
  Vec y = {1, 2, 3, 4};
  const std::vector<int32_t> zero = {0};
  backend_->RopeForward(y.data(), y.data(), zero.data(), inv_freq.data(), 1, 1, 4);
  ExpectClose({1, 2, 3, 4}, y);
  // The backward of a rotation is the inverse rotation: rope^-1(rope(x)) = x, accumulated.
  Vec dx = {10, 10, 10, 10};
  backend_->RopeBackward(dx.data(), out.data(), pos.data(), inv_freq.data(), 1, 1, 4);
  ExpectClose({11, 11, 10, 10}, dx);
  // Two heads at two positions: each head of a position turns by the same angles.
  const Vec x2 = {1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0};  // [N=2, H=2, D=4]
  const std::vector<int32_t> pos2 = {0, 1};
  Vec out2(16);
  backend_->RopeForward(out2.data(), x2.data(), pos2.data(), inv_freq.data(), 2, 2, 4);
  const float c5 = std::cos(0.5f), s5 = std::sin(0.5f);
  ExpectClose({1, 0, 0, 0, 1, 0, 0, 0, 0, c5, 0, s5, 0, c5, 0, s5}, out2);
}

Backend::AttentionShape Shape(int64_t b, int64_t t, int64_t hq, int64_t hkv, int64_t d,
                              int64_t window = 0) {
  return {.batch = b,
          .seq_len = t,
          .q_heads = hq,
          .kv_heads = hkv,
          .head_dim = d,
          .window = window,
          .scale = 1.0f};
}

TEST_F(ReferenceBackendTest, AttentionOfOnePositionIsItsValue) {
  // T = 1: the only score is q.k = 1*2 + 2*3 = 8 (scale 1), softmax 1, out = v, lse = 8.
  const Vec q = {1, 2}, k = {2, 3}, v = {5, -7};
  Vec out(2), lse(1);
  backend_->AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr,
                             Shape(1, 1, 1, 1, 2));
  ExpectClose({5, -7}, out);
  ExpectClose({8}, lse);
  // Backward: p = 1, so ds = p (dout.v - dout.out) = 0: dq = dk = 0 and dv = dout.
  const Vec dout = {1, 2};
  Vec dq = {0, 0}, dk = {0, 0}, dv = {1, 1};
  backend_->AttentionBackward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(),
                              q.data(), k.data(), v.data(), nullptr, Shape(1, 1, 1, 1, 2));
  ExpectClose({0, 0}, dq);
  ExpectClose({0, 0}, dk);
  ExpectClose({2, 3}, dv);
}

TEST_F(ReferenceBackendTest, AttentionIsCausalWithSegmentsAndWindow) {
  // D = 1, T = 3, scale 1: q = [1, 1, 1], k = [0, ln 2, ln 3], v = [1, 2, 3].
  // Row 0 sees only j = 0: out 1. Row 1: weights (1, 2) / 3: out (1 + 4) / 3 = 5/3, lse ln 3.
  // Row 2: weights (1, 2, 3) / 6: out (1 + 4 + 9) / 6 = 7/3, lse ln 6.
  const float ln2 = std::log(2.0f), ln3 = std::log(3.0f);
  const Vec q = {1, 1, 1}, k = {0, ln2, ln3}, v = {1, 2, 3};
  Vec out(3), lse(3);
  backend_->AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr,
                             Shape(1, 3, 1, 1, 1));
  ExpectClose({1, 5.0f / 3, 7.0f / 3}, out);
  ExpectClose({0, std::log(3.0f), std::log(6.0f)}, lse);
  // Segments [0, 1, 1]: row 1 sees only itself (2); row 2 sees j = 1, 2: (4 + 9) / 5 = 13/5.
  const std::vector<int32_t> segment = {0, 1, 1};
  backend_->AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), segment.data(),
                             Shape(1, 3, 1, 1, 1));
  ExpectClose({1, 2, 13.0f / 5}, out);
  ExpectClose({0, ln2, std::log(5.0f)}, lse);
  // Window 2: row 2 sees j = 1, 2 only (2 - 0 >= 2): also 13/5; row 1 still sees j = 0, 1.
  backend_->AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr,
                             Shape(1, 3, 1, 1, 1, /*window=*/2));
  ExpectClose({1, 5.0f / 3, 13.0f / 5}, out);
  // Window 1: every row sees only itself.
  backend_->AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr,
                             Shape(1, 3, 1, 1, 1, /*window=*/1));
  ExpectClose({1, 2, 3}, out);
}

TEST_F(ReferenceBackendTest, AttentionGroupsQueryHeadsOnSharedKeyValueHeads) {
  // B = 2 sequences of T = 2, Hq = 4 query heads on Hkv = 2 kv heads, D = 1. Query heads 0, 1
  // read kv head 0 and 2, 3 read kv head 1. All q = 0, so every allowed key weighs the same:
  // row 0 = v_0, row 1 = mean(v_0, v_1), per kv head and per sequence.
  const Vec q(2 * 2 * 4, 0.0f);
  const Vec k(2 * 2 * 2, 1.0f);
  // v[b, t, g]: sequence 0: t0 = (1, 10), t1 = (3, 30); sequence 1: t0 = (5, 50), t1 = (7, 70).
  const Vec v = {1, 10, 3, 30, 5, 50, 7, 70};
  Vec out(16), lse(16);
  backend_->AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr,
                             Shape(2, 2, 4, 2, 1));
  ExpectClose({1, 1, 10, 10, 2, 2, 20, 20, 5, 5, 50, 50, 6, 6, 60, 60}, out);
  // lse[b, h, t] = log(number of keys seen): 0 for t = 0, ln 2 for t = 1.
  for (int bh = 0; bh < 8; ++bh) {
    EXPECT_NEAR(lse[bh * 2], 0.0f, kTol);
    EXPECT_NEAR(lse[bh * 2 + 1], std::log(2.0f), kTol);
  }
  // dv of kv head g sums over its two query heads: with dout = 1 everywhere, v_0 of a sequence
  // gets 1 (row 0) + 0.5 (row 1) from each of two heads = 3; v_1 gets 0.5 * 2 = 1.
  const Vec dout(16, 1.0f);
  Vec dq(16, 0.0f), dk(8, 0.0f), dv(8, 0.0f);
  backend_->AttentionBackward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(),
                              q.data(), k.data(), v.data(), nullptr, Shape(2, 2, 4, 2, 1));
  ExpectClose({3, 3, 1, 1, 3, 3, 1, 1}, dv);
}

TEST_F(ReferenceBackendTest, SwiGluForwardAndBackward) {
  // gate = [0, 1], up = [5, 2]: silu(0) = 0, silu(1) = 1 / (1 + e^-1) = 0.73105858;
  // out = [0, 1.46211716].
  const Vec gate = {0, 1}, up = {5, 2};
  Vec out(2);
  backend_->SwiGluForward(out.data(), gate.data(), up.data(), 2);
  ExpectClose({0, 1.46211716f}, out);
  // silu'(g) = s (1 + g (1 - s)): silu'(0) = 0.5; silu'(1) = 0.73105858 * 1.26894142 =
  // 0.92767051. dout = [1, 1]: dgate = [5 * 0.5, 2 * 0.92767051] = [2.5, 1.85534102];
  // dup = [0, 0.73105858]; both added to 1.
  const Vec dout = {1, 1};
  Vec dgate = {1, 1}, dup = {1, 1};
  backend_->SwiGluBackward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), 2);
  ExpectClose({3.5f, 2.85534102f}, dgate);
  ExpectClose({1, 1.73105858f}, dup);
}

TEST_F(ReferenceBackendTest, AddMayWriteInPlace) {
  Vec a = {1, 2, 3};
  const Vec b = {10, 20, 30};
  backend_->Add(a.data(), a.data(), b.data(), 3);
  ExpectClose({11, 22, 33}, a);
}

TEST_F(ReferenceBackendTest, CrossEntropyLossAndGradients) {
  // hidden = [[1]], weight = [[0], [ln 3]] (V = 2, C = 1): logits [0, ln 3], softmax [1/4, 3/4].
  // Target 1: loss = ln 4 - ln 3 = ln(4/3). dlogits = grad_scale * [1/4, -1/4];
  // dhidden = dlogits . weight = -ln 3 / 4 * grad_scale; dweight = dlogits * hidden.
  // Row 2 has the same hidden and target 0: loss ln 4, dlogits [-3/4, 3/4], dhidden 3 ln 3 / 4.
  // Row 3 is ignored (-100): no loss, no gradient.
  const float ln3 = std::log(3.0f);
  const Vec hidden = {1, 1, 5};
  const Vec weight = {0, ln3};
  const std::vector<int32_t> targets = {1, 0, -100};
  for (int64_t chunk : {1, 2, 3, 100}) {
    Vec dhidden = {0, 0, 7}, dweight = {0, 0};
    const double loss = backend_->CrossEntropy(dhidden.data(), dweight.data(), hidden.data(),
                                               F32(weight, 2, 1), targets.data(), 3, 0.5f, chunk);
    EXPECT_NEAR(loss, std::log(4.0 / 3) + std::log(4.0), 1e-6) << chunk;
    ExpectClose({-ln3 / 8, 3 * ln3 / 8, 7}, dhidden);
    // dweight = 0.5 * ([1/4, -1/4] + [-3/4, 3/4]) = [-0.25, 0.25].
    ExpectClose({-0.25f, 0.25f}, dweight);
  }
  // Loss only (dhidden null) leaves everything alone.
  const double loss = backend_->CrossEntropy(nullptr, nullptr, hidden.data(), F32(weight, 2, 1),
                                             targets.data(), 3, 1.0f, 2);
  EXPECT_NEAR(loss, std::log(16.0 / 3), 1e-6);
  // A frozen bf16 head (no dweight) gives the same dhidden.
  std::vector<uint16_t> bf16 = {tensor::FloatToBF16(0), tensor::FloatToBF16(2.0f)};
  WeightRef head{.format = WeightRef::Format::kBF16, .data = bf16.data(), .rows = 2, .cols = 1};
  Vec dhidden = {0, 0, 0};
  // logits [0, 2]: loss of target 1 = log(1 + e^2) - 2.
  const std::vector<int32_t> one = {1};
  const double l =
      backend_->CrossEntropy(dhidden.data(), nullptr, hidden.data(), head, one.data(), 1, 1.0f, 1);
  EXPECT_NEAR(l, std::log(1 + std::exp(2.0)) - 2, 1e-6);
  // dhidden = (softmax_1 - 1) * 2 = -2 / (1 + e^2).
  EXPECT_NEAR(dhidden[0], -2 / (1 + std::exp(2.0)), kTol);
}

TEST_F(ReferenceBackendTest, LoraForwardAndBackwardWithoutDropout) {
  // x = [[1, 2]], a = [[1, 1]] (R = 1, I = 2), b = [[2], [3]] (O = 2), scale 0.5:
  // xa = 3, y += 0.5 * 3 * [2, 3] = [3, 4.5] on top of y = [1, 1].
  const Vec x = {1, 2}, a = {1, 1}, b = {2, 3};
  Vec y = {1, 1}, xa(1);
  backend_->LoraForward(y.data(), xa.data(), x.data(), a.data(), b.data(), 1, 2, 2, 1, 0.5f, {});
  ExpectClose({3}, xa);
  ExpectClose({4, 5.5f}, y);
  // dy = [1, 0]: dxa = 0.5 * (1 * 2) = 1; db = 0.5 * dy^T xa = [1.5, 0]; da = dxa * x = [1, 2];
  // dx = dxa * a = [1, 1].
  const Vec dy = {1, 0};
  Vec dx = {0, 0}, da = {0, 0}, db = {0, 0};
  backend_->LoraBackward(dx.data(), da.data(), db.data(), dy.data(), x.data(), xa.data(), a.data(),
                         b.data(), 1, 2, 2, 1, 0.5f, {});
  ExpectClose({1, 1}, dx);
  ExpectClose({1, 2}, da);
  ExpectClose({1.5f, 0}, db);
  // dx may be null.
  backend_->LoraBackward(nullptr, da.data(), db.data(), dy.data(), x.data(), xa.data(), a.data(),
                         b.data(), 1, 2, 2, 1, 0.5f, {});
  ExpectClose({2, 4}, da);
}

TEST_F(ReferenceBackendTest, LoraDropoutFollowsDropoutKeep) {
  // I = 64 inputs of 1 with a = 1: xa = sum of kept x / (1 - p) = kept * 2 for p = 0.5.
  const Dropout dropout{.probability = 0.5f, .seed = 99};
  const Vec x(64, 1.0f), a(64, 1.0f), b = {1};
  int kept = 0;
  for (int i = 0; i < 64; ++i) kept += DropoutKeep(99, static_cast<uint64_t>(i), 0.5f);
  ASSERT_GT(kept, 0);
  ASSERT_LT(kept, 64);
  Vec y = {0}, xa(1);
  backend_->LoraForward(y.data(), xa.data(), x.data(), a.data(), b.data(), 1, 64, 1, 1, 1.0f,
                        dropout);
  ExpectClose({2.0f * kept}, xa);
  // dx is 2 where kept and 0 where dropped (dy = 1, b = 1, a = 1, scale 1).
  const Vec dy = {1};
  Vec dx(64, 0.0f), da(64, 0.0f), db(1, 0.0f);
  backend_->LoraBackward(dx.data(), da.data(), db.data(), dy.data(), x.data(), xa.data(), a.data(),
                         b.data(), 1, 64, 1, 1, 1.0f, dropout);
  for (int i = 0; i < 64; ++i) {
    const float expected = DropoutKeep(99, static_cast<uint64_t>(i), 0.5f) ? 2.0f : 0.0f;
    EXPECT_EQ(dx[i], expected) << i;
    EXPECT_EQ(da[i], expected) << i;  // da = dxa * dropout(x) = 1 * (2 or 0)
  }
}

TEST_F(ReferenceBackendTest, Nf4DequantizeIsTheDocumentedFormula) {
  // absmax 1 and 3 (see nf4_test): block 0 comes back with absmax 2 + map[0] = 1.00703125.
  Vec x(128, 0.0f);
  x[1] = 0.5f;
  x[2] = -1.0f;
  x[127] = 3.0f;
  auto q = QuantizeNf4(x);
  ASSERT_TRUE(q.ok()) << q.status();
  Vec out(128);
  backend_->Nf4Dequantize(out.data(), q->View(), 128);
  const float absmax0 = 2.0f + BitsandbytesDynamicMap()[0];
  // 0.5 is nearest 0.44070983 (code 12): 0.5 - 0.4407 = 0.059 < 0.5626 - 0.5 = 0.063.
  EXPECT_EQ(out[1], kNf4Values[12] * absmax0);
  EXPECT_EQ(out[2], -absmax0);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[127], 3.0f);
}

TEST_F(ReferenceBackendTest, AdamWFollowsPyTorchOverTwoSteps) {
  // p = 1, g = 0.5, lr = 0.1, wd = 0.1, betas (0.9, 0.999), eps 1e-8.
  // Step 1: p = 1 * (1 - 0.01) = 0.99; m = 0.05, v = 0.00025; m_hat = 0.5, v_hat = 0.25;
  //   p -= 0.1 * 0.5 / (0.5 + 1e-8) -> 0.89 (+2e-10).
  // Step 2: p = 0.89 * 0.99 = 0.8811; m = 0.045 + 0.05 = 0.095, v = 0.00024975 + 0.00025 =
  //   0.00049975; m_hat = 0.095 / 0.19 = 0.5, v_hat = 0.00049975 / 0.001999 = 0.25;
  //   p -= 0.1 * 0.5 / 0.5 -> 0.7811.
  Vec p = {1}, g = {0.5f}, m = {0}, v = {0};
  Backend::AdamWParams params{.learning_rate = 0.1f, .weight_decay = 0.1f, .step = 1};
  backend_->AdamWStep(p.data(), g.data(), m.data(), v.data(), 1, params);
  ExpectClose({0.89f}, p);
  ExpectClose({0.05f}, m);
  ExpectClose({0.00025f}, v);
  params.step = 2;
  backend_->AdamWStep(p.data(), g.data(), m.data(), v.data(), 1, params);
  ExpectClose({0.7811f}, p);
  ExpectClose({0.095f}, m);
  ExpectClose({0.00049975f}, v);
  // A zero gradient with no decay leaves a fresh parameter where it is.
  Vec p0 = {2}, g0 = {0}, m0 = {0}, v0 = {0};
  backend_->AdamWStep(p0.data(), g0.data(), m0.data(), v0.data(), 1,
                      {.learning_rate = 0.1f, .step = 1});
  ExpectClose({2}, p0);
}

TEST_F(ReferenceBackendTest, SumOfSquaresAndScale) {
  Vec x = {3, 4, -12};
  EXPECT_EQ(backend_->SumOfSquares(x.data(), 3), 169.0);
  backend_->Scale(x.data(), 0.5f, 3);
  ExpectClose({1.5f, 2, -6}, x);
}

}  // namespace
}  // namespace sovai::kernels
