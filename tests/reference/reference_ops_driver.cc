// reference_ops_driver DIR: runs one op of the reference backend for tests/reference/ops_golden.py.
//
// DIR/request.json names the op and its sizes: {"op": "rmsnorm", "params": {"n": 3, ...}}. Each
// input array is DIR/<name>.bin, raw little-endian f32 (int32 for ids, positions, targets and
// segments); each output is written to DIR/out_<name>.bin the same way (the cross-entropy loss
// as one f64). Gradient outputs start from zero buffers, so they are the gradients themselves.
// A missing or wrongly sized file, an unknown op or a bad parameter is an error naming it (exit
// 1); the golden script wrote every byte, but it is still checked, not believed.
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "base/env.h"
#include "base/json.h"
#include "base/status.h"
#include "kernels/backend.h"
#include "kernels/nf4.h"
#include "kernels/rope.h"

namespace sovai {
namespace {

using base::Result;
using base::Status;

// Largest array the driver reads or a size parameter may ask for (the golden cases are tiny).
constexpr int64_t kMaxElements = int64_t{1} << 22;
constexpr uint64_t kMaxRequestBytes = 1 << 16;

class Driver {
 public:
  Driver(std::string dir, const nlohmann::json& params) : dir_(std::move(dir)), params_(params) {}

  Result<int64_t> Size(std::string_view name) {
    SOVAI_ASSIGN_OR_RETURN(int64_t v, base::GetInt(params_, name));
    if (v < 0 || v > kMaxElements) {
      return base::InvalidArgumentError("parameter '" + std::string(name) +
                                        "' = " + std::to_string(v) + " is outside [0, " +
                                        std::to_string(kMaxElements) + "]");
    }
    return v;
  }
  Result<double> Number(std::string_view name) { return base::GetDouble(params_, name); }

  template <typename T>
  Result<std::vector<T>> Read(const std::string& name, int64_t count) {
    if (count < 0 || count > kMaxElements) {
      return base::InvalidArgumentError(name + ": " + std::to_string(count) + " elements");
    }
    const std::string path = dir_ + "/" + name + ".bin";
    SOVAI_ASSIGN_OR_RETURN(std::string bytes,
                           base::Env::Default().ReadFile(path, kMaxElements * sizeof(T)));
    if (bytes.size() != static_cast<size_t>(count) * sizeof(T)) {
      return base::InvalidArgumentError(path + " holds " + std::to_string(bytes.size()) +
                                        " bytes; expected " + std::to_string(count) + " x " +
                                        std::to_string(sizeof(T)));
    }
    std::vector<T> out(static_cast<size_t>(count));
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }

  template <typename T>
  Status Write(const std::string& name, const std::vector<T>& values) {
    std::string bytes(values.size() * sizeof(T), '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return base::Env::Default().WriteFileAtomically(dir_ + "/out_" + name + ".bin", bytes);
  }

 private:
  std::string dir_;
  const nlohmann::json& params_;
};

using Vec = std::vector<float>;
using Ids = std::vector<int32_t>;

kernels::WeightRef F32(const Vec& w, int64_t rows, int64_t cols) {
  return {.format = kernels::WeightRef::Format::kF32, .data = w.data(), .rows = rows, .cols = cols};
}

Status RunLinear(Driver& d, kernels::Backend& be) {
  SOVAI_ASSIGN_OR_RETURN(int64_t n, d.Size("n"));
  SOVAI_ASSIGN_OR_RETURN(int64_t in, d.Size("in"));
  SOVAI_ASSIGN_OR_RETURN(int64_t out, d.Size("out"));
  SOVAI_ASSIGN_OR_RETURN(Vec x, d.Read<float>("x", n * in));
  SOVAI_ASSIGN_OR_RETURN(Vec w, d.Read<float>("w", out * in));
  SOVAI_ASSIGN_OR_RETURN(Vec bias, d.Read<float>("bias", out));
  SOVAI_ASSIGN_OR_RETURN(Vec dout, d.Read<float>("dout", n * out));
  Vec y(n * out), dx(n * in, 0.0f), dw(out * in, 0.0f), dbias(out, 0.0f);
  be.LinearForward(y.data(), x.data(), F32(w, out, in), bias.data(), n);
  be.LinearBackwardInput(dx.data(), dout.data(), F32(w, out, in), n);
  be.Gemm(true, false, out, in, n, 1.0f, dout.data(), x.data(), 1.0f, dw.data());
  be.LinearBackwardBias(dbias.data(), dout.data(), n, out);
  SOVAI_RETURN_IF_ERROR(d.Write("y", y));
  SOVAI_RETURN_IF_ERROR(d.Write("dx", dx));
  SOVAI_RETURN_IF_ERROR(d.Write("dw", dw));
  return d.Write("dbias", dbias);
}

Status RunRmsNorm(Driver& d, kernels::Backend& be) {
  SOVAI_ASSIGN_OR_RETURN(int64_t n, d.Size("n"));
  SOVAI_ASSIGN_OR_RETURN(int64_t c, d.Size("c"));
  SOVAI_ASSIGN_OR_RETURN(double eps, d.Number("eps"));
  SOVAI_ASSIGN_OR_RETURN(Vec x, d.Read<float>("x", n * c));
  SOVAI_ASSIGN_OR_RETURN(Vec weight, d.Read<float>("weight", c));
  SOVAI_ASSIGN_OR_RETURN(Vec dout, d.Read<float>("dout", n * c));
  Vec y(n * c), rstd(n), dx(n * c, 0.0f), dweight(c, 0.0f);
  be.RmsNormForward(y.data(), rstd.data(), x.data(), weight.data(), n, c, static_cast<float>(eps));
  be.RmsNormBackward(dx.data(), dweight.data(), dout.data(), x.data(), weight.data(), rstd.data(),
                     n, c);
  SOVAI_RETURN_IF_ERROR(d.Write("y", y));
  SOVAI_RETURN_IF_ERROR(d.Write("dx", dx));
  return d.Write("dweight", dweight);
}

Status RunRope(Driver& d, kernels::Backend& be, const nlohmann::json& params) {
  SOVAI_ASSIGN_OR_RETURN(int64_t n, d.Size("n"));
  SOVAI_ASSIGN_OR_RETURN(int64_t heads, d.Size("heads"));
  SOVAI_ASSIGN_OR_RETURN(int64_t head_dim, d.Size("head_dim"));
  SOVAI_ASSIGN_OR_RETURN(double theta, d.Number("theta"));
  SOVAI_ASSIGN_OR_RETURN(std::string kind_name, base::GetString(params, "scaling"));
  auto kind = kernels::ParseRopeScalingKind(kind_name);
  if (!kind) return base::InvalidArgumentError("unknown scaling '" + kind_name + "'");
  kernels::RopeScaling scaling{.kind = *kind};
  if (*kind != kernels::RopeScaling::Kind::kNone) {
    SOVAI_ASSIGN_OR_RETURN(scaling.factor, d.Number("factor"));
  }
  if (*kind == kernels::RopeScaling::Kind::kLlama3) {
    SOVAI_ASSIGN_OR_RETURN(scaling.low_freq_factor, d.Number("low_freq_factor"));
    SOVAI_ASSIGN_OR_RETURN(scaling.high_freq_factor, d.Number("high_freq_factor"));
    SOVAI_ASSIGN_OR_RETURN(scaling.original_max_position_embeddings,
                           d.Number("original_max_position_embeddings"));
  }
  SOVAI_ASSIGN_OR_RETURN(Vec inv_freq, kernels::RopeInverseFrequencies(head_dim, theta, scaling));
  SOVAI_ASSIGN_OR_RETURN(Vec x, d.Read<float>("x", n * heads * head_dim));
  SOVAI_ASSIGN_OR_RETURN(Ids positions, d.Read<int32_t>("positions", n));
  SOVAI_ASSIGN_OR_RETURN(Vec dout, d.Read<float>("dout", n * heads * head_dim));
  Vec y(x.size()), dx(x.size(), 0.0f);
  be.RopeForward(y.data(), x.data(), positions.data(), inv_freq.data(), n, heads, head_dim);
  be.RopeBackward(dx.data(), dout.data(), positions.data(), inv_freq.data(), n, heads, head_dim);
  SOVAI_RETURN_IF_ERROR(d.Write("inv_freq", inv_freq));
  SOVAI_RETURN_IF_ERROR(d.Write("y", y));
  return d.Write("dx", dx);
}

Status RunAttention(Driver& d, kernels::Backend& be, const nlohmann::json& params) {
  kernels::Backend::AttentionShape s;
  SOVAI_ASSIGN_OR_RETURN(s.batch, d.Size("batch"));
  SOVAI_ASSIGN_OR_RETURN(s.seq_len, d.Size("seq_len"));
  SOVAI_ASSIGN_OR_RETURN(s.q_heads, d.Size("q_heads"));
  SOVAI_ASSIGN_OR_RETURN(s.kv_heads, d.Size("kv_heads"));
  SOVAI_ASSIGN_OR_RETURN(s.head_dim, d.Size("head_dim"));
  SOVAI_ASSIGN_OR_RETURN(s.window, d.Size("window"));
  SOVAI_ASSIGN_OR_RETURN(double scale, d.Number("scale"));
  s.scale = static_cast<float>(scale);
  if (s.kv_heads == 0 || s.q_heads % s.kv_heads != 0 || s.head_dim == 0) {
    return base::InvalidArgumentError("q_heads must be a positive multiple of kv_heads");
  }
  SOVAI_ASSIGN_OR_RETURN(bool segmented, base::GetBool(params, "segmented"));
  const int64_t tokens = s.batch * s.seq_len;
  SOVAI_ASSIGN_OR_RETURN(Vec q, d.Read<float>("q", tokens * s.q_heads * s.head_dim));
  SOVAI_ASSIGN_OR_RETURN(Vec k, d.Read<float>("k", tokens * s.kv_heads * s.head_dim));
  SOVAI_ASSIGN_OR_RETURN(Vec v, d.Read<float>("v", tokens * s.kv_heads * s.head_dim));
  SOVAI_ASSIGN_OR_RETURN(Vec dout, d.Read<float>("dout", q.size()));
  Ids segment;
  if (segmented) {
    SOVAI_ASSIGN_OR_RETURN(segment, d.Read<int32_t>("segment", tokens));
  }
  const int32_t* seg = segmented ? segment.data() : nullptr;
  Vec out(q.size()), lse(s.batch * s.q_heads * s.seq_len);
  Vec dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  be.AttentionForward(out.data(), lse.data(), q.data(), k.data(), v.data(), seg, s);
  be.AttentionBackward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(),
                       q.data(), k.data(), v.data(), seg, s);
  SOVAI_RETURN_IF_ERROR(d.Write("out", out));
  SOVAI_RETURN_IF_ERROR(d.Write("lse", lse));
  SOVAI_RETURN_IF_ERROR(d.Write("dq", dq));
  SOVAI_RETURN_IF_ERROR(d.Write("dk", dk));
  return d.Write("dv", dv);
}

Status RunSwiGlu(Driver& d, kernels::Backend& be) {
  SOVAI_ASSIGN_OR_RETURN(int64_t count, d.Size("count"));
  SOVAI_ASSIGN_OR_RETURN(Vec gate, d.Read<float>("gate", count));
  SOVAI_ASSIGN_OR_RETURN(Vec up, d.Read<float>("up", count));
  SOVAI_ASSIGN_OR_RETURN(Vec dout, d.Read<float>("dout", count));
  Vec out(count), dgate(count, 0.0f), dup(count, 0.0f);
  be.SwiGluForward(out.data(), gate.data(), up.data(), count);
  be.SwiGluBackward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), count);
  SOVAI_RETURN_IF_ERROR(d.Write("out", out));
  SOVAI_RETURN_IF_ERROR(d.Write("dgate", dgate));
  return d.Write("dup", dup);
}

Status RunCrossEntropy(Driver& d, kernels::Backend& be) {
  SOVAI_ASSIGN_OR_RETURN(int64_t n, d.Size("n"));
  SOVAI_ASSIGN_OR_RETURN(int64_t c, d.Size("c"));
  SOVAI_ASSIGN_OR_RETURN(int64_t vocab, d.Size("vocab"));
  SOVAI_ASSIGN_OR_RETURN(int64_t chunk_rows, d.Size("chunk_rows"));
  SOVAI_ASSIGN_OR_RETURN(double grad_scale, d.Number("grad_scale"));
  if (chunk_rows == 0 || vocab == 0) return base::InvalidArgumentError("chunk_rows, vocab > 0");
  SOVAI_ASSIGN_OR_RETURN(Vec hidden, d.Read<float>("hidden", n * c));
  SOVAI_ASSIGN_OR_RETURN(Vec weight, d.Read<float>("weight", vocab * c));
  SOVAI_ASSIGN_OR_RETURN(Ids targets, d.Read<int32_t>("targets", n));
  for (int32_t t : targets) {
    if (t >= vocab) return base::InvalidArgumentError("target " + std::to_string(t) + " >= V");
  }
  Vec dhidden(n * c, 0.0f), dweight(vocab * c, 0.0f);
  const double loss =
      be.CrossEntropy(dhidden.data(), dweight.data(), hidden.data(), F32(weight, vocab, c),
                      targets.data(), n, static_cast<float>(grad_scale), chunk_rows);
  SOVAI_RETURN_IF_ERROR(d.Write("loss", std::vector<double>{loss}));
  SOVAI_RETURN_IF_ERROR(d.Write("dhidden", dhidden));
  return d.Write("dweight", dweight);
}

Status RunLora(Driver& d, kernels::Backend& be) {
  SOVAI_ASSIGN_OR_RETURN(int64_t n, d.Size("n"));
  SOVAI_ASSIGN_OR_RETURN(int64_t in, d.Size("in"));
  SOVAI_ASSIGN_OR_RETURN(int64_t out, d.Size("out"));
  SOVAI_ASSIGN_OR_RETURN(int64_t rank, d.Size("rank"));
  SOVAI_ASSIGN_OR_RETURN(double scale, d.Number("scale"));
  SOVAI_ASSIGN_OR_RETURN(Vec x, d.Read<float>("x", n * in));
  SOVAI_ASSIGN_OR_RETURN(Vec a, d.Read<float>("a", rank * in));
  SOVAI_ASSIGN_OR_RETURN(Vec b, d.Read<float>("b", out * rank));
  SOVAI_ASSIGN_OR_RETURN(Vec y, d.Read<float>("y0", n * out));
  SOVAI_ASSIGN_OR_RETURN(Vec dy, d.Read<float>("dy", n * out));
  Vec xa(n * rank), dx(n * in, 0.0f), da(rank * in, 0.0f), db(out * rank, 0.0f);
  const auto s = static_cast<float>(scale);
  be.LoraForward(y.data(), xa.data(), x.data(), a.data(), b.data(), n, in, out, rank, s, {});
  be.LoraBackward(dx.data(), da.data(), db.data(), dy.data(), x.data(), xa.data(), a.data(),
                  b.data(), n, in, out, rank, s, {});
  SOVAI_RETURN_IF_ERROR(d.Write("y", y));
  SOVAI_RETURN_IF_ERROR(d.Write("dx", dx));
  SOVAI_RETURN_IF_ERROR(d.Write("da", da));
  return d.Write("db", db);
}

Status RunAdamW(Driver& d, kernels::Backend& be) {
  SOVAI_ASSIGN_OR_RETURN(int64_t count, d.Size("count"));
  SOVAI_ASSIGN_OR_RETURN(int64_t steps, d.Size("steps"));
  kernels::Backend::AdamWParams p;
  SOVAI_ASSIGN_OR_RETURN(double lr, d.Number("lr"));
  SOVAI_ASSIGN_OR_RETURN(double beta1, d.Number("beta1"));
  SOVAI_ASSIGN_OR_RETURN(double beta2, d.Number("beta2"));
  SOVAI_ASSIGN_OR_RETURN(double eps, d.Number("eps"));
  SOVAI_ASSIGN_OR_RETURN(double weight_decay, d.Number("weight_decay"));
  p.learning_rate = static_cast<float>(lr);
  p.beta1 = static_cast<float>(beta1);
  p.beta2 = static_cast<float>(beta2);
  p.eps = static_cast<float>(eps);
  p.weight_decay = static_cast<float>(weight_decay);
  SOVAI_ASSIGN_OR_RETURN(Vec param, d.Read<float>("param", count));
  SOVAI_ASSIGN_OR_RETURN(Vec grads, d.Read<float>("grads", steps * count));
  Vec m(count, 0.0f), v(count, 0.0f);
  for (int64_t t = 0; t < steps; ++t) {
    p.step = t + 1;
    be.AdamWStep(param.data(), grads.data() + t * count, m.data(), v.data(), count, p);
  }
  SOVAI_RETURN_IF_ERROR(d.Write("param", param));
  SOVAI_RETURN_IF_ERROR(d.Write("m", m));
  return d.Write("v", v);
}

Status RunEmbedding(Driver& d, kernels::Backend& be) {
  SOVAI_ASSIGN_OR_RETURN(int64_t n, d.Size("n"));
  SOVAI_ASSIGN_OR_RETURN(int64_t vocab, d.Size("vocab"));
  SOVAI_ASSIGN_OR_RETURN(int64_t c, d.Size("c"));
  SOVAI_ASSIGN_OR_RETURN(Ids ids, d.Read<int32_t>("ids", n));
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) return base::InvalidArgumentError("id " + std::to_string(id));
  }
  SOVAI_ASSIGN_OR_RETURN(Vec table, d.Read<float>("table", vocab * c));
  SOVAI_ASSIGN_OR_RETURN(Vec dout, d.Read<float>("dout", n * c));
  Vec out(n * c), dtable(vocab * c, 0.0f);
  be.EmbeddingForward(out.data(), ids.data(), F32(table, vocab, c), n);
  be.EmbeddingBackward(dtable.data(), dout.data(), ids.data(), n, vocab, c);
  SOVAI_RETURN_IF_ERROR(d.Write("out", out));
  return d.Write("dtable", dtable);
}

Status Run(const std::string& dir) {
  SOVAI_ASSIGN_OR_RETURN(std::string text,
                         base::Env::Default().ReadFile(dir + "/request.json", kMaxRequestBytes));
  SOVAI_ASSIGN_OR_RETURN(nlohmann::json request, base::ParseJson(text));
  SOVAI_ASSIGN_OR_RETURN(std::string op, base::GetString(request, "op"));
  SOVAI_ASSIGN_OR_RETURN(const nlohmann::json* params, base::GetObject(request, "params"));
  Driver d(dir, *params);
  auto backend = kernels::NewReferenceBackend();
  if (op == "linear") return RunLinear(d, *backend);
  if (op == "rmsnorm") return RunRmsNorm(d, *backend);
  if (op == "rope") return RunRope(d, *backend, *params);
  if (op == "attention") return RunAttention(d, *backend, *params);
  if (op == "swiglu") return RunSwiGlu(d, *backend);
  if (op == "cross_entropy") return RunCrossEntropy(d, *backend);
  if (op == "lora") return RunLora(d, *backend);
  if (op == "adamw") return RunAdamW(d, *backend);
  if (op == "embedding") return RunEmbedding(d, *backend);
  if (op == "nf4_map") {
    const auto& map = kernels::BitsandbytesDynamicMap();
    return d.Write("map", Vec(map.begin(), map.end()));
  }
  return base::InvalidArgumentError("unknown op '" + op + "'");
}

}  // namespace
}  // namespace sovai

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR (see the header of reference_ops_driver.cc)\n", argv[0]);
    return 2;
  }
  const sovai::base::Status status = sovai::Run(argv[1]);
  if (!status.ok()) {
    std::fprintf(stderr, "reference_ops_driver: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
