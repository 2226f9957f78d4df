// The pooling routes of InferenceServer: POST /v1/embeddings and POST /v1/rerank
// (docs/api/openai.md). Each input (or query-document pair) is a prefill-only sequence that the
// engine batches with the other work (Engine::SubmitPooling).
#include "base/log.h"
#include "serve/internal/server_util.h"
#include "serve/pooling_api.h"
#include "serve/server.h"

namespace sovai::serve {

using base::Status;
using internal::ErrorResponse;

namespace {

using Clock = std::chrono::steady_clock;

std::string Quote(std::string_view name) { return "'" + std::string(name) + "'"; }

ApiError WrongTask(const std::string& model, ModelTask task, std::string_view route) {
  return InvalidRequestError(
      "model", "The model `" + model + "` is a " + ModelTaskKind(task) +
                   " model and does not answer " + std::string(route) +
                   " (sovai-engine serve --task chooses what a model is served for).");
}

// The (yes, no) tokens of a reranker: the flag's, else config.json's "classifier_from_token"
// ([no, yes], as vLLM reads it for Qwen3-Reranker), else Qwen3-Reranker's own "yes" and "no".
std::pair<std::string, std::string> RerankTokens(const ServeOptions& options,
                                                 const model::ModelConfig& config) {
  if (!options.rerank_yes_token.empty()) {
    return {options.rerank_yes_token, options.rerank_no_token};
  }
  if (config.extra.is_object()) {
    const auto it = config.extra.find("classifier_from_token");
    if (it != config.extra.end() && it->is_array() && it->size() == 2 && (*it)[0].is_string() &&
        (*it)[1].is_string()) {
      return {(*it)[1].get<std::string>(), (*it)[0].get<std::string>()};
    }
  }
  return {"yes", "no"};
}

}  // namespace

const char* ModelTaskKind(ModelTask task) {
  switch (task) {
    case ModelTask::kAuto:
      return "auto";
    case ModelTask::kGenerate:
      return "generate";
    case ModelTask::kEmbed:
      return "embedding";
    case ModelTask::kRerank:
      return "reranker";
  }
  return "generate";
}

base::ResponseCacheUse InferenceServer::PoolingCacheUse(base::CacheControl cache_control) const {
  if (cache_ == nullptr) return base::ResponseCacheUse{};
  return base::DecideResponseCache(base::PoolingCacheable(), cache_control);
}

std::optional<net::Response> InferenceServer::CachedAnswer(base::ResponseCacheUse use,
                                                           const std::string& key) {
  if (!use.lookup) return std::nullopt;
  std::shared_ptr<const std::string> hit = cache_->Get(key);
  if (!hit) return std::nullopt;
  net::Response response = net::Response::Json(200, *hit);
  response.headers.Set(std::string(kCacheStatusHeader), "hit");
  return response;
}

net::Response InferenceServer::RunPooling(
    Engine& engine, PoolingRequest request, const std::string& model,
    base::ResponseCacheUse cache_use, std::string cache_key,
    std::function<std::string(const std::vector<std::vector<float>>&, int64_t)> render) {
  const Clock::time_point arrived = Clock::now();
  auto submitted = engine.SubmitPooling(std::move(request));
  if (!submitted.ok()) {
    if (submitted.status().code() == base::StatusCode::kResourceExhausted) rejected_.fetch_add(1);
    return ErrorResponse(
        internal::SubmitError(submitted.status(), model, options_.engine.max_waiting));
  }
  std::shared_ptr<PoolingJob> job = std::move(*submitted);
  net::Response response = net::Response::Stream(
      200, "application/json",
      [this, job, arrived, cache_use, cache_key = std::move(cache_key),
       render = std::move(render)](net::BodyWriter& out) -> Status {
        // A client that went away is only noticed by writing to it: a space now and then
        // (leading whitespace is valid JSON), as the completion routes do.
        while (!job->Wait(options_.heartbeat_interval)) {
          if (Status written = out.Write(" "); !written.ok()) {
            job->Cancel();
            return written;
          }
        }
        e2e_.Observe(std::chrono::duration<double>(Clock::now() - arrived).count());
        if (Status failed = job->error(); !failed.ok()) {
          return out.Write(SerializeJson(InternalServerError(failed.message()).ToJson()));
        }
        const std::string json = render(job->outputs(), job->prompt_tokens());
        if (cache_use.store) cache_->Put(cache_key, json);
        return out.Write(json);
      });
  response.headers.Set(std::string(kCacheStatusHeader), std::string(cache_use.MissStatus()));
  return response;
}

net::Response InferenceServer::Embeddings(net::Request& request) {
  Engine* e = engine();
  if (e == nullptr) return ErrorResponse(ModelLoadingError(options_.engine.served_model_name));
  auto body = request.body().ReadAll();
  if (!body.ok()) return ErrorResponse(ApiErrorFromStatus(body.status()));
  ApiResult<EmbeddingRequest> parsed = ParseEmbeddingRequest(
      *body,
      {.cache_control = base::ParseCacheControl(request.header("Cache-Control").value_or(""))});
  if (!parsed.ok()) return ErrorResponse(parsed.error());
  std::string adapter, adapter_hash;
  if (auto unknown = ResolveModel(*e, parsed->model, adapter, adapter_hash)) {
    return ErrorResponse(*unknown);
  }
  if (task_ != ModelTask::kEmbed) {
    return ErrorResponse(WrongTask(parsed->model, task_, "/v1/embeddings"));
  }
  if (!e->pooling()) {
    return ErrorResponse(InvalidRequestError(
        "model", "The model `" + parsed->model +
                     "` has no pooling: its directory needs sentence-transformers' modules.json "
                     "and a Pooling module's config.json (docs/engine.md)."));
  }
  const model::PoolingConfig pooling = *e->pooling();
  if (parsed->dimensions && *parsed->dimensions > pooling.dimension) {
    return ErrorResponse(InvalidRequestError(
        "dimensions", "Invalid value for 'dimensions': the model's embeddings have " +
                          std::to_string(pooling.dimension) + " dimensions, got " +
                          std::to_string(*parsed->dimensions) + "."));
  }
  if (static_cast<int64_t>(parsed->inputs.size()) > options_.engine.max_waiting) {
    return ErrorResponse(InvalidRequestError(
        "input", "'input' holds " + std::to_string(parsed->inputs.size()) +
                     " inputs; this server queues at most " +
                     std::to_string(options_.engine.max_waiting) + " in one request."));
  }
  // Embeddings are deterministic: every request may be cached (base/response_cache_policy.h).
  const base::ResponseCacheUse cache_use = PoolingCacheUse(parsed->cache_control);
  std::string cache_key;
  if (cache_use.lookup || cache_use.store) cache_key = EmbeddingCacheKey(*parsed, adapter_hash);
  if (auto hit = CachedAnswer(cache_use, cache_key)) {
    embedding_requests_.fetch_add(1);
    return std::move(*hit);
  }
  PoolingRequest pooling_request{.adapter = adapter, .output = PoolingRequest::Output::kEmbedding};
  const int64_t max_tokens = std::min(e->max_model_len(), kMaxEmbeddingInputTokens);
  int64_t total_tokens = 0;
  for (size_t i = 0; i < parsed->inputs.size(); ++i) {
    const CompletionPrompt& input = parsed->inputs[i];
    const std::string param =
        parsed->inputs.size() == 1 ? "input" : "input[" + std::to_string(i) + "]";
    std::vector<int32_t> tokens;
    if (input.token_ids) {
      if (auto outside = TokenOutsideVocabulary(*input.token_ids, e->config().vocab_size, param)) {
        return ErrorResponse(*outside);
      }
      tokens = *input.token_ids;
    } else {
      // As sentence-transformers and vLLM tokenize: with the tokenizer's special tokens (the
      // EOS that Qwen3-Embedding's last-token pooling reads).
      auto encoded = e->tokenizer().Encode(input.text, {.add_special_tokens = true});
      if (!encoded.ok()) return ErrorResponse(ApiErrorFromStatus(encoded.status(), param));
      tokens = std::move(*encoded);
    }
    if (static_cast<int64_t>(tokens.size()) > max_tokens) {
      return ErrorResponse(InvalidRequestError(
          param, "This model's maximum input length is " + std::to_string(max_tokens) +
                     " tokens, however you requested " + std::to_string(tokens.size()) +
                     " tokens in " + Quote(param) + ". Please reduce your input."));
    }
    total_tokens += static_cast<int64_t>(tokens.size());
    pooling_request.prompts.push_back(std::move(tokens));
  }
  if (total_tokens > kMaxEmbeddingRequestTokens) {
    return ErrorResponse(InvalidRequestError(
        "input", "The inputs hold " + std::to_string(total_tokens) + " tokens; at most " +
                     std::to_string(kMaxEmbeddingRequestTokens) + " may be sent in one request."));
  }
  embedding_requests_.fetch_add(1);
  return RunPooling(
      *e, std::move(pooling_request), parsed->model, cache_use, std::move(cache_key),
      [request = std::move(*parsed), pooling](const std::vector<std::vector<float>>& outputs,
                                              int64_t prompt_tokens) {
        std::vector<std::vector<float>> embeddings;
        for (const std::vector<float>& pooled : outputs) {
          embeddings.push_back(FinishEmbedding(pooled, request.dimensions, pooling.normalize));
        }
        return SerializeJson(
            EmbeddingResponse(request.model, embeddings, request.encoding_format, prompt_tokens));
      });
}

net::Response InferenceServer::Rerank(net::Request& request) {
  Engine* e = engine();
  if (e == nullptr) return ErrorResponse(ModelLoadingError(options_.engine.served_model_name));
  auto body = request.body().ReadAll();
  if (!body.ok()) return ErrorResponse(ApiErrorFromStatus(body.status()));
  ApiResult<RerankRequest> parsed = ParseRerankRequest(
      *body,
      {.cache_control = base::ParseCacheControl(request.header("Cache-Control").value_or(""))});
  if (!parsed.ok()) return ErrorResponse(parsed.error());
  std::string adapter, adapter_hash;
  if (auto unknown = ResolveModel(*e, parsed->model, adapter, adapter_hash)) {
    return ErrorResponse(*unknown);
  }
  if (task_ != ModelTask::kRerank) {
    return ErrorResponse(WrongTask(parsed->model, task_, "/v1/rerank"));
  }
  // Qwen3-Reranker reads the logits of the tokens "yes" and "no" (convert_tokens_to_ids).
  const auto [yes_token, no_token] = RerankTokens(options_, e->config());
  const std::optional<int32_t> yes = e->tokenizer().TokenToId(yes_token);
  const std::optional<int32_t> no = e->tokenizer().TokenToId(no_token);
  if (!yes || !no) {
    return ErrorResponse(InvalidRequestError(
        "model", "The model `" + parsed->model + "` cannot rerank: its tokenizer has no token '" +
                     (yes ? no_token : yes_token) +
                     "' (sovai-engine serve --rerank-tokens or config.json's "
                     "classifier_from_token name them)."));
  }
  if (static_cast<int64_t>(parsed->documents.size()) > options_.engine.max_waiting) {
    return ErrorResponse(InvalidRequestError(
        "documents", "'documents' holds " + std::to_string(parsed->documents.size()) +
                         " documents; this server queues at most " +
                         std::to_string(options_.engine.max_waiting) + " in one request."));
  }
  const base::ResponseCacheUse cache_use = PoolingCacheUse(parsed->cache_control);
  std::string cache_key;
  if (cache_use.lookup || cache_use.store) cache_key = RerankCacheKey(*parsed, adapter_hash);
  if (auto hit = CachedAnswer(cache_use, cache_key)) {
    rerank_requests_.fetch_add(1);
    return std::move(*hit);
  }
  PoolingRequest pooling_request{.adapter = adapter,
                                 .output = PoolingRequest::Output::kYesNoScore,
                                 .yes_token = *yes,
                                 .no_token = *no};
  int64_t total_tokens = 0;
  for (size_t i = 0; i < parsed->documents.size(); ++i) {
    const std::string param = "documents[" + std::to_string(i) + "]";
    // The prompt holds its special tokens (<|im_start|> ...) as text: none are added.
    auto encoded = e->tokenizer().Encode(
        RerankPrompt(parsed->instruction, parsed->query, parsed->documents[i]),
        {.add_special_tokens = false});
    if (!encoded.ok()) return ErrorResponse(ApiErrorFromStatus(encoded.status(), param));
    if (static_cast<int64_t>(encoded->size()) > e->max_model_len()) {
      return ErrorResponse(InvalidRequestError(
          param, "This model's maximum context length is " + std::to_string(e->max_model_len()) +
                     " tokens, however the query with " + Quote(param) + " is " +
                     std::to_string(encoded->size()) + " tokens. Please shorten them."));
    }
    total_tokens += static_cast<int64_t>(encoded->size());
    pooling_request.prompts.push_back(std::move(*encoded));
  }
  if (total_tokens > kMaxRerankRequestTokens) {
    return ErrorResponse(InvalidRequestError(
        "documents", "The query-document pairs hold " + std::to_string(total_tokens) +
                         " tokens; at most " + std::to_string(kMaxRerankRequestTokens) +
                         " may be sent in one request."));
  }
  rerank_requests_.fetch_add(1);
  return RunPooling(*e, std::move(pooling_request), parsed->model, cache_use, std::move(cache_key),
                    [request = std::move(*parsed)](const std::vector<std::vector<float>>& outputs,
                                                   int64_t prompt_tokens) {
                      std::vector<float> scores;
                      for (const std::vector<float>& output : outputs) scores.push_back(output[0]);
                      return SerializeJson(RerankResponse(request, scores, prompt_tokens));
                    });
}

}  // namespace sovai::serve
