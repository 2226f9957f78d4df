// The Llama-family transformer (llama, mistral, qwen2, qwen3), forward and backward, built from the
// ops of kernels/backend.h. One model code serves training (full, LoRA, QLoRA) and inference.
//
//   x = embed(tokens)                                           x[N, C]
//   per layer:  h = rmsnorm(x) ; q,k,v = h @ Wq,Wk,Wv (+bias) (+LoRA)
//               q,k = rmsnorm per head (qwen3) ; q,k = rope(q,k)
//               x = x + attention(q, k, v) @ Wo (+LoRA)
//               h = rmsnorm(x) ; x = x + (silu(h @ Wgate) * (h @ Wup)) @ Wdown (+LoRA)
//   logits = rmsnorm(x) @ lm_head^T  (lm_head = embed when tied)
//
// Base weights are frozen in f32, bf16 or NF4 (QLoRA), or trainable in f32 (full training). LoRA
// adapters (PEFT semantics: y += scale * B(A(dropout(x))), scale = alpha / r, or alpha / sqrt(r)
// with rsLoRA) may sit on any subset of the seven projections.
//
// A step runs on a Batch of B rows of T tokens (N = B*T). Rows may pack several samples:
// `segments` keeps samples from attending to each other and `positions` restarts at each sample.
// Activations of the last TrainForwardBackward are kept inside the model (one step at a time).
//
// Memory: a model belongs to the backend it was loaded on. Every weight, parameter, gradient,
// activation, KV block and adapter lives in that backend's buffers (kernels/backend.h); host data
// crosses only through Upload (weights, batches, index arrays) and Download (logits, exported
// adapters and tensors). The backend must outlive the model, its caches and adapters, and the
// methods that take a backend refuse another one (FailedPrecondition).
//
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kernels/backend.h"
#include "kernels/nf4.h"
#include "model/model_config.h"
#include "model/peft_adapter.h"
#include "model/safetensors.h"

namespace sovai::model {

// The seven linear projections of a layer are the modules a PEFT adapter targets (peft_adapter.h
// names them: "q_proj", ..., "down_proj").
using Projection = LoraModule;
inline constexpr int kProjectionCount = 7;

// A trainable tensor: its value and gradient (f32, same size, in the backend's memory) and its HF
// or PEFT name. Read and write them with kernels::DownloadAll and Backend::Upload.
struct Parameter {
  std::string name;
  std::vector<uint64_t> shape;
  kernels::DeviceBuffer value;  // f32[numel()]
  kernels::DeviceBuffer grad;   // f32[numel()]; empty for a frozen norm or bias
  int64_t numel() const { return value.count<float>(); }
};
// A parameter holding `values` (uploaded to `backend`), with a zeroed gradient when with_grad.
// Errors: the backend's allocation errors.
base::Result<Parameter> NewParameter(kernels::Backend& backend, std::string name,
                                     std::vector<uint64_t> shape, std::span<const float> values,
                                     bool with_grad);

// How frozen base weights are kept in memory.
enum class BaseWeights : uint8_t {
  kF32,
  kBF16,       // bf16 projections (norms and biases stay f32)
  kNF4,        // QLoRA: NF4 projections, embeddings and head in bf16
  kTrainable,  // full training: every tensor is an f32 Parameter
  kQ8_0,       // inference: Q8_0 projections, embeddings and head (bf16 where a row is not
               // whole blocks of 32)
};

struct LoraOptions {
  int64_t rank = 16;
  double alpha = 32;
  float dropout = 0.05f;
  bool use_rslora = false;
  std::vector<Projection> targets;  // empty: all seven
  uint64_t seed = 0;                // initialisation of A (B starts at zero, as in PEFT)

  double Scale() const;
};

// One tensor of a checkpoint as the loader sees it: f32/f16/bf16 elements.
struct SourceTensor {
  tensor::DType dtype = tensor::DType::kF32;
  std::vector<uint64_t> shape;
  std::span<const std::byte> bytes;
};
// Looks up a tensor by its HF name; NotFound when absent.
using TensorSource = std::function<base::Result<SourceTensor>(std::string_view name)>;
// The tensors of a checkpoint (which must outlive the source), as f32/f16/bf16 views.
TensorSource TensorSourceOf(const SafetensorsSet& weights);

struct Batch {
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::span<const int32_t> tokens;     // [N]
  std::span<const int32_t> targets;    // [N]; < 0: not counted in the loss
  std::span<const int32_t> positions;  // [N]; empty: 0..T-1 in every row
  std::span<const int32_t> segments;   // [N]; empty: one sample per row
};

// The paged KV cache of one model for inference: per layer, keys and values
// [num_blocks, block_size, Hkv, D] in f32. Which blocks a sequence owns is the scheduler's
// business (serve/block_manager.h); the model only reads and writes the blocks it is given.
class KvCache {
 public:
  // A cache of num_blocks blocks in `backend`'s memory, zeroed. Errors: the backend's allocation
  // errors (ResourceExhausted).
  static base::Result<KvCache> Create(kernels::Backend& backend, const ModelConfig& config,
                                      int64_t num_blocks, int64_t block_size);
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  kernels::Backend& backend() const { return *backend_; }
  // Bytes one token takes in the cache (keys and values of every layer).
  static int64_t BytesPerToken(const ModelConfig& config);
  // The layer's keys and values (the backend's memory, for its ops).
  float* keys(int64_t layer) { return keys_[static_cast<size_t>(layer)].as<float>(); }
  float* values(int64_t layer) { return values_[static_cast<size_t>(layer)].as<float>(); }
  // Copies the keys and values of slots [0, count) of block `from` into the same slots of block
  // `to`, in every layer (a partial prefix-cache hit: serve/scheduler.h), with the backend's
  // Copy. Blocks in [0, num_blocks), from != to, count in [0, block_size] (violations are bugs:
  // SOVAI_CHECK).
  void CopyLeadingSlots(int64_t from, int64_t to, int64_t count);

 private:
  KvCache() = default;
  kernels::Backend* backend_ = nullptr;
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
  int64_t slot_floats_ = 0;                           // Hkv * D
  std::vector<kernels::DeviceBuffer> keys_, values_;  // [L] of [num_blocks * block_size * Hkv * D]
};

// A LoRA adapter prepared for inference next to a frozen base model; many can be in use at once,
// and sequences with different adapters (or none) share one batched forward pass.
class InferenceAdapter {
 public:
  // The adapter's weights uploaded to `backend` (the model's). Errors: an adapter that does not
  // fit `config` (ValidateLoraAdapter), layers_to_transform, the backend's allocation errors.
  static base::Result<std::unique_ptr<InferenceAdapter>> FromPeft(kernels::Backend& backend,
                                                                  const LoraAdapter& adapter,
                                                                  const ModelConfig& config);
  int64_t rank() const { return rank_; }
  float scale() const { return scale_; }
  kernels::Backend& backend() const { return *backend_; }
  // A [R, in] and B [out, R] of one projection, f32 in the backend's memory.
  struct ModuleWeights {
    kernels::DeviceBuffer a;
    kernels::DeviceBuffer b;
  };
  // The weights of `projection` in `layer`; null when the adapter has none there.
  const ModuleWeights* Module(int64_t layer, Projection projection) const;

 private:
  kernels::Backend* backend_ = nullptr;
  int64_t rank_ = 0;
  float scale_ = 0;
  int64_t layers_ = 0;
  std::vector<ModuleWeights> modules_;
  std::vector<int32_t> index_;  // [layers * 7] -> modules_ index, -1 when absent
};

// Which final hidden states (after the final norm, the rows the head would read) an inference
// step returns for a sequence: none, its last token's, or one per token of the step (pooling of
// embedding models: last-token, mean, first-token).
enum class HiddenOutput : uint8_t { kNone, kLast, kAll };

// The new tokens of one sequence in an inference step.
struct InferenceSequence {
  std::span<const int32_t> tokens;       // [T] the tokens to run (a prompt chunk or one token)
  int64_t start = 0;                     // they sit at positions start .. start + T - 1
  std::span<const int32_t> block_table;  // the blocks holding positions 0 .. start + T - 1
  const InferenceAdapter* adapter = nullptr;
  bool want_logits = false;  // return the logits after the last of `tokens`
  HiddenOutput hidden = HiddenOutput::kNone;
};

class LlamaModel {
 public:
  // Loads the base weights from `source` (names and shapes as ExpectedTensors(config) says) into
  // `backend`'s memory.
  static base::Result<std::unique_ptr<LlamaModel>> Load(kernels::Backend& backend,
                                                        const ModelConfig& config,
                                                        const TensorSource& source,
                                                        BaseWeights storage);
  // A trainable model with weights drawn as transformers initialises Llama (normal, std 0.02;
  // norms at one), for training from scratch.
  static base::Result<std::unique_ptr<LlamaModel>> RandomInit(kernels::Backend& backend,
                                                              const ModelConfig& config,
                                                              uint64_t seed);
  ~LlamaModel();

  const ModelConfig& config() const { return config_; }
  // The backend whose memory holds the model.
  kernels::Backend& backend() const { return *backend_; }

  // Adds LoRA adapters to every target projection of every layer. Errors: a second call, a
  // model with trainable base weights, rank < 1.
  base::Status AddLora(const LoraOptions& options);
  const std::optional<LoraOptions>& lora() const { return lora_; }
  // The adapter of `projection` in `layer` (A [r, in], B [out, r]); nullptr when it has none.
  struct LoraPair {
    Parameter* a = nullptr;
    Parameter* b = nullptr;
  };
  LoraPair Lora(int64_t layer, Projection projection);

  // The adapters as a PEFT adapter (for WriteLoraAdapter); FailedPrecondition without adapters.
  base::Result<LoraAdapter> ExportLora(std::string base_model_name) const;
  // Adds adapters with the weights of a PEFT adapter (for inference or continued training).
  base::Status ImportLora(const LoraAdapter& adapter);

  // What an optimizer updates: LoRA A/B when adapters exist, else every base tensor (kTrainable).
  std::vector<Parameter*> TrainableParameters();
  // A base tensor by HF name as f32 (for writing a fully trained model). With `merge_lora`, a
  // projection weight with an adapter comes back as W + scale * B @ A (for writing a merged model).
  base::Result<std::vector<float>> BaseTensorF32(std::string_view name, bool merge_lora) const;
  // Names and shapes of the base tensors, in checkpoint order.
  const std::vector<ExpectedTensor>& base_tensors() const { return expected_; }

  // Forward and backward over `batch`: returns the SUM of token losses over counted targets and
  // ACCUMULATES into the trainable gradients the gradient of (sum of losses) * grad_scale.
  // `training` enables LoRA dropout. These methods, and Infer, run on `backend`, which must be
  // the model's (FailedPrecondition otherwise); they upload the batch and download what they
  // return.
  base::Result<double> TrainForwardBackward(kernels::Backend& backend, const Batch& batch,
                                            float grad_scale, uint64_t dropout_seed);
  // The sum of token losses without a backward pass (evaluation).
  base::Result<double> Loss(kernels::Backend& backend, const Batch& batch);
  // logits[N, V] of every position.
  base::Result<std::vector<float>> Logits(kernels::Backend& backend, const Batch& batch);

  // One batched inference step over several sequences (llama_infer.cc): runs every sequence's
  // new tokens, writing their keys and values into `cache` at the positions their block tables
  // give, and fills logits[S', V] with the logits of the last token of each sequence whose
  // want_logits is set, in order. Positions below `start` must already be in the cache. Errors
  // (InvalidArgument): a token id outside the vocabulary, a block table too short for the
  // positions, a block id outside the cache, a position past max_position_embeddings;
  // FailedPrecondition for a cache or adapter of another backend. The logits are downloaded.
  base::Status Infer(kernels::Backend& backend, KvCache& cache,
                     std::span<const InferenceSequence> sequences, std::vector<float>& logits);
  // The same step, also filling `hidden` with [H', C] final hidden states: for each sequence in
  // order, none, its last token's row or every token's row, as its `hidden` asks. The rows are
  // the ones the logits are computed from (one forward pass serves both). Downloaded.
  base::Status Infer(kernels::Backend& backend, KvCache& cache,
                     std::span<const InferenceSequence> sequences, std::vector<float>& logits,
                     std::vector<float>& hidden);

 private:
  struct Layer;
  struct Activations;
  LlamaModel(kernels::Backend& backend, ModelConfig config);
  base::Status Allocate(BaseWeights storage);
  // Puts a loaded or initialised base tensor in its slot.
  base::Status Place(const std::string& name, std::vector<float> values,
                     kernels::WeightRef::Format projection_format,
                     kernels::WeightRef::Format table_format, bool trainable);
  // The slot of a base tensor; nullptr for an unknown name.
  struct Slot;
  Slot Find(std::string_view name) const;
  // The backend has every op, and it is the model's.
  base::Status CheckBackend(const kernels::Backend& backend) const;
  base::Status CheckBatch(const Batch& batch) const;
  // Sizes the activations for `batch` and uploads its arrays.
  base::Status PrepareActivations(const Batch& batch);
  // Runs the forward pass, keeping what backward needs, up to the final normed hidden state.
  base::Status Forward(kernels::Backend& backend, const Batch& batch, bool training,
                       uint64_t dropout_seed);
  void Backward(kernels::Backend& backend, uint64_t dropout_seed);

  kernels::Backend* backend_;
  ModelConfig config_;
  std::vector<ExpectedTensor> expected_;
  BaseWeights storage_ = BaseWeights::kF32;
  std::vector<std::unique_ptr<Layer>> layers_;
  struct Globals;
  std::unique_ptr<Globals> globals_;
  std::optional<LoraOptions> lora_;
  std::vector<std::unique_ptr<Parameter>> lora_parameters_;
  std::unique_ptr<Activations> acts_;
  struct InferScratch;
  // The end of an inference step: the final norm over the `kept` rows the last layer left in
  // the scratch, the head over the last row of each sequence that wants logits, and the
  // downloads of the logits and of the hidden states the sequences asked for.
  void InferOutputs(kernels::Backend& backend, std::span<const InferenceSequence> sequences,
                    int64_t kept, int64_t with_logits, std::vector<float>& logits,
                    std::vector<float>& hidden);
  // Infer's other steps: the check that model, cache and adapters share `backend`; the
  // sequences flattened into the scratch's tokens, positions, sequence of each token, cache
  // slots and block tables (each checked against the model and the cache); and, before the
  // last layer's attention, the rows whose outputs leave the step moved to the front of q and x.
  base::Status CheckInferBackends(kernels::Backend& backend, KvCache& cache,
                                  std::span<const InferenceSequence> sequences) const;
  base::Status FlattenSequences(KvCache& cache, std::span<const InferenceSequence> sequences,
                                int64_t max_blocks);
  void MoveKeptRowsUp(kernels::Backend& backend, std::span<const InferenceSequence> sequences);
  std::unique_ptr<InferScratch> infer_;
};

}  // namespace sovai::model
