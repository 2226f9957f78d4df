// Inference over the paged KV cache must compute what the training forward computes: the logits
// of the last token of a sequence, run in chunks and single decode steps through scattered
// blocks, batched with other sequences that use other adapters, equal the logits of the whole
// sequence run at once through LlamaModel::Logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/llama.h"
#include "model/model_config.h"

namespace sovai::model {
namespace {

// qwen3 (per-head q/k norms), llama, or mistral with a sliding window when window > 0; heads of
// `head_dim` (64 takes the cpu backend's AVX2 paged attention where the CPU has it).
ModelConfig SmallConfig(bool qwen3, bool tie, int64_t window = 0, int64_t head_dim = 16) {
  const std::string arch = qwen3        ? "Qwen3ForCausalLM"
                           : window > 0 ? "MistralForCausalLM"
                                        : "LlamaForCausalLM";
  const std::string type = qwen3 ? "qwen3" : window > 0 ? "mistral" : "llama";
  std::string json = R"({"architectures": [")" + arch + R"("], "model_type": ")" + type + R"(",
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": )" +
                     std::to_string(head_dim) + R"(, "vocab_size": 101,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "sliding_window": )" +
                     (window > 0 ? std::to_string(window) : "null") +
                     R"(, "tie_word_embeddings": )" + (tie ? "true" : "false") + "}";
  auto config = ParseModelConfig(json, "config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// A frozen model with random weights in `storage` (via an f32 model drawn by RandomInit), in
// `backend`'s memory.
std::unique_ptr<LlamaModel> FrozenModel(kernels::Backend& backend, const ModelConfig& config,
                                        BaseWeights storage) {
  auto host = kernels::NewReferenceBackend();
  auto random = LlamaModel::RandomInit(*host, config, 7);
  EXPECT_TRUE(random.ok()) << random.status();
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, std::vector<uint64_t>> shapes;
  for (const ExpectedTensor& e : (*random)->base_tensors()) {
    auto t = (*random)->BaseTensorF32(e.name, false);
    if (!t.ok()) continue;  // the tied head
    // RandomInit's 0.02 makes every logit nearly equal; larger weights make the test sharper.
    for (float& v : *t) v *= e.name.ends_with("norm.weight") ? 1.0f : 5.0f;
    tensors[e.name] = std::move(*t);
    shapes[e.name] = e.shape;
  }
  TensorSource source = [&](std::string_view name) -> base::Result<SourceTensor> {
    auto it = tensors.find(std::string(name));
    if (it == tensors.end()) return base::Status(base::StatusCode::kNotFound, "absent");
    return SourceTensor{tensor::DType::kF32, shapes[it->first],
                        std::as_bytes(std::span<const float>(it->second))};
  };
  auto model = LlamaModel::Load(backend, config, source, storage);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

LoraAdapter RandomAdapter(const ModelConfig& config, uint64_t seed, int64_t rank) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 0.3f);
  LoraAdapter adapter;
  adapter.config.r = rank;
  adapter.config.lora_alpha = 2.0 * static_cast<double>(rank);
  adapter.config.target_modules = {LoraModule::kQ, LoraModule::kV, LoraModule::kDown};
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    for (LoraModule m : adapter.config.target_modules) {
      const int64_t in = m == LoraModule::kDown ? config.intermediate_size : config.hidden_size;
      const int64_t out = m == LoraModule::kQ   ? config.q_dim()
                          : m == LoraModule::kV ? config.kv_dim()
                                                : config.hidden_size;
      LoraModuleWeights w{l, m, std::vector<float>(static_cast<size_t>(rank * in)),
                          std::vector<float>(static_cast<size_t>(out * rank))};
      for (float& v : w.a) v = normal(rng);
      for (float& v : w.b) v = normal(rng);
      adapter.modules.push_back(std::move(w));
    }
  }
  return adapter;
}

std::vector<int32_t> RandomTokens(size_t count, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(count);
  for (int32_t& t : out) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return out;
}

// The logits after the last token of `tokens`, through the training forward.
std::vector<float> WholeSequenceLogits(LlamaModel& model, kernels::Backend& backend,
                                       const std::vector<int32_t>& tokens) {
  std::vector<int32_t> targets(tokens.size(), -100);
  Batch batch{.batch = 1,
              .seq_len = static_cast<int64_t>(tokens.size()),
              .tokens = tokens,
              .targets = targets};
  auto logits = model.Logits(backend, batch);
  EXPECT_TRUE(logits.ok()) << logits.status();
  const int64_t v = model.config().vocab_size;
  return std::vector<float>(logits->end() - v, logits->end());
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LT(worst, tolerance) << what;
}

struct Case {
  const char* name;
  bool qwen3;
  bool tie;
  int64_t window;
  BaseWeights storage;
  int64_t head_dim = 16;
};

class LlamaInferTest : public ::testing::TestWithParam<Case> {};

// Three sequences share every step: A (no adapter) prefills 23 tokens in chunks of 10 then
// decodes, B (adapter 1) prefills 9 at once then decodes, C (adapter 2) starts later. Their
// blocks interleave in the cache. After every step, each sequence that asked for logits must
// match the whole-sequence forward of the same model with its adapter merged in.
TEST_P(LlamaInferTest, ChunkedBatchedMultiAdapterMatchesWholeSequenceForward) {
  const Case& param = GetParam();
  const ModelConfig config = SmallConfig(param.qwen3, param.tie, param.window, param.head_dim);
  // strict:cpu runs the cpu backend's ops behind the check that each is handed only memory
  // the backend allocated: model, cache, adapters, index arrays and scratch alike.
  for (const char* backend_name : {"reference", "cpu", "strict:cpu"}) {
    SCOPED_TRACE(backend_name);
    const std::string which_backend = backend_name;
    auto backend = which_backend == "cpu" ? kernels::NewCpuBackend(2)
                   : which_backend == "strict:cpu"
                       ? kernels::NewStrictBackend(kernels::NewCpuBackend(2))
                       : kernels::NewReferenceBackend();
    auto model = FrozenModel(*backend, config, param.storage);
    const LoraAdapter peft1 = RandomAdapter(config, 1, 4);
    const LoraAdapter peft2 = RandomAdapter(config, 2, 8);
    auto adapter1 = InferenceAdapter::FromPeft(*backend, peft1, config);
    auto adapter2 = InferenceAdapter::FromPeft(*backend, peft2, config);
    ASSERT_TRUE(adapter1.ok() && adapter2.ok());
    // Reference models: the same base with each adapter imported for the training forward.
    auto with1 = FrozenModel(*backend, config, param.storage);
    ASSERT_TRUE(with1->ImportLora(peft1).ok());
    auto with2 = FrozenModel(*backend, config, param.storage);
    ASSERT_TRUE(with2->ImportLora(peft2).ok());

    const int64_t block_size = 4;
    KvCache cache = KvCache::Create(*backend, config, 40, block_size).value();
    struct Seq {
      std::vector<int32_t> tokens;  // everything known so far
      int64_t computed = 0;         // positions already in the cache
      std::vector<int32_t> blocks;
      const InferenceAdapter* adapter;
      LlamaModel* reference;
    };
    std::vector<Seq> seqs = {{RandomTokens(23, 11, 101), 0, {}, nullptr, model.get()},
                             {RandomTokens(9, 12, 101), 0, {}, adapter1->get(), with1.get()},
                             {RandomTokens(6, 13, 101), 0, {}, adapter2->get(), with2.get()}};
    int32_t next_block = 39;  // hand out blocks from the top, interleaved between sequences
    std::mt19937 rng(5);
    for (int step = 0; step < 8; ++step) {
      std::vector<InferenceSequence> batch;
      std::vector<size_t> which;
      for (size_t i = 0; i < seqs.size(); ++i) {
        Seq& s = seqs[i];
        if (i == 2 && step < 2) continue;  // C joins at step 2
        const int64_t pending = static_cast<int64_t>(s.tokens.size()) - s.computed;
        const int64_t chunk = std::min<int64_t>(pending, i == 0 ? 10 : pending);
        while (static_cast<int64_t>(s.blocks.size()) * block_size < s.computed + chunk) {
          s.blocks.push_back(next_block--);
        }
        InferenceSequence in;
        in.tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.computed),
                                                               static_cast<size_t>(chunk));
        in.start = s.computed;
        in.block_table = s.blocks;
        in.adapter = s.adapter;
        in.want_logits = s.computed + chunk == static_cast<int64_t>(s.tokens.size());
        batch.push_back(in);
        which.push_back(i);
      }
      std::vector<float> logits;
      ASSERT_TRUE(model->Infer(*backend, cache, batch, logits).ok());
      size_t row = 0;
      for (size_t b = 0; b < batch.size(); ++b) {
        Seq& s = seqs[which[b]];
        s.computed += static_cast<int64_t>(batch[b].tokens.size());
        if (!batch[b].want_logits) continue;
        std::vector<float> got(logits.begin() + static_cast<int64_t>(row) * 101,
                               logits.begin() + static_cast<int64_t>(row + 1) * 101);
        ++row;
        ExpectClose(got, WholeSequenceLogits(*s.reference, *backend, s.tokens), 2e-3,
                    std::string(param.name) + " step " + std::to_string(step) + " sequence " +
                        std::to_string(which[b]));
        s.tokens.push_back(static_cast<int32_t>(rng() % 101));  // the "sampled" token
      }
      EXPECT_EQ(row * 101, logits.size());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, LlamaInferTest,
    ::testing::Values(Case{"llama_f32", false, false, 0, BaseWeights::kF32},
                      Case{"qwen3_tied_bf16", true, true, 0, BaseWeights::kBF16},
                      Case{"llama_q8_0_window", false, true, 5, BaseWeights::kQ8_0},
                      Case{"llama_q8_0_head64", false, true, 0, BaseWeights::kQ8_0, 64}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// A partial prefix-cache hit: B shares A's first 6 tokens, i.e. A's block 0 and the first 2
// slots of A's block 1, which B copies into a block of its own (A's stays unwritten). B's logits
// after computing only its own 3 tokens must be those of B computed from scratch, bit for bit
// (Q8_0 computes every row the same way in any batch); without the copy they are not.
TEST(LlamaInferCacheTest, CopiedLeadingSlotsServeAsThePrefix) {
  const ModelConfig config = SmallConfig(false, true, 0, 64);
  // On strict:cpu too: the copy is the backend's Copy between blocks of its own buffers.
  for (bool strict : {false, true}) {
    SCOPED_TRACE(strict ? "strict:cpu" : "cpu");
    auto backend =
        strict ? kernels::NewStrictBackend(kernels::NewCpuBackend(2)) : kernels::NewCpuBackend(2);
    auto model = FrozenModel(*backend, config, BaseWeights::kQ8_0);
    KvCache cache = KvCache::Create(*backend, config, 16, 4).value();
    std::vector<float> logits;
    auto run = [&](std::span<const int32_t> tokens, int64_t start,
                   const std::vector<int32_t>& table) {
      InferenceSequence seq{
          .tokens = tokens, .start = start, .block_table = table, .want_logits = true};
      EXPECT_TRUE(model->Infer(*backend, cache, {&seq, 1}, logits).ok());
      return logits;
    };
    const std::vector<int32_t> a = RandomTokens(10, 21, 101);
    std::vector<int32_t> b(a.begin(), a.begin() + 6);
    for (int32_t t : RandomTokens(3, 22, 101)) b.push_back(t);
    const std::vector<float> a_logits = run(a, 0, {0, 1, 2});
    const std::vector<float> scratch = run(b, 0, {3, 4, 5});

    cache.CopyLeadingSlots(/*from=*/1, /*to=*/6, /*count=*/2);
    const std::span<const int32_t> tail = std::span<const int32_t>(b).subspan(6);
    EXPECT_EQ(run(tail, 6, {0, 6, 7}), scratch);
    // The copy is what made it: block 8 never held those slots.
    EXPECT_NE(run(tail, 6, {0, 8, 9}), scratch);
    // A's blocks were only read: A's last token again gives A's logits.
    EXPECT_EQ(run(std::span<const int32_t>(a).subspan(9), 9, {0, 1, 2}), a_logits);
  }
}

// A Q8_0 model whose intermediate size is not whole Q8_0 blocks (688, the tiny models') keeps its
// down projection in bf16, a product through sgemm, whose rounding of a row depends on how many
// rows it is handed and where the row falls among them. So a prefix-cache hit (the last few tokens
// computed over the cached rest) is not promised the cold prefill's bits there, only its values
// to within kBf16HitTolerance of each logit's size; CopiedLeadingSlotsServeAsThePrefix holds the
// bit-identity of models whose widths are whole blocks.
TEST(LlamaInferCacheTest, AHitWithABf16ProjectionIsWithinTheStatedBound) {
  constexpr float kBf16HitTolerance = 1e-5f;  // relative; measured up to 1e-6 here
  ModelConfig config = SmallConfig(false, true, 0, 64);
  config.hidden_size = 256;
  config.intermediate_size = 688;
  auto backend = kernels::NewCpuBackend(2);
  auto model = FrozenModel(*backend, config, BaseWeights::kQ8_0);
  KvCache cache = KvCache::Create(*backend, config, 16, 4).value();
  std::vector<float> logits;
  const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  auto run = [&](std::span<const int32_t> tokens, int64_t start) {
    InferenceSequence seq{
        .tokens = tokens, .start = start, .block_table = table, .want_logits = true};
    EXPECT_TRUE(model->Infer(*backend, cache, {&seq, 1}, logits).ok());
    return logits;
  };
  for (const auto& [length, tail] :
       std::vector<std::pair<size_t, size_t>>{{8, 2}, {8, 1}, {16, 3}, {20, 2}, {21, 5}, {32, 1}}) {
    SCOPED_TRACE(std::to_string(length) + " tokens, " + std::to_string(tail) + " on the hit");
    const std::vector<int32_t> a = RandomTokens(length, 23 + static_cast<uint32_t>(length), 101);
    const std::vector<float> cold = run(a, 0);
    const auto start = static_cast<int64_t>(length - tail);
    const std::vector<float> hit = run(std::span<const int32_t>(a).subspan(length - tail), start);
    ASSERT_EQ(hit.size(), cold.size());
    for (size_t i = 0; i < hit.size(); ++i) {
      EXPECT_NEAR(hit[i], cold[i], kBf16HitTolerance * std::max(1.0f, std::abs(cold[i])));
    }
  }
}

// The device seam: on the strict backend (every op handed only the backend's own buffers, fresh
// ones poisoned) inference and the training forward compute the cpu backend's logits bit for bit,
// and everything the model, the cache and the adapter allocated is freed with them.
TEST(LlamaInferSeamTest, TheStrictBackendComputesTheCpuBackendsBits) {
  const ModelConfig config = SmallConfig(true, false, 0, 64);  // qwen3: per-head norms too
  auto cpu = kernels::NewCpuBackend(2);
  auto strict = kernels::NewStrictBackend(kernels::NewCpuBackend(2));
  const LoraAdapter peft = RandomAdapter(config, 3, 4);
  const std::vector<int32_t> prompt = RandomTokens(13, 31, 101);
  std::vector<std::vector<float>> results[2];
  for (int which = 0; which < 2; ++which) {
    kernels::Backend& backend = which == 0 ? *cpu : *strict;
    auto model = FrozenModel(backend, config, BaseWeights::kBF16);
    auto adapter = InferenceAdapter::FromPeft(backend, peft, config);
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    KvCache cache = KvCache::Create(backend, config, 8, 4).value();
    std::vector<float> logits;
    // A prefill of 9 tokens without logits, then 4 more, then a decode step with the adapter.
    const std::vector<int32_t> table = {5, 2, 7, 0};
    auto run = [&](int64_t begin, int64_t end, const InferenceAdapter* with) {
      InferenceSequence seq{.tokens = std::span<const int32_t>(prompt).subspan(
                                static_cast<size_t>(begin), static_cast<size_t>(end - begin)),
                            .start = begin,
                            .block_table = table,
                            .adapter = with,
                            .want_logits = end == 13 || end == 12};
      ASSERT_TRUE(model->Infer(backend, cache, {&seq, 1}, logits).ok());
      results[which].push_back(logits);
    };
    run(0, 9, nullptr);
    run(9, 12, nullptr);
    run(12, 13, adapter->get());
    results[which].push_back(WholeSequenceLogits(*model, backend, prompt));
  }
  ASSERT_EQ(results[0].size(), 4u);
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[1][i], results[0][i]) << i;
  EXPECT_FALSE(results[0][1].empty());
  EXPECT_EQ(strict->memory_stats().live_buffers, 0);
  EXPECT_GT(strict->memory_stats().peak_bytes, 0);
}

TEST(LlamaInferSeamTest, RefusesACacheOrAdapterOfAnotherBackend) {
  const ModelConfig config = SmallConfig(false, true);
  auto backend = kernels::NewReferenceBackend();
  auto other = kernels::NewReferenceBackend();
  auto model = FrozenModel(*backend, config, BaseWeights::kF32);
  KvCache cache = KvCache::Create(*backend, config, 4, 4).value();
  KvCache foreign_cache = KvCache::Create(*other, config, 4, 4).value();
  auto foreign_adapter = InferenceAdapter::FromPeft(*other, RandomAdapter(config, 1, 2), config);
  ASSERT_TRUE(foreign_adapter.ok());
  std::vector<float> logits;
  const std::vector<int32_t> tokens = {1, 2};
  const std::vector<int32_t> table = {0};
  InferenceSequence seq{.tokens = tokens, .start = 0, .block_table = table, .want_logits = true};
  EXPECT_TRUE(model->Infer(*backend, cache, {&seq, 1}, logits).ok());
  EXPECT_EQ(model->Infer(*other, cache, {&seq, 1}, logits).code(),
            base::StatusCode::kFailedPrecondition);
  EXPECT_EQ(model->Infer(*backend, foreign_cache, {&seq, 1}, logits).code(),
            base::StatusCode::kFailedPrecondition);
  seq.adapter = foreign_adapter->get();
  EXPECT_EQ(model->Infer(*backend, cache, {&seq, 1}, logits).code(),
            base::StatusCode::kFailedPrecondition);
  const std::vector<int32_t> targets = {2, -100};
  const Batch batch{.batch = 1, .seq_len = 2, .tokens = tokens, .targets = targets};
  EXPECT_EQ(model->Loss(*other, batch).status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(model->Loss(*backend, batch).ok());
}

TEST(LlamaInferErrorsTest, RefusesBadTokensPositionsAndBlocks) {
  const ModelConfig config = SmallConfig(false, true);
  auto backend = kernels::NewReferenceBackend();
  auto model = FrozenModel(*backend, config, BaseWeights::kF32);
  KvCache cache = KvCache::Create(*backend, config, 4, 4).value();
  std::vector<float> logits;
  const std::vector<int32_t> table = {0, 1};
  const std::vector<int32_t> bad_token = {1, 101};
  InferenceSequence seq{.tokens = bad_token, .start = 0, .block_table = table};
  EXPECT_EQ(model->Infer(*backend, cache, {&seq, 1}, logits).code(),
            base::StatusCode::kInvalidArgument);
  const std::vector<int32_t> ok_tokens = {1, 2, 3};
  seq = {.tokens = ok_tokens, .start = 6, .block_table = table};  // needs 9 positions, has 8
  EXPECT_EQ(model->Infer(*backend, cache, {&seq, 1}, logits).code(),
            base::StatusCode::kInvalidArgument);
  const std::vector<int32_t> outside = {0, 4};
  seq = {.tokens = ok_tokens, .start = 0, .block_table = outside};
  EXPECT_EQ(model->Infer(*backend, cache, {&seq, 1}, logits).code(),
            base::StatusCode::kInvalidArgument);
  seq = {.tokens = ok_tokens, .start = 254, .block_table = table};  // past 256 positions
  EXPECT_EQ(model->Infer(*backend, cache, {&seq, 1}, logits).code(),
            base::StatusCode::kInvalidArgument);
}

// Hidden states (embedding models' pooling reads them) come from the same pass as the logits: in
// one step with a sequence that wants logits only, one that wants every row's hidden state (in two
// chunks) and one that wants its last row's and its logits, each returned row, through the tied
// head, gives the whole-sequence forward's logits at its position.
TEST(LlamaInferHiddenTest, HiddenStatesAreTheRowsTheHeadReads) {
  const ModelConfig config = SmallConfig(true, true);
  for (bool strict : {false, true}) {
    SCOPED_TRACE(strict ? "strict:cpu" : "cpu");
    auto backend =
        strict ? kernels::NewStrictBackend(kernels::NewCpuBackend(2)) : kernels::NewCpuBackend(2);
    auto model = FrozenModel(*backend, config, BaseWeights::kF32);
    const std::vector<float> embed =
        model->BaseTensorF32("model.embed_tokens.weight", false).value();
    const int64_t c = config.hidden_size, v = config.vocab_size;
    auto head = [&](const float* h) {
      std::vector<float> out(static_cast<size_t>(v));
      for (int64_t t = 0; t < v; ++t) {
        double sum = 0;
        for (int64_t k = 0; k < c; ++k) sum += double{h[k]} * embed[static_cast<size_t>(t * c + k)];
        out[static_cast<size_t>(t)] = static_cast<float>(sum);
      }
      return out;
    };
    auto all_logits = [&](const std::vector<int32_t>& tokens) {
      std::vector<int32_t> targets(tokens.size(), -100);
      Batch batch{.batch = 1,
                  .seq_len = static_cast<int64_t>(tokens.size()),
                  .tokens = tokens,
                  .targets = targets};
      return model->Logits(*backend, batch).value();
    };
    KvCache cache = KvCache::Create(*backend, config, 16, 4).value();
    const std::vector<int32_t> a = RandomTokens(11, 31, 101), b = RandomTokens(6, 32, 101),
                               cc = RandomTokens(9, 33, 101);
    const std::vector<int32_t> a_table{0, 1, 2}, b_table{3, 4}, c_table{5, 6, 7};
    std::vector<float> logits, hidden;
    // Step 1: A's first 5 tokens (all rows), B whole (logits), C whole (last row and logits).
    std::vector<InferenceSequence> step{
        {.tokens = std::span(a).first(5), .block_table = a_table, .hidden = HiddenOutput::kAll},
        {.tokens = b, .block_table = b_table, .want_logits = true},
        {.tokens = cc, .block_table = c_table, .want_logits = true, .hidden = HiddenOutput::kLast}};
    ASSERT_TRUE(model->Infer(*backend, cache, step, logits, hidden).ok());
    ASSERT_EQ(logits.size(), static_cast<size_t>(2 * v));
    ASSERT_EQ(hidden.size(), static_cast<size_t>(6 * c));
    const std::vector<float> a_want = all_logits(a), b_want = all_logits(b),
                             c_want = all_logits(cc);
    auto row_of = [&](const std::vector<float>& all, int64_t t) {
      return std::vector<float>(all.begin() + t * v, all.begin() + (t + 1) * v);
    };
    for (int64_t t = 0; t < 5; ++t) {
      ExpectClose(head(hidden.data() + t * c), row_of(a_want, t), 2e-3,
                  "A row " + std::to_string(t));
    }
    ExpectClose(std::vector<float>(logits.begin(), logits.begin() + v), row_of(b_want, 5), 2e-3,
                "B logits");
    ExpectClose(std::vector<float>(logits.begin() + v, logits.end()), row_of(c_want, 8), 2e-3,
                "C logits");
    ExpectClose(head(hidden.data() + 5 * c), row_of(c_want, 8), 2e-3, "C last row");
    // Step 2: the rest of A, alone; every row again.
    InferenceSequence rest{.tokens = std::span(a).subspan(5),
                           .start = 5,
                           .block_table = a_table,
                           .hidden = HiddenOutput::kAll};
    ASSERT_TRUE(model->Infer(*backend, cache, {&rest, 1}, logits, hidden).ok());
    EXPECT_TRUE(logits.empty());
    ASSERT_EQ(hidden.size(), static_cast<size_t>(6 * c));
    for (int64_t t = 0; t < 6; ++t) {
      ExpectClose(head(hidden.data() + t * c), row_of(a_want, 5 + t), 2e-3,
                  "A row " + std::to_string(5 + t));
    }
  }
}

}  // namespace
}  // namespace sovai::model
