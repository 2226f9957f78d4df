// The reference ops: every forward and backward op of backend.h as plain loops, templated over the
// scalar type T so that the same code runs in f32 (the reference backend) and in double (the
// gradient checks, where finite differences need the extra precision). Each loop is written to
// read like its formula; nothing here is fast.
//
// Legend: N token positions (B*T), B batch, T sequence length, C channels, V vocabulary,
// Hq / Hkv query / key-value heads, D head size, I / O a linear layer's input / output features,
// R LoRA rank. Shapes are row-major, as in backend.h.
//
// Precision: every sum is accumulated in double whatever T is, and rounded to T once when stored;
// element-wise math (exp, silu, cos) runs in T. Weights arrive dense (the backend dequantizes
// bf16 and NF4 first).
//
// Contracts (shapes, indices) are checked with SOVAI_CHECK: this is the test oracle, so a caller's
// mistake stops it loudly instead of reading out of bounds.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/check.h"
#include "kernels/backend.h"

namespace sovai::kernels::reference {

// --- dense algebra ------------------------------------------------------------------------------

// c[M, N] = alpha * op(a) @ op(b) + beta * c; op(a) = a[M, K] or a[K, M]^T, op(b) = b[K, N] or
// b[N, K]^T. beta == 0 does not read c.
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          const T* b, T beta, T* c) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const T a_ip = trans_a ? a[p * m + i] : a[i * k + p];
        const T b_pj = trans_b ? b[j * k + p] : b[p * n + j];
        sum += static_cast<double>(a_ip) * static_cast<double>(b_pj);
      }
      const double scaled = static_cast<double>(alpha) * sum;
      c[i * n + j] = static_cast<T>(beta == 0 ? scaled : scaled + beta * c[i * n + j]);
    }
  }
}

// out[N, O] = x[N, I] @ w[O, I]^T + bias[O] (bias may be null).
template <typename T>
void LinearForward(T* out, const T* x, const T* w, const T* bias, int64_t n, int64_t in,
                   int64_t out_features) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < out_features; ++o) {
      double sum = bias ? static_cast<double>(bias[o]) : 0.0;
      for (int64_t i = 0; i < in; ++i) {
        sum += static_cast<double>(x[r * in + i]) * static_cast<double>(w[o * in + i]);
      }
      out[r * out_features + o] = static_cast<T>(sum);
    }
  }
}

// dx[N, I] += dout[N, O] @ w[O, I].
template <typename T>
void LinearBackwardInput(T* dx, const T* dout, const T* w, int64_t n, int64_t in,
                         int64_t out_features) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < in; ++i) {
      double sum = 0;
      for (int64_t o = 0; o < out_features; ++o) {
        sum += static_cast<double>(dout[r * out_features + o]) * static_cast<double>(w[o * in + i]);
      }
      dx[r * in + i] += static_cast<T>(sum);
    }
  }
}

// dbias[O] += sum_n dout[n, O].
template <typename T>
void LinearBackwardBias(T* dbias, const T* dout, int64_t n, int64_t out_features) {
  for (int64_t o = 0; o < out_features; ++o) {
    double sum = 0;
    for (int64_t r = 0; r < n; ++r) sum += static_cast<double>(dout[r * out_features + o]);
    dbias[o] += static_cast<T>(sum);
  }
}

// --- embedding ----------------------------------------------------------------------------------

// out[N, C] = table[ids[n], :] with table[V, C].
template <typename T>
void EmbeddingForward(T* out, const int32_t* ids, const T* table, int64_t n, int64_t vocab,
                      int64_t c) {
  for (int64_t r = 0; r < n; ++r) {
    SOVAI_CHECK(ids[r] >= 0 && ids[r] < vocab) << "token id " << ids[r] << " at " << r;
    std::copy(table + ids[r] * c, table + (ids[r] + 1) * c, out + r * c);
  }
}

// dtable[V, C] += dout[n, :] for each n at row ids[n] (repeated ids sum).
template <typename T>
void EmbeddingBackward(T* dtable, const T* dout, const int32_t* ids, int64_t n, int64_t vocab,
                       int64_t c) {
  for (int64_t r = 0; r < n; ++r) {
    SOVAI_CHECK(ids[r] >= 0 && ids[r] < vocab) << "token id " << ids[r] << " at " << r;
    for (int64_t j = 0; j < c; ++j) dtable[ids[r] * c + j] += dout[r * c + j];
  }
}

// --- normalization ------------------------------------------------------------------------------

// out[N, C] = x * rstd * weight[C], rstd[N] = 1 / sqrt(mean_c(x^2) + eps).
template <typename T>
void RmsNormForward(T* out, T* rstd, const T* x, const T* weight, int64_t n, int64_t c, T eps) {
  for (int64_t r = 0; r < n; ++r) {
    const T* row = x + r * c;
    double sum_sq = 0;
    for (int64_t j = 0; j < c; ++j) sum_sq += static_cast<double>(row[j]) * row[j];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(c) + eps);
    rstd[r] = static_cast<T>(inv_rms);
    for (int64_t j = 0; j < c; ++j) {
      out[r * c + j] = static_cast<T>(static_cast<double>(row[j]) * inv_rms * weight[j]);
    }
  }
}

// dx[N, C] += rstd * weight * dout - x * rstd^3 / C * sum_c(dout * weight * x);
// dweight[C] += sum_n(dout * x * rstd) when dweight is not null.
template <typename T>
void RmsNormBackward(T* dx, T* dweight, const T* dout, const T* x, const T* weight, const T* rstd,
                     int64_t n, int64_t c) {
  for (int64_t r = 0; r < n; ++r) {
    const double rs = rstd[r];
    double dot = 0;  // sum_c dout * weight * x
    for (int64_t j = 0; j < c; ++j) {
      dot += static_cast<double>(dout[r * c + j]) * weight[j] * x[r * c + j];
    }
    for (int64_t j = 0; j < c; ++j) {
      const double grad = rs * weight[j] * dout[r * c + j] -
                          x[r * c + j] * rs * rs * rs / static_cast<double>(c) * dot;
      dx[r * c + j] += static_cast<T>(grad);
    }
  }
  if (dweight == nullptr) return;
  for (int64_t j = 0; j < c; ++j) {
    double sum = 0;
    for (int64_t r = 0; r < n; ++r) {
      sum += static_cast<double>(dout[r * c + j]) * x[r * c + j] * rstd[r];
    }
    dweight[j] += static_cast<T>(sum);
  }
}

// --- rotary position embedding ------------------------------------------------------------------

// out[N, H, D] = rope(x) in the rotate-half layout; the angle is positions[n] * inv_freq[i]
// computed in T (f32 for the backend, as Hugging Face does). out may equal x.
template <typename T>
void RopeForward(T* out, const T* x, const int32_t* positions, const float* inv_freq, int64_t n,
                 int64_t heads, int64_t head_dim) {
  SOVAI_CHECK(head_dim % 2 == 0) << head_dim;
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (r * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const T angle = static_cast<T>(positions[r]) * static_cast<T>(inv_freq[i]);
        const T cos = std::cos(angle);
        const T sin = std::sin(angle);
        const T x1 = x[base + i];
        const T x2 = x[base + half + i];
        out[base + i] = x1 * cos - x2 * sin;
        out[base + half + i] = x2 * cos + x1 * sin;
      }
    }
  }
}

// dx += rope^-1(dout): the transpose of the rotation, i.e. the rotation by -angle.
template <typename T>
void RopeBackward(T* dx, const T* dout, const int32_t* positions, const float* inv_freq, int64_t n,
                  int64_t heads, int64_t head_dim) {
  SOVAI_CHECK(head_dim % 2 == 0) << head_dim;
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (r * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const T angle = static_cast<T>(positions[r]) * static_cast<T>(inv_freq[i]);
        const T cos = std::cos(angle);
        const T sin = std::sin(angle);
        const T d1 = dout[base + i];
        const T d2 = dout[base + half + i];
        dx[base + i] += d1 * cos + d2 * sin;
        dx[base + half + i] += d2 * cos - d1 * sin;
      }
    }
  }
}

// --- attention ----------------------------------------------------------------------------------

using AttentionShape = Backend::AttentionShape;

inline void CheckAttentionShape(const AttentionShape& s) {
  SOVAI_CHECK(s.batch >= 0 && s.seq_len >= 0 && s.head_dim > 0 && s.kv_heads > 0 && s.q_heads > 0 &&
              s.q_heads % s.kv_heads == 0)
      << "attention shape B=" << s.batch << " T=" << s.seq_len << " Hq=" << s.q_heads
      << " Hkv=" << s.kv_heads << " D=" << s.head_dim;
}

// Whether position i of sequence b may attend to position j (causal, same segment, in window).
inline bool AttentionAllowed(const AttentionShape& s, const int32_t* segment, int64_t b, int64_t i,
                             int64_t j) {
  if (j > i) return false;
  if (s.window > 0 && i - j >= s.window) return false;
  if (segment != nullptr && segment[b * s.seq_len + j] != segment[b * s.seq_len + i]) return false;
  return true;
}

// Index of element d of head h at position t of sequence b in a [N, heads, D] array.
inline int64_t HeadIndex(const AttentionShape& s, int64_t heads, int64_t b, int64_t t, int64_t h,
                         int64_t d) {
  return ((b * s.seq_len + t) * heads + h) * s.head_dim + d;
}

// out[N, Hq, D] = softmax(scale * q k^T, masked) v per head; lse[B, Hq, T] the row log-sum-exps.
template <typename T>
void AttentionForward(T* out, T* lse, const T* q, const T* k, const T* v, const int32_t* segment,
                      const AttentionShape& s) {
  CheckAttentionShape(s);
  const int64_t group = s.q_heads / s.kv_heads;
  std::vector<double> scores(static_cast<size_t>(s.seq_len));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t g = h / group;  // the key/value head this query head reads
      for (int64_t i = 0; i < s.seq_len; ++i) {
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          if (!AttentionAllowed(s, segment, b, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < s.head_dim; ++d) {
            dot += static_cast<double>(q[HeadIndex(s, s.q_heads, b, i, h, d)]) *
                   k[HeadIndex(s, s.kv_heads, b, j, g, d)];
          }
          scores[j] = s.scale * dot;
          max_score = std::max(max_score, scores[j]);
        }
        double sum_exp = 0;
        for (int64_t j = 0; j <= i; ++j) {
          if (AttentionAllowed(s, segment, b, i, j)) sum_exp += std::exp(scores[j] - max_score);
        }
        const double row_lse = max_score + std::log(sum_exp);
        lse[(b * s.q_heads + h) * s.seq_len + i] = static_cast<T>(row_lse);
        for (int64_t d = 0; d < s.head_dim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) {
            if (!AttentionAllowed(s, segment, b, i, j)) continue;
            acc += std::exp(scores[j] - row_lse) * v[HeadIndex(s, s.kv_heads, b, j, g, d)];
          }
          out[HeadIndex(s, s.q_heads, b, i, h, d)] = static_cast<T>(acc);
        }
      }
    }
  }
}

// --- paged KV cache (inference) ------------------------------------------------------------------

// cache[slots[n], :] = new[n, :] for the keys and the values; `row` = Hkv * D floats per slot.
template <typename T>
void KvCacheWrite(T* k_cache, T* v_cache, const T* k, const T* v, const int32_t* slots, int64_t n,
                  int64_t row) {
  for (int64_t t = 0; t < n; ++t) {
    SOVAI_CHECK(slots[t] >= 0) << "slot " << slots[t];
    for (int64_t e = 0; e < row; ++e) {
      k_cache[slots[t] * row + e] = k[t * row + e];
      v_cache[slots[t] * row + e] = v[t * row + e];
    }
  }
}

// out[N, Hq, D]: each token attends, per head, to its sequence's cached positions 0..position
// (inside the window), read through the sequence's block table.
template <typename T>
void PagedAttention(T* out, const T* q, const T* k_cache, const T* v_cache, const int32_t* seq_of,
                    const int32_t* positions, const int32_t* block_tables, int64_t n,
                    const Backend::PagedAttentionShape& s) {
  SOVAI_CHECK(s.head_dim > 0 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 && s.block_size > 0 &&
              s.max_blocks > 0)
      << "paged attention shape Hq=" << s.q_heads << " Hkv=" << s.kv_heads << " D=" << s.head_dim
      << " block=" << s.block_size;
  const int64_t group = s.q_heads / s.kv_heads;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = positions[t];
    SOVAI_CHECK(pos >= 0 && pos < s.max_blocks * s.block_size) << "position " << pos;
    const int32_t* table = block_tables + static_cast<int64_t>(seq_of[t]) * s.max_blocks;
    const int64_t first = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
    std::vector<double> scores(static_cast<size_t>(pos + 1));
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t g = h / group;
      const T* qh = q + (t * s.q_heads + h) * s.head_dim;
      double max_score = -std::numeric_limits<double>::infinity();
      for (int64_t j = first; j <= pos; ++j) {
        const int64_t slot = table[j / s.block_size] * s.block_size + j % s.block_size;
        const T* kj = k_cache + (slot * s.kv_heads + g) * s.head_dim;
        double dot = 0;
        for (int64_t d = 0; d < s.head_dim; ++d) dot += static_cast<double>(qh[d]) * kj[d];
        scores[j] = s.scale * dot;
        max_score = std::max(max_score, scores[j]);
      }
      double sum_exp = 0;
      for (int64_t j = first; j <= pos; ++j) sum_exp += std::exp(scores[j] - max_score);
      for (int64_t d = 0; d < s.head_dim; ++d) {
        double acc = 0;
        for (int64_t j = first; j <= pos; ++j) {
          const int64_t slot = table[j / s.block_size] * s.block_size + j % s.block_size;
          acc += std::exp(scores[j] - max_score) / sum_exp *
                 v_cache[(slot * s.kv_heads + g) * s.head_dim + d];
        }
        out[(t * s.q_heads + h) * s.head_dim + d] = static_cast<T>(acc);
      }
    }
  }
}

// With p_ij = exp(scale * q_i.k_j - lse_i) recomputed from the saved lse and
// delta_i = dout_i . out_i:
//   dv_j += sum_i p_ij dout_i,   ds_ij = p_ij (dout_i . v_j - delta_i),
//   dq_i += scale * sum_j ds_ij k_j,   dk_j += scale * sum_i ds_ij q_i
// (dk and dv summed over the query heads of the group).
template <typename T>
void AttentionBackward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q,
                       const T* k, const T* v, const int32_t* segment, const AttentionShape& s) {
  CheckAttentionShape(s);
  const int64_t group = s.q_heads / s.kv_heads;
  const int64_t kv_size = s.batch * s.seq_len * s.kv_heads * s.head_dim;
  // dk and dv receive contributions from every later position and every head of the group:
  // summed in double here, added to the caller's buffers once at the end.
  std::vector<double> dk_sum(static_cast<size_t>(kv_size), 0.0);
  std::vector<double> dv_sum(static_cast<size_t>(kv_size), 0.0);
  std::vector<double> ds(static_cast<size_t>(s.seq_len));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < s.seq_len; ++i) {
        const int64_t qi = HeadIndex(s, s.q_heads, b, i, h, 0);
        const double row_lse = lse[(b * s.q_heads + h) * s.seq_len + i];
        double delta = 0;
        for (int64_t d = 0; d < s.head_dim; ++d) {
          delta += static_cast<double>(dout[qi + d]) * out[qi + d];
        }
        for (int64_t j = 0; j <= i; ++j) {
          if (!AttentionAllowed(s, segment, b, i, j)) continue;
          const int64_t kj = HeadIndex(s, s.kv_heads, b, j, g, 0);
          double score = 0;
          double dp = 0;  // dout_i . v_j
          for (int64_t d = 0; d < s.head_dim; ++d) {
            score += static_cast<double>(q[qi + d]) * k[kj + d];
            dp += static_cast<double>(dout[qi + d]) * v[kj + d];
          }
          const double p = std::exp(s.scale * score - row_lse);
          ds[j] = p * (dp - delta);
          for (int64_t d = 0; d < s.head_dim; ++d) {
            dv_sum[kj + d] += p * dout[qi + d];
            dk_sum[kj + d] += s.scale * ds[j] * q[qi + d];
          }
        }
        for (int64_t d = 0; d < s.head_dim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) {
            if (!AttentionAllowed(s, segment, b, i, j)) continue;
            acc += ds[j] * k[HeadIndex(s, s.kv_heads, b, j, g, d)];
          }
          dq[qi + d] += static_cast<T>(s.scale * acc);
        }
      }
    }
  }
  for (int64_t e = 0; e < kv_size; ++e) {
    dk[e] += static_cast<T>(dk_sum[e]);
    dv[e] += static_cast<T>(dv_sum[e]);
  }
}

// --- feed-forward -------------------------------------------------------------------------------

template <typename T>
T Sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// out = silu(gate) * up, silu(g) = g * sigmoid(g).
template <typename T>
void SwiGluForward(T* out, const T* gate, const T* up, int64_t count) {
  for (int64_t e = 0; e < count; ++e) out[e] = gate[e] * Sigmoid(gate[e]) * up[e];
}

// dgate += dout * up * silu'(gate), silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)));
// dup += dout * silu(gate).
template <typename T>
void SwiGluBackward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t count) {
  for (int64_t e = 0; e < count; ++e) {
    const T sig = Sigmoid(gate[e]);
    dgate[e] += dout[e] * up[e] * sig * (T(1) + gate[e] * (T(1) - sig));
    dup[e] += dout[e] * gate[e] * sig;
  }
}

template <typename T>
void Add(T* out, const T* a, const T* b, int64_t count) {
  for (int64_t e = 0; e < count; ++e) out[e] = a[e] + b[e];
}

// --- loss ---------------------------------------------------------------------------------------

// Sum over counted rows of logsumexp(logits) - logits[target], logits = hidden[N, C] @ w[V, C]^T,
// chunk_rows rows at a time. With dhidden: dlogits = grad_scale * (softmax - onehot),
// dhidden += dlogits @ w, dweight += dlogits^T @ hidden (dweight may be null).
template <typename T>
double CrossEntropy(T* dhidden, T* dweight, const T* hidden, const T* w, const int32_t* targets,
                    int64_t n, int64_t c, int64_t vocab, T grad_scale, int64_t chunk_rows) {
  SOVAI_CHECK(chunk_rows >= 1) << chunk_rows;
  SOVAI_CHECK(vocab >= 1) << vocab;
  double loss_sum = 0;
  std::vector<double> logits(
      static_cast<size_t>(std::min(chunk_rows, std::max<int64_t>(n, 1)) * vocab));  // [rows, V]
  for (int64_t first = 0; first < n; first += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, n - first);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = first + r;
      const int32_t target = targets[row];
      SOVAI_CHECK(target < vocab) << "target " << target << " at " << row;
      double* z = logits.data() + r * vocab;
      if (target < 0) {  // ignored: no loss, zero gradient
        std::fill(z, z + vocab, 0.0);
        continue;
      }
      double max_logit = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < vocab; ++j) {
        double dot = 0;
        for (int64_t p = 0; p < c; ++p)
          dot += static_cast<double>(hidden[row * c + p]) * w[j * c + p];
        z[j] = dot;
        max_logit = std::max(max_logit, dot);
      }
      double sum_exp = 0;
      for (int64_t j = 0; j < vocab; ++j) sum_exp += std::exp(z[j] - max_logit);
      const double lse = max_logit + std::log(sum_exp);
      loss_sum += lse - z[target];
      // From here on z holds dlogits for the row.
      for (int64_t j = 0; j < vocab; ++j) {
        z[j] = grad_scale * (std::exp(z[j] - lse) - (j == target ? 1.0 : 0.0));
      }
    }
    if (dhidden == nullptr) continue;
    for (int64_t r = 0; r < rows; ++r) {
      const double* dz = logits.data() + r * vocab;
      for (int64_t p = 0; p < c; ++p) {
        double acc = 0;
        for (int64_t j = 0; j < vocab; ++j) acc += dz[j] * w[j * c + p];
        dhidden[(first + r) * c + p] += static_cast<T>(acc);
      }
    }
    if (dweight == nullptr) continue;
    for (int64_t j = 0; j < vocab; ++j) {
      for (int64_t p = 0; p < c; ++p) {
        double acc = 0;
        for (int64_t r = 0; r < rows; ++r)
          acc += logits[r * vocab + j] * hidden[(first + r) * c + p];
        dweight[j * c + p] += static_cast<T>(acc);
      }
    }
  }
  return loss_sum;
}

// --- LoRA ---------------------------------------------------------------------------------------

// What element `index` of x is multiplied by: 0 if dropped, else 1 / (1 - p) (1 without dropout).
template <typename T>
T DropoutFactor(const Dropout& dropout, int64_t index) {
  if (dropout.probability <= 0) return T(1);
  if (!DropoutKeep(dropout.seed, static_cast<uint64_t>(index), dropout.probability)) return T(0);
  return T(1) / (T(1) - static_cast<T>(dropout.probability));
}

// xa[N, R] = dropout(x)[N, I] @ a[R, I]^T; y[N, O] += scale * xa @ b[O, R]^T.
template <typename T>
void LoraForward(T* y, T* xa, const T* x, const T* a, const T* b, int64_t n, int64_t in,
                 int64_t out, int64_t rank, T scale, const Dropout& dropout) {
  SOVAI_CHECK(dropout.probability >= 0 && dropout.probability < 1) << dropout.probability;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t k = 0; k < rank; ++k) {
      double sum = 0;
      for (int64_t i = 0; i < in; ++i) {
        const T x_dropped = x[r * in + i] * DropoutFactor<T>(dropout, r * in + i);
        sum += static_cast<double>(x_dropped) * a[k * in + i];
      }
      xa[r * rank + k] = static_cast<T>(sum);
    }
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t k = 0; k < rank; ++k)
        sum += static_cast<double>(xa[r * rank + k]) * b[o * rank + k];
      y[r * out + o] += static_cast<T>(scale * sum);
    }
  }
}

// dxa[N, R] = scale * dy @ b; db += scale * dy^T @ xa; da += dxa^T @ dropout(x);
// dx += dropout'(dxa @ a) (dx may be null).
template <typename T>
void LoraBackward(T* dx, T* da, T* db, const T* dy, const T* x, const T* xa, const T* a, const T* b,
                  int64_t n, int64_t in, int64_t out, int64_t rank, T scale,
                  const Dropout& dropout) {
  SOVAI_CHECK(dropout.probability >= 0 && dropout.probability < 1) << dropout.probability;
  std::vector<double> dxa(static_cast<size_t>(n * rank));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t k = 0; k < rank; ++k) {
      double sum = 0;
      for (int64_t o = 0; o < out; ++o)
        sum += static_cast<double>(dy[r * out + o]) * b[o * rank + k];
      dxa[r * rank + k] = scale * sum;
    }
  }
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < rank; ++k) {
      double sum = 0;
      for (int64_t r = 0; r < n; ++r)
        sum += static_cast<double>(dy[r * out + o]) * xa[r * rank + k];
      db[o * rank + k] += static_cast<T>(scale * sum);
    }
  }
  for (int64_t k = 0; k < rank; ++k) {
    for (int64_t i = 0; i < in; ++i) {
      double sum = 0;
      for (int64_t r = 0; r < n; ++r) {
        const T x_dropped = x[r * in + i] * DropoutFactor<T>(dropout, r * in + i);
        sum += dxa[r * rank + k] * x_dropped;
      }
      da[k * in + i] += static_cast<T>(sum);
    }
  }
  if (dx == nullptr) return;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < in; ++i) {
      double sum = 0;
      for (int64_t k = 0; k < rank; ++k) sum += dxa[r * rank + k] * a[k * in + i];
      dx[r * in + i] += static_cast<T>(DropoutFactor<T>(dropout, r * in + i) * sum);
    }
  }
}

// --- optimizer ----------------------------------------------------------------------------------

// torch.optim.AdamW's step for one tensor (see backend.h); the scalars are computed in double.
template <typename T>
void AdamWStep(T* param, const T* grad, T* m, T* v, int64_t count, const Backend::AdamWParams& p) {
  SOVAI_CHECK(p.step >= 1) << p.step;
  const double lr = p.learning_rate;
  const double beta1 = p.beta1;
  const double beta2 = p.beta2;
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(p.step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(p.step));
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (int64_t e = 0; e < count; ++e) {
    param[e] = static_cast<T>(param[e] * (1 - lr * p.weight_decay));
    m[e] = static_cast<T>(beta1 * m[e] + (1 - beta1) * grad[e]);
    v[e] = static_cast<T>(beta2 * v[e] + (1 - beta2) * static_cast<double>(grad[e]) * grad[e]);
    const double denom = std::sqrt(static_cast<double>(v[e])) / bias_correction2_sqrt + p.eps;
    param[e] = static_cast<T>(param[e] - step_size * m[e] / denom);
  }
}

}  // namespace sovai::kernels::reference
