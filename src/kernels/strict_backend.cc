// NewStrictBackend (backend.h): a host-memory backend that forwards every op to another one after
// checking that each pointer it is given, with the extent the op reads or writes, lies inside one
// live buffer of its own. Device backends cannot read host memory; this is how a CPU-only test
// proves the model, the trainer and the engine never hand an op anything else.
//
// Extents follow backend.h's shape comments. Where an extent depends on data (the KV cache's
// slots and block tables), the index arrays are checked first and then read: they are this
// backend's host memory.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "base/check.h"
#include "kernels/backend.h"
#include "tensor/tensor.h"

namespace sovai::kernels {
namespace {

// Poison for fresh buffers: 0xFF bytes are a NaN as f32, -1 as int32 (an id every op refuses or
// a target that counts nothing), so whatever reads memory nobody wrote shows it.
constexpr uint8_t kPoison = 0xFF;

size_t Floats(int64_t count) { return static_cast<size_t>(count) * sizeof(float); }
size_t Ints(int64_t count) { return static_cast<size_t>(count) * sizeof(int32_t); }

class StrictBackend final : public Backend {
 public:
  explicit StrictBackend(std::unique_ptr<Backend> inner)
      : inner_(std::move(inner)), name_("strict:" + std::string(inner_->name())) {}

  std::string_view name() const override { return name_; }
  bool Supports(Op op) const override { return inner_->Supports(op); }

  // --- memory ---
  void Upload(void* dst, const void* host_src, size_t bytes) override {
    Check(dst, bytes, "Upload", "dst");
    if (bytes > 0) std::memcpy(dst, host_src, bytes);
  }
  void Download(void* host_dst, const void* src, size_t bytes) override {
    Check(src, bytes, "Download", "src");
    if (bytes > 0) std::memcpy(host_dst, src, bytes);
  }
  void Copy(void* dst, const void* src, size_t bytes) override {
    Check(dst, bytes, "Copy", "dst");
    Check(src, bytes, "Copy", "src");
    if (bytes == 0 || dst == src) return;
    const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
    SOVAI_CHECK(d + bytes <= s || s + bytes <= d) << name_ << " Copy: overlapping ranges";
    std::memcpy(dst, src, bytes);
  }
  void Fill(void* dst, uint8_t value, size_t bytes) override {
    Check(dst, bytes, "Fill", "dst");
    if (bytes > 0) std::memset(dst, value, bytes);
  }
  void Synchronize() override { inner_->Synchronize(); }
  tensor::DType activation_dtype() const override { return inner_->activation_dtype(); }

  // --- ops ---
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    Check(a, Floats(m * k), "Gemm", "a");
    Check(b, Floats(k * n), "Gemm", "b");
    Check(c, Floats(m * n), "Gemm", "c");
    inner_->Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  }
  void LinearForward(float* out, const float* x, const WeightRef& w, const float* bias,
                     int64_t n) override {
    Check(out, Floats(n * w.rows), "LinearForward", "out");
    Check(x, Floats(n * w.cols), "LinearForward", "x");
    CheckWeight(w, "LinearForward");
    if (bias != nullptr) Check(bias, Floats(w.rows), "LinearForward", "bias");
    inner_->LinearForward(out, x, w, bias, n);
  }
  void LinearBackwardInput(float* dx, const float* dout, const WeightRef& w, int64_t n) override {
    Check(dx, Floats(n * w.cols), "LinearBackwardInput", "dx");
    Check(dout, Floats(n * w.rows), "LinearBackwardInput", "dout");
    CheckWeight(w, "LinearBackwardInput");
    inner_->LinearBackwardInput(dx, dout, w, n);
  }
  void LinearBackwardBias(float* dbias, const float* dout, int64_t n, int64_t out) override {
    Check(dbias, Floats(out), "LinearBackwardBias", "dbias");
    Check(dout, Floats(n * out), "LinearBackwardBias", "dout");
    inner_->LinearBackwardBias(dbias, dout, n, out);
  }
  void EmbeddingForward(float* out, const int32_t* ids, const WeightRef& table,
                        int64_t n) override {
    Check(out, Floats(n * table.cols), "EmbeddingForward", "out");
    Check(ids, Ints(n), "EmbeddingForward", "ids");
    CheckWeight(table, "EmbeddingForward");
    inner_->EmbeddingForward(out, ids, table, n);
  }
  void EmbeddingBackward(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                         int64_t vocab, int64_t c) override {
    Check(dtable, Floats(vocab * c), "EmbeddingBackward", "dtable");
    Check(dout, Floats(n * c), "EmbeddingBackward", "dout");
    Check(ids, Ints(n), "EmbeddingBackward", "ids");
    inner_->EmbeddingBackward(dtable, dout, ids, n, vocab, c);
  }
  void RmsNormForward(float* out, float* rstd, const float* x, const float* weight, int64_t n,
                      int64_t c, float eps) override {
    Check(out, Floats(n * c), "RmsNormForward", "out");
    Check(rstd, Floats(n), "RmsNormForward", "rstd");
    Check(x, Floats(n * c), "RmsNormForward", "x");
    Check(weight, Floats(c), "RmsNormForward", "weight");
    inner_->RmsNormForward(out, rstd, x, weight, n, c, eps);
  }
  void RmsNormBackward(float* dx, float* dweight, const float* dout, const float* x,
                       const float* weight, const float* rstd, int64_t n, int64_t c) override {
    Check(dx, Floats(n * c), "RmsNormBackward", "dx");
    if (dweight != nullptr) Check(dweight, Floats(c), "RmsNormBackward", "dweight");
    Check(dout, Floats(n * c), "RmsNormBackward", "dout");
    Check(x, Floats(n * c), "RmsNormBackward", "x");
    Check(weight, Floats(c), "RmsNormBackward", "weight");
    Check(rstd, Floats(n), "RmsNormBackward", "rstd");
    inner_->RmsNormBackward(dx, dweight, dout, x, weight, rstd, n, c);
  }
  void RopeForward(float* out, const float* x, const int32_t* positions, const float* inv_freq,
                   int64_t n, int64_t heads, int64_t head_dim) override {
    CheckRope(out, x, positions, inv_freq, n, heads, head_dim, "RopeForward");
    inner_->RopeForward(out, x, positions, inv_freq, n, heads, head_dim);
  }
  void RopeBackward(float* dx, const float* dout, const int32_t* positions, const float* inv_freq,
                    int64_t n, int64_t heads, int64_t head_dim) override {
    CheckRope(dx, dout, positions, inv_freq, n, heads, head_dim, "RopeBackward");
    inner_->RopeBackward(dx, dout, positions, inv_freq, n, heads, head_dim);
  }
  void AttentionForward(float* out, float* lse, const float* q, const float* k, const float* v,
                        const int32_t* segment, const AttentionShape& s) override {
    const int64_t n = s.batch * s.seq_len;
    Check(out, Floats(n * s.q_heads * s.head_dim), "AttentionForward", "out");
    Check(lse, Floats(n * s.q_heads), "AttentionForward", "lse");
    CheckQkv(q, k, v, segment, s, "AttentionForward");
    inner_->AttentionForward(out, lse, q, k, v, segment, s);
  }
  void AttentionBackward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                         const float* lse, const float* q, const float* k, const float* v,
                         const int32_t* segment, const AttentionShape& s) override {
    const int64_t n = s.batch * s.seq_len;
    const size_t q_bytes = Floats(n * s.q_heads * s.head_dim);
    const size_t kv_bytes = Floats(n * s.kv_heads * s.head_dim);
    Check(dq, q_bytes, "AttentionBackward", "dq");
    Check(dk, kv_bytes, "AttentionBackward", "dk");
    Check(dv, kv_bytes, "AttentionBackward", "dv");
    Check(dout, q_bytes, "AttentionBackward", "dout");
    Check(out, q_bytes, "AttentionBackward", "out");
    Check(lse, Floats(n * s.q_heads), "AttentionBackward", "lse");
    CheckQkv(q, k, v, segment, s, "AttentionBackward");
    inner_->AttentionBackward(dq, dk, dv, dout, out, lse, q, k, v, segment, s);
  }
  void KvCacheWrite(float* k_cache, float* v_cache, const float* k, const float* v,
                    const int32_t* slots, int64_t n, int64_t kv_heads, int64_t head_dim) override {
    const int64_t slot_floats = kv_heads * head_dim;
    Check(k, Floats(n * slot_floats), "KvCacheWrite", "k");
    Check(v, Floats(n * slot_floats), "KvCacheWrite", "v");
    Check(slots, Ints(n), "KvCacheWrite", "slots");
    const int64_t cache_slots = n > 0 ? *std::max_element(slots, slots + n) + 1 : 0;
    Check(k_cache, Floats(cache_slots * slot_floats), "KvCacheWrite", "k_cache");
    Check(v_cache, Floats(cache_slots * slot_floats), "KvCacheWrite", "v_cache");
    inner_->KvCacheWrite(k_cache, v_cache, k, v, slots, n, kv_heads, head_dim);
  }
  void PagedAttention(float* out, const float* q, const float* k_cache, const float* v_cache,
                      const int32_t* seq_of, const int32_t* positions, const int32_t* block_tables,
                      int64_t n, const PagedAttentionShape& s) override {
    const size_t q_bytes = Floats(n * s.q_heads * s.head_dim);
    Check(out, q_bytes, "PagedAttention", "out");
    Check(q, q_bytes, "PagedAttention", "q");
    Check(seq_of, Ints(n), "PagedAttention", "seq_of");
    Check(positions, Ints(n), "PagedAttention", "positions");
    const int64_t seqs = n > 0 ? *std::max_element(seq_of, seq_of + n) + 1 : 0;
    Check(block_tables, Ints(seqs * s.max_blocks), "PagedAttention", "block_tables");
    const int64_t blocks =
        seqs > 0 ? *std::max_element(block_tables, block_tables + seqs * s.max_blocks) + 1 : 0;
    const size_t cache_bytes = Floats(blocks * s.block_size * s.kv_heads * s.head_dim);
    Check(k_cache, cache_bytes, "PagedAttention", "k_cache");
    Check(v_cache, cache_bytes, "PagedAttention", "v_cache");
    inner_->PagedAttention(out, q, k_cache, v_cache, seq_of, positions, block_tables, n, s);
  }
  void SwiGluForward(float* out, const float* gate, const float* up, int64_t count) override {
    Check(out, Floats(count), "SwiGluForward", "out");
    Check(gate, Floats(count), "SwiGluForward", "gate");
    Check(up, Floats(count), "SwiGluForward", "up");
    inner_->SwiGluForward(out, gate, up, count);
  }
  void SwiGluBackward(float* dgate, float* dup, const float* dout, const float* gate,
                      const float* up, int64_t count) override {
    Check(dgate, Floats(count), "SwiGluBackward", "dgate");
    Check(dup, Floats(count), "SwiGluBackward", "dup");
    Check(dout, Floats(count), "SwiGluBackward", "dout");
    Check(gate, Floats(count), "SwiGluBackward", "gate");
    Check(up, Floats(count), "SwiGluBackward", "up");
    inner_->SwiGluBackward(dgate, dup, dout, gate, up, count);
  }
  void Add(float* out, const float* a, const float* b, int64_t count) override {
    Check(out, Floats(count), "Add", "out");
    Check(a, Floats(count), "Add", "a");
    Check(b, Floats(count), "Add", "b");
    inner_->Add(out, a, b, count);
  }
  double CrossEntropy(float* dhidden, float* dweight, const float* hidden, const WeightRef& weight,
                      const int32_t* targets, int64_t n, float grad_scale,
                      int64_t chunk_rows) override {
    if (dhidden != nullptr) Check(dhidden, Floats(n * weight.cols), "CrossEntropy", "dhidden");
    if (dweight != nullptr) {
      Check(dweight, Floats(weight.rows * weight.cols), "CrossEntropy", "dweight");
    }
    Check(hidden, Floats(n * weight.cols), "CrossEntropy", "hidden");
    CheckWeight(weight, "CrossEntropy");
    Check(targets, Ints(n), "CrossEntropy", "targets");
    return inner_->CrossEntropy(dhidden, dweight, hidden, weight, targets, n, grad_scale,
                                chunk_rows);
  }
  void LoraForward(float* y, float* xa, const float* x, const float* a, const float* b, int64_t n,
                   int64_t in, int64_t out, int64_t rank, float scale,
                   const Dropout& dropout) override {
    Check(y, Floats(n * out), "LoraForward", "y");
    Check(xa, Floats(n * rank), "LoraForward", "xa");
    Check(x, Floats(n * in), "LoraForward", "x");
    Check(a, Floats(rank * in), "LoraForward", "a");
    Check(b, Floats(out * rank), "LoraForward", "b");
    inner_->LoraForward(y, xa, x, a, b, n, in, out, rank, scale, dropout);
  }
  void LoraBackward(float* dx, float* da, float* db, const float* dy, const float* x,
                    const float* xa, const float* a, const float* b, int64_t n, int64_t in,
                    int64_t out, int64_t rank, float scale, const Dropout& dropout) override {
    if (dx != nullptr) Check(dx, Floats(n * in), "LoraBackward", "dx");
    Check(da, Floats(rank * in), "LoraBackward", "da");
    Check(db, Floats(out * rank), "LoraBackward", "db");
    Check(dy, Floats(n * out), "LoraBackward", "dy");
    Check(x, Floats(n * in), "LoraBackward", "x");
    Check(xa, Floats(n * rank), "LoraBackward", "xa");
    Check(a, Floats(rank * in), "LoraBackward", "a");
    Check(b, Floats(out * rank), "LoraBackward", "b");
    inner_->LoraBackward(dx, da, db, dy, x, xa, a, b, n, in, out, rank, scale, dropout);
  }
  void Nf4Dequantize(float* out, const Nf4Weight& w, int64_t numel) override {
    Check(out, Floats(numel), "Nf4Dequantize", "out");
    CheckNf4(w, numel, "Nf4Dequantize");
    inner_->Nf4Dequantize(out, w, numel);
  }
  void AdamWStep(float* param, const float* grad, float* m, float* v, int64_t count,
                 const AdamWParams& params) override {
    Check(param, Floats(count), "AdamWStep", "param");
    Check(grad, Floats(count), "AdamWStep", "grad");
    Check(m, Floats(count), "AdamWStep", "m");
    Check(v, Floats(count), "AdamWStep", "v");
    inner_->AdamWStep(param, grad, m, v, count, params);
  }
  double SumOfSquares(const float* grad, int64_t count) override {
    Check(grad, Floats(count), "SumOfSquares", "grad");
    return inner_->SumOfSquares(grad, count);
  }
  void Scale(float* x, float factor, int64_t count) override {
    Check(x, Floats(count), "Scale", "x");
    inner_->Scale(x, factor, count);
  }

 protected:
  void* AllocateBytes(size_t bytes) override {
    void* data = ::operator new[](bytes, std::align_val_t{kBufferAlignment}, std::nothrow);
    if (data == nullptr) return nullptr;
    std::memset(data, kPoison, bytes);
    std::lock_guard lock(mu_);
    live_[reinterpret_cast<uintptr_t>(data)] = bytes;
    return data;
  }
  void FreeBytes(void* data, size_t bytes) override {
    {
      std::lock_guard lock(mu_);
      auto it = live_.find(reinterpret_cast<uintptr_t>(data));
      SOVAI_CHECK(it != live_.end() && it->second == bytes)
          << name_ << ": freeing an unknown buffer";
      live_.erase(it);
    }
    // Poisoned again, so that a pointer kept past the free reads NaNs if the memory is not reused.
    std::memset(data, kPoison, bytes);
    ::operator delete[](data, std::align_val_t{kBufferAlignment});
  }

 private:
  // [p, p + bytes) must lie inside one live buffer; nothing to check for an empty extent.
  void Check(const void* p, size_t bytes, const char* op, const char* arg) const {
    if (bytes == 0) return;
    const auto begin = reinterpret_cast<uintptr_t>(p);
    std::lock_guard lock(mu_);
    auto it = live_.upper_bound(begin);
    const bool inside = it != live_.begin() &&
                        begin - std::prev(it)->first < std::prev(it)->second &&
                        bytes <= std::prev(it)->second - (begin - std::prev(it)->first);
    SOVAI_CHECK(inside) << name_ << " " << op << ": " << arg << " (" << bytes << " bytes at " << p
                        << ") is not inside a live buffer of this backend";
  }
  void CheckNf4(const Nf4Weight& w, int64_t numel, const char* op) const {
    const int64_t blocks = numel / Nf4Weight::kBlockSize;
    const int64_t scales = (blocks + Nf4Weight::kAbsmaxBlockSize - 1) / Nf4Weight::kAbsmaxBlockSize;
    Check(w.codes, static_cast<size_t>(numel / 2), op, "nf4.codes");
    Check(w.absmax_codes, static_cast<size_t>(blocks), op, "nf4.absmax_codes");
    Check(w.absmax_scales, Floats(scales), op, "nf4.absmax_scales");
    Check(w.absmax_map, Floats(Nf4Weight::kAbsmaxMapSize), op, "nf4.absmax_map");
  }
  void CheckWeight(const WeightRef& w, const char* op) const {
    const int64_t numel = w.rows * w.cols;
    switch (w.format) {
      case WeightRef::Format::kF32:
        Check(w.data, Floats(numel), op, "weight");
        return;
      case WeightRef::Format::kBF16:
        Check(w.data, static_cast<size_t>(numel) * sizeof(uint16_t), op, "weight");
        return;
      case WeightRef::Format::kQ8_0:
        Check(w.data,
              static_cast<size_t>(numel / tensor::kQ8_0BlockValues * tensor::kQ8_0BlockBytes), op,
              "weight");
        return;
      case WeightRef::Format::kNF4:
        CheckNf4(w.nf4, numel, op);
        return;
    }
  }
  void CheckRope(const float* out, const float* x, const int32_t* positions, const float* inv_freq,
                 int64_t n, int64_t heads, int64_t head_dim, const char* op) const {
    Check(out, Floats(n * heads * head_dim), op, "out");
    Check(x, Floats(n * heads * head_dim), op, "x");
    Check(positions, Ints(n), op, "positions");
    Check(inv_freq, Floats(head_dim / 2), op, "inv_freq");
  }
  void CheckQkv(const float* q, const float* k, const float* v, const int32_t* segment,
                const AttentionShape& s, const char* op) const {
    const int64_t n = s.batch * s.seq_len;
    Check(q, Floats(n * s.q_heads * s.head_dim), op, "q");
    Check(k, Floats(n * s.kv_heads * s.head_dim), op, "k");
    Check(v, Floats(n * s.kv_heads * s.head_dim), op, "v");
    if (segment != nullptr) Check(segment, Ints(n), op, "segment");
  }

  std::unique_ptr<Backend> inner_;
  std::string name_;
  mutable std::mutex mu_;             // guards live_
  std::map<uintptr_t, size_t> live_;  // base address -> bytes of every live buffer
};

}  // namespace

std::unique_ptr<Backend> NewStrictBackend(std::unique_ptr<Backend> inner) {
  SOVAI_CHECK(inner != nullptr);
  return std::make_unique<StrictBackend>(std::move(inner));
}

}  // namespace sovai::kernels
