#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "base/check.h"
#include "kernels/rope.h"
#include "model/llama_internal.h"
#include "tensor/dtype.h"

namespace sovai::model {

using base::Result;
using base::Status;
using base::StatusCode;
using kernels::Backend;
using kernels::WeightRef;
using tensor::DType;

namespace {

// The most logits the loss keeps at a time: chunk_rows = max(1, this / vocab).
constexpr int64_t kLogitsPerChunk = int64_t{8} << 20;

using kernels::SplitMix64;

// Deterministic normal and uniform draws (Box-Muller over splitmix64), the same on every platform.
class Draws {
 public:
  explicit Draws(uint64_t seed) : state_(seed) {}
  double Uniform() {  // [0, 1)
    state_ = SplitMix64(state_);
    return static_cast<double>(state_ >> 11) * 0x1.0p-53;
  }
  double Normal() {
    double u1 = std::max(Uniform(), 1e-300);
    double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

std::string LayerPrefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }

std::string ProjectionTensorName(int64_t layer, Projection p) {
  return LayerPrefix(layer) + std::string(LoraModuleParent(p)) + "." +
         std::string(LoraModuleName(p));
}

Result<std::vector<float>> ToF32(const SourceTensor& t, std::string_view name, uint64_t expected) {
  size_t element = tensor::DTypeSize(t.dtype);
  if (t.bytes.size() != expected * element) {
    return Status(StatusCode::kInvalidArgument,
                  "tensor '" + std::string(name) + "' has " + std::to_string(t.bytes.size()) +
                      " bytes, expected " + std::to_string(expected * element));
  }
  std::vector<float> out(expected);
  tensor::ConvertElements(t.dtype, t.bytes.data(), DType::kF32, out.data(), expected);
  return out;
}

uint64_t Elements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

}  // namespace

TensorSource TensorSourceOf(const SafetensorsSet& weights) {
  return [&weights](std::string_view name) -> Result<SourceTensor> {
    SOVAI_ASSIGN_OR_RETURN(SafetensorsSet::Entry e, weights.Get(name));
    SOVAI_ASSIGN_OR_RETURN(DType dtype, RequireComputable(*e.tensor, e.file->path()));
    return SourceTensor{dtype, e.tensor->shape, e.tensor->bytes};
  };
}

Result<Parameter> NewParameter(Backend& backend, std::string name, std::vector<uint64_t> shape,
                               std::span<const float> values, bool with_grad) {
  Parameter p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  SOVAI_ASSIGN_OR_RETURN(p.value, kernels::UploadNew<float>(backend, values));
  if (with_grad) {
    SOVAI_ASSIGN_OR_RETURN(p.grad, kernels::AllocateZeros<float>(backend, p.numel()));
  }
  return p;
}

double LoraOptions::Scale() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / rank;
}

LlamaModel::LlamaModel(Backend& backend, ModelConfig config)
    : backend_(&backend), config_(std::move(config)) {}
LlamaModel::~LlamaModel() = default;

Status LlamaModel::Allocate(BaseWeights storage) {
  SOVAI_RETURN_IF_ERROR(ValidateModelConfig(config_));
  storage_ = storage;
  expected_ = ExpectedTensors(config_);
  kernels::RopeScaling scaling;
  if (config_.rope_scaling) {
    const RopeScaling& r = *config_.rope_scaling;
    scaling.kind = r.type == RopeScaling::Type::kLinear ? kernels::RopeScaling::Kind::kLinear
                                                        : kernels::RopeScaling::Kind::kLlama3;
    scaling.factor = r.factor;
    scaling.low_freq_factor = r.low_freq_factor;
    scaling.high_freq_factor = r.high_freq_factor;
    scaling.original_max_position_embeddings =
        static_cast<double>(r.original_max_position_embeddings);
  }
  SOVAI_ASSIGN_OR_RETURN(
      std::vector<float> inv_freq,
      kernels::RopeInverseFrequencies(config_.head_dim, config_.rope_theta, scaling));
  globals_ = std::make_unique<Globals>();
  SOVAI_ASSIGN_OR_RETURN(globals_->inv_freq, kernels::UploadNew<float>(*backend_, inv_freq));
  layers_.clear();
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    auto layer = std::make_unique<Layer>();
    layer->window = config_.SlidingWindowForLayer(l).value_or(0);
    layers_.push_back(std::move(layer));
  }
  return Status();
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::Load(Backend& backend, const ModelConfig& config,
                                                     const TensorSource& source,
                                                     BaseWeights storage) {
  std::unique_ptr<LlamaModel> model(new LlamaModel(backend, config));
  SOVAI_RETURN_IF_ERROR(model->Allocate(storage));
  const bool trainable = storage == BaseWeights::kTrainable;
  const WeightRef::Format projection_format =
      storage == BaseWeights::kBF16   ? WeightRef::Format::kBF16
      : storage == BaseWeights::kNF4  ? WeightRef::Format::kNF4
      : storage == BaseWeights::kQ8_0 ? WeightRef::Format::kQ8_0
                                      : WeightRef::Format::kF32;
  // Embeddings and the head are looked up by row or computed in chunks: NF4 saves little there,
  // so QLoRA keeps them in bf16 (as bitsandbytes leaves them unquantized).
  // Q8_0 inference quantizes them too (as llama.cpp's Q8_0 files do), when the hidden size is
  // whole blocks.
  const bool q8_0_tables =
      storage == BaseWeights::kQ8_0 &&
      config.hidden_size % static_cast<int64_t>(kernels::kQ8_0BlockValues) == 0;
  const WeightRef::Format table_format = storage == BaseWeights::kF32 || trainable
                                             ? WeightRef::Format::kF32
                                         : q8_0_tables ? WeightRef::Format::kQ8_0
                                                       : WeightRef::Format::kBF16;
  for (const ExpectedTensor& want : model->expected_) {
    auto found = source(want.name);
    if (!found.ok()) {
      if (want.optional && found.status().code() == StatusCode::kNotFound) continue;
      return found.status();
    }
    if (found->shape != want.shape) {
      return Status(StatusCode::kInvalidArgument,
                    "tensor '" + want.name + "' has the wrong shape for this config");
    }
    SOVAI_ASSIGN_OR_RETURN(std::vector<float> values,
                           ToF32(*found, want.name, Elements(want.shape)));
    SOVAI_RETURN_IF_ERROR(
        model->Place(want.name, std::move(values), projection_format, table_format, trainable));
  }
  return model;
}

LlamaModel::Slot LlamaModel::Find(std::string_view name) const {
  Slot slot;
  Globals& g = *globals_;
  if (name == "model.embed_tokens.weight") {
    slot.matrix = &g.embed;
  } else if (name == "model.norm.weight") {
    slot.vector = &g.final_norm;
  } else if (name == "lm_head.weight") {
    if (!config_.tie_word_embeddings) slot.matrix = &g.head;
  } else if (name.starts_with("model.layers.")) {
    std::string_view rest = name.substr(13);
    size_t dot = rest.find('.');
    if (dot == std::string_view::npos) return slot;
    int64_t l = 0;
    for (char c : rest.substr(0, dot)) {
      if (c < '0' || c > '9' || l > config_.num_hidden_layers) return slot;
      l = l * 10 + (c - '0');
    }
    if (l >= config_.num_hidden_layers) return slot;
    Layer& layer = *layers_[static_cast<size_t>(l)];
    rest = rest.substr(dot + 1);
    if (rest == "input_layernorm.weight") {
      slot.vector = &layer.input_norm;
    } else if (rest == "post_attention_layernorm.weight") {
      slot.vector = &layer.post_norm;
    } else if (rest == "self_attn.q_norm.weight") {
      slot.vector = &layer.q_norm;
    } else if (rest == "self_attn.k_norm.weight") {
      slot.vector = &layer.k_norm;
    } else {
      for (int i = 0; i < kProjectionCount; ++i) {
        std::string base =
            ProjectionTensorName(l, static_cast<Projection>(i)).substr(LayerPrefix(l).size());
        if (rest == base + ".weight") slot.matrix = &layer.proj[i];
        if (rest == base + ".bias") slot.vector = &layer.bias[i];
      }
    }
  }
  return slot;
}

Status LlamaModel::Place(const std::string& name, std::vector<float> values,
                         WeightRef::Format projection_format, WeightRef::Format table_format,
                         bool trainable) {
  Slot slot = Find(name);
  if (name == "lm_head.weight" && config_.tie_word_embeddings) return Status();  // tied: embed
  const ExpectedTensor* want = nullptr;
  for (const ExpectedTensor& e : expected_) {
    if (e.name == name) want = &e;
  }
  if (want == nullptr || (slot.matrix == nullptr && slot.vector == nullptr)) {
    return Status(StatusCode::kInvalidArgument, "unexpected tensor '" + name + "'");
  }
  if (slot.vector != nullptr) {
    SOVAI_ASSIGN_OR_RETURN(slot.vector->p,
                           NewParameter(*backend_, name, want->shape, values, trainable));
    return Status();
  }
  bool table = name == "model.embed_tokens.weight" || name == "lm_head.weight";
  WeightRef::Format format = table ? table_format : projection_format;
  const int64_t cols = static_cast<int64_t>(want->shape[1]);
  if (format == WeightRef::Format::kQ8_0 &&
      cols % static_cast<int64_t>(kernels::kQ8_0BlockValues) != 0) {
    format = WeightRef::Format::kBF16;  // rows that are not whole Q8_0 blocks, as llama.cpp does
  }
  return slot.matrix->Store(*backend_, std::move(values), name,
                            static_cast<int64_t>(want->shape[0]), cols, format, trainable);
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::RandomInit(Backend& backend,
                                                           const ModelConfig& config,
                                                           uint64_t seed) {
  std::unique_ptr<LlamaModel> model(new LlamaModel(backend, config));
  SOVAI_RETURN_IF_ERROR(model->Allocate(BaseWeights::kTrainable));
  // transformers' LlamaPreTrainedModel._init_weights: normal(0, initializer_range) for linear
  // and embedding weights, zero biases, unit norms.
  double std_dev = 0.02;
  if (config.extra.contains("initializer_range") && config.extra["initializer_range"].is_number()) {
    std_dev = config.extra["initializer_range"].get<double>();
  }
  Draws draws(SplitMix64(seed));
  for (const ExpectedTensor& want : model->expected_) {
    if (want.optional) continue;  // tied lm_head
    std::vector<float> values(Elements(want.shape));
    bool is_norm = want.name.ends_with("norm.weight");
    bool is_bias = want.name.ends_with(".bias");
    for (float& v : values) {
      v = is_norm ? 1.0f : is_bias ? 0.0f : static_cast<float>(draws.Normal() * std_dev);
    }
    SOVAI_RETURN_IF_ERROR(model->Place(want.name, std::move(values), WeightRef::Format::kF32,
                                       WeightRef::Format::kF32, /*trainable=*/true));
  }
  return model;
}

Status LlamaModel::AddLora(const LoraOptions& options) {
  if (lora_) return Status(StatusCode::kFailedPrecondition, "the model already has LoRA adapters");
  if (storage_ == BaseWeights::kTrainable) {
    return Status(StatusCode::kFailedPrecondition,
                  "LoRA adapters need frozen base weights, not a fully trainable model");
  }
  if (options.rank < 1 || options.rank > 4096) {
    return Status(StatusCode::kInvalidArgument,
                  "LoRA rank must be in [1, 4096], got " + std::to_string(options.rank));
  }
  if (!(options.alpha > 0) || !std::isfinite(options.alpha)) {
    return Status(StatusCode::kInvalidArgument, "LoRA alpha must be a positive number");
  }
  if (!(options.dropout >= 0 && options.dropout < 1)) {
    return Status(StatusCode::kInvalidArgument, "LoRA dropout must be in [0, 1)");
  }
  lora_ = options;
  if (lora_->targets.empty()) {
    for (int i = 0; i < kProjectionCount; ++i) lora_->targets.push_back(static_cast<Projection>(i));
  }
  Draws draws(SplitMix64(options.seed ^ 0x4c6f5241ull));
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    Layer& layer = *layers_[static_cast<size_t>(l)];
    for (Projection p : lora_->targets) {
      int i = static_cast<int>(p);
      if (layer.lora_a[i]) continue;  // listed twice
      const WeightRef& w = layer.proj[i].ref;
      std::string name = "base_model.model." + ProjectionTensorName(l, p);
      // PEFT: kaiming_uniform_(a=sqrt(5)) on A, i.e. U(-1/sqrt(in), 1/sqrt(in)); B = 0, so the
      // adapted model starts equal to the base model. A is drawn on the host and uploaded.
      double bound = 1.0 / std::sqrt(static_cast<double>(w.cols));
      std::vector<float> a_values(static_cast<size_t>(options.rank * w.cols));
      for (float& v : a_values) v = static_cast<float>((2 * draws.Uniform() - 1) * bound);
      SOVAI_ASSIGN_OR_RETURN(Parameter a, NewParameter(*backend_, name + ".lora_A.weight",
                                                       {static_cast<uint64_t>(options.rank),
                                                        static_cast<uint64_t>(w.cols)},
                                                       a_values, /*with_grad=*/true));
      const std::vector<float> b_values(static_cast<size_t>(w.rows * options.rank), 0.0f);
      SOVAI_ASSIGN_OR_RETURN(Parameter b, NewParameter(*backend_, name + ".lora_B.weight",
                                                       {static_cast<uint64_t>(w.rows),
                                                        static_cast<uint64_t>(options.rank)},
                                                       b_values, /*with_grad=*/true));
      layer.lora_a[i] = std::make_unique<Parameter>(std::move(a));
      layer.lora_b[i] = std::make_unique<Parameter>(std::move(b));
    }
  }
  return Status();
}

Result<LoraAdapter> LlamaModel::ExportLora(std::string base_model_name) const {
  if (!lora_) return Status(StatusCode::kFailedPrecondition, "the model has no LoRA adapters");
  LoraAdapter out;
  out.config.r = lora_->rank;
  out.config.lora_alpha = lora_->alpha;
  out.config.lora_dropout = lora_->dropout;
  out.config.use_rslora = lora_->use_rslora;
  out.config.target_modules = lora_->targets;
  std::sort(out.config.target_modules.begin(), out.config.target_modules.end());
  out.config.target_modules.erase(
      std::unique(out.config.target_modules.begin(), out.config.target_modules.end()),
      out.config.target_modules.end());
  out.config.base_model_name_or_path = std::move(base_model_name);
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const Layer& layer = *layers_[static_cast<size_t>(l)];
    for (LoraModule module : kAllLoraModules) {
      int i = static_cast<int>(module);
      if (!layer.lora_a[i]) continue;
      out.modules.push_back(LoraModuleWeights{l, module,
                                              kernels::DownloadAll<float>(layer.lora_a[i]->value),
                                              kernels::DownloadAll<float>(layer.lora_b[i]->value)});
    }
  }
  return out;
}

Status LlamaModel::ImportLora(const LoraAdapter& adapter) {
  SOVAI_RETURN_IF_ERROR(ValidateLoraAdapter(adapter, config_));
  if (!adapter.config.layers_to_transform.empty()) {
    return Status(StatusCode::kUnimplemented,
                  "adapters on a subset of layers (layers_to_transform) are not supported yet");
  }
  LoraOptions options;
  options.rank = adapter.config.r;
  options.alpha = adapter.config.lora_alpha;
  options.dropout = static_cast<float>(adapter.config.lora_dropout);
  options.use_rslora = adapter.config.use_rslora;
  options.targets = adapter.config.target_modules;
  SOVAI_RETURN_IF_ERROR(AddLora(options));
  for (const LoraModuleWeights& m : adapter.modules) {
    Layer& layer = *layers_[static_cast<size_t>(m.layer)];
    int i = static_cast<int>(m.module);
    // ValidateLoraAdapter checked the shapes against the config, which AddLora sized them by.
    for (auto [param, values] :
         {std::pair{layer.lora_a[i].get(), &m.a}, std::pair{layer.lora_b[i].get(), &m.b}}) {
      SOVAI_CHECK_EQ(param->numel(), static_cast<int64_t>(values->size())) << param->name;
      backend_->Upload(param->value.data(), values->data(), values->size() * sizeof(float));
    }
  }
  return Status();
}

LlamaModel::LoraPair LlamaModel::Lora(int64_t layer, Projection projection) {
  if (layer < 0 || layer >= config_.num_hidden_layers) return {};
  Layer& l = *layers_[static_cast<size_t>(layer)];
  int i = static_cast<int>(projection);
  return {l.lora_a[i].get(), l.lora_b[i].get()};
}

std::vector<Parameter*> LlamaModel::TrainableParameters() {
  std::vector<Parameter*> out;
  if (lora_) {
    for (auto& layer : layers_) {
      for (int i = 0; i < kProjectionCount; ++i) {
        if (layer->lora_a[i]) {
          out.push_back(layer->lora_a[i].get());
          out.push_back(layer->lora_b[i].get());
        }
      }
    }
    return out;
  }
  if (storage_ != BaseWeights::kTrainable) return out;
  for (const ExpectedTensor& e : expected_) {
    Slot slot = Find(e.name);
    if (slot.matrix != nullptr && slot.matrix->param) out.push_back(slot.matrix->param.get());
    if (slot.vector != nullptr && slot.vector->present()) out.push_back(&slot.vector->p);
  }
  return out;
}

Result<std::vector<float>> LlamaModel::BaseTensorF32(std::string_view name, bool merge_lora) const {
  Slot slot = Find(name);
  if (slot.vector != nullptr && slot.vector->present()) {
    return kernels::DownloadAll<float>(slot.vector->p.value);
  }
  if (slot.matrix == nullptr || slot.matrix->ref.rows == 0) {
    return Status(StatusCode::kNotFound, "the model has no tensor '" + std::string(name) + "'");
  }
  SOVAI_ASSIGN_OR_RETURN(std::vector<float> w, slot.matrix->ToF32());  // [O, I]
  if (!merge_lora || !lora_) return w;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const Layer& layer = *layers_[static_cast<size_t>(l)];
    for (int i = 0; i < kProjectionCount; ++i) {
      if (&layer.proj[i] != slot.matrix || !layer.lora_a[i]) continue;
      // W[O, I] += scale * B[O, R] @ A[R, I], accumulated in double as PEFT's merge is exact
      // enough not to show in a saved bf16 model.
      const int64_t rows = layer.proj[i].ref.rows, cols = layer.proj[i].ref.cols;
      const int64_t r = lora_->rank;
      const std::vector<float> a_host = kernels::DownloadAll<float>(layer.lora_a[i]->value);
      const std::vector<float> b_host = kernels::DownloadAll<float>(layer.lora_b[i]->value);
      const float* a = a_host.data();
      const float* b = b_host.data();
      const double scale = lora_->Scale();
      std::vector<double> row(static_cast<size_t>(cols));  // [I] (B @ A)[o, :]
      for (int64_t o = 0; o < rows; ++o) {
        std::fill(row.begin(), row.end(), 0.0);
        for (int64_t k = 0; k < r; ++k) {
          double bk = b[o * r + k];
          const float* ak = a + k * cols;
          for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] += bk * ak[c];
        }
        for (int64_t c = 0; c < cols; ++c) {
          w[static_cast<size_t>(o * cols + c)] +=
              static_cast<float>(scale * row[static_cast<size_t>(c)]);
        }
      }
    }
  }
  return w;
}

// The engine refuses a backend that lacks an op the model needs, or that does not hold the model,
// before computing anything.
Status LlamaModel::CheckBackend(const Backend& backend) const {
  if (&backend != backend_) {
    return Status(StatusCode::kFailedPrecondition,
                  "the model's weights are in the " + std::string(backend_->name()) +
                      " backend's memory; it cannot run on another backend (" +
                      std::string(backend.name()) + ")");
  }
  for (int i = 0; i < static_cast<int>(kernels::Op::kCount); ++i) {
    auto op = static_cast<kernels::Op>(i);
    if (!backend.Supports(op)) {
      return Status(StatusCode::kUnimplemented, "the " + std::string(backend.name()) +
                                                    " backend lacks the op " +
                                                    std::string(kernels::OpName(op)));
    }
  }
  return Status();
}

Status LlamaModel::CheckBatch(const Batch& batch) const {
  const int64_t n = batch.batch * batch.seq_len;
  if (batch.batch < 1 || batch.seq_len < 1) {
    return Status(StatusCode::kInvalidArgument, "a batch needs at least one row of one token");
  }
  auto sized = [&](size_t size, bool optional) {
    return (optional && size == 0) || size == static_cast<size_t>(n);
  };
  if (!sized(batch.tokens.size(), false) || !sized(batch.targets.size(), true) ||
      !sized(batch.positions.size(), true) || !sized(batch.segments.size(), true)) {
    return Status(StatusCode::kInvalidArgument,
                  "batch arrays must hold batch * seq_len = " + std::to_string(n) + " entries");
  }
  for (int32_t t : batch.tokens) {
    if (t < 0 || t >= config_.vocab_size) {
      return Status(StatusCode::kInvalidArgument, "token id " + std::to_string(t) +
                                                      " is outside the vocabulary of " +
                                                      std::to_string(config_.vocab_size));
    }
  }
  for (int32_t t : batch.targets) {
    if (t >= config_.vocab_size) {
      return Status(StatusCode::kInvalidArgument,
                    "target id " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  for (int32_t p : batch.positions) {
    if (p < 0) return Status(StatusCode::kInvalidArgument, "positions must not be negative");
  }
  return Status();
}

Status LlamaModel::PrepareActivations(const Batch& batch) {
  if (!acts_) acts_ = std::make_unique<Activations>();
  Activations& a = *acts_;
  Backend& backend = *backend_;
  const int64_t n = batch.batch * batch.seq_len;
  const int64_t c = config_.hidden_size, f = config_.intermediate_size;
  const int64_t qd = config_.q_dim(), kvd = config_.kv_dim();
  const int64_t hq = config_.num_attention_heads, hkv = config_.num_key_value_heads;
  // The shapes of every buffer are written at Activations (llama_internal.h). A buffer keeps its
  // memory from step to step while it is large enough.
  auto size = [&](kernels::DeviceBuffer& buffer, int64_t count) {
    return kernels::Reserve(backend, buffer, static_cast<size_t>(count) * sizeof(float));
  };
  a.n = n;
  a.batch = batch.batch;
  a.seq_len = batch.seq_len;
  a.layers.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    Activations::PerLayer& p = a.layers[l];
    SOVAI_RETURN_IF_ERROR(size(p.x_in, n * c));
    SOVAI_RETURN_IF_ERROR(size(p.ln1, n * c));
    SOVAI_RETURN_IF_ERROR(size(p.rstd1, n));
    SOVAI_RETURN_IF_ERROR(size(p.q, n * qd));
    SOVAI_RETURN_IF_ERROR(size(p.k, n * kvd));
    SOVAI_RETURN_IF_ERROR(size(p.v, n * kvd));
    if (config_.has_qk_norm()) {
      SOVAI_RETURN_IF_ERROR(size(p.q_lin, n * qd));
      SOVAI_RETURN_IF_ERROR(size(p.k_lin, n * kvd));
      SOVAI_RETURN_IF_ERROR(size(p.rstd_q, n * hq));
      SOVAI_RETURN_IF_ERROR(size(p.rstd_k, n * hkv));
    }
    SOVAI_RETURN_IF_ERROR(size(p.att, n * qd));
    SOVAI_RETURN_IF_ERROR(size(p.lse, n * hq));
    SOVAI_RETURN_IF_ERROR(size(p.x_mid, n * c));
    SOVAI_RETURN_IF_ERROR(size(p.ln2, n * c));
    SOVAI_RETURN_IF_ERROR(size(p.rstd2, n));
    SOVAI_RETURN_IF_ERROR(size(p.gate, n * f));
    SOVAI_RETURN_IF_ERROR(size(p.up, n * f));
    SOVAI_RETURN_IF_ERROR(size(p.hidden, n * f));
    for (int i = 0; i < kProjectionCount; ++i) {
      if (layers_[l]->lora_a[i]) SOVAI_RETURN_IF_ERROR(size(p.xa[i], n * lora_->rank));
    }
  }
  SOVAI_RETURN_IF_ERROR(size(a.x_out, n * c));
  SOVAI_RETURN_IF_ERROR(size(a.lnf, n * c));
  SOVAI_RETURN_IF_ERROR(size(a.rstdf, n));
  // The batch's arrays, uploaded (positions computed on the host when the batch has none).
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    positions[static_cast<size_t>(i)] = batch.positions.empty()
                                            ? static_cast<int32_t>(i % batch.seq_len)
                                            : batch.positions[static_cast<size_t>(i)];
  }
  auto upload = [&](kernels::DeviceBuffer& buffer, std::span<const int32_t> values) -> Status {
    if (values.empty()) {
      buffer.Reset();
      return Status();
    }
    SOVAI_RETURN_IF_ERROR(kernels::Reserve(backend, buffer, values.size_bytes()));
    backend.Upload(buffer.data(), values.data(), values.size_bytes());
    return Status();
  };
  SOVAI_RETURN_IF_ERROR(upload(a.tokens, batch.tokens));
  SOVAI_RETURN_IF_ERROR(upload(a.targets, batch.targets));
  SOVAI_RETURN_IF_ERROR(upload(a.positions, positions));
  SOVAI_RETURN_IF_ERROR(upload(a.segments, batch.segments));
  return Status();
}

namespace {

// The dropout stream of one LoRA site: distinct per step, layer and projection.
kernels::Dropout SiteDropout(float probability, uint64_t step_seed, int64_t layer, int projection) {
  return kernels::Dropout{
      probability,
      SplitMix64(step_seed ^ SplitMix64(static_cast<uint64_t>(layer) * 8 + projection))};
}

}  // namespace

Status LlamaModel::Forward(Backend& backend, const Batch& batch, bool training,
                           uint64_t dropout_seed) {
  SOVAI_RETURN_IF_ERROR(PrepareActivations(batch));
  Activations& a = *acts_;
  const int64_t n = a.n, c = config_.hidden_size, f = config_.intermediate_size;
  const int64_t hq = config_.num_attention_heads, hkv = config_.num_key_value_heads;
  const int64_t d = config_.head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const int32_t* segments = I32(a.segments);  // null: one sample per row
  const int32_t* positions = I32(a.positions);
  const float* inv_freq = F32(globals_->inv_freq);
  const float dropout = training && lora_ ? lora_->dropout : 0.0f;
  const float lora_scale = lora_ ? static_cast<float>(lora_->Scale()) : 0.0f;

  // y[N, out] = x[N, in] @ W^T + bias (+ LoRA) for projection i of layer l.
  auto project = [&](int64_t l, int i, const float* x, float* y, const kernels::DeviceBuffer& xa) {
    Layer& layer = *layers_[static_cast<size_t>(l)];
    backend.LinearForward(y, x, layer.proj[i].ref, layer.bias[i].data(), n);
    if (layer.lora_a[i]) {
      backend.LoraForward(y, F32(xa), x, F32(layer.lora_a[i]->value), F32(layer.lora_b[i]->value),
                          n, layer.proj[i].ref.cols, layer.proj[i].ref.rows, lora_->rank,
                          lora_scale, SiteDropout(dropout, dropout_seed, l, i));
    }
  };

  // x[N, C] = embed(tokens)
  kernels::DeviceBuffer* x = a.layers.empty() ? &a.x_out : &a.layers[0].x_in;
  backend.EmbeddingForward(F32(*x), I32(a.tokens), globals_->embed.ref, n);
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = *layers_[l];
    Activations::PerLayer& p = a.layers[l];
    const int64_t li = static_cast<int64_t>(l);
    backend.RmsNormForward(F32(p.ln1), F32(p.rstd1), F32(p.x_in), layer.input_norm.data(), n, c,
                           eps);
    float* q_out = config_.has_qk_norm() ? F32(p.q_lin) : F32(p.q);
    float* k_out = config_.has_qk_norm() ? F32(p.k_lin) : F32(p.k);
    project(li, 0, F32(p.ln1), q_out, p.xa[0]);
    project(li, 1, F32(p.ln1), k_out, p.xa[1]);
    project(li, 2, F32(p.ln1), F32(p.v), p.xa[2]);
    if (config_.has_qk_norm()) {
      // q[N*Hq, D] = rmsnorm over each head (qwen3).
      backend.RmsNormForward(F32(p.q), F32(p.rstd_q), F32(p.q_lin), layer.q_norm.data(), n * hq, d,
                             eps);
      backend.RmsNormForward(F32(p.k), F32(p.rstd_k), F32(p.k_lin), layer.k_norm.data(), n * hkv, d,
                             eps);
    }
    backend.RopeForward(F32(p.q), F32(p.q), positions, inv_freq, n, hq, d);
    backend.RopeForward(F32(p.k), F32(p.k), positions, inv_freq, n, hkv, d);
    Backend::AttentionShape shape{a.batch,
                                  a.seq_len,
                                  hq,
                                  hkv,
                                  d,
                                  layer.window,
                                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)))};
    backend.AttentionForward(F32(p.att), F32(p.lse), F32(p.q), F32(p.k), F32(p.v), segments, shape);
    // x_mid = x_in + att @ Wo^T
    project(li, 3, F32(p.att), F32(p.x_mid), p.xa[3]);
    backend.Add(F32(p.x_mid), F32(p.x_mid), F32(p.x_in), n * c);
    backend.RmsNormForward(F32(p.ln2), F32(p.rstd2), F32(p.x_mid), layer.post_norm.data(), n, c,
                           eps);
    project(li, 4, F32(p.ln2), F32(p.gate), p.xa[4]);
    project(li, 5, F32(p.ln2), F32(p.up), p.xa[5]);
    backend.SwiGluForward(F32(p.hidden), F32(p.gate), F32(p.up), n * f);
    kernels::DeviceBuffer& next = l + 1 < layers_.size() ? a.layers[l + 1].x_in : a.x_out;
    project(li, 6, F32(p.hidden), F32(next), p.xa[6]);
    backend.Add(F32(next), F32(next), F32(p.x_mid), n * c);
  }
  backend.RmsNormForward(F32(a.lnf), F32(a.rstdf), F32(a.x_out), globals_->final_norm.data(), n, c,
                         eps);
  return Status();
}

void LlamaModel::Backward(Backend& backend, uint64_t dropout_seed) {
  Activations& a = *acts_;
  const int64_t n = a.n, c = config_.hidden_size, f = config_.intermediate_size;
  const int64_t hq = config_.num_attention_heads, hkv = config_.num_key_value_heads;
  const int64_t d = config_.head_dim, qd = config_.q_dim(), kvd = config_.kv_dim();
  const int32_t* segments = I32(a.segments);
  const int32_t* positions = I32(a.positions);
  const float* inv_freq = F32(globals_->inv_freq);
  const float dropout = lora_ ? lora_->dropout : 0.0f;
  const float lora_scale = lora_ ? static_cast<float>(lora_->Scale()) : 0.0f;
  // Gradient buffers are zeroed before the ops that accumulate into them (backend.h).
  auto zero = [&](kernels::DeviceBuffer& buffer, int64_t count) {
    backend.Zero(buffer.data(), static_cast<size_t>(count) * sizeof(float));
  };

  // dx[N, in] += dy[N, out] @ W (+ LoRA), and the weight/bias/adapter gradients.
  auto project_back = [&](int64_t l, int i, const float* x, const float* dy, float* dx,
                          const kernels::DeviceBuffer& xa) {
    Layer& layer = *layers_[static_cast<size_t>(l)];
    Matrix& w = layer.proj[i];
    backend.LinearBackwardInput(dx, dy, w.ref, n);
    if (float* dw = w.grad()) {
      // dW[O, I] += dy[N, O]^T @ x[N, I]
      backend.Gemm(true, false, w.ref.rows, w.ref.cols, n, 1.0f, dy, x, 1.0f, dw);
    }
    if (float* db = layer.bias[i].grad()) {
      backend.LinearBackwardBias(db, dy, n, w.ref.rows);
    }
    if (layer.lora_a[i]) {
      backend.LoraBackward(dx, F32(layer.lora_a[i]->grad), F32(layer.lora_b[i]->grad), dy, x,
                           F32(xa), F32(layer.lora_a[i]->value), F32(layer.lora_b[i]->value), n,
                           w.ref.cols, w.ref.rows, lora_->rank, lora_scale,
                           SiteDropout(dropout, dropout_seed, l, i));
    }
  };

  // a.dx holds d(loss)/d(x_out) on entry: the final norm's backward of dlnf (in a.dln).
  zero(a.dx, n * c);
  backend.RmsNormBackward(F32(a.dx), globals_->final_norm.grad(), F32(a.dln), F32(a.x_out),
                          globals_->final_norm.data(), F32(a.rstdf), n, c);
  for (size_t l = layers_.size(); l-- > 0;) {
    Layer& layer = *layers_[l];
    Activations::PerLayer& p = a.layers[l];
    const int64_t li = static_cast<int64_t>(l);
    // MLP: x_next = x_mid + down(swiglu(gate(ln2), up(ln2))); a.dx is d/dx_next and stays as the
    // residual part of d/dx_mid.
    zero(a.dhidden, n * f);
    project_back(li, 6, F32(p.hidden), F32(a.dx), F32(a.dhidden), p.xa[6]);
    zero(a.dgate, n * f);
    zero(a.dup, n * f);
    backend.SwiGluBackward(F32(a.dgate), F32(a.dup), F32(a.dhidden), F32(p.gate), F32(p.up), n * f);
    zero(a.dln, n * c);
    project_back(li, 4, F32(p.ln2), F32(a.dgate), F32(a.dln), p.xa[4]);
    project_back(li, 5, F32(p.ln2), F32(a.dup), F32(a.dln), p.xa[5]);
    backend.RmsNormBackward(F32(a.dx), layer.post_norm.grad(), F32(a.dln), F32(p.x_mid),
                            layer.post_norm.data(), F32(p.rstd2), n, c);
    // Attention: x_mid = x_in + o(attention(rope(q), rope(k), v)); a.dx is now d/dx_mid.
    zero(a.datt, n * qd);
    project_back(li, 3, F32(p.att), F32(a.dx), F32(a.datt), p.xa[3]);
    zero(a.dq, n * qd);
    zero(a.dk, n * kvd);
    zero(a.dv, n * kvd);
    Backend::AttentionShape shape{a.batch,
                                  a.seq_len,
                                  hq,
                                  hkv,
                                  d,
                                  layer.window,
                                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)))};
    backend.AttentionBackward(F32(a.dq), F32(a.dk), F32(a.dv), F32(a.datt), F32(p.att), F32(p.lse),
                              F32(p.q), F32(p.k), F32(p.v), segments, shape);
    // Undo the rotation: d/d(pre-rope q) = rope^-1(dq).
    zero(a.dq_lin, n * qd);
    zero(a.dk_lin, n * kvd);
    backend.RopeBackward(F32(a.dq_lin), F32(a.dq), positions, inv_freq, n, hq, d);
    backend.RopeBackward(F32(a.dk_lin), F32(a.dk), positions, inv_freq, n, hkv, d);
    if (config_.has_qk_norm()) {
      // The rotated values were the per-head norms of q_lin/k_lin: one more backward.
      zero(a.dq, n * qd);
      zero(a.dk, n * kvd);
      backend.RmsNormBackward(F32(a.dq), layer.q_norm.grad(), F32(a.dq_lin), F32(p.q_lin),
                              layer.q_norm.data(), F32(p.rstd_q), n * hq, d);
      backend.RmsNormBackward(F32(a.dk), layer.k_norm.grad(), F32(a.dk_lin), F32(p.k_lin),
                              layer.k_norm.data(), F32(p.rstd_k), n * hkv, d);
      std::swap(a.dq, a.dq_lin);
      std::swap(a.dk, a.dk_lin);
    }
    zero(a.dln, n * c);
    project_back(li, 0, F32(p.ln1), F32(a.dq_lin), F32(a.dln), p.xa[0]);
    project_back(li, 1, F32(p.ln1), F32(a.dk_lin), F32(a.dln), p.xa[1]);
    project_back(li, 2, F32(p.ln1), F32(a.dv), F32(a.dln), p.xa[2]);
    backend.RmsNormBackward(F32(a.dx), layer.input_norm.grad(), F32(a.dln), F32(p.x_in),
                            layer.input_norm.data(), F32(p.rstd1), n, c);
  }
  if (float* dtable = globals_->embed.grad()) {
    backend.EmbeddingBackward(dtable, F32(a.dx), I32(a.tokens), n, config_.vocab_size, c);
  }
}

Result<double> LlamaModel::TrainForwardBackward(Backend& backend, const Batch& batch,
                                                float grad_scale, uint64_t dropout_seed) {
  SOVAI_RETURN_IF_ERROR(CheckBackend(backend));
  SOVAI_RETURN_IF_ERROR(CheckBatch(batch));
  if (batch.targets.empty()) {
    return Status(StatusCode::kInvalidArgument, "a training batch needs targets");
  }
  SOVAI_RETURN_IF_ERROR(Forward(backend, batch, /*training=*/true, dropout_seed));
  Activations& a = *acts_;
  const int64_t n = a.n, c = config_.hidden_size;
  const int64_t f = config_.intermediate_size, qd = config_.q_dim(), kvd = config_.kv_dim();
  // The backward scratch (Activations), sized for this batch.
  const std::pair<kernels::DeviceBuffer*, int64_t> scratch[] = {
      {&a.dx, n * c},    {&a.dln, n * c},     {&a.dq, n * qd},      {&a.dk, n * kvd},
      {&a.dv, n * kvd},  {&a.dq_lin, n * qd}, {&a.dk_lin, n * kvd}, {&a.datt, n * qd},
      {&a.dgate, n * f}, {&a.dup, n * f},     {&a.dhidden, n * f}};
  for (const auto& [buffer, count] : scratch) {
    SOVAI_RETURN_IF_ERROR(
        kernels::Reserve(backend, *buffer, static_cast<size_t>(count) * sizeof(float)));
  }
  backend.Zero(a.dln.data(), static_cast<size_t>(n * c) * sizeof(float));
  const Matrix& head = config_.tie_word_embeddings ? globals_->embed : globals_->head;
  float* dhead = config_.tie_word_embeddings ? globals_->embed.grad() : globals_->head.grad();
  const int64_t chunk = std::max<int64_t>(1, kLogitsPerChunk / config_.vocab_size);
  double loss = backend.CrossEntropy(F32(a.dln), dhead, F32(a.lnf), head.ref, I32(a.targets), n,
                                     grad_scale, chunk);
  Backward(backend, dropout_seed);
  return loss;
}

Result<double> LlamaModel::Loss(Backend& backend, const Batch& batch) {
  SOVAI_RETURN_IF_ERROR(CheckBackend(backend));
  SOVAI_RETURN_IF_ERROR(CheckBatch(batch));
  if (batch.targets.empty()) return Status(StatusCode::kInvalidArgument, "the loss needs targets");
  SOVAI_RETURN_IF_ERROR(Forward(backend, batch, /*training=*/false, 0));
  const Matrix& head = config_.tie_word_embeddings ? globals_->embed : globals_->head;
  const int64_t chunk = std::max<int64_t>(1, kLogitsPerChunk / config_.vocab_size);
  return backend.CrossEntropy(nullptr, nullptr, F32(acts_->lnf), head.ref, I32(acts_->targets),
                              acts_->n, 1.0f, chunk);
}

Result<std::vector<float>> LlamaModel::Logits(Backend& backend, const Batch& batch) {
  SOVAI_RETURN_IF_ERROR(CheckBackend(backend));
  SOVAI_RETURN_IF_ERROR(CheckBatch(batch));
  SOVAI_RETURN_IF_ERROR(Forward(backend, batch, /*training=*/false, 0));
  const Matrix& head = config_.tie_word_embeddings ? globals_->embed : globals_->head;
  const size_t count = static_cast<size_t>(acts_->n * config_.vocab_size);  // [N, V]
  // A buffer of this call only: [N, V] logits are the largest array of a step, not kept.
  SOVAI_ASSIGN_OR_RETURN(kernels::DeviceBuffer device_logits,
                         backend.Allocate(count * sizeof(float)));
  backend.LinearForward(F32(device_logits), F32(acts_->lnf), head.ref, nullptr, acts_->n);
  std::vector<float> logits(count);
  backend.Download(logits.data(), device_logits.data(), count * sizeof(float));
  return logits;
}

}  // namespace sovai::model
