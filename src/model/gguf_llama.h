// Export of a Hugging Face llama-architecture model (llama, mistral and fine-tunes of them) to
// GGUF, so that llama.cpp runs exactly the model we trained. It does what llama.cpp's
// convert_hf_to_gguf.py does for LlamaForCausalLM (docs/formats/gguf.md has the details):
//
// * Tensor names: model.embed_tokens.weight -> token_embd.weight, model.layers.N.* ->
//   blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
//   ffn_down}, model.norm.weight -> output_norm.weight, lm_head.weight -> output.weight (left out
//   when the embeddings are tied: llama.cpp then reuses token_embd). Biases map the same way.
// * Shapes are written in ggml order (the PyTorch shape reversed).
// * The rows of q_proj and k_proj (weights and biases) are permuted from Hugging Face's
//   rotate-half RoPE layout to the interleaved pairs llama.cpp's llama RoPE expects: within each
//   head of D rows, GGUF row 2i + j holds HF row j * D/2 + i (i < D/2, j in {0, 1}). K is
//   permuted per KV head. LlamaGgufSourceRow computes it.
// * Tensor types: 1-D tensors (norms, biases, rope_freqs) and every *_norm.weight stay F32;
//   the others take the file type's type, except that for Q8_0 a tensor whose rows (ne[0]) are
//   not a multiple of 32 falls back to F16, as the converter does.
// * Llama 3.1-style rope scaling ("rope_type": "llama3") is written as the rope_freqs.weight
//   tensor of per-frequency divisors (Llama3RopeFactors); linear scaling as the
//   llama.rope.scaling.{type,factor} keys. Other kinds are Unimplemented.
// * Metadata: llama.* hyperparameters (u32 / f32 as llama.cpp requires), general.*, and the
//   tokenizer (tokenizer.ggml.*), including the chat template.
//
// The input is a plain struct so that it does not depend on how the weights were loaded: each
// tensor is a name, dtype, PyTorch shape and a byte span (typically into a memory-mapped
// safetensors file). Nothing is copied whole: tensors are converted a few rows at a time while
// the GGUF file is written (GgufWriter, atomically).
//
// LlamaArchFromConfig and HfTensorsFrom build the input's parameters and tensors from a loaded
// checkpoint (model_config.h, safetensors.h); the vocabulary comes from the tokenizer.
//
// Thread-safety: functions of their arguments; the input must not change during the call.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "model/gguf.h"
#include "tensor/dtype.h"

namespace sovai::model {

struct ModelConfig;
class SafetensorsSet;

// What most tensors are stored as (general.file_type says it too).
enum class LlamaGgufFileType : uint8_t { kF32, kF16, kBF16, kQ8_0 };
// "f32", "f16", "bf16", "q8_0".
std::string_view LlamaGgufFileTypeName(LlamaGgufFileType type);
// The spellings above, case-insensitive; nullopt otherwise.
std::optional<LlamaGgufFileType> ParseLlamaGgufFileType(std::string_view name);
// llama.cpp's llama_ftype value for general.file_type: 0, 1, 32, 7.
uint32_t LlamaFtype(LlamaGgufFileType type);

enum class LlamaRopeScalingKind : uint8_t { kNone, kLinear, kLlama3 };

// config.json's "rope_scaling" (absent = kNone).
struct LlamaRopeScaling {
  LlamaRopeScalingKind kind = LlamaRopeScalingKind::kNone;
  double factor = 1.0;  // linear and llama3
  // llama3 only (Hugging Face's defaults for Llama 3.1).
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  uint64_t original_context_length = 8192;  // rope_scaling.original_max_position_embeddings
};

// config.json of a LlamaForCausalLM.
struct LlamaArchParams {
  uint32_t vocab_size = 0;         // rows of the embedding matrix
  uint32_t hidden_size = 0;        // C
  uint32_t intermediate_size = 0;  // feed-forward width
  uint32_t num_layers = 0;
  uint32_t num_heads = 0;
  uint32_t num_kv_heads = 0;  // = num_heads without grouped-query attention
  uint32_t head_dim = 0;      // usually hidden_size / num_heads; must be even
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  LlamaRopeScaling rope_scaling;
  uint32_t context_length = 0;  // max_position_embeddings
  bool tie_word_embeddings = false;
};

// One Hugging Face tensor. `data` is row-major, little-endian, exactly product(shape) elements of
// `dtype`, and must stay valid until WriteLlamaGguf returns.
struct HfTensor {
  std::string name;
  tensor::DType dtype = tensor::DType::kF32;
  std::vector<uint64_t> shape;  // PyTorch order, outermost first
  std::span<const uint8_t> data;
};

// tokenizer.ggml.model: "gpt2" for byte-level BPE (Llama 3, Mistral Nemo, Qwen), "llama" for
// SentencePiece BPE (Llama 2, Mistral 7B).
enum class LlamaTokenizerModel : uint8_t { kGpt2, kLlama };

// tokenizer.ggml.token_type values.
enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,  // special tokens (bos, eos, <|eot_id|>, ...)
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,  // SentencePiece byte-fallback tokens <0x00>..<0xFF>
};

struct LlamaVocab {
  LlamaTokenizerModel model = LlamaTokenizerModel::kGpt2;
  // tokenizer.ggml.pre: llama.cpp's pre-tokenizer name, e.g. "llama-bpe" (Llama 3), "default".
  std::string pre = "default";
  std::vector<std::string> tokens;         // in id order; padded to vocab_size (see below)
  std::vector<GgufTokenType> token_types;  // empty (all normal) or one per token
  std::vector<std::string> merges;         // "a b" per rule, priority order (gpt2)
  std::vector<float> scores;               // empty or one per token (llama: required)
  std::optional<uint32_t> bos_id, eos_id, unk_id, pad_id;
  std::optional<bool> add_bos, add_eos;
  std::string chat_template;  // tokenizer_config.json's chat_template; empty = none
};

struct LlamaGgufInput {
  std::string name;  // general.name
  LlamaArchParams arch;
  LlamaVocab vocab;
  std::vector<HfTensor> tensors;
};

// Where a tensor goes: computed by PlanLlamaGguf, used by WriteLlamaGguf.
struct LlamaGgufTensorPlan {
  std::string gguf_name;
  GgmlType type = GgmlType::kF32;
  std::vector<uint64_t> ne;  // ggml order
  // Index into input.tensors, or -1 for rope_freqs.weight (computed, not read).
  int64_t source = -1;
  // For attn_q / attn_k: the head count of the row permutation; 0 = rows kept in order.
  uint32_t permute_heads = 0;
};

// Checks the input (every tensor's name, dtype, shape and byte size against the parameters;
// that every required tensor is present; the vocabulary) and lays out the GGUF tensors in a
// fixed order: rope_freqs, token_embd, blk.0.*, blk.1.*, ..., output_norm, output. Errors:
// InvalidArgument naming the tensor or field; Unimplemented for an unsupported rope scaling.
base::Result<std::vector<LlamaGgufTensorPlan>> PlanLlamaGguf(const LlamaGgufInput& input,
                                                             LlamaGgufFileType file_type);

// Converts and writes `input` to `path` (atomically: on error the old file, if any, is kept).
// Errors: those of PlanLlamaGguf, of the metadata, and of the Env.
base::Status WriteLlamaGguf(base::Env& env, const std::string& path, const LlamaGgufInput& input,
                            LlamaGgufFileType file_type);

// The Hugging Face row that GGUF row `row` of a permuted q_proj / k_proj (weight or bias) holds:
// heads are blocks of `head_dim` rows (head_dim even), and within one,
// GGUF row 2i + j <- HF row j * head_dim/2 + i.
uint64_t LlamaGgufSourceRow(uint64_t row, uint64_t head_dim);

// rope_freqs.weight for "rope_type": "llama3": head_dim / 2 divisors, one per rotary frequency,
// computed in float as the converter does (1 for high frequencies, `factor` for low ones, a
// smooth blend between).
std::vector<float> Llama3RopeFactors(const LlamaArchParams& arch);

// --- Adapters from the Hugging Face loaders ---

// The parameters of a parsed config.json. Errors: Unimplemented for qwen2 / qwen3 (other GGUF
// architectures: no Q/K permutation, other tensors) and for a mistral sliding window shorter than
// the context (llama.cpp's llama architecture attends to the whole context, so the exported model
// would compute differently); InvalidArgument for a size beyond 32 bits.
base::Result<LlamaArchParams> LlamaArchFromConfig(const ModelConfig& config);

// Every tensor of a checkpoint, as views into its mapped files (no copy; valid while `weights`
// lives). Errors: Unimplemented naming a tensor whose dtype is not F32, F16 or BF16.
base::Result<std::vector<HfTensor>> HfTensorsFrom(const SafetensorsSet& weights);

// The GGUF vocabulary of a byte-level BPE tokenizer.json (with its tokenizer_config.json, which
// may be null): tokens in id order with their types (added special tokens are control tokens,
// other added tokens user-defined), the merges, BOS/EOS from the config's bos_token/eos_token
// and add_bos_token, the chat template, and llama.cpp's pre-tokenizer name for the split pattern
// ("llama-bpe" for Llama 3's, "qwen2" for Qwen's, "gpt-2" for GPT-2's). Errors: InvalidArgument
// for a malformed file; Unimplemented for a SentencePiece-style (byte_fallback / Metaspace)
// tokenizer, whose GGUF form needs the sentencepiece scores tokenizer.json lacks.
base::Result<LlamaVocab> LlamaVocabFromTokenizerJson(const nlohmann::json& tokenizer,
                                                     const nlohmann::json& tokenizer_config);

}  // namespace sovai::model
