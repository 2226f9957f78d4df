// The OpenAI-compatible protocol layer of `sovai-engine serve` (docs/api/openai.md): parsing and
// validating request bodies of POST /v1/chat/completions and /v1/completions, turning them into
// engine requests, building responses, stream chunks, the model list and OpenAI error bodies, and
// the response cache's key. No I/O: the HTTP wiring calls these.
//
//   ApiResult<OpenAiRequest> parsed = ParseChatCompletionRequest(
//       body, {.cache_control =
//       base::ParseCacheControl(headers.Get("Cache-Control").value_or(""))});
//   if (!parsed.ok()) return ErrorResponse(parsed.error());   // status + parsed.error().ToJson()
//   ApiResult<std::string> prompt = RenderChatPrompt(chat_template, *parsed);
//   ... tokenize ...
//   ApiResult<GenerationRequest> request = ToGenerationRequest(*parsed, tokens, adapter, context);
//   ... run it; ChatCompletionResponse(meta, choices, usage) or the chunk builders ...
//
// Validation follows OpenAI: every error is a 400 invalid_request_error whose `param` names the
// field ("temperature", "messages[2].role", "response_format.json_schema.name") and whose message
// says what was wrong. Unknown fields are ignored, as OpenAI does, except the ones that would
// silently change the output if ignored (kUnsupportedParams below). JSON `null` means "not given".
//
// Thread-safety: pure functions over their arguments; the structs are plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/check.h"
#include "base/json.h"
#include "base/response_cache_policy.h"
#include "base/status.h"
#include "model/chat_template.h"
#include "serve/request.h"

namespace sovai::serve {

// --- Limits (each is a 400 naming the parameter when exceeded) ---

// Request bodies: the JSON parser's size and nesting bounds. Nesting also bounds JSON schemas.
inline constexpr size_t kMaxRequestBodyBytes = base::kDefaultMaxJsonBytes;  // 16 MiB
inline constexpr int kMaxRequestJsonDepth = base::kDefaultMaxJsonDepth;     // 64
inline constexpr size_t kMaxModelNameBytes = 256;
inline constexpr size_t kMaxMessages = 4096;
inline constexpr size_t kMaxContentParts = 1024;  // per message
// A prompt given as token ids (a text prompt is bounded by the body size and the context).
inline constexpr size_t kMaxPromptTokenIds = 1u << 20;
// Prompts of one batched completion request, and its choices (prompts times n): each choice is a
// sequence in the engine's queue.
inline constexpr size_t kMaxPrompts = 256;
inline constexpr int64_t kMaxBatchChoices = 256;
// OpenAI's bounds on `stop`.
inline constexpr size_t kMaxStopSequences = 4;
inline constexpr size_t kMaxStopSequenceBytes = 256;
inline constexpr size_t kMaxStopTokenIds = 64;  // vLLM's stop_token_ids
inline constexpr int32_t kMaxChoices = 16;      // `n`; each choice costs a sequence of KV cache
inline constexpr int32_t kMaxTopLogprobs = 20;  // chat `top_logprobs` (OpenAI's bound)
inline constexpr int32_t kMaxCompletionLogprobs = 5;  // completions `logprobs` (OpenAI's bound)
inline constexpr double kMaxTemperature = 2.0;
inline constexpr double kMaxAbsPenalty = 2.0;        // presence_penalty, frequency_penalty
inline constexpr size_t kMaxLogitBiasEntries = 300;  // OpenAI's bound on logit_bias
inline constexpr double kMaxAbsLogitBias = 100.0;    // each bias is in [-100, 100] (OpenAI)
// vLLM's repetition_penalty only asks for > 0; past this no logit is left to penalize.
inline constexpr double kMaxRepetitionPenalty = 100.0;
inline constexpr size_t kMaxSchemaNameBytes = 64;  // response_format.json_schema.name (OpenAI)
// OpenAI's default max_tokens for /v1/completions; chat defaults to the rest of the context.
inline constexpr int64_t kDefaultCompletionMaxTokens = 16;
// A logprob below this is reported as this (OpenAI's convention; -inf has no JSON spelling).
inline constexpr float kMinReportedLogprob = -9999.0f;

// Fields that would change the output if they were ignored, each refused (400 naming it) when set
// to anything but its no-op value: tools/tool_choice/functions/function_call, suffix, best_of > 1,
// and vLLM extensions (use_beam_search, prompt_logprobs, guided_*). The exact rules are
// in openai_api.cc and docs/api/openai.md.

// The response header that tells whether a body came from the response cache: "hit", "miss" (the
// request was cacheable and its response is now stored) or "bypass" (not cacheable, or opted out).
// One name for the engine and the gateway.
inline constexpr std::string_view kCacheStatusHeader = base::kCacheStatusHeader;
// The data of the last Server-Sent Event of a stream (`data: [DONE]`).
inline constexpr std::string_view kStreamDoneData = "[DONE]";

// --- Errors ---

enum class Endpoint : uint8_t { kChatCompletions, kCompletions };

// An OpenAI error: HTTP `status` and the body {"error": {"message", "type", "param", "code"}}.
// Empty `param` and `code` are written as null.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;
  std::string code;

  nlohmann::ordered_json ToJson() const;
  friend bool operator==(const ApiError&, const ApiError&) = default;
};

// 400 invalid_request_error naming `param`.
ApiError InvalidRequestError(std::string param, std::string message);
// 404 "The model `x` does not exist or you do not have access to it.", code model_not_found.
ApiError ModelNotFoundError(std::string_view model);
// 429 when the waiting queue is full: type "requests", code "rate_limit_exceeded", as OpenAI's
// rate-limit errors (clients retry 429 with backoff).
ApiError QueueFullError(size_t max_waiting_requests);
// 400 context_length_exceeded, OpenAI's wording: "This model's maximum context length is N tokens.
// However, you requested M tokens (P in the messages, C in the completion). Please reduce the
// length of the messages or completion." Without `completion_tokens` (the prompt alone fills the
// context): "However, your messages resulted in P tokens. ...". "prompt" instead of "messages"
// for /v1/completions; `param` is "messages" or "prompt".
ApiError ContextLengthError(Endpoint endpoint, int64_t max_model_len, int64_t prompt_tokens,
                            std::optional<int64_t> completion_tokens);
// 500 server_error.
ApiError InternalServerError(std::string message);
// 503 server_error while the model (or adapter) is still loading.
ApiError ModelLoadingError(std::string_view model);
// The one table from Status to OpenAI errors: InvalidArgument, OutOfRange, FailedPrecondition,
// Unimplemented -> 400 invalid_request_error; NotFound -> 404; AlreadyExists -> 409;
// PermissionDenied -> 403; Unauthenticated -> 401 (code invalid_api_key); ResourceExhausted ->
// 429 (type requests); Unavailable -> 503 server_error; DeadlineExceeded -> 504 server_error;
// anything else -> 500 server_error. The message is the status's message. `status` must not be OK.
ApiError ApiErrorFromStatus(const base::Status& status, std::string param = "");
// The errors the HTTP server answers before a handler runs or in place of its answer (404 and 405
// for an unknown route, 413 over a body limit, 414, 431, 500 for a throwing handler) as OpenAI
// errors: `http_status` with `message`; 429 as QueueFullError (type requests, code
// rate_limit_exceeded), other 4xx invalid_request_error (413 with code request_too_large), 5xx
// server_error.
ApiError ApiErrorFromHttpStatus(int http_status, std::string message);

// A value, or the OpenAI error that answers the request.
template <typename T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : storage_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  ApiResult(ApiError error) : storage_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(storage_); }
  // Calling error() on a value or value() on an error is a bug (SOVAI_CHECK).
  const ApiError& error() const {
    SOVAI_CHECK(!ok()) << "error() on an ApiResult holding a value";
    return std::get<ApiError>(storage_);
  }
  T& value() & { return std::get<T>(Checked()); }
  const T& value() const& { return std::get<T>(Checked()); }
  T&& value() && { return std::get<T>(std::move(Checked())); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, ApiError>& Checked() {
    SOVAI_CHECK(ok()) << "value() on an error ApiResult: " << std::get<ApiError>(storage_).message;
    return storage_;
  }
  const std::variant<T, ApiError>& Checked() const {
    SOVAI_CHECK(ok()) << "value() on an error ApiResult: " << std::get<ApiError>(storage_).message;
    return storage_;
  }
  std::variant<T, ApiError> storage_;
};

// --- Requests ---

// One completion prompt: text, or token ids (then token_ids is set and non-empty, text empty).
struct CompletionPrompt {
  std::string text;
  std::optional<std::vector<int32_t>> token_ids;
  bool operator==(const CompletionPrompt&) const = default;
};

// A validated request of either endpoint, normalized: defaults filled in, `stop` always a list,
// max_completion_tokens folded into max_tokens, top_k -1 folded into 0.
struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;

  // Chat: at least one message. Roles are system, user, assistant and tool ("developer" is read
  // as "system", which chat templates know). Content is a string; an array of text parts is
  // joined with "\n" (as vLLM does). Assistant messages may carry tool_calls (then null content
  // is allowed); `name` and `tool_call_id` travel in ChatMessage::extra.
  std::vector<model::ChatMessage> messages;

  // Completions: one prompt, or several (OpenAI's batched completions: a list of strings or of
  // token-id lists, at most kMaxPrompts), each as text or as token ids. Choice p * n + i is
  // choice i of prompt p; each prompt is answered as a request of its own would be.
  std::vector<CompletionPrompt> prompts;
  bool echo = false;  // completions: each choice's text starts with its prompt

  // At least 1. Chat: nullopt means "until the context is full". Completions: default 16.
  std::optional<int64_t> max_tokens;
  std::vector<std::string> stop;        // at most 4, each 1..256 bytes (empty strings dropped)
  std::vector<int32_t> stop_token_ids;  // vLLM extension
  bool ignore_eos = false;              // vLLM extension
  int64_t min_tokens = 0;               // vLLM extension (GenerationRequest::min_tokens)
  int32_t n = 1;                        // 1..kMaxChoices
  // temperature, top_p, top_k, penalties, seed (an int64 kept as its two's complement bits) and
  // logprobs: chat `logprobs` + `top_logprobs`; completions `logprobs: k` sets logprobs and
  // top_logprobs = k.
  SamplingParams sampling;
  ResponseFormat response_format;
  bool response_format_strict = false;  // json_schema.strict (the schema is always enforced)

  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage

  // The request's Cache-Control: what it lets the response cache do (CacheUse).
  base::CacheControl cache_control = base::CacheControl::kDefault;
};

struct ParseOptions {
  // base::ParseCacheControl of the request's Cache-Control header.
  base::CacheControl cache_control = base::CacheControl::kDefault;
};

// Parse and validate a request body. Errors (all 400 invalid_request_error): malformed JSON or a
// body over kMaxRequestBodyBytes / kMaxRequestJsonDepth (param null), a body that is not an
// object, a field of the wrong type, a value out of range, a missing model / messages / prompt,
// an unknown role or content part type, and the unsupported fields above.
ApiResult<OpenAiRequest> ParseChatCompletionRequest(std::string_view body,
                                                    const ParseOptions& options = {});
ApiResult<OpenAiRequest> ParseCompletionRequest(std::string_view body,
                                                const ParseOptions& options = {});

// vLLM's POST /tokenize: {"model", "prompt"} or {"model", "messages", "add_generation_prompt"
// (default true)}, with "add_special_tokens" (default: true for a prompt, false for messages,
// whose template holds them).
struct TokenizeRequest {
  std::string model;
  bool chat = false;
  std::string prompt;                        // !chat
  std::vector<model::ChatMessage> messages;  // chat: validated as /v1/chat/completions does
  bool add_generation_prompt = true;
  bool add_special_tokens = true;
};
// vLLM's POST /detokenize: {"model", "tokens": [ids]} (ids are checked against the vocabulary
// by the server, which knows it).
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
// 400s as the parsers above: malformed JSON, a missing or mistyped field, both prompt and
// messages, more than kMaxPromptTokenIds tokens.
ApiResult<TokenizeRequest> ParseTokenizeRequest(std::string_view body);
ApiResult<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body);
// {"count", "max_model_len", "tokens"} and {"prompt"}, as vLLM answers them.
nlohmann::ordered_json TokenizeResponse(const std::vector<int32_t>& tokens, int64_t max_model_len);
nlohmann::ordered_json DetokenizeResponse(const std::string& text);

// The chat prompt: the messages through the model's template, with the generation prompt. A
// template error (for example a raise_exception on roles that do not alternate) is a 400 naming
// "messages" that carries the template's message.
ApiResult<std::string> RenderChatPrompt(const model::ChatTemplate& chat_template,
                                        const OpenAiRequest& request);
// The same for `messages`, with or without the generation prompt (/tokenize).
ApiResult<std::string> RenderChatPrompt(const model::ChatTemplate& chat_template,
                                        const std::vector<model::ChatMessage>& messages,
                                        bool add_generation_prompt);

// What the served model allows a request.
struct ModelContext {
  int64_t max_model_len = 0;  // tokens of context: prompt + completion
  int32_t vocab_size = 0;     // token ids must be below this
};

// A prompt field that may be a batch (completions' `prompt`, embeddings' `input`): a string, a
// list of token ids, a list of strings or a list of token-id lists (not mixed), at most
// `max_prompts`, each token-id list non-empty and at most kMaxPromptTokenIds. `value` nullptr or
// null: missing. Errors are 400s naming `param` ("input[3]").
ApiResult<std::vector<CompletionPrompt>> ParsePromptBatch(const nlohmann::json* value,
                                                          std::string_view param,
                                                          size_t max_prompts);

// The first of `ids` outside [0, vocab_size), as a 400 on `param` that gives its position; nullopt
// when they are all inside.
std::optional<ApiError> TokenOutsideVocabulary(std::span<const int32_t> ids, int64_t vocab_size,
                                               const std::string& param);

// The engine's request: `prompts` are the tokenized prompts (the rendered chat prompt, or each
// completion prompt's text or token ids), `adapter` the adapter's name (empty: the base model).
// max_tokens becomes the rest of the context when not given. Errors: ContextLengthError when a
// prompt plus max_tokens exceeds max_model_len (or the prompt alone fills it); 400 for an empty
// prompt or a token id (prompt, logit_bias or stop_token_ids) outside [0, vocab_size).
ApiResult<GenerationRequest> ToGenerationRequest(const OpenAiRequest& request,
                                                 std::vector<std::vector<int32_t>> prompts,
                                                 std::string adapter, const ModelContext& context);

// --- Response cache key ---

// The canonical form of everything in `request` that affects its response body: the endpoint,
// model, `adapter_content_hash` (so a reloaded adapter never serves old answers), messages or
// prompt, and every generation field, as JSON with sorted keys and normalized values (so `stop`
// "x" and ["x"], max_tokens and max_completion_tokens, an absent temperature and 1.0 read the
// same). stream, stream_options, user and cache_control are left out: they do not change the
// tokens.
std::string CanonicalRequest(const OpenAiRequest& request, std::string_view adapter_content_hash);
// The response cache's key: the lowercase hex SHA-256 of CanonicalRequest (64 bytes).
std::string CacheKey(const OpenAiRequest& request, std::string_view adapter_content_hash);
// Whether the response may be cached at all, by the rule the gateway applies too
// (base::CompletionCacheable): not streamed, and deterministic (greedy: temperature 0 or top_k 1;
// or with an explicit seed, n > 1 included).
bool Cacheable(const OpenAiRequest& request);
// What the cache may do for `request`: Cacheable, then its cache_control (no-cache: store, do not
// look up; no-store: neither) through base::DecideResponseCache. Store only complete responses:
// none of whose choices finished with FinishReason::kAbort.
base::ResponseCacheUse CacheUse(const OpenAiRequest& request);

// --- Responses ---

// Shared by every object of one response (and every chunk of one stream).
struct ResponseMeta {
  std::string id;                  // NewResponseId(endpoint)
  int64_t created = 0;             // Unix seconds
  std::string model;               // the name the client asked for
  std::string system_fingerprint;  // empty: the field is left out
};
// "chatcmpl-" or "cmpl-" followed by 24 random hex digits.
std::string NewResponseId(Endpoint endpoint);

// One alternative at a token position.
struct TopLogprob {
  std::string token;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0;
};

// One token of a choice with its log-probability and the most likely alternatives (most likely
// first, as many as the request's top_logprobs). `logprob` is nullopt only for the first prompt
// token of a completions echo, which has none (written as null). Logprobs below
// kMinReportedLogprob (and -inf) are written as kMinReportedLogprob.
struct OutputLogprob {
  std::string token;
  std::optional<float> logprob;
  std::vector<TopLogprob> top_logprobs;
};

// One choice of a response, or one chunk's piece of a choice when streaming.
struct ChoiceResult {
  int32_t index = 0;
  // The text (of this chunk, when streaming). Completions with echo: starts with the prompt.
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;  // kNone: null (a chunk mid-stream)
  // nullopt: "logprobs": null. Else one entry per token of `text`.
  std::optional<std::vector<OutputLogprob>> logprobs;
  // Completions logprobs: the text_offset of the first token, in Unicode code points from the
  // start of the response text (when streaming: the length of the text sent before this chunk).
  int64_t text_offset = 0;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // over all choices
  int64_t cached_tokens = 0;      // prompt tokens whose KV came from the prefix cache
};

// {"id", "object": "chat.completion", "created", "model", "choices": [{"index", "message":
// {"role": "assistant", "content"}, "logprobs": {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [{"token", "logprob", "bytes"}]}]} or null, "finish_reason"}], "usage":
// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
// {"cached_tokens"}}, "system_fingerprint"}.
nlohmann::ordered_json ChatCompletionResponse(const ResponseMeta& meta,
                                              const std::vector<ChoiceResult>& choices,
                                              const Usage& usage);
// {"id", "object": "text_completion", "created", "model", "choices": [{"text", "index",
// "logprobs": {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}
// or null, "finish_reason"}], "usage", "system_fingerprint"}.
nlohmann::ordered_json CompletionResponse(const ResponseMeta& meta,
                                          const std::vector<ChoiceResult>& choices,
                                          const Usage& usage);

// Stream chunks ("chat.completion.chunk" / "text_completion"), one choice each, in OpenAI's order:
// per choice a role chunk (chat only: delta {"role": "assistant", "content": ""}), content chunks
// (delta {"content": text}), a last chunk with finish_reason (delta {} when it has no text); then,
// with include_usage, one usage chunk with "choices": [] — and "usage": null on every other chunk.
// system_fingerprint, when set, follows model.
nlohmann::ordered_json ChatCompletionRoleChunk(const ResponseMeta& meta, int32_t index,
                                               bool include_usage);
nlohmann::ordered_json ChatCompletionChunk(const ResponseMeta& meta, const ChoiceResult& delta,
                                           bool include_usage);
nlohmann::ordered_json CompletionChunk(const ResponseMeta& meta, const ChoiceResult& delta,
                                       bool include_usage);
nlohmann::ordered_json UsageChunk(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage);
// The text of the SSE comment that ends a stream without include_usage, for meters on the way
// (docs/api/openai.md): {"usage":{...}} on one line.
std::string UsageComment(const Usage& usage);

// One served model for GET /v1/models: the base model (parent empty: null) or an adapter (parent:
// the base model's id), as vLLM lists them.
struct ModelCard {
  std::string id;
  int64_t created = 0;
  std::string root;    // base model: its path or repository; adapter: its path
  std::string parent;  // empty: null
  int64_t max_model_len = 0;
  std::string kind;                 // "generate", "embedding", "reranker"; empty: left out
  int64_t embedding_dimension = 0;  // embedding models; 0: left out
};
// {"object": "list", "data": [{"id", "object": "model", "created", "owned_by": "sovai", "root",
// "parent", "max_model_len", "kind", "embedding_dimension"}]}.
nlohmann::ordered_json ModelList(const std::vector<ModelCard>& models);

// Serializes a response, chunk or error body without throwing: invalid UTF-8 (a token that ends
// inside a character) is replaced by U+FFFD.
std::string SerializeJson(const nlohmann::ordered_json& value);

}  // namespace sovai::serve
