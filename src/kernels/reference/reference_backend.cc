// The reference backend: backend.h's interface over the f32 instantiation of reference/ops.h.
// Weights stored bf16 or NF4 are expanded to a dense f32 copy first (clear, not fast).
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/backend.h"
#include "kernels/nf4.h"
#include "kernels/q8_0.h"
#include "kernels/reference/ops.h"
#include "tensor/dtype.h"

namespace sovai::kernels {
namespace {

// w[rows, cols] as dense f32: a view of an f32 weight, or a converted copy in `storage`.
const float* DenseWeight(const WeightRef& w, std::vector<float>& storage) {
  SOVAI_CHECK(w.rows >= 0 && w.cols >= 0) << w.rows << " x " << w.cols;
  const int64_t numel = w.rows * w.cols;
  switch (w.format) {
    case WeightRef::Format::kF32:
      SOVAI_CHECK(w.data != nullptr || numel == 0);
      return static_cast<const float*>(w.data);
    case WeightRef::Format::kBF16: {
      SOVAI_CHECK(w.data != nullptr || numel == 0);
      const auto* bits = static_cast<const uint16_t*>(w.data);
      storage.resize(static_cast<size_t>(numel));
      for (int64_t e = 0; e < numel; ++e) storage[e] = tensor::BF16ToFloat(bits[e]);
      return storage.data();
    }
    case WeightRef::Format::kNF4:
      SOVAI_CHECK(numel % Nf4Weight::kBlockSize == 0) << "NF4 weight of " << numel << " elements";
      SOVAI_CHECK(w.nf4.codes && w.nf4.absmax_codes && w.nf4.absmax_scales && w.nf4.absmax_map);
      storage.resize(static_cast<size_t>(numel));
      DequantizeNf4(w.nf4, numel, storage.data());
      return storage.data();
    case WeightRef::Format::kQ8_0: {
      SOVAI_CHECK(w.cols % static_cast<int64_t>(kQ8_0BlockValues) == 0) << "Q8_0 row of " << w.cols;
      SOVAI_CHECK(w.data != nullptr || numel == 0);
      storage.resize(static_cast<size_t>(numel));
      const size_t row_bytes = Q8_0Bytes(static_cast<size_t>(w.cols));
      const auto* bytes = static_cast<const uint8_t*>(w.data);
      for (int64_t r = 0; r < w.rows; ++r) {
        DequantizeRowQ8_0({bytes + r * row_bytes, row_bytes},
                          {storage.data() + r * w.cols, static_cast<size_t>(w.cols)});
      }
      return storage.data();
    }
  }
  SOVAI_CHECK(false) << "unknown weight format " << static_cast<int>(w.format);
  return nullptr;
}

class ReferenceBackend final : public HostMemoryBackend {
 public:
  std::string_view name() const override { return "reference"; }
  bool Supports(Op op) const override { return op != Op::kCount; }

  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    reference::Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  }

  void LinearForward(float* out, const float* x, const WeightRef& w, const float* bias,
                     int64_t n) override {
    std::vector<float> storage;
    const float* dense = DenseWeight(w, storage);
    reference::LinearForward(out, x, dense, bias, n, w.cols, w.rows);
  }
  void LinearBackwardInput(float* dx, const float* dout, const WeightRef& w, int64_t n) override {
    std::vector<float> storage;
    const float* dense = DenseWeight(w, storage);
    reference::LinearBackwardInput(dx, dout, dense, n, w.cols, w.rows);
  }
  void LinearBackwardBias(float* dbias, const float* dout, int64_t n, int64_t out) override {
    reference::LinearBackwardBias(dbias, dout, n, out);
  }

  void EmbeddingForward(float* out, const int32_t* ids, const WeightRef& table,
                        int64_t n) override {
    SOVAI_CHECK(table.format != WeightRef::Format::kNF4)
        << "an embedding table is f32, bf16 or Q8_0";
    std::vector<float> storage;
    const float* dense = DenseWeight(table, storage);
    reference::EmbeddingForward(out, ids, dense, n, table.rows, table.cols);
  }
  void EmbeddingBackward(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                         int64_t vocab, int64_t c) override {
    reference::EmbeddingBackward(dtable, dout, ids, n, vocab, c);
  }

  void RmsNormForward(float* out, float* rstd, const float* x, const float* weight, int64_t n,
                      int64_t c, float eps) override {
    reference::RmsNormForward(out, rstd, x, weight, n, c, eps);
  }
  void RmsNormBackward(float* dx, float* dweight, const float* dout, const float* x,
                       const float* weight, const float* rstd, int64_t n, int64_t c) override {
    reference::RmsNormBackward(dx, dweight, dout, x, weight, rstd, n, c);
  }

  void RopeForward(float* out, const float* x, const int32_t* positions, const float* inv_freq,
                   int64_t n, int64_t heads, int64_t head_dim) override {
    reference::RopeForward(out, x, positions, inv_freq, n, heads, head_dim);
  }
  void RopeBackward(float* dx, const float* dout, const int32_t* positions, const float* inv_freq,
                    int64_t n, int64_t heads, int64_t head_dim) override {
    reference::RopeBackward(dx, dout, positions, inv_freq, n, heads, head_dim);
  }

  void AttentionForward(float* out, float* lse, const float* q, const float* k, const float* v,
                        const int32_t* segment, const AttentionShape& shape) override {
    reference::AttentionForward(out, lse, q, k, v, segment, shape);
  }
  void AttentionBackward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                         const float* lse, const float* q, const float* k, const float* v,
                         const int32_t* segment, const AttentionShape& shape) override {
    reference::AttentionBackward(dq, dk, dv, dout, out, lse, q, k, v, segment, shape);
  }

  void KvCacheWrite(float* k_cache, float* v_cache, const float* k, const float* v,
                    const int32_t* slots, int64_t n, int64_t kv_heads, int64_t head_dim) override {
    reference::KvCacheWrite(k_cache, v_cache, k, v, slots, n, kv_heads * head_dim);
  }
  void PagedAttention(float* out, const float* q, const float* k_cache, const float* v_cache,
                      const int32_t* seq_of, const int32_t* positions, const int32_t* block_tables,
                      int64_t n, const PagedAttentionShape& shape) override {
    reference::PagedAttention(out, q, k_cache, v_cache, seq_of, positions, block_tables, n, shape);
  }

  void SwiGluForward(float* out, const float* gate, const float* up, int64_t count) override {
    reference::SwiGluForward(out, gate, up, count);
  }
  void SwiGluBackward(float* dgate, float* dup, const float* dout, const float* gate,
                      const float* up, int64_t count) override {
    reference::SwiGluBackward(dgate, dup, dout, gate, up, count);
  }
  void Add(float* out, const float* a, const float* b, int64_t count) override {
    reference::Add(out, a, b, count);
  }

  double CrossEntropy(float* dhidden, float* dweight, const float* hidden, const WeightRef& weight,
                      const int32_t* targets, int64_t n, float grad_scale,
                      int64_t chunk_rows) override {
    SOVAI_CHECK(dweight == nullptr || weight.format == WeightRef::Format::kF32)
        << "a trainable head (dweight) must be stored f32";
    std::vector<float> storage;
    const float* dense = DenseWeight(weight, storage);
    return reference::CrossEntropy(dhidden, dweight, hidden, dense, targets, n, weight.cols,
                                   weight.rows, grad_scale, chunk_rows);
  }

  void LoraForward(float* y, float* xa, const float* x, const float* a, const float* b, int64_t n,
                   int64_t in, int64_t out, int64_t rank, float scale,
                   const Dropout& dropout) override {
    reference::LoraForward(y, xa, x, a, b, n, in, out, rank, scale, dropout);
  }
  void LoraBackward(float* dx, float* da, float* db, const float* dy, const float* x,
                    const float* xa, const float* a, const float* b, int64_t n, int64_t in,
                    int64_t out, int64_t rank, float scale, const Dropout& dropout) override {
    reference::LoraBackward(dx, da, db, dy, x, xa, a, b, n, in, out, rank, scale, dropout);
  }

  void Nf4Dequantize(float* out, const Nf4Weight& w, int64_t numel) override {
    DequantizeNf4(w, numel, out);
  }

  void AdamWStep(float* param, const float* grad, float* m, float* v, int64_t count,
                 const AdamWParams& params) override {
    reference::AdamWStep(param, grad, m, v, count, params);
  }
  double SumOfSquares(const float* grad, int64_t count) override {
    double sum = 0;
    for (int64_t e = 0; e < count; ++e) sum += static_cast<double>(grad[e]) * grad[e];
    return sum;
  }
  void Scale(float* x, float factor, int64_t count) override {
    for (int64_t e = 0; e < count; ++e) x[e] *= factor;
  }
};

}  // namespace

std::unique_ptr<Backend> NewReferenceBackend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace sovai::kernels
