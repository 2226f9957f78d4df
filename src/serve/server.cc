#include "serve/server.h"

#include <cstdio>

#include "base/log.h"
#include "base/time.h"
#include "serve/internal/server_util.h"
#include "serve/openai_api.h"

namespace sovai::serve {

using base::Result;
using base::Status;
using base::StatusCode;

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

using internal::ErrorResponse;
using internal::Hex;

// The server's error renderer: what net answers itself (an unknown route, a body over its limit,
// a malformed head) reads like every other error of this API.
void RenderApiError(const net::Request*, net::Response& response) {
  const ApiError error = ApiErrorFromHttpStatus(
      response.status,
      response.error_message.value_or(std::string(net::HttpReasonPhrase(response.status))));
  response.headers.Set("Content-Type", "application/json");
  response.body = SerializeJson(error.ToJson());
}

// What a request waits on while its choices run, gathered into final results.
struct Collected {
  std::vector<ChoiceResult> choices;
};

}  // namespace

Result<std::unique_ptr<InferenceServer>> InferenceServer::Start(const ServeOptions& options) {
  std::unique_ptr<InferenceServer> server(new InferenceServer());
  server->options_ = options;
  server->started_ = static_cast<int64_t>(std::time(nullptr));
  if (options.response_cache_bytes > 0) {
    server->cache_ = std::make_unique<ResponseCache>(options.response_cache_bytes);
  }
  server->http_ = std::make_unique<net::Server>(server->MakeRouter());
  net::ServerOptions http;
  http.listen = options.listen;
  http.server_name = "sovai-engine";
  http.error_renderer = RenderApiError;
  // Generation holds a worker per request: allow as many as the engine can queue.
  http.max_worker_threads = static_cast<int>(
      std::min<int64_t>(4096, options.engine.max_waiting + options.engine.max_num_seqs + 16));
  SOVAI_RETURN_IF_ERROR(server->http_->Start(http));
  InferenceServer* self = server.get();
  server->loader_ = std::thread([self] {
    auto engine = Engine::Start(self->options_.engine);
    std::lock_guard lock(self->load_mu_);
    if (engine.ok()) {
      self->engine_ = std::move(*engine);
      // The task: as asked, or what the directory says (a pooling config: an embedding model).
      self->task_ = self->options_.task;
      if (self->task_ == ModelTask::kAuto) {
        self->task_ = self->engine_->pooling() ? ModelTask::kEmbed : ModelTask::kGenerate;
      }
      self->engine_ready_.store(true);
    } else {
      self->load_status_ = engine.status();
    }
    self->load_done_ = true;
    self->load_cv_.notify_all();
  });
  return server;
}

InferenceServer::~InferenceServer() { Stop(); }

void InferenceServer::Stop() {
  if (loader_.joinable()) loader_.join();
  if (http_) http_->Stop();
  engine_ready_.store(false);
  engine_.reset();
}

Status InferenceServer::WaitReady() {
  std::unique_lock lock(load_mu_);
  load_cv_.wait(lock, [&] { return load_done_; });
  return load_status_;
}

std::optional<net::Response> InferenceServer::Unauthorized(const net::Request& request) const {
  if (options_.api_key.empty()) return std::nullopt;
  if (request.header("Authorization").value_or("") == "Bearer " + options_.api_key) {
    return std::nullopt;
  }
  ApiError error{.status = 401,
                 .type = "invalid_request_error",
                 .message = "Incorrect API key provided.",
                 .param = "",
                 .code = "invalid_api_key"};
  return ErrorResponse(error);
}

net::Router InferenceServer::MakeRouter() {
  net::Router router;
  router.Get("/health",
             [this](net::Request&) {
               if (engine() != nullptr) return net::Response::Text(200, "ok\n");
               std::lock_guard lock(load_mu_);
               if (load_done_) {
                 return net::Response::Text(503,
                                            "failed to load: " + load_status_.message() + "\n");
               }
               return net::Response::Text(503, "loading\n");
             },
             {.inline_handler = true});
  router.Get("/metrics", [this](net::Request&) { return Metrics(); }, {.inline_handler = true});
  router.Get("/v1/models", [this](net::Request& r) {
    if (auto denied = Unauthorized(r)) return std::move(*denied);
    return Models();
  });
  const net::RouteOptions body_limit{.max_body_bytes = kMaxRequestBodyBytes};
  router.Post(
      "/v1/chat/completions",
      [this](net::Request& r) {
        if (auto denied = Unauthorized(r)) return std::move(*denied);
        return Generate(r, /*chat=*/true);
      },
      body_limit);
  router.Post(
      "/v1/completions",
      [this](net::Request& r) {
        if (auto denied = Unauthorized(r)) return std::move(*denied);
        return Generate(r, /*chat=*/false);
      },
      body_limit);
  router.Post(
      "/v1/embeddings",
      [this](net::Request& r) {
        if (auto denied = Unauthorized(r)) return std::move(*denied);
        return Embeddings(r);
      },
      body_limit);
  router.Post(
      "/v1/rerank",
      [this](net::Request& r) {
        if (auto denied = Unauthorized(r)) return std::move(*denied);
        return Rerank(r);
      },
      body_limit);
  router.Post(
      "/tokenize",
      [this](net::Request& r) {
        if (auto denied = Unauthorized(r)) return std::move(*denied);
        return Tokenize(r);
      },
      body_limit);
  router.Post(
      "/detokenize",
      [this](net::Request& r) {
        if (auto denied = Unauthorized(r)) return std::move(*denied);
        return Detokenize(r);
      },
      body_limit);
  router.Post("/v1/adapters",
              [this](net::Request& r) {
                if (auto denied = Unauthorized(r)) return std::move(*denied);
                return LoadAdapter(r);
              },
              {.max_body_bytes = kMaxAdapterRequestBytes});
  router.Delete("/v1/adapters/{name}", [this](net::Request& r) {
    if (auto denied = Unauthorized(r)) return std::move(*denied);
    return UnloadAdapter(r);
  });
  return router;
}

std::optional<ApiError> InferenceServer::ResolveModel(const Engine& engine,
                                                      const std::string& model,
                                                      std::string& adapter,
                                                      std::string& adapter_hash) const {
  adapter.clear();
  adapter_hash = "base";
  if (model == engine.served_model_name()) return std::nullopt;
  std::optional<AdapterInfo> info = engine.Adapter(model);
  if (!info) return ModelNotFoundError(model);
  adapter = info->name;
  adapter_hash = Hex(info->content_hash);
  return std::nullopt;
}

net::Response InferenceServer::Models() {
  Engine* e = engine();
  if (e == nullptr) return ErrorResponse(ModelLoadingError(options_.engine.served_model_name));
  std::vector<ModelCard> cards;
  const int64_t dimension = task_ == ModelTask::kEmbed ? e->config().hidden_size : 0;
  cards.push_back(ModelCard{.id = e->served_model_name(),
                            .created = started_,
                            .root = options_.engine.model_dir,
                            .parent = "",
                            .max_model_len = e->max_model_len(),
                            .kind = ModelTaskKind(task_),
                            .embedding_dimension = dimension});
  for (const AdapterInfo& adapter : e->Adapters()) {
    cards.push_back(ModelCard{.id = adapter.name,
                              .created = started_,
                              .root = adapter.path,
                              .parent = e->served_model_name(),
                              .max_model_len = e->max_model_len(),
                              .kind = ModelTaskKind(task_),
                              .embedding_dimension = dimension});
  }
  return net::Response::Json(200, SerializeJson(ModelList(cards)));
}

namespace {

// nullopt when `model` is served (the base model or a loaded adapter, which share the
// tokenizer), else the 404.
std::optional<ApiError> UnknownModel(const Engine& engine, const std::string& model) {
  if (model == engine.served_model_name() || engine.Adapter(model)) return std::nullopt;
  return ModelNotFoundError(model);
}

// A /tokenize or /detokenize request: the engine loaded, the body parsed by `parse`, the model
// it names served; then `handle(engine, parsed)`. Otherwise the error response.
template <typename Parsed, typename Handle>
net::Response ServeTokenizerRequest(Engine* e, const std::string& served_model_name,
                                    net::Request& request,
                                    ApiResult<Parsed> (*parse)(std::string_view), Handle handle) {
  if (e == nullptr) return ErrorResponse(ModelLoadingError(served_model_name));
  auto body = request.body().ReadAll();
  if (!body.ok()) return ErrorResponse(ApiErrorFromStatus(body.status()));
  ApiResult<Parsed> parsed = parse(*body);
  if (!parsed.ok()) return ErrorResponse(parsed.error());
  if (auto unknown = UnknownModel(*e, parsed->model)) return ErrorResponse(*unknown);
  return handle(*e, *parsed);
}

}  // namespace

net::Response InferenceServer::Tokenize(net::Request& request) {
  return ServeTokenizerRequest(
      engine(), options_.engine.served_model_name, request, &ParseTokenizeRequest,
      [](Engine& e, const TokenizeRequest& parsed) {
        std::string text = parsed.prompt;
        if (parsed.chat) {
          ApiResult<std::string> rendered =
              RenderChatPrompt(e.chat_template(), parsed.messages, parsed.add_generation_prompt);
          if (!rendered.ok()) return ErrorResponse(rendered.error());
          text = std::move(*rendered);
        }
        auto tokens = e.tokenizer().Encode(text, {.add_special_tokens = parsed.add_special_tokens});
        if (!tokens.ok()) {
          return ErrorResponse(
              ApiErrorFromStatus(tokens.status(), parsed.chat ? "messages" : "prompt"));
        }
        return net::Response::Json(200,
                                   SerializeJson(TokenizeResponse(*tokens, e.max_model_len())));
      });
}

net::Response InferenceServer::Detokenize(net::Request& request) {
  return ServeTokenizerRequest(
      engine(), options_.engine.served_model_name, request, &ParseDetokenizeRequest,
      [](Engine& e, const DetokenizeRequest& parsed) {
        if (auto outside = TokenOutsideVocabulary(parsed.tokens, e.config().vocab_size, "tokens")) {
          return ErrorResponse(*outside);
        }
        auto text = e.tokenizer().Decode(parsed.tokens);
        if (!text.ok()) return ErrorResponse(ApiErrorFromStatus(text.status(), "tokens"));
        return net::Response::Json(200, SerializeJson(DetokenizeResponse(*text)));
      });
}

net::Response InferenceServer::LoadAdapter(net::Request& request) {
  Engine* e = engine();
  if (e == nullptr) return ErrorResponse(ModelLoadingError(options_.engine.served_model_name));
  auto body = request.body().ReadAll();
  if (!body.ok()) return ErrorResponse(ApiErrorFromStatus(body.status()));
  auto json = base::ParseJson(*body);
  if (!json.ok()) return ErrorResponse(ApiErrorFromStatus(json.status()));
  if (!json->is_object() || !(*json)["name"].is_string() || !(*json)["path"].is_string()) {
    return ErrorResponse(InvalidRequestError(
        "name", "the body must be {\"name\": <adapter id>, \"path\": <PEFT adapter directory>}"));
  }
  const std::string name = (*json)["name"];
  Status loaded = e->LoadAdapter(name, (*json)["path"]);
  if (!loaded.ok()) return ErrorResponse(ApiErrorFromStatus(loaded, "path"));
  nlohmann::ordered_json out = {
      {"id", name}, {"object", "model"}, {"parent", e->served_model_name()}};
  return net::Response::Json(200, SerializeJson(out));
}

net::Response InferenceServer::UnloadAdapter(net::Request& request) {
  Engine* e = engine();
  if (e == nullptr) return ErrorResponse(ModelLoadingError(options_.engine.served_model_name));
  const std::string name(request.param("name").value_or(""));
  Status unloaded = e->UnloadAdapter(name);
  if (!unloaded.ok()) return ErrorResponse(ModelNotFoundError(name));
  nlohmann::ordered_json out = {{"id", name}, {"object", "model"}, {"deleted", true}};
  return net::Response::Json(200, SerializeJson(out));
}

net::Response InferenceServer::Metrics() {
  std::string out;
  Engine* e = engine();
  if (e != nullptr) {
    const EngineStats s = e->Stats();
    RenderMetric("sovai_serve_requests_running", "gauge",
                 "Requests whose sequences hold KV blocks.",
                 static_cast<double>(s.scheduler.num_running), out);
    RenderMetric("sovai_serve_requests_waiting", "gauge", "Sequences waiting to be scheduled.",
                 static_cast<double>(s.scheduler.num_waiting), out);
    RenderMetric("sovai_serve_prompt_tokens_total", "counter", "Prompt tokens computed.",
                 static_cast<double>(s.prompt_tokens), out);
    RenderMetric("sovai_serve_generation_tokens_total", "counter", "Tokens generated.",
                 static_cast<double>(s.generation_tokens), out);
    RenderMetric("sovai_serve_kv_cache_usage_ratio", "gauge",
                 "Fraction of KV cache blocks held by sequences.",
                 s.scheduler.num_total_blocks == 0
                     ? 0.0
                     : static_cast<double>(s.scheduler.num_used_blocks) /
                           static_cast<double>(s.scheduler.num_total_blocks),
                 out);
    RenderMetric("sovai_serve_kv_cache_free_blocks", "gauge",
                 "KV cache blocks that can be allocated (free or evictable).",
                 static_cast<double>(s.scheduler.num_free_blocks), out);
    RenderMetric("sovai_serve_prefix_cache_queries_total", "counter",
                 "Prompt tokens looked up in the prefix cache.",
                 static_cast<double>(s.scheduler.prefix_cache_queried_tokens), out);
    RenderMetric("sovai_serve_prefix_cache_hits_total", "counter",
                 "Prompt tokens reused from the prefix cache.",
                 static_cast<double>(s.scheduler.prefix_cache_hit_tokens), out);
    RenderMetric("sovai_serve_prefix_cache_partial_hits_total", "counter",
                 "Of the reused prompt tokens, those copied from a partly matching block.",
                 static_cast<double>(s.scheduler.prefix_cache_partial_hit_tokens), out);
    RenderMetric("sovai_serve_preemptions_total", "counter", "Sequences preempted for blocks.",
                 static_cast<double>(s.scheduler.num_preemptions), out);
    RenderMetric("sovai_serve_request_success_stop_total", "counter",
                 "Choices that ended with finish_reason stop.",
                 static_cast<double>(s.finished_stop), out);
    RenderMetric("sovai_serve_request_success_length_total", "counter",
                 "Choices that ended with finish_reason length.",
                 static_cast<double>(s.finished_length), out);
    RenderMetric("sovai_serve_pooled_prompts_total", "counter",
                 "Embedding inputs and rerank documents that produced their output.",
                 static_cast<double>(s.pooled_prompts), out);
    RenderMetric("sovai_serve_request_aborted_total", "counter",
                 "Choices cancelled (the client went away) or failed.",
                 static_cast<double>(s.finished_abort), out);
  }
  if (cache_) {
    const ResponseCacheStats c = cache_->stats();
    RenderMetric("sovai_serve_response_cache_hits_total", "counter", "Responses served from cache.",
                 static_cast<double>(c.hits), out);
    RenderMetric("sovai_serve_response_cache_misses_total", "counter",
                 "Cacheable requests not found in the cache.", static_cast<double>(c.misses), out);
    RenderMetric("sovai_serve_response_cache_bytes", "gauge", "Bytes held by the response cache.",
                 static_cast<double>(c.bytes), out);
  }
  RenderMetric("sovai_serve_embedding_requests_total", "counter",
               "POST /v1/embeddings requests answered 200.",
               static_cast<double>(embedding_requests_.load()), out);
  RenderMetric("sovai_serve_rerank_requests_total", "counter",
               "POST /v1/rerank requests answered 200.",
               static_cast<double>(rerank_requests_.load()), out);
  RenderMetric("sovai_serve_requests_rejected_total", "counter",
               "Requests refused because the queue was full.",
               static_cast<double>(rejected_.load()), out);
  ttft_.Render("sovai_serve_time_to_first_token_seconds", "Time to first token.", out);
  tpot_.Render("sovai_serve_time_per_output_token_seconds",
               "Mean time per output token after the first, per request.", out);
  e2e_.Render("sovai_serve_e2e_request_latency_seconds", "Request latency.", out);
  return net::Response::Text(200, std::move(out), "text/plain; version=0.0.4; charset=utf-8");
}

namespace {

// The per-choice results of a generation, built up from its deltas.
class ResultBuilder {
 public:
  ResultBuilder(const model::Tokenizer& tokenizer, int32_t n, bool logprobs)
      : tokenizer_(tokenizer), logprobs_(logprobs), choices_(static_cast<size_t>(n)) {
    for (int32_t i = 0; i < n; ++i) {
      choices_[static_cast<size_t>(i)].index = i;
      if (logprobs) choices_[static_cast<size_t>(i)].logprobs.emplace();
    }
  }

  // The delta as a ChoiceResult (for a stream chunk), also added to the totals.
  ChoiceResult Add(const ChoiceDelta& delta) {
    ChoiceResult piece;
    piece.index = delta.index;
    piece.text = delta.text;
    piece.finish_reason = delta.finish;
    ChoiceResult& total = choices_[static_cast<size_t>(delta.index)];
    piece.text_offset = CodePoints(total.text);
    if (logprobs_) {
      piece.logprobs.emplace();
      for (const TokenOutput& t : delta.tokens) piece.logprobs->push_back(Convert(t));
      total.logprobs->insert(total.logprobs->end(), piece.logprobs->begin(), piece.logprobs->end());
    }
    total.text += delta.text;
    if (delta.finish != FinishReason::kNone) total.finish_reason = delta.finish;
    return piece;
  }

  std::vector<ChoiceResult>& choices() { return choices_; }

 private:
  static int64_t CodePoints(const std::string& text) {
    int64_t count = 0;
    for (unsigned char c : text) count += (c & 0xC0) != 0x80;
    return count;
  }
  OutputLogprob Convert(const TokenOutput& t) const {
    OutputLogprob out;
    out.token = tokenizer_.TokenBytes(t.token).value_or("");
    out.logprob = t.logprob;
    for (const auto& [id, logprob] : t.top_logprobs) {
      out.top_logprobs.push_back(TopLogprob{tokenizer_.TokenBytes(id).value_or(""), logprob});
    }
    return out;
  }

  const model::Tokenizer& tokenizer_;
  bool logprobs_;
  std::vector<ChoiceResult> choices_;
};

// The prompts' tokens, and their texts for `echo` (empty without it: nothing else reads them).
struct EncodedPrompts {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> texts;
};

ApiResult<EncodedPrompts> EncodePrompts(Engine& engine, const OpenAiRequest& request, bool chat) {
  const bool echo = !chat && request.echo;
  EncodedPrompts out;
  auto encode = [&](const std::string& text) -> std::optional<ApiError> {
    // A rendered chat prompt already holds its special tokens; a raw completion prompt gets the
    // tokenizer's (e.g. BOS), as transformers' and vLLM's tokenization of a prompt does.
    auto encoded = engine.tokenizer().Encode(text, {.add_special_tokens = !chat});
    if (!encoded.ok()) return ApiErrorFromStatus(encoded.status(), "prompt");
    out.tokens.push_back(std::move(*encoded));
    out.texts.push_back(echo ? text : "");
    return std::nullopt;
  };
  if (chat) {
    ApiResult<std::string> rendered = RenderChatPrompt(engine.chat_template(), request);
    if (!rendered.ok()) return rendered.error();
    if (auto failed = encode(*rendered)) return *failed;
    return out;
  }
  for (const CompletionPrompt& prompt : request.prompts) {
    if (prompt.token_ids) {
      out.tokens.push_back(*prompt.token_ids);
      out.texts.push_back(echo ? engine.tokenizer().Decode(*prompt.token_ids).value_or("") : "");
    } else if (auto failed = encode(prompt.text)) {
      return *failed;
    }
  }
  return out;
}

}  // namespace

// A submitted generation and what its response is made of, shared by the response's writer.
struct InferenceServer::Answer {
  std::shared_ptr<Generation> generation;
  OpenAiRequest request;
  ResponseMeta meta;
  bool chat = false;
  bool echo = false;
  std::vector<std::string> prompt_texts;  // for `echo`: prompt p's text, else ""
  int32_t num_choices = 0;                // choice c answers prompt c / n
  Clock::time_point arrived;
  base::ResponseCacheUse cache_use;
  std::string cache_key;
  const model::Tokenizer* tokenizer = nullptr;  // the engine's

  Endpoint endpoint() const { return chat ? Endpoint::kChatCompletions : Endpoint::kCompletions; }
  ChoiceDelta EchoOf(int32_t choice) const {
    return ChoiceDelta{.index = choice,
                       .text = prompt_texts[static_cast<size_t>(choice / request.n)]};
  }
  Usage UsageNow() const {
    const GenerationUsage u = generation->usage();
    return Usage{.prompt_tokens = u.prompt_tokens,
                 .completion_tokens = u.completion_tokens,
                 .cached_tokens = u.cached_tokens};
  }
};

net::Response InferenceServer::Generate(net::Request& request, bool chat) {
  const Clock::time_point arrived = Clock::now();
  Engine* e = engine();
  if (e == nullptr) return ErrorResponse(ModelLoadingError(options_.engine.served_model_name));
  auto body = request.body().ReadAll();
  if (!body.ok()) return ErrorResponse(ApiErrorFromStatus(body.status()));
  const ParseOptions parse_options{
      .cache_control = base::ParseCacheControl(request.header("Cache-Control").value_or(""))};
  ApiResult<OpenAiRequest> parsed = chat ? ParseChatCompletionRequest(*body, parse_options)
                                         : ParseCompletionRequest(*body, parse_options);
  if (!parsed.ok()) return ErrorResponse(parsed.error());

  if (task_ == ModelTask::kEmbed) {
    return ErrorResponse(InvalidRequestError(
        "model", "The model `" + parsed->model +
                     "` is an embedding model: it answers POST /v1/embeddings, not " +
                     (chat ? "/v1/chat/completions." : "/v1/completions.")));
  }
  std::string adapter, adapter_hash;
  if (auto unknown = ResolveModel(*e, parsed->model, adapter, adapter_hash)) {
    return ErrorResponse(*unknown);
  }

  // The cache is keyed on the request itself, so a hit skips the template and the tokenizer.
  auto answer = std::make_shared<Answer>();
  answer->cache_use = cache_ != nullptr ? CacheUse(*parsed) : base::ResponseCacheUse{};
  if (answer->cache_use.lookup || answer->cache_use.store) {
    answer->cache_key = CacheKey(*parsed, adapter_hash);
  }
  if (answer->cache_use.lookup) {
    if (std::shared_ptr<const std::string> hit = cache_->Get(answer->cache_key)) {
      net::Response response = net::Response::Json(200, *hit);
      response.headers.Set(std::string(kCacheStatusHeader), "hit");
      return response;
    }
  }

  ApiResult<EncodedPrompts> prompts = EncodePrompts(*e, *parsed, chat);
  if (!prompts.ok()) return ErrorResponse(prompts.error());
  ApiResult<GenerationRequest> generation_request =
      ToGenerationRequest(*parsed, std::move(prompts->tokens), adapter,
                          ModelContext{.max_model_len = e->max_model_len(),
                                       .vocab_size = static_cast<int32_t>(e->config().vocab_size)});
  if (!generation_request.ok()) return ErrorResponse(generation_request.error());

  auto submitted = e->Submit(std::move(*generation_request));
  if (!submitted.ok()) {
    if (submitted.status().code() == StatusCode::kResourceExhausted) rejected_.fetch_add(1);
    return ErrorResponse(
        internal::SubmitError(submitted.status(), parsed->model, options_.engine.max_waiting));
  }
  answer->generation = std::move(*submitted);
  answer->chat = chat;
  answer->echo = !chat && parsed->echo;
  answer->meta = ResponseMeta{.id = NewResponseId(answer->endpoint()),
                              .created = static_cast<int64_t>(std::time(nullptr)),
                              .model = parsed->model,
                              .system_fingerprint = ""};
  answer->request = std::move(*parsed);
  answer->prompt_texts = std::move(prompts->texts);
  answer->num_choices = static_cast<int32_t>(answer->prompt_texts.size()) * answer->request.n;
  answer->arrived = arrived;
  answer->tokenizer = &e->tokenizer();
  if (answer->request.stream) return StreamAnswer(std::move(answer));
  return WholeAnswer(std::move(answer));
}

bool InferenceServer::FollowGeneration(const Answer& answer,
                                       const std::function<bool(const ChoiceDelta&)>& on_delta,
                                       const std::function<bool()>& idle) {
  Generation& generation = *answer.generation;
  std::vector<ChoiceDelta> deltas;
  std::optional<Clock::time_point> first_token;
  Clock::time_point last_heartbeat = Clock::now();
  while (generation.Wait(deltas, std::chrono::milliseconds(100))) {
    for (const ChoiceDelta& delta : deltas) {
      if (!delta.text.empty() && !first_token) {
        first_token = Clock::now();
        ttft_.Observe(Seconds(*first_token - answer.arrived));
      }
      if (!on_delta(delta)) {
        generation.Cancel();
        return false;
      }
    }
    // A client that went away is only noticed by writing to it: write something now and then
    // even while tokens flow (a non-streamed response writes nothing else until the end).
    if (Clock::now() - last_heartbeat >= options_.heartbeat_interval) {
      if (!idle()) {
        generation.Cancel();
        return false;
      }
      last_heartbeat = Clock::now();
    }
  }
  const Clock::time_point done = Clock::now();
  e2e_.Observe(Seconds(done - answer.arrived));
  const GenerationUsage usage = generation.usage();
  if (first_token && usage.completion_tokens > 1) {
    tpot_.Observe(Seconds(done - *first_token) / static_cast<double>(usage.completion_tokens - 1));
  }
  return true;
}

net::Response InferenceServer::StreamAnswer(std::shared_ptr<const Answer> answer) {
  return net::Response::Sse([this, answer](net::SseWriter& sse) -> Status {
    const Answer& a = *answer;
    const bool include_usage = a.request.include_usage;
    ResultBuilder results(*a.tokenizer, a.num_choices, a.request.sampling.logprobs);
    Status write_status;
    auto send = [&](const nlohmann::ordered_json& chunk) {
      write_status = sse.WriteEvent(SerializeJson(chunk));
      return write_status.ok();
    };
    for (int32_t i = 0; i < a.num_choices && (a.chat || a.echo); ++i) {
      if (!send(a.chat ? ChatCompletionRoleChunk(a.meta, i, include_usage)
                       : CompletionChunk(a.meta, results.Add(a.EchoOf(i)), include_usage))) {
        a.generation->Cancel();
        return write_status;
      }
    }
    const bool finished = FollowGeneration(
        a,
        [&](const ChoiceDelta& delta) {
          const ChoiceResult piece = results.Add(delta);
          return send(a.chat ? ChatCompletionChunk(a.meta, piece, include_usage)
                             : CompletionChunk(a.meta, piece, include_usage));
        },
        [&] {
          write_status = sse.WriteComment();
          return write_status.ok();
        });
    if (!finished) return write_status;
    if (include_usage && !send(UsageChunk(a.endpoint(), a.meta, a.UsageNow()))) {
      return write_status;
    }
    if (!include_usage) {
      // For meters between us and the client (the platform's gateway): clients skip comments.
      SOVAI_RETURN_IF_ERROR(sse.WriteComment(UsageComment(a.UsageNow())));
    }
    return sse.WriteEvent(kStreamDoneData);
  });
}

net::Response InferenceServer::WholeAnswer(std::shared_ptr<const Answer> answer) {
  net::Response response = net::Response::Stream(
      200, "application/json", [this, answer](net::BodyWriter& out) -> Status {
        const Answer& a = *answer;
        ResultBuilder results(*a.tokenizer, a.num_choices, a.request.sampling.logprobs);
        for (int32_t i = 0; i < a.num_choices && a.echo; ++i) results.Add(a.EchoOf(i));
        Status write_status;
        const bool finished = FollowGeneration(
            a,
            [&](const ChoiceDelta& delta) {
              results.Add(delta);
              return true;
            },
            [&] {
              write_status = out.Write(" ");
              return write_status.ok();
            });
        if (!finished) return write_status;
        if (Status failed = a.generation->error(); !failed.ok()) {
          return out.Write(SerializeJson(InternalServerError(failed.message()).ToJson()));
        }
        const std::string json =
            SerializeJson(a.chat ? ChatCompletionResponse(a.meta, results.choices(), a.UsageNow())
                                 : CompletionResponse(a.meta, results.choices(), a.UsageNow()));
        bool complete = true;
        for (const ChoiceResult& c : results.choices()) {
          complete = complete && c.finish_reason != FinishReason::kAbort;
        }
        if (a.cache_use.store && complete) cache_->Put(a.cache_key, json);
        return out.Write(json);
      });
  response.headers.Set(std::string(kCacheStatusHeader),
                       std::string(answer->cache_use.MissStatus()));
  return response;
}

}  // namespace sovai::serve
