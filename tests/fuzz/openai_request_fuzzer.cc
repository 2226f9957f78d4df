// libFuzzer target for the OpenAI request parsers (src/serve/openai_api.h, pooling_api.h): the
// input is a request body. Every endpoint's parser (chat, completions, embeddings, rerank) must
// accept it or refuse it with a 400 naming what was wrong,
// never crash; an accepted request must survive the steps that follow it on the server (the
// canonical cache key and its JSON, the sampler's preconditions) and keep the documented bounds.
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/json.h"
#include "serve/openai_api.h"
#include "serve/pooling_api.h"
#include "serve/sampler.h"

namespace {

void Check(const sovai::serve::ApiResult<sovai::serve::OpenAiRequest>& parsed) {
  using namespace sovai::serve;
  if (!parsed.ok()) {
    SOVAI_CHECK(parsed.error().status == 400) << parsed.error().status;
    SOVAI_CHECK(!parsed.error().message.empty());
    // The error body is what the client reads: it must serialize.
    SOVAI_CHECK(!SerializeJson(parsed.error().ToJson()).empty());
    return;
  }
  const OpenAiRequest& r = *parsed;
  SOVAI_CHECK(r.n >= 1 && r.n <= kMaxChoices) << r.n;
  SOVAI_CHECK(r.stop.size() <= kMaxStopSequences);
  for (const std::string& s : r.stop) SOVAI_CHECK(s.size() <= kMaxStopSequenceBytes);
  SOVAI_CHECK(!r.max_tokens || *r.max_tokens >= 1);
  SOVAI_CHECK(r.min_tokens >= 0 && (!r.max_tokens || r.min_tokens <= *r.max_tokens));
  SOVAI_CHECK(r.sampling.temperature >= 0 && r.sampling.temperature <= kMaxTemperature);
  SOVAI_CHECK(r.sampling.top_p > 0 && r.sampling.top_p <= 1);
  // The engine's Sampler checks these: an accepted request that failed them would crash it.
  const sovai::base::Status sampling = ValidateSamplingParams(r.sampling);
  SOVAI_CHECK(sampling.ok()) << sampling;
  SOVAI_CHECK(r.sampling.logit_bias.size() <= kMaxLogitBiasEntries);
  if (r.endpoint == Endpoint::kCompletions) {
    SOVAI_CHECK(!r.prompts.empty() && r.prompts.size() <= kMaxPrompts) << r.prompts.size();
    SOVAI_CHECK(static_cast<int64_t>(r.prompts.size()) * r.n <= kMaxBatchChoices);
  }
  const std::string canonical = CanonicalRequest(r, "fuzz");
  SOVAI_CHECK(sovai::base::ParseJson(canonical).ok()) << canonical;
  SOVAI_CHECK(CacheKey(r, "fuzz").size() == 64);
}

}  // namespace

// /tokenize and /detokenize bodies: accepted, or refused with a 400.
template <typename T>
void CheckOther(const sovai::serve::ApiResult<T>& parsed) {
  if (!parsed.ok()) SOVAI_CHECK(parsed.error().status == 400) << parsed.error().status;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  Check(sovai::serve::ParseChatCompletionRequest(body));
  Check(sovai::serve::ParseCompletionRequest(body));
  CheckOther(sovai::serve::ParseTokenizeRequest(body));
  auto detokenize = sovai::serve::ParseDetokenizeRequest(body);
  CheckOther(detokenize);
  if (detokenize.ok()) {
    SOVAI_CHECK(detokenize->tokens.size() <= sovai::serve::kMaxPromptTokenIds);
    for (int32_t id : detokenize->tokens) SOVAI_CHECK(id >= 0) << id;
  }
  auto embedding = sovai::serve::ParseEmbeddingRequest(body);
  CheckOther(embedding);
  if (embedding.ok()) {
    SOVAI_CHECK(!embedding->inputs.empty() &&
                embedding->inputs.size() <= sovai::serve::kMaxEmbeddingInputs);
    SOVAI_CHECK(!embedding->dimensions || *embedding->dimensions >= 1);
    SOVAI_CHECK(sovai::serve::EmbeddingCacheKey(*embedding, "fuzz").size() == 64);
  }
  auto rerank = sovai::serve::ParseRerankRequest(body);
  CheckOther(rerank);
  if (rerank.ok()) {
    SOVAI_CHECK(!rerank->documents.empty() &&
                rerank->documents.size() <= sovai::serve::kMaxRerankDocuments);
    SOVAI_CHECK(!rerank->top_n || *rerank->top_n >= 1);
    SOVAI_CHECK(sovai::serve::RerankCacheKey(*rerank, "fuzz").size() == 64);
    // The answer for any scores serializes and holds at most top_n results.
    std::vector<float> scores(rerank->documents.size(), 0.5f);
    const auto answer = sovai::serve::RerankResponse(*rerank, scores, 1);
    SOVAI_CHECK(!sovai::serve::SerializeJson(answer).empty());
  }
  return 0;
}
