// Every backward op of the reference against central finite differences of its forward, in
// double precision (the ops are templates; this instantiates them with T = double).
//
// For an op with output y = f(inputs) the test draws a random cotangent g, defines the scalar
// L = sum(g * y), and compares the backward's gradient of each input (fed dout = g) with
// (L(u + h) - L(u - h)) / 2h for every element u of that input. Gradient buffers start at random
// values, so the check also proves that backward ops ACCUMULATE (the test subtracts the start).
//
// Tolerance: central differences have truncation error ~h^2 |f'''| and rounding error
// ~1e-16 |L| / h; with h = 1e-5 and |L| ~ 10 both are ~1e-10, so 1e-7 (relative to
// max(1, |gradient|)) separates a right gradient from a wrong one by orders of magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/reference/ops.h"

namespace sovai::kernels::reference {
namespace {

using Vec = std::vector<double>;
constexpr double kStep = 1e-5;
constexpr double kTolerance = 1e-7;

class GradCheck : public ::testing::Test {
 protected:
  Vec Random(size_t count, double scale = 1.0) {
    std::normal_distribution<double> normal(0.0, scale);
    Vec v(count);
    for (double& x : v) x = normal(rng_);
    return v;
  }

  // Checks analytic = dL/du for every element of `u`, L computed by `loss` from the current u.
  void Check(const std::string& name, Vec& u, const Vec& analytic,
             const std::function<double()>& loss) {
    ASSERT_EQ(u.size(), analytic.size()) << name;
    for (size_t e = 0; e < u.size(); ++e) {
      const double saved = u[e];
      u[e] = saved + kStep;
      const double up = loss();
      u[e] = saved - kStep;
      const double down = loss();
      u[e] = saved;
      const double numeric = (up - down) / (2 * kStep);
      EXPECT_NEAR(analytic[e], numeric, kTolerance * std::max(1.0, std::fabs(numeric)))
          << name << "[" << e << "]";
    }
  }

  // The gradient a backward op added to a buffer that started as `start`.
  static Vec Added(const Vec& after, const Vec& start) {
    Vec d(after.size());
    for (size_t e = 0; e < d.size(); ++e) d[e] = after[e] - start[e];
    return d;
  }

  static double Dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t e = 0; e < a.size(); ++e) s += a[e] * b[e];
    return s;
  }

  std::mt19937 rng_{20240601};
};

TEST_F(GradCheck, Linear) {
  const int64_t n = 3, in = 4, out = 5;
  Vec x = Random(n * in), w = Random(out * in), bias = Random(out), g = Random(n * out);
  auto loss = [&] {
    Vec y(n * out);
    LinearForward(y.data(), x.data(), w.data(), bias.data(), n, in, out);
    return Dot(g, y);
  };
  const Vec dx0 = Random(n * in), dbias0 = Random(out), dw0 = Random(out * in);
  Vec dx = dx0, dbias = dbias0, dw = dw0;
  LinearBackwardInput(dx.data(), g.data(), w.data(), n, in, out);
  LinearBackwardBias(dbias.data(), g.data(), n, out);
  // The weight gradient is the Gemm backend.h names: dw[O, I] += dout^T @ x.
  Gemm(true, false, out, in, n, 1.0, g.data(), x.data(), 1.0, dw.data());
  Check("dx", x, Added(dx, dx0), loss);
  Check("dbias", bias, Added(dbias, dbias0), loss);
  Check("dw", w, Added(dw, dw0), loss);
}

TEST_F(GradCheck, Embedding) {
  const int64_t n = 5, vocab = 4, c = 3;
  const std::vector<int32_t> ids = {3, 0, 3, 1, 3};  // repeats, and row 2 unused
  Vec table = Random(vocab * c), g = Random(n * c);
  auto loss = [&] {
    Vec y(n * c);
    EmbeddingForward(y.data(), ids.data(), table.data(), n, vocab, c);
    return Dot(g, y);
  };
  const Vec d0 = Random(vocab * c);
  Vec d = d0;
  EmbeddingBackward(d.data(), g.data(), ids.data(), n, vocab, c);
  Check("dtable", table, Added(d, d0), loss);
}

TEST_F(GradCheck, RmsNorm) {
  const int64_t n = 3, c = 6;
  Vec x = Random(n * c), weight = Random(c), g = Random(n * c);
  const double eps = 1e-5;
  auto loss = [&] {
    Vec y(n * c), rstd(n);
    RmsNormForward(y.data(), rstd.data(), x.data(), weight.data(), n, c, eps);
    return Dot(g, y);
  };
  Vec y(n * c), rstd(n);
  RmsNormForward(y.data(), rstd.data(), x.data(), weight.data(), n, c, eps);
  const Vec dx0 = Random(n * c), dw0 = Random(c);
  Vec dx = dx0, dw = dw0;
  RmsNormBackward(dx.data(), dw.data(), g.data(), x.data(), weight.data(), rstd.data(), n, c);
  Check("dx", x, Added(dx, dx0), loss);
  Check("dweight", weight, Added(dw, dw0), loss);
}

TEST_F(GradCheck, Rope) {
  const int64_t n = 3, heads = 2, d = 6;
  const std::vector<int32_t> positions = {0, 7, 1000};
  const std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f};
  Vec x = Random(n * heads * d), g = Random(n * heads * d);
  auto loss = [&] {
    Vec y(x.size());
    RopeForward(y.data(), x.data(), positions.data(), inv_freq.data(), n, heads, d);
    return Dot(g, y);
  };
  const Vec dx0 = Random(x.size());
  Vec dx = dx0;
  RopeBackward(dx.data(), g.data(), positions.data(), inv_freq.data(), n, heads, d);
  Check("dx", x, Added(dx, dx0), loss);
}

struct AttentionCase {
  const char* name;
  Backend::AttentionShape shape;
  std::vector<int32_t> segment;  // empty: no segments
};

class AttentionGradCheck : public GradCheck, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionGradCheck, QueryKeyValue) {
  const AttentionCase& c = GetParam();
  const auto& s = c.shape;
  const int64_t tokens = s.batch * s.seq_len;
  const int32_t* segment = c.segment.empty() ? nullptr : c.segment.data();
  Vec q = Random(tokens * s.q_heads * s.head_dim), k = Random(tokens * s.kv_heads * s.head_dim),
      v = Random(tokens * s.kv_heads * s.head_dim), g = Random(q.size());
  auto loss = [&] {
    Vec out(q.size()), lse(s.batch * s.q_heads * s.seq_len);
    AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), segment, s);
    return Dot(g, out);
  };
  Vec out(q.size()), lse(s.batch * s.q_heads * s.seq_len);
  AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), segment, s);
  const Vec dq0 = Random(q.size()), dk0 = Random(k.size()), dv0 = Random(v.size());
  Vec dq = dq0, dk = dk0, dv = dv0;
  AttentionBackward(dq.data(), dk.data(), dv.data(), g.data(), out.data(), lse.data(), q.data(),
                    k.data(), v.data(), segment, s);
  Check("dq", q, Added(dq, dq0), loss);
  Check("dk", k, Added(dk, dk0), loss);
  Check("dv", v, Added(dv, dv0), loss);
}

Backend::AttentionShape Shape(int64_t b, int64_t t, int64_t hq, int64_t hkv, int64_t d,
                              int64_t window) {
  return {.batch = b,
          .seq_len = t,
          .q_heads = hq,
          .kv_heads = hkv,
          .head_dim = d,
          .window = window,
          .scale = 1.0f / std::sqrt(static_cast<float>(d))};
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGradCheck,
    ::testing::Values(AttentionCase{"multi_head", Shape(1, 4, 2, 2, 3, 0), {}},
                      AttentionCase{"grouped_query", Shape(2, 4, 4, 2, 3, 0), {}},
                      AttentionCase{"multi_query", Shape(1, 5, 3, 1, 2, 0), {}},
                      AttentionCase{"sliding_window", Shape(1, 6, 2, 1, 2, 2), {}},
                      AttentionCase{"segments", Shape(2, 4, 2, 1, 2, 0), {0, 0, 1, 1, 5, 6, 6, 6}},
                      AttentionCase{
                          "window_and_segments", Shape(1, 6, 2, 2, 2, 3), {1, 1, 1, 1, 2, 2}}),
    [](const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name; });

TEST_F(GradCheck, SwiGlu) {
  const int64_t count = 12;
  Vec gate = Random(count, 2.0), up = Random(count), g = Random(count);
  auto loss = [&] {
    Vec y(count);
    SwiGluForward(y.data(), gate.data(), up.data(), count);
    return Dot(g, y);
  };
  const Vec dgate0 = Random(count), dup0 = Random(count);
  Vec dgate = dgate0, dup = dup0;
  SwiGluBackward(dgate.data(), dup.data(), g.data(), gate.data(), up.data(), count);
  Check("dgate", gate, Added(dgate, dgate0), loss);
  Check("dup", up, Added(dup, dup0), loss);
}

TEST_F(GradCheck, CrossEntropyWithIgnoredTargetsAndChunks) {
  const int64_t n = 5, c = 3, vocab = 7;
  const std::vector<int32_t> targets = {2, -100, 6, 0, -1};  // two ignored
  Vec hidden = Random(n * c), w = Random(vocab * c);
  const double grad_scale = 1.0 / 3;  // the mean over the three counted positions
  // L = grad_scale * sum of losses; the op's backward is dL/d(hidden, w) for exactly this L.
  auto loss = [&] {
    return grad_scale * CrossEntropy<double>(nullptr, nullptr, hidden.data(), w.data(),
                                             targets.data(), n, c, vocab, grad_scale, 2);
  };
  for (int64_t chunk : {1, 2, 5}) {
    const Vec dh0 = Random(n * c), dw0 = Random(vocab * c);
    Vec dh = dh0, dw = dw0;
    CrossEntropy<double>(dh.data(), dw.data(), hidden.data(), w.data(), targets.data(), n, c, vocab,
                         grad_scale, chunk);
    Check("dhidden chunk " + std::to_string(chunk), hidden, Added(dh, dh0), loss);
    Check("dweight chunk " + std::to_string(chunk), w, Added(dw, dw0), loss);
    // Ignored rows get no gradient at all.
    for (int64_t p = 0; p < c; ++p) {
      EXPECT_EQ(dh[1 * c + p], dh0[1 * c + p]);
      EXPECT_EQ(dh[4 * c + p], dh0[4 * c + p]);
    }
  }
}

class LoraGradCheck : public GradCheck, public ::testing::WithParamInterface<float> {};

TEST_P(LoraGradCheck, InputsAndAdapters) {
  const int64_t n = 3, in = 5, out = 4, rank = 2;
  const double scale = 2.0;  // lora_alpha / r = 4 / 2
  const Dropout dropout{.probability = GetParam(), .seed = 77};
  Vec x = Random(n * in), a = Random(rank * in), b = Random(out * rank), g = Random(n * out);
  // The dropout mask is a function of (seed, index) only, so L is a smooth function of x, a, b.
  auto loss = [&] {
    Vec y(n * out, 0.0), xa(n * rank);
    LoraForward(y.data(), xa.data(), x.data(), a.data(), b.data(), n, in, out, rank, scale,
                dropout);
    return Dot(g, y);
  };
  Vec y(n * out, 0.0), xa(n * rank);
  LoraForward(y.data(), xa.data(), x.data(), a.data(), b.data(), n, in, out, rank, scale, dropout);
  const Vec dx0 = Random(x.size()), da0 = Random(a.size()), db0 = Random(b.size());
  Vec dx = dx0, da = da0, db = db0;
  LoraBackward(dx.data(), da.data(), db.data(), g.data(), x.data(), xa.data(), a.data(), b.data(),
               n, in, out, rank, scale, dropout);
  Check("dx", x, Added(dx, dx0), loss);
  Check("da", a, Added(da, da0), loss);
  Check("db", b, Added(db, db0), loss);
  if (dropout.probability > 0) {
    // Some inputs were dropped: their gradient is exactly zero.
    int dropped = 0;
    for (int64_t e = 0; e < n * in; ++e) {
      if (!DropoutKeep(dropout.seed, static_cast<uint64_t>(e), dropout.probability)) {
        ++dropped;
        EXPECT_EQ(dx[e], dx0[e]) << e;
      }
    }
    EXPECT_GT(dropped, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Dropout, LoraGradCheck, ::testing::Values(0.0f, 0.3f),
                         [](const ::testing::TestParamInfo<float>& info) {
                           return info.param == 0 ? std::string("none") : std::string("p03");
                         });

}  // namespace
}  // namespace sovai::kernels::reference
