// Writes tiny llama models to GGUF for the independent check in check_gguf.py.
//
//   model_gguf_fixture OUT_DIR
//
// For each case it writes, into OUT_DIR: the Hugging Face side (model.safetensors, config.json,
// and vocab.json, a plain JSON of the tokenizer fields) and one GGUF file per file type written
// by WriteLlamaGguf, plus manifest.json listing them. check_gguf.py reads the GGUF files with a
// reader written from the GGUF spec (read_gguf.py) and compares them with the Hugging Face side
// using its own implementation of the converter's rules; nothing expected is produced here.
//
// The cases cover: bf16 / f32 / f16 sources; GQA and not; q/k biases; llama3 rope scaling
// (rope_freqs) and linear scaling; tied embeddings; a feed-forward width that is not a multiple
// of 32 (Q8_0 falls back to F16 there); head_dim != hidden / heads (key_length); byte-level BPE
// and SentencePiece vocabularies, padded to vocab_size; a block of zeros, a block of Q8_0 rounding
// ties and outliers in the weights.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/json.h"
#include "model/gguf_llama.h"

namespace {

using nlohmann::json;
using sovai::model::LlamaArchParams;
using sovai::model::LlamaGgufFileType;
using sovai::model::LlamaRopeScalingKind;
using sovai::tensor::DType;

struct Case {
  std::string name;
  LlamaArchParams arch;
  DType dtype;
  bool biases = false;
  bool sentencepiece = false;
  int tokenizer_tokens = 0;  // < vocab_size: the rest is padding
  std::vector<LlamaGgufFileType> file_types;
};

// Deterministic values in [-0.5, 0.5) with a few outliers and a whole zero block.
class Values {
 public:
  explicit Values(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  float Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    const double unit = static_cast<double>(state_ >> 11) / 9007199254740992.0;
    ++count_;
    if (count_ % 997 == 0) return static_cast<float>(8 * (unit - 0.5));  // outliers
    return static_cast<float>(unit - 0.5);
  }

 private:
  uint64_t state_;
  uint64_t count_ = 0;
};

struct HfModel {
  std::vector<sovai::model::HfTensor> tensors;
  std::vector<std::vector<uint8_t>> storage;  // reserved up front: spans stay valid
  json header = json::object();
  uint64_t data_bytes = 0;
};

void AddTensor(HfModel& m, const std::string& name, std::vector<uint64_t> shape, DType dtype) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  Values values(m.tensors.size() + 7);
  std::vector<float> f(n);
  for (float& v : f) v = values.Next();
  if (n >= 96 && name.find("norm") == std::string::npos) {
    for (int i = 32; i < 64; ++i) f[i] = 0.0f;  // one all-zero Q8_0 block
    // A block whose Q8_0 scale is exactly 2^-7, with quants that land on halves: roundf takes
    // them away from zero where rint would take them to even (all exact in bf16 and f16).
    const float tie_block[] = {127.0f / 128, 2.5f / 128, -2.5f / 128,  0.5f / 128,
                               -0.5f / 128,  3.5f / 128, -126.5f / 128};
    for (int i = 64; i < 96; ++i) f[i] = static_cast<float>(i - 80) / 128;
    for (size_t i = 0; i < std::size(tie_block); ++i) f[64 + i] = tie_block[i];
  }
  std::vector<uint8_t>& bytes = m.storage.emplace_back(n * sovai::tensor::DTypeSize(dtype));
  sovai::tensor::ConvertElements(DType::kF32, f.data(), dtype, bytes.data(), n);
  m.tensors.push_back({name, dtype, shape, std::span<const uint8_t>(bytes.data(), bytes.size())});
  static const std::map<DType, std::string> kNames = {
      {DType::kF32, "F32"}, {DType::kF16, "F16"}, {DType::kBF16, "BF16"}};
  m.header[name] = {{"dtype", kNames.at(dtype)},
                    {"shape", shape},
                    {"data_offsets", {m.data_bytes, m.data_bytes + bytes.size()}}};
  m.data_bytes += bytes.size();
}

HfModel MakeModel(const Case& c) {
  const LlamaArchParams& a = c.arch;
  HfModel m;
  m.storage.reserve(4 + 16 * a.num_layers);
  const uint64_t C = a.hidden_size, F = a.intermediate_size;
  const uint64_t q = uint64_t{a.num_heads} * a.head_dim, kv = uint64_t{a.num_kv_heads} * a.head_dim;
  AddTensor(m, "model.embed_tokens.weight", {a.vocab_size, C}, c.dtype);
  for (uint32_t i = 0; i < a.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    AddTensor(m, p + "input_layernorm.weight", {C}, c.dtype);
    AddTensor(m, p + "self_attn.q_proj.weight", {q, C}, c.dtype);
    AddTensor(m, p + "self_attn.k_proj.weight", {kv, C}, c.dtype);
    AddTensor(m, p + "self_attn.v_proj.weight", {kv, C}, c.dtype);
    AddTensor(m, p + "self_attn.o_proj.weight", {C, q}, c.dtype);
    if (c.biases) {
      AddTensor(m, p + "self_attn.q_proj.bias", {q}, c.dtype);
      AddTensor(m, p + "self_attn.k_proj.bias", {kv}, c.dtype);
      AddTensor(m, p + "self_attn.v_proj.bias", {kv}, c.dtype);
    }
    AddTensor(m, p + "post_attention_layernorm.weight", {C}, c.dtype);
    AddTensor(m, p + "mlp.gate_proj.weight", {F, C}, c.dtype);
    AddTensor(m, p + "mlp.up_proj.weight", {F, C}, c.dtype);
    AddTensor(m, p + "mlp.down_proj.weight", {C, F}, c.dtype);
  }
  AddTensor(m, "model.norm.weight", {C}, c.dtype);
  if (!a.tie_word_embeddings) AddTensor(m, "lm_head.weight", {a.vocab_size, C}, c.dtype);
  return m;
}

sovai::model::LlamaVocab MakeVocab(const Case& c) {
  sovai::model::LlamaVocab v;
  using sovai::model::GgufTokenType;
  if (c.sentencepiece) {
    v.model = sovai::model::LlamaTokenizerModel::kLlama;
    v.pre = "default";
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.token_types = {GgufTokenType::kUnknown, GgufTokenType::kControl, GgufTokenType::kControl};
    v.scores = {0, 0, 0};
    for (int b = 0; b < 8; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      v.tokens.push_back(name);
      v.token_types.push_back(GgufTokenType::kByte);
      v.scores.push_back(0);
    }
    for (int i = static_cast<int>(v.tokens.size()); i < c.tokenizer_tokens; ++i) {
      v.tokens.push_back("\xe2\x96\x81w" + std::to_string(i));  // "▁w<i>"
      v.token_types.push_back(GgufTokenType::kNormal);
      v.scores.push_back(-static_cast<float>(i) / 4);
    }
    v.bos_id = 1;
    v.eos_id = 2;
    v.unk_id = 0;
    v.add_bos = true;
    v.add_eos = false;
  } else {
    v.model = sovai::model::LlamaTokenizerModel::kGpt2;
    v.pre = "llama-bpe";
    for (int i = 0; i < c.tokenizer_tokens - 2; ++i) {
      v.tokens.push_back(i % 3 == 0 ? "\xc4\xa0t" + std::to_string(i) : "t" + std::to_string(i));
      v.token_types.push_back(GgufTokenType::kNormal);
    }
    v.tokens.push_back("<|begin_of_text|>");
    v.tokens.push_back("<|eot_id|>");
    v.token_types.push_back(GgufTokenType::kControl);
    v.token_types.push_back(GgufTokenType::kControl);
    v.merges = {"t 1", "\xc4\xa0 t", "t1 2"};
    v.bos_id = static_cast<uint32_t>(c.tokenizer_tokens - 2);
    v.eos_id = static_cast<uint32_t>(c.tokenizer_tokens - 1);
    v.pad_id = static_cast<uint32_t>(c.tokenizer_tokens - 1);
    v.add_bos = true;
    v.chat_template =
        "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
        "{{ m['content'] }}<|eot_id|>{% endfor %}";
  }
  return v;
}

json ConfigJson(const LlamaArchParams& a, bool biases) {
  json config = {{"architectures", {"LlamaForCausalLM"}},
                 {"model_type", "llama"},
                 {"vocab_size", a.vocab_size},
                 {"hidden_size", a.hidden_size},
                 {"intermediate_size", a.intermediate_size},
                 {"num_hidden_layers", a.num_layers},
                 {"num_attention_heads", a.num_heads},
                 {"num_key_value_heads", a.num_kv_heads},
                 {"head_dim", a.head_dim},
                 {"rms_norm_eps", a.rms_norm_eps},
                 {"rope_theta", a.rope_theta},
                 {"max_position_embeddings", a.context_length},
                 {"tie_word_embeddings", a.tie_word_embeddings},
                 {"attention_bias", biases}};
  const auto& s = a.rope_scaling;
  if (s.kind == LlamaRopeScalingKind::kLinear) {
    config["rope_scaling"] = {{"type", "linear"}, {"factor", s.factor}};
  } else if (s.kind == LlamaRopeScalingKind::kLlama3) {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", s.factor},
                              {"low_freq_factor", s.low_freq_factor},
                              {"high_freq_factor", s.high_freq_factor},
                              {"original_max_position_embeddings", s.original_context_length}};
  }
  return config;
}

json VocabJson(const sovai::model::LlamaVocab& v) {
  json out = {{"model", v.model == sovai::model::LlamaTokenizerModel::kGpt2 ? "gpt2" : "llama"},
              {"pre", v.pre},
              {"tokens", v.tokens},
              {"merges", v.merges},
              {"scores", v.scores},
              {"chat_template", v.chat_template}};
  std::vector<int> types;
  for (auto t : v.token_types) types.push_back(static_cast<int>(t));
  out["token_types"] = types;
  auto id = [](const std::optional<uint32_t>& x) { return x ? json(*x) : json(nullptr); };
  out["bos_id"] = id(v.bos_id);
  out["eos_id"] = id(v.eos_id);
  out["unk_id"] = id(v.unk_id);
  out["pad_id"] = id(v.pad_id);
  out["add_bos"] = v.add_bos ? json(*v.add_bos) : json(nullptr);
  out["add_eos"] = v.add_eos ? json(*v.add_eos) : json(nullptr);
  return out;
}

int Fail(const sovai::base::Status& status) {
  std::fprintf(stderr, "model_gguf_fixture: %s\n", status.ToString().c_str());
  return 1;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  {
    Case c;
    c.name = "llama3";  // Llama 3.1-style: GQA, llama3 rope scaling, byte-level BPE, bf16
    c.arch.vocab_size = 40;
    c.arch.hidden_size = 64;
    c.arch.intermediate_size = 96;
    c.arch.num_layers = 2;
    c.arch.num_heads = 4;
    c.arch.num_kv_heads = 2;
    c.arch.head_dim = 16;
    c.arch.rms_norm_eps = 1e-5;
    c.arch.rope_theta = 500000.0;
    c.arch.rope_scaling = {LlamaRopeScalingKind::kLlama3, 8.0, 1.0, 4.0, 8192};
    c.arch.context_length = 131072;
    c.dtype = DType::kBF16;
    c.biases = true;
    c.tokenizer_tokens = 36;
    c.file_types = {LlamaGgufFileType::kF32, LlamaGgufFileType::kF16, LlamaGgufFileType::kBF16,
                    LlamaGgufFileType::kQ8_0};
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "spm";  // Llama 2-style: SentencePiece, tied, linear scaling, f32, ffn 80
    c.arch.vocab_size = 48;
    c.arch.hidden_size = 64;
    c.arch.intermediate_size = 80;
    c.arch.num_layers = 1;
    c.arch.num_heads = 2;
    c.arch.num_kv_heads = 2;
    c.arch.head_dim = 32;
    c.arch.rms_norm_eps = 1e-6;
    c.arch.rope_theta = 10000.0;
    c.arch.rope_scaling = {LlamaRopeScalingKind::kLinear, 2.0};
    c.arch.context_length = 4096;
    c.arch.tie_word_embeddings = true;
    c.dtype = DType::kF32;
    c.sentencepiece = true;
    c.tokenizer_tokens = 48;
    c.file_types = {LlamaGgufFileType::kQ8_0, LlamaGgufFileType::kF16, LlamaGgufFileType::kBF16};
    cases.push_back(c);
  }
  {
    Case c;
    c.name = "headdim";  // f16 source, head_dim 8 with hidden 64 and 4 heads
    c.arch.vocab_size = 32;
    c.arch.hidden_size = 64;
    c.arch.intermediate_size = 128;
    c.arch.num_layers = 1;
    c.arch.num_heads = 4;
    c.arch.num_kv_heads = 1;
    c.arch.head_dim = 8;
    c.arch.rms_norm_eps = 1e-5;
    c.arch.rope_theta = 1000000.0;
    c.arch.context_length = 1024;
    c.dtype = DType::kF16;
    c.tokenizer_tokens = 30;
    c.file_types = {LlamaGgufFileType::kBF16, LlamaGgufFileType::kQ8_0};
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: model_gguf_fixture OUT_DIR\n");
    return 2;
  }
  sovai::base::Env& env = sovai::base::Env::Default();
  const std::string dir = argv[1];
  if (env.FileExists(dir)) {
    if (auto s = env.DeleteDirRecursive(dir); !s.ok()) return Fail(s);
  }
  if (auto s = env.CreateDirs(dir); !s.ok()) return Fail(s);
  json manifest = json::array();
  for (const Case& c : Cases()) {
    HfModel model = MakeModel(c);
    // model.safetensors: u64 header length, JSON header, data.
    std::string header = sovai::base::DumpJson(model.header);
    std::string st;
    const uint64_t header_bytes = header.size();
    st.append(reinterpret_cast<const char*>(&header_bytes), 8);
    st += header;
    for (const auto& bytes : model.storage) st.append(bytes.begin(), bytes.end());
    const std::string prefix = sovai::base::JoinPath(dir, c.name);
    if (auto s = env.WriteFileAtomically(prefix + ".safetensors", st); !s.ok()) return Fail(s);
    if (auto s = env.WriteFileAtomically(prefix + ".config.json",
                                         sovai::base::DumpJson(ConfigJson(c.arch, c.biases), 2));
        !s.ok()) {
      return Fail(s);
    }
    sovai::model::LlamaGgufInput input;
    input.name = "tiny-" + c.name;
    input.arch = c.arch;
    input.vocab = MakeVocab(c);
    input.tensors = model.tensors;
    if (auto s = env.WriteFileAtomically(prefix + ".vocab.json",
                                         sovai::base::DumpJson(VocabJson(input.vocab), 2));
        !s.ok()) {
      return Fail(s);
    }
    for (LlamaGgufFileType type : c.file_types) {
      const std::string type_name(sovai::model::LlamaGgufFileTypeName(type));
      const std::string gguf = prefix + "." + type_name + ".gguf";
      if (auto s = sovai::model::WriteLlamaGguf(env, gguf, input, type); !s.ok()) return Fail(s);
      manifest.push_back({{"case", c.name},
                          {"name", input.name},
                          {"file_type", type_name},
                          {"gguf", gguf},
                          {"safetensors", prefix + ".safetensors"},
                          {"config", prefix + ".config.json"},
                          {"vocab", prefix + ".vocab.json"}});
    }
  }
  if (auto s = env.WriteFileAtomically(sovai::base::JoinPath(dir, "manifest.json"),
                                       sovai::base::DumpJson(manifest, 2));
      !s.ok()) {
    return Fail(s);
  }
  std::printf("wrote %zu GGUF files to %s\n", manifest.size(), dir.c_str());
  return 0;
}
