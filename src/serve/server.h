// The HTTP face of `sovai-engine serve` (docs/api/openai.md): OpenAI's /v1/models,
// /v1/chat/completions and /v1/completions over the engine (engine.h), with Server-Sent Events
// streaming, the response cache (response_cache.h), runtime adapters (/v1/adapters), /health and
// /metrics.
//
// The HTTP listener starts before the model loads, so that /health answers 503 while loading
// and orchestrators can tell "starting" from "dead"; generation requests get 503 until then.
//
// A client that goes away cancels its generation. It is only noticed by writing to it, so every
// response writes at least every heartbeat interval (ServeOptions, kHeartbeatInterval by default):
// a streamed one its chunks or an SSE comment, a non-streamed one a space (leading whitespace is
// valid JSON); a failed write cancels.
//
// Thread-safety: Start/Stop from the owner; handlers run on the HTTP server's workers.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "base/status.h"
#include "net/http.h"
#include "serve/engine.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"
#include "serve/response_cache.h"

namespace sovai::serve {

inline constexpr std::chrono::milliseconds kHeartbeatInterval{1000};
// The range ServeOptions::heartbeat_interval may take.
inline constexpr std::chrono::milliseconds kMinHeartbeatInterval{10};
inline constexpr std::chrono::milliseconds kMaxHeartbeatInterval{60'000};
// Seconds a client is told to wait (Retry-After) when the waiting queue is full.
inline constexpr int kRetryAfterSeconds = 1;
// Largest body of POST /v1/adapters ({"name", "path"}).
inline constexpr uint64_t kMaxAdapterRequestBytes = 64 << 10;

// What the served model answers (`--task`). kAuto: kEmbed when the model directory has a
// sentence-transformers pooling (modules.json), else kGenerate.
enum class ModelTask : uint8_t {
  kAuto,
  kGenerate,  // /v1/chat/completions, /v1/completions
  kEmbed,     // /v1/embeddings (the model's pooling)
  kRerank,    // /v1/rerank (yes/no logits, Qwen3-Reranker), and the completion routes
};
// "generate", "embedding", "reranker" (the `kind` of /v1/models); "auto" for kAuto.
const char* ModelTaskKind(ModelTask task);

struct ServeOptions {
  EngineOptions engine;
  ModelTask task = ModelTask::kAuto;
  // kRerank: the vocabulary's tokens whose logits answer "relevant" and "not relevant"
  // (Qwen3-Reranker's "yes" and "no"; a byte-level vocabulary may hold only "Ġyes"). Empty: the
  // model's config.json "classifier_from_token" ([NO, YES], the key vLLM reads for
  // Qwen3-Reranker), else "yes" and "no". An endpoint or app of a reranker names its tokens in
  // the model directory this way, since its replicas take no serve flags.
  std::string rerank_yes_token;
  std::string rerank_no_token;
  std::string listen = "127.0.0.1:8000";
  size_t response_cache_bytes = kDefaultResponseCacheBytes;  // 0 disables the cache
  // When set, every /v1 request needs "Authorization: Bearer <api_key>" (401 otherwise).
  std::string api_key;
  // How often a response writes at the least (see above): the longest a client that went away
  // keeps its generation running. In [kMinHeartbeatInterval, kMaxHeartbeatInterval].
  std::chrono::milliseconds heartbeat_interval = kHeartbeatInterval;
};

class InferenceServer {
 public:
  // Starts listening at once and loads the engine on a background thread.
  static base::Result<std::unique_ptr<InferenceServer>> Start(const ServeOptions& options);
  ~InferenceServer();

  uint16_t port() const { return http_->port(); }
  // Blocks until the engine has loaded (OK) or failed to (its error).
  base::Status WaitReady();
  void Stop();

 private:
  InferenceServer() = default;
  net::Router MakeRouter();
  // POST /v1/chat/completions and /v1/completions: checks, the cache, the prompts' tokens and
  // the submission, then the answer streamed (StreamAnswer) or whole (WholeAnswer).
  net::Response Generate(net::Request& request, bool chat);
  struct Answer;  // a submitted generation and what its response is made of (server.cc)
  net::Response StreamAnswer(std::shared_ptr<const Answer> answer);
  net::Response WholeAnswer(std::shared_ptr<const Answer> answer);
  // Runs the generation to its end, handing each delta to `on_delta` and calling `idle` every
  // heartbeat interval (either false: the client is gone, and the generation is cancelled).
  // Observes the latency metrics. False when cancelled so.
  bool FollowGeneration(const Answer& answer,
                        const std::function<bool(const ChoiceDelta&)>& on_delta,
                        const std::function<bool()>& idle);
  net::Response Models();
  // POST /v1/embeddings and /v1/rerank (server_pooling.cc).
  net::Response Embeddings(net::Request& request);
  net::Response Rerank(net::Request& request);
  // Runs a pooling request to its end and answers `render(outputs, prompt_tokens)`, through the
  // response cache under `cache_key` when `cache_use` says so.
  net::Response RunPooling(
      Engine& engine, PoolingRequest request, const std::string& model,
      base::ResponseCacheUse cache_use, std::string cache_key,
      std::function<std::string(const std::vector<std::vector<float>>&, int64_t)> render);
  // What the response cache may do for a pooling request (always cacheable, then its
  // Cache-Control), and its answer from the cache when it may look up and holds one.
  base::ResponseCacheUse PoolingCacheUse(base::CacheControl cache_control) const;
  std::optional<net::Response> CachedAnswer(base::ResponseCacheUse use, const std::string& key);
  // nullopt when `model` is served (the base model, or a loaded adapter: then `adapter` is its
  // name and `adapter_hash` its content hash in hex; "base" for the base model), else the 404.
  std::optional<ApiError> ResolveModel(const Engine& engine, const std::string& model,
                                       std::string& adapter, std::string& adapter_hash) const;
  // vLLM's /tokenize and /detokenize, with the served model's tokenizer and chat template.
  net::Response Tokenize(net::Request& request);
  net::Response Detokenize(net::Request& request);
  net::Response LoadAdapter(net::Request& request);
  net::Response UnloadAdapter(net::Request& request);
  net::Response Metrics();
  // 401 when an api_key is set and the request does not carry it; nullopt when allowed.
  std::optional<net::Response> Unauthorized(const net::Request& request) const;
  Engine* engine() const { return engine_ready_.load() ? engine_.get() : nullptr; }

  ServeOptions options_;
  std::unique_ptr<net::Server> http_;
  std::unique_ptr<Engine> engine_;
  std::atomic<bool> engine_ready_{false};
  ModelTask task_ = ModelTask::kGenerate;  // resolved before engine_ready_ is set
  std::mutex load_mu_;
  base::Status load_status_;
  bool load_done_ = false;
  std::condition_variable load_cv_;
  std::thread loader_;
  std::unique_ptr<ResponseCache> cache_;
  int64_t started_ = 0;

  Histogram ttft_{
      {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}};
  Histogram tpot_{
      {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}};
  Histogram e2e_{{0.01, 0.05, 0.1, 0.3, 0.5, 1, 2.5, 5, 10, 20, 40, 60}};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> embedding_requests_{0};
  std::atomic<uint64_t> rerank_requests_{0};
};

}  // namespace sovai::serve
