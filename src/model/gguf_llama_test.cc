#include "model/gguf_llama.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "kernels/q8_0.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace sovai::model {

using kernels::DequantizeRowQ8_0;
using kernels::kQ8_0BlockValues;
using kernels::Q8_0Bytes;
using kernels::QuantizeRowQ8_0;
namespace {

using base::StatusCode;

LlamaArchParams TinyArch() {
  LlamaArchParams a;
  a.vocab_size = 40;
  a.hidden_size = 64;
  a.intermediate_size = 96;
  a.num_layers = 2;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 16;
  a.rms_norm_eps = 1e-5;
  a.rope_theta = 500000.0;
  a.context_length = 2048;
  return a;
}

// A model whose weights are known: each tensor's values as floats (already rounded to its dtype)
// and its bytes, stored one byte past an aligned address, as safetensors data may be.
struct TinyModel {
  LlamaGgufInput input;
  std::map<std::string, std::vector<float>> values;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> storage;

  void Add(const std::string& name, std::vector<uint64_t> shape, tensor::DType dtype) {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    std::vector<float> f(n);
    const size_t seed = values.size() + 1;
    for (uint64_t i = 0; i < n; ++i) {
      f[i] = static_cast<float>(0.08 * std::sin(0.37 * static_cast<double>(i) + seed) +
                                0.01 * static_cast<double>(seed % 5));
    }
    std::vector<float> aligned(n);  // room for n values of any dtype, suitably aligned
    tensor::ConvertElements(tensor::DType::kF32, f.data(), dtype, aligned.data(), n);
    tensor::ConvertElements(dtype, aligned.data(), tensor::DType::kF32, f.data(), n);
    auto bytes = std::make_unique<std::vector<uint8_t>>(1 + n * tensor::DTypeSize(dtype));
    std::memcpy(bytes->data() + 1, aligned.data(), n * tensor::DTypeSize(dtype));
    input.tensors.push_back(
        {name, dtype, shape, std::span<const uint8_t>(bytes->data() + 1, bytes->size() - 1)});
    values[name] = std::move(f);
    storage.push_back(std::move(bytes));
  }
};

TinyModel MakeTiny(const LlamaArchParams& a, tensor::DType dtype = tensor::DType::kBF16,
                   bool biases = false) {
  TinyModel m;
  m.input.name = "tiny";
  m.input.arch = a;
  const uint64_t C = a.hidden_size, F = a.intermediate_size;
  const uint64_t q = uint64_t{a.num_heads} * a.head_dim, kv = uint64_t{a.num_kv_heads} * a.head_dim;
  m.Add("model.embed_tokens.weight", {a.vocab_size, C}, dtype);
  for (uint32_t i = 0; i < a.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m.Add(p + "input_layernorm.weight", {C}, dtype);
    m.Add(p + "self_attn.q_proj.weight", {q, C}, dtype);
    m.Add(p + "self_attn.k_proj.weight", {kv, C}, dtype);
    m.Add(p + "self_attn.v_proj.weight", {kv, C}, dtype);
    m.Add(p + "self_attn.o_proj.weight", {C, q}, dtype);
    if (biases) {
      m.Add(p + "self_attn.q_proj.bias", {q}, dtype);
      m.Add(p + "self_attn.k_proj.bias", {kv}, dtype);
    }
    m.Add(p + "post_attention_layernorm.weight", {C}, dtype);
    m.Add(p + "mlp.gate_proj.weight", {F, C}, dtype);
    m.Add(p + "mlp.up_proj.weight", {F, C}, dtype);
    m.Add(p + "mlp.down_proj.weight", {C, F}, dtype);
  }
  m.Add("model.norm.weight", {C}, dtype);
  if (!a.tie_word_embeddings) m.Add("lm_head.weight", {a.vocab_size, C}, dtype);
  LlamaVocab& v = m.input.vocab;
  v.model = LlamaTokenizerModel::kGpt2;
  v.pre = "llama-bpe";
  for (int i = 0; i < 34; ++i) v.tokens.push_back("t" + std::to_string(i));
  v.token_types.assign(34, GgufTokenType::kNormal);
  v.token_types[33] = GgufTokenType::kControl;
  v.merges = {"t 1", "t 2"};
  v.bos_id = 33;
  v.eos_id = 32;
  v.add_bos = true;
  v.chat_template = "{{ messages[0]['content'] }}";
  return m;
}

class GgufLlamaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr ? base : "/tmp") + "/sovai_gguf_llama_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_TRUE(env_.DeleteDirRecursive(dir_).ok()); }
  std::string Path(std::string_view name) const { return base::JoinPath(dir_, name); }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
};

const LlamaGgufTensorPlan* FindPlan(const std::vector<LlamaGgufTensorPlan>& plan,
                                    std::string_view name) {
  for (const LlamaGgufTensorPlan& p : plan) {
    if (p.gguf_name == name) return &p;
  }
  return nullptr;
}

// The tensor's values as floats, whatever its ggml type.
std::vector<float> Dequantize(const GgufReader& r, const GgufTensorInfo& info) {
  auto bytes = r.TensorData(info);
  uint64_t n = 1;
  for (uint64_t d : info.ne) n *= d;
  std::vector<float> out(n);
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  switch (info.type_id) {
    case 0:
      std::memcpy(out.data(), copy.data(), n * 4);
      break;
    case 1:
      tensor::ConvertElements(tensor::DType::kF16, copy.data(), tensor::DType::kF32, out.data(), n);
      break;
    case 30:
      tensor::ConvertElements(tensor::DType::kBF16, copy.data(), tensor::DType::kF32, out.data(),
                              n);
      break;
    case 8:
      DequantizeRowQ8_0(copy, out);
      break;
    default:
      ADD_FAILURE() << "unexpected type " << info.type_id;
  }
  return out;
}

// --- The Q/K permutation ---

TEST(LlamaGgufPermutationTest, MatchesTheConvertersReshapeSwapaxes) {
  // permute(w, n_head): w.reshape(n_head, 2, D/2, cols).swapaxes(1, 2).reshape(w.shape): the row
  // at (h, i, j) of the result is the row at (h, j, i) of the input.
  const uint64_t n_head = 3, D = 8;
  std::vector<uint64_t> expected(n_head * D);
  for (uint64_t h = 0; h < n_head; ++h) {
    for (uint64_t i = 0; i < D / 2; ++i) {
      for (uint64_t j = 0; j < 2; ++j) expected[h * D + i * 2 + j] = h * D + j * (D / 2) + i;
    }
  }
  for (uint64_t row = 0; row < n_head * D; ++row) {
    EXPECT_EQ(LlamaGgufSourceRow(row, D), expected[row]) << row;
  }
  // Head 0 interleaves its halves: rows 0..3 pair with rows 4..7.
  std::vector<uint64_t> head0;
  for (uint64_t row = 0; row < D; ++row) head0.push_back(LlamaGgufSourceRow(row, D));
  EXPECT_EQ(head0, (std::vector<uint64_t>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(LlamaGgufSourceRow(8, D), 8u);
  EXPECT_EQ(LlamaGgufSourceRow(9, D), 12u);
}

// --- Llama 3.1 rope scaling ---

TEST(LlamaGgufRopeTest, Llama3FactorsFollowTheLlama31Formula) {
  LlamaArchParams a = TinyArch();
  a.head_dim = 128;
  a.rope_theta = 500000.0;
  a.rope_scaling = {LlamaRopeScalingKind::kLlama3, 8.0, 1.0, 4.0, 8192};
  std::vector<float> factors = Llama3RopeFactors(a);
  ASSERT_EQ(factors.size(), 64u);
  // Meta's reference (in double): wavelengths shorter than 8192/4 keep their frequency, longer
  // than 8192/1 are divided by 8, in between a smooth blend.
  for (size_t i = 0; i < factors.size(); ++i) {
    const double freq = 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / 128.0);
    const double wavelen = 2 * std::numbers::pi / freq;
    double expected;
    if (wavelen < 8192.0 / 4) {
      expected = 1.0;
    } else if (wavelen > 8192.0 / 1) {
      expected = 8.0;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      expected = 1.0 / ((1 - smooth) / 8.0 + smooth);
    }
    EXPECT_NEAR(factors[i], expected, 1e-5 * expected) << i;
    if (i > 0) {
      EXPECT_GE(factors[i], factors[i - 1]) << i;
    }
  }
  EXPECT_EQ(factors.front(), 1.0f);
  EXPECT_EQ(factors.back(), 8.0f);
}

// --- Planning ---

TEST(LlamaGgufPlanTest, NamesShapesTypesAndOrder) {
  LlamaArchParams a = TinyArch();
  a.rope_scaling = {LlamaRopeScalingKind::kLlama3, 8.0, 1.0, 4.0, 8192};
  TinyModel m = MakeTiny(a, tensor::DType::kBF16, /*biases=*/true);
  auto plan = PlanLlamaGguf(m.input, LlamaGgufFileType::kQ8_0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // rope_freqs, token_embd, 2 x (9 + 2 biases), output_norm, output.
  ASSERT_EQ(plan->size(), 1u + 1 + 2 * 11 + 2);
  EXPECT_EQ((*plan)[0].gguf_name, "rope_freqs.weight");
  EXPECT_EQ((*plan)[0].ne, (std::vector<uint64_t>{8}));
  EXPECT_EQ((*plan)[0].type, GgmlType::kF32);
  EXPECT_EQ((*plan)[1].gguf_name, "token_embd.weight");
  EXPECT_EQ((*plan)[1].ne, (std::vector<uint64_t>{64, 40}));  // torch [40, 64] reversed
  EXPECT_EQ(plan->back().gguf_name, "output.weight");

  const LlamaGgufTensorPlan* q = FindPlan(*plan, "blk.1.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->ne, (std::vector<uint64_t>{64, 64}));
  EXPECT_EQ(q->type, GgmlType::kQ8_0);
  EXPECT_EQ(q->permute_heads, 4u);
  const LlamaGgufTensorPlan* k = FindPlan(*plan, "blk.1.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->ne, (std::vector<uint64_t>{64, 32}));
  EXPECT_EQ(k->permute_heads, 2u);  // per KV head
  const LlamaGgufTensorPlan* kb = FindPlan(*plan, "blk.0.attn_k.bias");
  ASSERT_NE(kb, nullptr);
  EXPECT_EQ(kb->type, GgmlType::kF32);  // 1-D
  EXPECT_EQ(kb->permute_heads, 2u);
  EXPECT_EQ(FindPlan(*plan, "blk.0.attn_v.weight")->permute_heads, 0u);
  EXPECT_EQ(FindPlan(*plan, "blk.0.attn_norm.weight")->type, GgmlType::kF32);
  EXPECT_EQ(FindPlan(*plan, "blk.0.ffn_norm.weight")->type, GgmlType::kF32);
  EXPECT_EQ(FindPlan(*plan, "output_norm.weight")->type, GgmlType::kF32);
  EXPECT_EQ(FindPlan(*plan, "blk.0.ffn_down.weight")->ne, (std::vector<uint64_t>{96, 64}));

  for (auto [file_type, big] : {std::pair{LlamaGgufFileType::kF32, GgmlType::kF32},
                                std::pair{LlamaGgufFileType::kF16, GgmlType::kF16},
                                std::pair{LlamaGgufFileType::kBF16, GgmlType::kBF16}}) {
    auto p = PlanLlamaGguf(m.input, file_type);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(FindPlan(*p, "blk.0.ffn_up.weight")->type, big);
    EXPECT_EQ(FindPlan(*p, "token_embd.weight")->type, big);
    EXPECT_EQ(FindPlan(*p, "blk.0.attn_norm.weight")->type, GgmlType::kF32);
  }
}

TEST(LlamaGgufPlanTest, Q8_0FallsBackToF16ForRowsThatAreNotWholeBlocks) {
  LlamaArchParams a = TinyArch();
  a.intermediate_size = 80;  // ffn_down's rows (ne[0]) are 80 values
  TinyModel m = MakeTiny(a);
  auto plan = PlanLlamaGguf(m.input, LlamaGgufFileType::kQ8_0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(FindPlan(*plan, "blk.0.ffn_down.weight")->type, GgmlType::kF16);
  EXPECT_EQ(FindPlan(*plan, "blk.0.ffn_up.weight")->type, GgmlType::kQ8_0);  // ne[0] = 64
}

TEST(LlamaGgufPlanTest, TiedEmbeddingsLeaveOutTheOutputTensor) {
  LlamaArchParams a = TinyArch();
  a.tie_word_embeddings = true;
  TinyModel m = MakeTiny(a);
  auto plan = PlanLlamaGguf(m.input, LlamaGgufFileType::kF16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(FindPlan(*plan, "output.weight"), nullptr);
  // A tied checkpoint that still carries lm_head.weight: it is skipped, not an error.
  m.Add("lm_head.weight", {40, 64}, tensor::DType::kBF16);
  plan = PlanLlamaGguf(m.input, LlamaGgufFileType::kF16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(FindPlan(*plan, "output.weight"), nullptr);
}

TEST(LlamaGgufPlanTest, RotaryCachesAreIgnored) {
  TinyModel m = MakeTiny(TinyArch());
  m.Add("model.layers.0.self_attn.rotary_emb.inv_freq", {8}, tensor::DType::kF32);
  EXPECT_TRUE(PlanLlamaGguf(m.input, LlamaGgufFileType::kF16).ok());
}

void ExpectPlanError(const LlamaGgufInput& input, StatusCode code, std::string_view needle) {
  auto plan = PlanLlamaGguf(input, LlamaGgufFileType::kF16);
  ASSERT_FALSE(plan.ok()) << "accepted";
  EXPECT_EQ(plan.status().code(), code) << plan.status();
  EXPECT_NE(plan.status().message().find(needle), std::string::npos) << plan.status();
}

TEST(LlamaGgufPlanTest, RejectsInputsThatDoNotMatchTheConfig) {
  {
    TinyModel m = MakeTiny(TinyArch());
    m.input.tensors.erase(m.input.tensors.begin() + 3);  // layer 0's k_proj
    ExpectPlanError(m.input, StatusCode::kInvalidArgument,
                    "'model.layers.0.self_attn.k_proj.weight' is missing");
  }
  {
    TinyModel m = MakeTiny(TinyArch());
    m.input.tensors[2].shape = {32, 128};
    ExpectPlanError(m.input, StatusCode::kInvalidArgument, "has shape [32, 128]");
  }
  {
    TinyModel m = MakeTiny(TinyArch());
    m.input.tensors[2].data = m.input.tensors[2].data.subspan(1);
    ExpectPlanError(m.input, StatusCode::kInvalidArgument, "bytes, its shape");
  }
  {
    TinyModel m = MakeTiny(TinyArch());
    m.Add("model.layers.0.mlp.experts.0.weight", {4}, tensor::DType::kF32);
    ExpectPlanError(m.input, StatusCode::kInvalidArgument,
                    "'model.layers.0.mlp.experts.0.weight' is not part of a llama model");
  }
  {
    TinyModel m = MakeTiny(TinyArch());
    m.Add("model.layers.7.input_layernorm.weight", {64}, tensor::DType::kF32);
    ExpectPlanError(m.input, StatusCode::kInvalidArgument, "with 2 layers");
  }
  {
    TinyModel m = MakeTiny(TinyArch());
    m.input.tensors.push_back(m.input.tensors[0]);
    ExpectPlanError(m.input, StatusCode::kInvalidArgument, "given twice");
  }
}

TEST(LlamaGgufPlanTest, RejectsBadParameters) {
  TinyModel m = MakeTiny(TinyArch());
  LlamaGgufInput input = m.input;
  input.arch.head_dim = 15;
  ExpectPlanError(input, StatusCode::kInvalidArgument, "odd");
  input = m.input;
  input.arch.num_kv_heads = 3;
  ExpectPlanError(input, StatusCode::kInvalidArgument, "not a multiple of num_key_value_heads");
  input = m.input;
  input.arch.num_layers = 0;
  ExpectPlanError(input, StatusCode::kInvalidArgument, "num_hidden_layers is 0");
  input = m.input;
  input.arch.rope_scaling = {LlamaRopeScalingKind::kLlama3, 8.0, 4.0, 1.0, 8192};
  ExpectPlanError(input, StatusCode::kInvalidArgument, "high_freq_factor");
}

TEST(LlamaGgufPlanTest, RejectsBadVocabularies) {
  TinyModel m = MakeTiny(TinyArch());
  LlamaGgufInput input = m.input;
  input.vocab.tokens.resize(41);
  ExpectPlanError(input, StatusCode::kInvalidArgument, "more than the model's vocab_size 40");
  input = m.input;
  input.vocab.eos_id = 40;
  ExpectPlanError(input, StatusCode::kInvalidArgument, "eos token id 40");
  input = m.input;
  input.vocab.token_types.pop_back();
  ExpectPlanError(input, StatusCode::kInvalidArgument, "token types");
  input = m.input;
  input.vocab.merges.clear();
  ExpectPlanError(input, StatusCode::kInvalidArgument, "needs its merges");
  input = m.input;
  input.vocab.model = LlamaTokenizerModel::kLlama;
  ExpectPlanError(input, StatusCode::kInvalidArgument, "one score per token");
  input.vocab.scores.assign(33, 0.0f);
  ExpectPlanError(input, StatusCode::kInvalidArgument, "34 tokens but 33 scores");
}

// --- Writing and reading back ---

class GgufLlamaWriteTest : public GgufLlamaTest,
                           public ::testing::WithParamInterface<LlamaGgufFileType> {};

TEST_P(GgufLlamaWriteTest, ReadsBackWithTheRightMetadataAndWeights) {
  const LlamaGgufFileType file_type = GetParam();
  LlamaArchParams a = TinyArch();
  a.rope_scaling = {LlamaRopeScalingKind::kLinear, 2.0};
  TinyModel m = MakeTiny(a, tensor::DType::kBF16, /*biases=*/true);
  const std::string path = Path("tiny.gguf");
  ASSERT_TRUE(WriteLlamaGguf(env_, path, m.input, file_type).ok());

  auto reader = GgufReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const GgufReader& r = **reader;
  EXPECT_EQ(r.GetString("general.architecture").value(), "llama");
  EXPECT_EQ(r.GetString("general.name").value(), "tiny");
  EXPECT_EQ(r.GetUint("general.file_type").value(), LlamaFtype(file_type));
  // llama.cpp reads these as u32 and f32 exactly; another integer width would not load.
  for (auto [key, value] :
       std::initializer_list<std::pair<const char*, uint32_t>>{{"llama.vocab_size", 40},
                                                               {"llama.context_length", 2048},
                                                               {"llama.embedding_length", 64},
                                                               {"llama.block_count", 2},
                                                               {"llama.feed_forward_length", 96},
                                                               {"llama.rope.dimension_count", 16},
                                                               {"llama.attention.head_count", 4},
                                                               {"llama.attention.head_count_kv", 2},
                                                               {"tokenizer.ggml.bos_token_id", 33},
                                                               {"tokenizer.ggml.eos_token_id", 32},
                                                               {"general.alignment", 32}}) {
    const GgufValue* v = r.Find(key);
    ASSERT_NE(v, nullptr) << key;
    ASSERT_EQ(v->type(), GgufValueType::kUint32) << key;
    EXPECT_EQ(std::get<uint32_t>(v->storage), value) << key;
  }
  EXPECT_EQ(r.Find("llama.attention.key_length"), nullptr);  // 4 x 16 = 64: the default
  EXPECT_EQ(r.Find("llama.rope.freq_base")->type(), GgufValueType::kFloat32);
  EXPECT_EQ(r.GetFloat("llama.rope.freq_base").value(), 500000.0);
  EXPECT_FLOAT_EQ(r.GetFloat("llama.attention.layer_norm_rms_epsilon").value(), 1e-5f);
  EXPECT_EQ(r.GetString("llama.rope.scaling.type").value(), "linear");
  EXPECT_EQ(r.GetFloat("llama.rope.scaling.factor").value(), 2.0);
  EXPECT_EQ(r.GetString("tokenizer.ggml.model").value(), "gpt2");
  EXPECT_EQ(r.GetString("tokenizer.ggml.pre").value(), "llama-bpe");
  EXPECT_EQ(r.GetString("tokenizer.chat_template").value(), "{{ messages[0]['content'] }}");
  EXPECT_EQ(std::get<bool>(r.Find("tokenizer.ggml.add_bos_token")->storage), true);
  EXPECT_EQ(r.Find("tokenizer.ggml.add_eos_token"), nullptr);
  const GgufArray* tokens = r.Find("tokenizer.ggml.tokens")->AsArray();
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->elements.size(), 40u);  // padded to vocab_size
  EXPECT_EQ(*tokens->elements[5].AsString(), "t5");
  EXPECT_EQ(*tokens->elements[39].AsString(), "[PAD39]");
  const GgufArray* types = r.Find("tokenizer.ggml.token_type")->AsArray();
  ASSERT_EQ(types->element_type, GgufValueType::kInt32);
  EXPECT_EQ(std::get<int32_t>(types->elements[33].storage), 3);
  EXPECT_EQ(std::get<int32_t>(types->elements[39].storage), 5);
  EXPECT_EQ(*r.Find("tokenizer.ggml.merges")->AsArray()->elements[1].AsString(), "t 2");
  EXPECT_EQ(r.Find("tokenizer.ggml.scores"), nullptr);

  // Weights: un-permute Q and K and compare with the originals.
  const double step = file_type == LlamaGgufFileType::kQ8_0 ? 0.09 / 127 : 0;
  auto check = [&](const std::string& hf, const std::string& gguf, uint64_t permute_head_dim) {
    const GgufTensorInfo* info = r.FindTensor(gguf);
    ASSERT_NE(info, nullptr) << gguf;
    const std::vector<float>& original = m.values.at(hf);
    std::vector<float> got = Dequantize(r, *info);
    ASSERT_EQ(got.size(), original.size()) << gguf;
    const uint64_t cols = info->ne.size() == 2 ? info->ne[0] : 1;
    const uint64_t rows = got.size() / cols;
    const bool f32 = info->type_id == 0;
    for (uint64_t row = 0; row < rows; ++row) {
      const uint64_t src = permute_head_dim ? LlamaGgufSourceRow(row, permute_head_dim) : row;
      for (uint64_t c = 0; c < cols; ++c) {
        const float want = original[src * cols + c];
        const float have = got[row * cols + c];
        // bf16 values are exact in f32 and bf16; f16 rounding of values below 0.13 is < 2^-14.
        const double tolerance = f32 ? 0 : step > 0 ? step : 1.0 / (1 << 14);
        ASSERT_NEAR(have, want, tolerance) << gguf << " row " << row << " col " << c;
      }
    }
  };
  check("model.embed_tokens.weight", "token_embd.weight", 0);
  check("model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight", 16);
  check("model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight", 16);
  check("model.layers.0.self_attn.q_proj.bias", "blk.0.attn_q.bias", 16);
  check("model.layers.0.self_attn.k_proj.bias", "blk.0.attn_k.bias", 16);
  check("model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight", 0);
  check("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", 0);
  check("model.layers.1.post_attention_layernorm.weight", "blk.1.ffn_norm.weight", 0);
  check("model.norm.weight", "output_norm.weight", 0);
  check("lm_head.weight", "output.weight", 0);
  if (file_type == LlamaGgufFileType::kBF16 || file_type == LlamaGgufFileType::kF32) {
    // bf16 inputs are exact in both: the bytes are the originals.
    const GgufTensorInfo* v = r.FindTensor("blk.0.attn_v.weight");
    std::vector<float> got = Dequantize(r, *v);
    EXPECT_EQ(got, m.values.at("model.layers.0.self_attn.v_proj.weight"));
  }
}

INSTANTIATE_TEST_SUITE_P(FileTypes, GgufLlamaWriteTest,
                         ::testing::Values(LlamaGgufFileType::kF32, LlamaGgufFileType::kF16,
                                           LlamaGgufFileType::kBF16, LlamaGgufFileType::kQ8_0),
                         [](const auto& info) {
                           return std::string(LlamaGgufFileTypeName(info.param));
                         });

TEST_F(GgufLlamaTest, Llama3ScalingWritesRopeFreqsAndSentencePieceWritesScores) {
  LlamaArchParams a = TinyArch();
  a.rope_scaling = {LlamaRopeScalingKind::kLlama3, 8.0, 1.0, 4.0, 8192};
  a.head_dim = 8;  // 4 heads x 8 = 32, not hidden_size: key/value_length are written
  TinyModel m = MakeTiny(a, tensor::DType::kF32);
  m.input.vocab.model = LlamaTokenizerModel::kLlama;
  m.input.vocab.pre = "default";
  m.input.vocab.merges.clear();
  m.input.vocab.scores.assign(34, -1.5f);
  const std::string path = Path("l3.gguf");
  ASSERT_TRUE(WriteLlamaGguf(env_, path, m.input, LlamaGgufFileType::kF32).ok());
  auto reader = GgufReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const GgufReader& r = **reader;
  EXPECT_EQ(r.GetUint("llama.attention.key_length").value(), 8u);
  EXPECT_EQ(r.GetUint("llama.attention.value_length").value(), 8u);
  EXPECT_EQ(r.Find("llama.rope.scaling.type"), nullptr);
  EXPECT_EQ(r.GetString("tokenizer.ggml.model").value(), "llama");
  const GgufArray* scores = r.Find("tokenizer.ggml.scores")->AsArray();
  ASSERT_EQ(scores->elements.size(), 40u);
  EXPECT_EQ(std::get<float>(scores->elements[0].storage), -1.5f);
  EXPECT_EQ(std::get<float>(scores->elements[39].storage), -1000.0f);
  const GgufTensorInfo* freqs = r.FindTensor("rope_freqs.weight");
  ASSERT_NE(freqs, nullptr);
  EXPECT_EQ(freqs->ne, (std::vector<uint64_t>{4}));
  EXPECT_EQ(Dequantize(r, *freqs), Llama3RopeFactors(a));
  EXPECT_EQ(r.tensors().front().name, "rope_freqs.weight");
}

TEST_F(GgufLlamaTest, AFailedWriteLeavesNoFile) {
  TinyModel m = MakeTiny(TinyArch());
  base::FaultInjectionEnv faulty(env_);
  faulty.FailNth(base::FaultOp::kAppend, 3);
  const std::string path = Path("fail.gguf");
  EXPECT_FALSE(WriteLlamaGguf(faulty, path, m.input, LlamaGgufFileType::kQ8_0).ok());
  EXPECT_FALSE(env_.FileExists(path));
  EXPECT_TRUE(env_.ListDir(dir_).value().empty());
}

// --- Adapters from a loaded checkpoint ---

constexpr const char* kTinyLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 40, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
})";

TEST_F(GgufLlamaTest, ExportsACheckpointLoadedFromSafetensors) {
  auto config = ParseModelConfig(kTinyLlamaConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  auto arch = LlamaArchFromConfig(*config);
  ASSERT_TRUE(arch.ok()) << arch.status();
  EXPECT_EQ(arch->head_dim, 16u);
  EXPECT_EQ(arch->num_kv_heads, 2u);
  EXPECT_EQ(arch->context_length, 2048u);
  EXPECT_EQ(arch->rope_scaling.kind, LlamaRopeScalingKind::kLlama3);
  EXPECT_EQ(arch->rope_scaling.original_context_length, 8192u);

  TinyModel m = MakeTiny(*arch);
  SafetensorsWriter writer;
  for (const HfTensor& t : m.input.tensors) {
    TensorToWrite w;
    w.name = t.name;
    w.dtype = ToSafetensorsDType(t.dtype);
    w.shape = t.shape;
    w.data = std::span<const std::byte>(reinterpret_cast<const std::byte*>(t.data.data()),
                                        t.data.size());
    ASSERT_TRUE(writer.Add(std::move(w)).ok());
  }
  const std::string st_path = Path("model.safetensors");
  ASSERT_TRUE(writer.WriteFile(env_, st_path).ok());
  auto weights = SafetensorsSet::OpenFile(st_path);
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto tensors = HfTensorsFrom(**weights);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->size(), m.input.tensors.size());

  LlamaGgufInput input;
  input.name = "from-checkpoint";
  input.arch = *arch;
  input.vocab = m.input.vocab;
  input.tensors = std::move(*tensors);
  const std::string path = Path("model.gguf");
  ASSERT_TRUE(WriteLlamaGguf(env_, path, input, LlamaGgufFileType::kBF16).ok());
  auto reader = GgufReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const GgufTensorInfo* q = (*reader)->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  std::vector<float> got = Dequantize(**reader, *q);
  const std::vector<float>& original = m.values.at("model.layers.0.self_attn.q_proj.weight");
  for (uint64_t row = 0; row < 64; ++row) {
    for (uint64_t c = 0; c < 64; ++c) {
      ASSERT_EQ(got[row * 64 + c], original[LlamaGgufSourceRow(row, 16) * 64 + c]) << row;
    }
  }
  EXPECT_NE((*reader)->FindTensor("rope_freqs.weight"), nullptr);
}

TEST(LlamaGgufAdapterTest, RefusesOtherArchitecturesAndSlidingWindows) {
  nlohmann::json qwen = nlohmann::json::parse(kTinyLlamaConfig);
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  qwen["model_type"] = "qwen2";
  qwen.erase("rope_scaling");
  auto qwen_config = ParseModelConfig(qwen.dump());
  ASSERT_TRUE(qwen_config.ok()) << qwen_config.status();
  auto refused = LlamaArchFromConfig(*qwen_config);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("qwen2"), std::string::npos) << refused.status();

  nlohmann::json mistral = nlohmann::json::parse(kTinyLlamaConfig);
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["model_type"] = "mistral";
  mistral.erase("rope_scaling");
  mistral["sliding_window"] = 1024;
  auto windowed = ParseModelConfig(mistral.dump());
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_EQ(LlamaArchFromConfig(*windowed).status().code(), StatusCode::kUnimplemented);
  mistral["sliding_window"] = nullptr;
  auto full = ParseModelConfig(mistral.dump());
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(LlamaArchFromConfig(*full).ok());
}

TEST(LlamaGgufFileTypeTest, NamesAndFtypes) {
  EXPECT_EQ(ParseLlamaGgufFileType("Q8_0"), LlamaGgufFileType::kQ8_0);
  EXPECT_EQ(ParseLlamaGgufFileType("bf16"), LlamaGgufFileType::kBF16);
  EXPECT_FALSE(ParseLlamaGgufFileType("q4_k_m").has_value());
  // llama.cpp's llama_ftype numbers.
  EXPECT_EQ(LlamaFtype(LlamaGgufFileType::kF32), 0u);
  EXPECT_EQ(LlamaFtype(LlamaGgufFileType::kF16), 1u);
  EXPECT_EQ(LlamaFtype(LlamaGgufFileType::kQ8_0), 7u);
  EXPECT_EQ(LlamaFtype(LlamaGgufFileType::kBF16), 32u);
}

}  // namespace
}  // namespace sovai::model

namespace sovai::model {
namespace {

// llama.cpp knows GPT-2's pre-tokenizer as "gpt-2" and refuses a GGUF that says "gpt2" ("unknown
// pre-tokenizer type"): a byte-level tokenizer without a Split pattern of its own (the tiny
// models') exports as "gpt-2"; Llama 3's and Qwen's splits keep their names.
TEST(LlamaGgufVocabTest, ByteLevelWithoutASplitPatternIsGpt2ByLlamaCppsName) {
  const nlohmann::json tokenizer = {
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}};
  auto vocab = LlamaVocabFromTokenizerJson(tokenizer, nlohmann::json::object());
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->pre, "gpt-2");
}

}  // namespace
}  // namespace sovai::model
