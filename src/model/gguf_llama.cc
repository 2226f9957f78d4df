#include "model/gguf_llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <utility>

#include "base/check.h"
#include "base/strings.h"
#include "kernels/q8_0.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace sovai::model {

using kernels::DequantizeRowQ8_0;
using kernels::kQ8_0BlockValues;
using kernels::Q8_0Bytes;
using kernels::QuantizeRowQ8_0;

namespace {

// Converted bytes handed to the writer at a time: bounds the memory a conversion takes whatever
// the model's size.
constexpr uint64_t kConversionChunkBytes = 1u << 20;
// gguf-py's GGML_QUANT_VERSION, written as general.quantization_version.
constexpr uint32_t kQuantizationVersion = 2;
// Score of the [PAD<i>] tokens added to a SentencePiece vocabulary (as the converter does).
constexpr float kPadTokenScore = -1000.0f;

std::string ShapeString(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// What the plain file types store their big tensors as.
GgmlType FileTypeGgml(LlamaGgufFileType type) {
  switch (type) {
    case LlamaGgufFileType::kF32:
      return GgmlType::kF32;
    case LlamaGgufFileType::kF16:
      return GgmlType::kF16;
    case LlamaGgufFileType::kBF16:
      return GgmlType::kBF16;
    case LlamaGgufFileType::kQ8_0:
      return GgmlType::kQ8_0;
  }
  return GgmlType::kF32;
}

std::optional<tensor::DType> PlainDType(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return tensor::DType::kF32;
    case GgmlType::kF16:
      return tensor::DType::kF16;
    case GgmlType::kBF16:
      return tensor::DType::kBF16;
    case GgmlType::kQ8_0:
      return std::nullopt;
  }
  return std::nullopt;
}

// One tensor a llama checkpoint may hold.
struct TensorSlot {
  std::string hf_name;
  std::string gguf_name;
  std::vector<uint64_t> shape;  // PyTorch order
  bool required = true;
  uint32_t permute_heads = 0;
};

std::vector<TensorSlot> LlamaTensorSlots(const LlamaArchParams& a) {
  const uint64_t C = a.hidden_size;
  const uint64_t F = a.intermediate_size;
  const uint64_t q_rows = uint64_t{a.num_heads} * a.head_dim;
  const uint64_t kv_rows = uint64_t{a.num_kv_heads} * a.head_dim;
  std::vector<TensorSlot> out;
  out.push_back({"model.embed_tokens.weight", "token_embd.weight", {a.vocab_size, C}});
  for (uint32_t i = 0; i < a.num_layers; ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    const std::string gg = "blk." + std::to_string(i) + ".";
    auto linear = [&](const std::string& hf_name, const std::string& gg_name, uint64_t rows,
                      uint64_t cols, uint32_t heads) {
      out.push_back(
          {hf + hf_name + ".weight", gg + gg_name + ".weight", {rows, cols}, true, heads});
      out.push_back({hf + hf_name + ".bias", gg + gg_name + ".bias", {rows}, false, heads});
    };
    out.push_back({hf + "input_layernorm.weight", gg + "attn_norm.weight", {C}});
    linear("self_attn.q_proj", "attn_q", q_rows, C, a.num_heads);
    linear("self_attn.k_proj", "attn_k", kv_rows, C, a.num_kv_heads);
    linear("self_attn.v_proj", "attn_v", kv_rows, C, 0);
    linear("self_attn.o_proj", "attn_output", C, q_rows, 0);
    out.push_back({hf + "post_attention_layernorm.weight", gg + "ffn_norm.weight", {C}});
    linear("mlp.gate_proj", "ffn_gate", F, C, 0);
    linear("mlp.up_proj", "ffn_up", F, C, 0);
    linear("mlp.down_proj", "ffn_down", C, F, 0);
  }
  out.push_back({"model.norm.weight", "output_norm.weight", {C}});
  // With tied embeddings llama.cpp reuses token_embd for the output; a checkpoint that still
  // carries lm_head.weight (a copy) has it skipped below.
  out.push_back({"lm_head.weight", "output.weight", {a.vocab_size, C}, !a.tie_word_embeddings});
  return out;
}

base::Status CheckArch(const LlamaArchParams& a) {
  auto positive = [](uint64_t v, std::string_view field) -> base::Status {
    if (v == 0)
      return base::InvalidArgumentError("llama parameter " + std::string(field) + " is 0");
    return base::Status();
  };
  SOVAI_RETURN_IF_ERROR(positive(a.vocab_size, "vocab_size"));
  SOVAI_RETURN_IF_ERROR(positive(a.hidden_size, "hidden_size"));
  SOVAI_RETURN_IF_ERROR(positive(a.intermediate_size, "intermediate_size"));
  SOVAI_RETURN_IF_ERROR(positive(a.num_layers, "num_hidden_layers"));
  SOVAI_RETURN_IF_ERROR(positive(a.num_heads, "num_attention_heads"));
  SOVAI_RETURN_IF_ERROR(positive(a.num_kv_heads, "num_key_value_heads"));
  SOVAI_RETURN_IF_ERROR(positive(a.head_dim, "head_dim"));
  SOVAI_RETURN_IF_ERROR(positive(a.context_length, "max_position_embeddings"));
  if (a.head_dim % 2 != 0) {
    return base::InvalidArgumentError("llama head_dim " + std::to_string(a.head_dim) +
                                      " is odd: RoPE rotates pairs");
  }
  if (a.num_heads % a.num_kv_heads != 0) {
    return base::InvalidArgumentError("llama num_attention_heads " + std::to_string(a.num_heads) +
                                      " is not a multiple of num_key_value_heads " +
                                      std::to_string(a.num_kv_heads));
  }
  if (a.num_layers > 100'000 || a.vocab_size > static_cast<uint32_t>(INT32_MAX)) {
    return base::InvalidArgumentError("llama num_hidden_layers or vocab_size out of range");
  }
  if (!(a.rms_norm_eps > 0) || !(a.rope_theta > 0)) {
    return base::InvalidArgumentError("llama rms_norm_eps and rope_theta must be positive");
  }
  const LlamaRopeScaling& s = a.rope_scaling;
  if (s.kind != LlamaRopeScalingKind::kNone && !(s.factor > 0)) {
    return base::InvalidArgumentError("llama rope_scaling.factor must be positive");
  }
  if (s.kind == LlamaRopeScalingKind::kLlama3 &&
      (!(s.high_freq_factor > s.low_freq_factor) || !(s.low_freq_factor > 0) ||
       s.original_context_length == 0)) {
    return base::InvalidArgumentError(
        "llama3 rope_scaling needs high_freq_factor > low_freq_factor > 0 and "
        "original_max_position_embeddings > 0");
  }
  return base::Status();
}

// The vocabulary as written: padded to vocab_size (as the converter does for a tokenizer with
// fewer tokens than embedding rows), types and scores filled in.
struct PaddedVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;  // empty for gpt2 without scores
};

base::Result<PaddedVocab> PadVocab(const LlamaVocab& v, uint32_t vocab_size) {
  if (v.tokens.empty()) return base::InvalidArgumentError("the tokenizer has no tokens");
  if (v.tokens.size() > vocab_size) {
    return base::InvalidArgumentError("the tokenizer has " + std::to_string(v.tokens.size()) +
                                      " tokens, more than the model's vocab_size " +
                                      std::to_string(vocab_size));
  }
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size()) {
    return base::InvalidArgumentError("the tokenizer has " + std::to_string(v.tokens.size()) +
                                      " tokens but " + std::to_string(v.token_types.size()) +
                                      " token types");
  }
  if (!v.scores.empty() && v.scores.size() != v.tokens.size()) {
    return base::InvalidArgumentError("the tokenizer has " + std::to_string(v.tokens.size()) +
                                      " tokens but " + std::to_string(v.scores.size()) + " scores");
  }
  if (v.model == LlamaTokenizerModel::kLlama && v.scores.empty()) {
    return base::InvalidArgumentError(
        "a SentencePiece (llama) tokenizer needs one score per token: llama.cpp merges by score");
  }
  if (v.model == LlamaTokenizerModel::kGpt2 && v.merges.empty()) {
    return base::InvalidArgumentError("a byte-level BPE (gpt2) tokenizer needs its merges");
  }
  if (v.pre.empty()) return base::InvalidArgumentError("tokenizer.ggml.pre is empty");
  PaddedVocab out;
  out.tokens = v.tokens;
  out.types.reserve(vocab_size);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    out.types.push_back(
        static_cast<int32_t>(v.token_types.empty() ? GgufTokenType::kNormal : v.token_types[i]));
  }
  out.scores = v.scores;
  for (uint32_t i = static_cast<uint32_t>(v.tokens.size()); i < vocab_size; ++i) {
    out.tokens.push_back("[PAD" + std::to_string(i) + "]");
    out.types.push_back(static_cast<int32_t>(GgufTokenType::kUnused));
    if (!out.scores.empty()) out.scores.push_back(kPadTokenScore);
  }
  const std::pair<const char*, const std::optional<uint32_t>*> ids[] = {
      {"bos", &v.bos_id}, {"eos", &v.eos_id}, {"unk", &v.unk_id}, {"pad", &v.pad_id}};
  for (const auto& [name, id] : ids) {
    if (id->has_value() && **id >= out.tokens.size()) {
      return base::InvalidArgumentError(std::string(name) + " token id " + std::to_string(**id) +
                                        " is outside the vocabulary of " +
                                        std::to_string(out.tokens.size()));
    }
  }
  return out;
}

// Streams one converted tensor: `rows` rows of `cols` values, row r taken from source row
// SourceRow(r), converted to `type` a chunk of rows at a time.
base::Status ProduceConverted(const HfTensor& src, const LlamaGgufTensorPlan& plan,
                              uint64_t head_dim, const GgufChunkSink& sink) {
  // A permuted 1-D bias is rows of one value; other 1-D tensors are one row.
  uint64_t rows = 1;
  uint64_t cols = 1;
  if (src.shape.size() == 2) {
    rows = src.shape[0];
    cols = src.shape[1];
  } else if (plan.permute_heads != 0) {
    rows = src.shape[0];
  } else {
    cols = src.shape[0];
  }
  const size_t in_elem = tensor::DTypeSize(src.dtype);
  const std::optional<tensor::DType> out_dtype = PlainDType(plan.type);
  const uint64_t out_row_bytes = out_dtype ? cols * tensor::DTypeSize(*out_dtype) : Q8_0Bytes(cols);
  const uint64_t in_row_bytes = cols * in_elem;
  const uint64_t rows_per_chunk =
      std::max<uint64_t>(1, kConversionChunkBytes / std::max(out_row_bytes, cols * 4));
  // Float-typed buffers: the source span may be unaligned (safetensors data offsets are
  // arbitrary), so each row is copied into aligned storage before it is read as numbers.
  std::vector<float> in_row((in_row_bytes + 3) / 4);
  std::vector<float> f32_row(out_dtype ? 0 : cols);
  std::string out;
  out.reserve(std::min(rows, rows_per_chunk) * out_row_bytes);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t source_row = plan.permute_heads != 0 ? LlamaGgufSourceRow(r, head_dim) : r;
    std::memcpy(in_row.data(), src.data.data() + source_row * in_row_bytes, in_row_bytes);
    const size_t at = out.size();
    out.resize(at + out_row_bytes);
    if (out_dtype) {
      tensor::ConvertElements(src.dtype, in_row.data(), *out_dtype, out.data() + at, cols);
    } else {
      tensor::ConvertElements(src.dtype, in_row.data(), tensor::DType::kF32, f32_row.data(), cols);
      QuantizeRowQ8_0(
          f32_row, std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data() + at), out_row_bytes));
    }
    if (out.size() >= rows_per_chunk * out_row_bytes || r + 1 == rows) {
      SOVAI_RETURN_IF_ERROR(sink(out));
      out.clear();
    }
  }
  return base::Status();
}

}  // namespace

std::string_view LlamaGgufFileTypeName(LlamaGgufFileType type) {
  switch (type) {
    case LlamaGgufFileType::kF32:
      return "f32";
    case LlamaGgufFileType::kF16:
      return "f16";
    case LlamaGgufFileType::kBF16:
      return "bf16";
    case LlamaGgufFileType::kQ8_0:
      return "q8_0";
  }
  return "?";
}

std::optional<LlamaGgufFileType> ParseLlamaGgufFileType(std::string_view name) {
  for (LlamaGgufFileType type : {LlamaGgufFileType::kF32, LlamaGgufFileType::kF16,
                                 LlamaGgufFileType::kBF16, LlamaGgufFileType::kQ8_0}) {
    if (base::EqualsIgnoreCase(name, LlamaGgufFileTypeName(type))) return type;
  }
  return std::nullopt;
}

uint32_t LlamaFtype(LlamaGgufFileType type) {
  switch (type) {
    case LlamaGgufFileType::kF32:
      return 0;  // LLAMA_FTYPE_ALL_F32
    case LlamaGgufFileType::kF16:
      return 1;  // LLAMA_FTYPE_MOSTLY_F16
    case LlamaGgufFileType::kBF16:
      return 32;  // LLAMA_FTYPE_MOSTLY_BF16
    case LlamaGgufFileType::kQ8_0:
      return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
  }
  return 0;
}

uint64_t LlamaGgufSourceRow(uint64_t row, uint64_t head_dim) {
  SOVAI_CHECK(head_dim > 0 && head_dim % 2 == 0) << "head_dim " << head_dim;
  const uint64_t head = row / head_dim;
  const uint64_t within = row % head_dim;
  // GGUF row 2i + j <- HF row j * head_dim/2 + i: the converter's reshape(n_head, 2, D/2, ...)
  // .swapaxes(1, 2), which pairs HF's rotate-half halves into adjacent rows.
  return head * head_dim + (within % 2) * (head_dim / 2) + within / 2;
}

std::vector<float> Llama3RopeFactors(const LlamaArchParams& arch) {
  // Mirrors the converter's float32 torch arithmetic, python scalars taken to float.
  const LlamaRopeScaling& s = arch.rope_scaling;
  const float base = static_cast<float>(arch.rope_theta);
  const float dim = static_cast<float>(arch.head_dim);
  const float factor = static_cast<float>(s.factor);
  const double old_context = static_cast<double>(s.original_context_length);
  const float low_freq_wavelen = static_cast<float>(old_context / s.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(old_context / s.high_freq_factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const float span = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  const float two_pi = static_cast<float>(2 * std::numbers::pi);
  std::vector<float> out;
  out.reserve(arch.head_dim / 2);
  for (uint32_t i = 0; i < arch.head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / dim;
    const float freq = 1.0f / std::pow(base, exponent);
    const float wavelen = two_pi / freq;
    if (wavelen < high_freq_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = (static_cast<float>(old_context) / wavelen - low) / span;
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

base::Result<std::vector<LlamaGgufTensorPlan>> PlanLlamaGguf(const LlamaGgufInput& input,
                                                             LlamaGgufFileType file_type) {
  const LlamaArchParams& a = input.arch;
  SOVAI_RETURN_IF_ERROR(CheckArch(a));

  std::map<std::string, size_t, std::less<>> by_name;
  for (size_t i = 0; i < input.tensors.size(); ++i) {
    const HfTensor& t = input.tensors[i];
    if (!by_name.emplace(t.name, i).second) {
      return base::InvalidArgumentError("tensor '" + t.name + "' is given twice");
    }
  }

  std::vector<LlamaGgufTensorPlan> plan;
  if (a.rope_scaling.kind == LlamaRopeScalingKind::kLlama3) {
    plan.push_back({"rope_freqs.weight", GgmlType::kF32, {a.head_dim / 2}, -1, 0});
  }
  size_t used = 0;
  for (const TensorSlot& e : LlamaTensorSlots(a)) {
    auto it = by_name.find(e.hf_name);
    if (it == by_name.end()) {
      if (e.required) {
        return base::InvalidArgumentError("tensor '" + e.hf_name + "' is missing");
      }
      continue;
    }
    ++used;
    const HfTensor& t = input.tensors[it->second];
    if (t.shape != e.shape) {
      return base::InvalidArgumentError("tensor '" + t.name + "' has shape " +
                                        ShapeString(t.shape) + ", the model's config needs " +
                                        ShapeString(e.shape));
    }
    uint64_t elements = 1;
    for (uint64_t n : t.shape) elements *= n;  // bounded: the shape matched the u32 parameters
    if (elements > std::numeric_limits<uint64_t>::max() / 4 ||
        t.data.size() != elements * tensor::DTypeSize(t.dtype)) {
      return base::InvalidArgumentError(
          "tensor '" + t.name + "' has " + std::to_string(t.data.size()) + " bytes, its shape " +
          ShapeString(t.shape) + " of " + std::string(tensor::DTypeName(t.dtype)) + " needs " +
          std::to_string(elements * tensor::DTypeSize(t.dtype)));
    }
    if (!e.required && e.hf_name == "lm_head.weight") continue;  // tied: token_embd serves
    LlamaGgufTensorPlan p;
    p.gguf_name = e.gguf_name;
    p.ne.assign(t.shape.rbegin(), t.shape.rend());
    p.source = static_cast<int64_t>(it->second);
    p.permute_heads = e.permute_heads;
    // The converter's rule: 1-D tensors and norms stay F32 (llama.cpp's kernels expect it); the
    // rest take the file type, and Q8_0 needs whole blocks of 32 along each row.
    const bool keep_f32 = p.ne.size() <= 1 || p.gguf_name.ends_with("_norm.weight");
    p.type = keep_f32 ? GgmlType::kF32 : FileTypeGgml(file_type);
    if (p.type == GgmlType::kQ8_0 && p.ne[0] % kQ8_0BlockValues != 0) p.type = GgmlType::kF16;
    plan.push_back(std::move(p));
  }
  if (used != input.tensors.size()) {
    // Name the first tensor that is not part of a llama model, ignoring RoPE caches.
    for (const HfTensor& t : input.tensors) {
      if (t.name.ends_with(".rotary_emb.inv_freq")) continue;
      bool known = false;
      for (const TensorSlot& e : LlamaTensorSlots(a)) known = known || e.hf_name == t.name;
      if (!known) {
        return base::InvalidArgumentError(
            "tensor '" + t.name + "' is not part of a llama model with " +
            std::to_string(a.num_layers) +
            " layers (expected model.embed_tokens.weight, model.layers.N.{input_layernorm, "
            "self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}, "
            "model.norm.weight, lm_head.weight)");
      }
    }
  }
  SOVAI_RETURN_IF_ERROR(PadVocab(input.vocab, a.vocab_size).status());
  return plan;
}

base::Status WriteLlamaGguf(base::Env& env, const std::string& path, const LlamaGgufInput& input,
                            LlamaGgufFileType file_type) {
  SOVAI_ASSIGN_OR_RETURN(std::vector<LlamaGgufTensorPlan> plan, PlanLlamaGguf(input, file_type));
  const LlamaArchParams& a = input.arch;
  SOVAI_ASSIGN_OR_RETURN(PaddedVocab vocab, PadVocab(input.vocab, a.vocab_size));
  const LlamaVocab& v = input.vocab;

  GgufWriter w;
  // General. llama.cpp reads each key with one type: u32 for counts, f32 for floats.
  SOVAI_RETURN_IF_ERROR(w.SetString("general.architecture", "llama"));
  SOVAI_RETURN_IF_ERROR(w.SetString("general.type", "model"));
  if (!input.name.empty()) SOVAI_RETURN_IF_ERROR(w.SetString("general.name", input.name));
  SOVAI_RETURN_IF_ERROR(w.SetUint32("general.file_type", LlamaFtype(file_type)));
  SOVAI_RETURN_IF_ERROR(w.SetUint32("general.quantization_version", kQuantizationVersion));
  // Hyperparameters.
  SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.vocab_size", a.vocab_size));
  SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.context_length", a.context_length));
  SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.embedding_length", a.hidden_size));
  SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.block_count", a.num_layers));
  SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.feed_forward_length", a.intermediate_size));
  SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.rope.dimension_count", a.head_dim));
  SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.attention.head_count", a.num_heads));
  SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.attention.head_count_kv", a.num_kv_heads));
  SOVAI_RETURN_IF_ERROR(
      w.SetFloat32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(a.rms_norm_eps)));
  SOVAI_RETURN_IF_ERROR(w.SetFloat32("llama.rope.freq_base", static_cast<float>(a.rope_theta)));
  if (uint64_t{a.head_dim} * a.num_heads != a.hidden_size) {
    // llama.cpp assumes head_dim = hidden_size / heads unless told otherwise.
    SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.attention.key_length", a.head_dim));
    SOVAI_RETURN_IF_ERROR(w.SetUint32("llama.attention.value_length", a.head_dim));
  }
  if (a.rope_scaling.kind == LlamaRopeScalingKind::kLinear) {
    SOVAI_RETURN_IF_ERROR(w.SetString("llama.rope.scaling.type", "linear"));
    SOVAI_RETURN_IF_ERROR(
        w.SetFloat32("llama.rope.scaling.factor", static_cast<float>(a.rope_scaling.factor)));
  }
  // Tokenizer.
  SOVAI_RETURN_IF_ERROR(w.SetString("tokenizer.ggml.model",
                                    v.model == LlamaTokenizerModel::kGpt2 ? "gpt2" : "llama"));
  SOVAI_RETURN_IF_ERROR(w.SetString("tokenizer.ggml.pre", v.pre));
  SOVAI_RETURN_IF_ERROR(
      w.Set("tokenizer.ggml.tokens", GgufValue::StringArray(std::move(vocab.tokens))));
  if (!vocab.scores.empty()) {
    SOVAI_RETURN_IF_ERROR(w.Set("tokenizer.ggml.scores", GgufValue::Float32Array(vocab.scores)));
  }
  SOVAI_RETURN_IF_ERROR(w.Set("tokenizer.ggml.token_type", GgufValue::Int32Array(vocab.types)));
  if (!v.merges.empty()) {
    SOVAI_RETURN_IF_ERROR(w.Set("tokenizer.ggml.merges", GgufValue::StringArray(v.merges)));
  }
  const std::pair<const char*, const std::optional<uint32_t>*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos_id},
      {"tokenizer.ggml.eos_token_id", &v.eos_id},
      {"tokenizer.ggml.unknown_token_id", &v.unk_id},
      {"tokenizer.ggml.padding_token_id", &v.pad_id}};
  for (const auto& [key, id] : ids) {
    if (id->has_value()) SOVAI_RETURN_IF_ERROR(w.SetUint32(key, **id));
  }
  if (v.add_bos) SOVAI_RETURN_IF_ERROR(w.SetBool("tokenizer.ggml.add_bos_token", *v.add_bos));
  if (v.add_eos) SOVAI_RETURN_IF_ERROR(w.SetBool("tokenizer.ggml.add_eos_token", *v.add_eos));
  if (!v.chat_template.empty()) {
    SOVAI_RETURN_IF_ERROR(w.SetString("tokenizer.chat_template", v.chat_template));
  }

  // Tensors, converted while they are written.
  const std::vector<float> rope_factors = a.rope_scaling.kind == LlamaRopeScalingKind::kLlama3
                                              ? Llama3RopeFactors(a)
                                              : std::vector<float>();
  for (const LlamaGgufTensorPlan& p : plan) {
    if (p.source < 0) {
      SOVAI_RETURN_IF_ERROR(w.AddTensorBytes(
          p.gguf_name, p.type, p.ne,
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(rope_factors.data()),
                                   rope_factors.size() * sizeof(float))));
      continue;
    }
    const HfTensor& src = input.tensors[static_cast<size_t>(p.source)];
    const uint64_t head_dim = a.head_dim;
    SOVAI_RETURN_IF_ERROR(
        w.AddTensor(p.gguf_name, p.type, p.ne, [&src, &p, head_dim](const GgufChunkSink& sink) {
          return ProduceConverted(src, p, head_dim, sink);
        }));
  }
  return w.Write(env, path);
}

base::Result<LlamaArchParams> LlamaArchFromConfig(const ModelConfig& config) {
  if (config.architecture != Architecture::kLlama &&
      config.architecture != Architecture::kMistral) {
    return base::UnimplementedError(
        "GGUF export supports llama and mistral models, not " +
        std::string(ModelTypeName(config.architecture)) +
        " (llama.cpp runs it as another architecture with other tensors)");
  }
  if (config.sliding_window && *config.sliding_window < config.max_position_embeddings) {
    return base::UnimplementedError("GGUF export: the model attends within a sliding window of " +
                                    std::to_string(*config.sliding_window) +
                                    " tokens, which llama.cpp's llama architecture "
                                    "does not do; its output would differ beyond that many tokens");
  }
  LlamaArchParams a;
  const std::pair<uint32_t*, std::pair<int64_t, const char*>> sizes[] = {
      {&a.vocab_size, {config.vocab_size, "vocab_size"}},
      {&a.hidden_size, {config.hidden_size, "hidden_size"}},
      {&a.intermediate_size, {config.intermediate_size, "intermediate_size"}},
      {&a.num_layers, {config.num_hidden_layers, "num_hidden_layers"}},
      {&a.num_heads, {config.num_attention_heads, "num_attention_heads"}},
      {&a.num_kv_heads, {config.num_key_value_heads, "num_key_value_heads"}},
      {&a.head_dim, {config.head_dim, "head_dim"}},
      {&a.context_length, {config.max_position_embeddings, "max_position_embeddings"}}};
  for (const auto& [field, value] : sizes) {
    if (value.first < 0 || value.first > static_cast<int64_t>(UINT32_MAX)) {
      return base::InvalidArgumentError("config " + std::string(value.second) + " " +
                                        std::to_string(value.first) + " does not fit GGUF's u32");
    }
    *field = static_cast<uint32_t>(value.first);
  }
  a.rms_norm_eps = config.rms_norm_eps;
  a.rope_theta = config.rope_theta;
  a.tie_word_embeddings = config.tie_word_embeddings;
  if (config.rope_scaling) {
    const RopeScaling& s = *config.rope_scaling;
    a.rope_scaling.kind = s.type == RopeScaling::Type::kLinear ? LlamaRopeScalingKind::kLinear
                                                               : LlamaRopeScalingKind::kLlama3;
    a.rope_scaling.factor = s.factor;
    a.rope_scaling.low_freq_factor = s.low_freq_factor;
    a.rope_scaling.high_freq_factor = s.high_freq_factor;
    if (s.original_max_position_embeddings <= 0) {
      return base::InvalidArgumentError("config rope_scaling.original_max_position_embeddings " +
                                        std::to_string(s.original_max_position_embeddings));
    }
    a.rope_scaling.original_context_length =
        static_cast<uint64_t>(s.original_max_position_embeddings);
  }
  return a;
}

base::Result<std::vector<HfTensor>> HfTensorsFrom(const SafetensorsSet& weights) {
  std::vector<HfTensor> out;
  out.reserve(weights.entries().size());
  for (const SafetensorsSet::Entry& entry : weights.entries()) {
    const SafetensorsTensor& t = *entry.tensor;
    SOVAI_ASSIGN_OR_RETURN(tensor::DType dtype, RequireComputable(t, entry.file->path()));
    out.push_back({t.name, dtype, t.shape,
                   std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(t.bytes.data()),
                                            t.bytes.size())});
  }
  return out;
}

namespace {

// The split patterns of the tokenizers llama.cpp knows by name (tokenizer.ggml.pre).
constexpr std::string_view kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwenSplit =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// The first Split pattern of a pre_tokenizer (or of a Sequence of them); "" when there is none.
std::string SplitPattern(const nlohmann::json& pre) {
  if (!pre.is_object()) return "";
  if (pre.value("type", "") == "Split" && pre.contains("pattern") && pre["pattern"].is_object() &&
      pre["pattern"].contains("Regex") && pre["pattern"]["Regex"].is_string()) {
    return pre["pattern"]["Regex"].get<std::string>();
  }
  if (pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array()) {
    for (const nlohmann::json& p : pre["pretokenizers"]) {
      std::string found = SplitPattern(p);
      if (!found.empty()) return found;
    }
  }
  return "";
}

// bos_token / eos_token: a string or {"content": ...}.
std::optional<std::string> SpecialTokenText(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const nlohmann::json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

base::Result<LlamaVocab> LlamaVocabFromTokenizerJson(const nlohmann::json& tokenizer,
                                                     const nlohmann::json& tokenizer_config) {
  auto bad = [](const std::string& what) {
    return base::InvalidArgumentError("tokenizer.json: " + what);
  };
  if (!tokenizer.is_object() || !tokenizer.contains("model") || !tokenizer["model"].is_object()) {
    return bad("no model");
  }
  const nlohmann::json& model = tokenizer["model"];
  if (model.value("type", "") != "BPE") return bad("the model is not BPE");
  if (model.value("byte_fallback", false)) {
    return base::UnimplementedError(
        "GGUF export of SentencePiece-style tokenizers (byte_fallback) is not supported: it needs "
        "the sentencepiece scores, which tokenizer.json does not carry");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) return bad("model.vocab is missing");
  LlamaVocab vocab;
  vocab.model = LlamaTokenizerModel::kGpt2;
  std::vector<std::string> by_id;
  std::vector<GgufTokenType> types;
  auto place = [&](int64_t id, const std::string& text, GgufTokenType type) -> base::Status {
    if (id < 0 || id > (int64_t{1} << 24))
      return bad("token id " + std::to_string(id) + " out of range");
    if (static_cast<size_t>(id) >= by_id.size()) {
      by_id.resize(static_cast<size_t>(id) + 1);
      types.resize(static_cast<size_t>(id) + 1, GgufTokenType::kUnused);
    }
    by_id[static_cast<size_t>(id)] = text;
    types[static_cast<size_t>(id)] = type;
    return base::Status();
  };
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) return bad("model.vocab['" + text + "'] is not an id");
    SOVAI_RETURN_IF_ERROR(place(id.get<int64_t>(), text, GgufTokenType::kNormal));
  }
  if (tokenizer.contains("added_tokens") && tokenizer["added_tokens"].is_array()) {
    for (const nlohmann::json& t : tokenizer["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
          !t.contains("content") || !t["content"].is_string()) {
        return bad("a malformed added_tokens entry");
      }
      SOVAI_RETURN_IF_ERROR(
          place(t["id"].get<int64_t>(), t["content"].get<std::string>(),
                t.value("special", false) ? GgufTokenType::kControl : GgufTokenType::kUserDefined));
    }
  }
  for (size_t i = 0; i < by_id.size(); ++i) {
    if (types[i] == GgufTokenType::kUnused) by_id[i] = "[PAD" + std::to_string(i) + "]";
  }
  vocab.tokens = std::move(by_id);
  vocab.token_types = std::move(types);
  if (model.contains("merges") && model["merges"].is_array()) {
    for (const nlohmann::json& m : model["merges"]) {
      if (m.is_string()) {
        vocab.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        vocab.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        return bad("a malformed merges entry");
      }
    }
  }
  const std::string split = SplitPattern(tokenizer.value("pre_tokenizer", nlohmann::json()));
  // llama.cpp spells GPT-2's pre-tokenizer "gpt-2" (llama-vocab.cpp; "gpt2" is refused on load).
  vocab.pre = split == kLlama3Split ? "llama-bpe" : split == kQwenSplit ? "qwen2" : "gpt-2";
  auto id_of = [&](const std::optional<std::string>& text) -> std::optional<uint32_t> {
    if (!text) return std::nullopt;
    for (size_t i = 0; i < vocab.tokens.size(); ++i) {
      if (vocab.tokens[i] == *text) return static_cast<uint32_t>(i);
    }
    return std::nullopt;
  };
  vocab.bos_id = id_of(SpecialTokenText(tokenizer_config, "bos_token"));
  vocab.eos_id = id_of(SpecialTokenText(tokenizer_config, "eos_token"));
  vocab.pad_id = id_of(SpecialTokenText(tokenizer_config, "pad_token"));
  if (tokenizer_config.is_object()) {
    if (tokenizer_config.contains("add_bos_token") &&
        tokenizer_config["add_bos_token"].is_boolean()) {
      vocab.add_bos = tokenizer_config["add_bos_token"].get<bool>();
    }
    if (tokenizer_config.contains("add_eos_token") &&
        tokenizer_config["add_eos_token"].is_boolean()) {
      vocab.add_eos = tokenizer_config["add_eos_token"].get<bool>();
    }
    if (tokenizer_config.contains("chat_template") &&
        tokenizer_config["chat_template"].is_string()) {
      vocab.chat_template = tokenizer_config["chat_template"].get<std::string>();
    }
  }
  return vocab;
}

}  // namespace sovai::model
