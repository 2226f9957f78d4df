// The OpenAI API's answers (openai_api.h): error objects, whole responses and stream chunks,
// the model list. Request parsing and validation are in openai_api.cc.
#include "base/crypto.h"
#include "serve/internal/openai_json.h"
#include "serve/openai_api.h"

namespace sovai::serve {

namespace {

using OJson = nlohmann::ordered_json;
using internal::FloatForJson;

double ReportedLogprob(float logprob) {
  // NaN and -inf compare false: both become the floor.
  if (!(logprob >= kMinReportedLogprob)) logprob = kMinReportedLogprob;
  return FloatForJson(logprob);
}

OJson Bytes(std::string_view token) {
  OJson bytes = OJson::array();
  for (unsigned char c : token) bytes.push_back(static_cast<int>(c));
  return bytes;
}

OJson FinishReasonJson(FinishReason reason) {
  if (reason == FinishReason::kNone) return nullptr;
  return FinishReasonName(reason);
}

// {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
OJson ChatLogprobs(const std::optional<std::vector<OutputLogprob>>& logprobs) {
  if (!logprobs) return nullptr;
  OJson content = OJson::array();
  for (const OutputLogprob& t : *logprobs) {
    OJson top = OJson::array();
    for (const TopLogprob& alt : t.top_logprobs) {
      top.push_back({{"token", alt.token},
                     {"logprob", ReportedLogprob(alt.logprob)},
                     {"bytes", Bytes(alt.token)}});
    }
    content.push_back({{"token", t.token},
                       {"logprob", ReportedLogprob(t.logprob.value_or(kMinReportedLogprob))},
                       {"bytes", Bytes(t.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return OJson{{"content", std::move(content)}};
}

// Unicode code points in `s`: bytes that do not continue a UTF-8 sequence.
int64_t CodePoints(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
OJson CompletionLogprobs(const ChoiceResult& choice) {
  if (!choice.logprobs) return nullptr;
  OJson tokens = OJson::array(), token_logprobs = OJson::array(), top = OJson::array(),
        offsets = OJson::array();
  int64_t offset = choice.text_offset;
  for (const OutputLogprob& t : *choice.logprobs) {
    tokens.push_back(t.token);
    offsets.push_back(offset);
    offset += CodePoints(t.token);
    if (!t.logprob) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(ReportedLogprob(*t.logprob));
    OJson alternatives = OJson::object();
    for (const TopLogprob& alt : t.top_logprobs) {
      alternatives[alt.token] = ReportedLogprob(alt.logprob);
    }
    top.push_back(std::move(alternatives));
  }
  return OJson{{"tokens", std::move(tokens)},
               {"token_logprobs", std::move(token_logprobs)},
               {"top_logprobs", std::move(top)},
               {"text_offset", std::move(offsets)}};
}

OJson UsageJson(const Usage& usage) {
  return OJson{{"prompt_tokens", usage.prompt_tokens},
               {"completion_tokens", usage.completion_tokens},
               {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
               {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

// id, object, created, model and (for chunks) system_fingerprint.
OJson Header(const ResponseMeta& meta, std::string_view object, bool fingerprint_here) {
  OJson out = {
      {"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
  if (fingerprint_here && !meta.system_fingerprint.empty()) {
    out["system_fingerprint"] = meta.system_fingerprint;
  }
  return out;
}

OJson Chunk(const ResponseMeta& meta, std::string_view object, OJson choice, bool include_usage) {
  OJson out = Header(meta, object, /*fingerprint_here=*/true);
  out["choices"] = OJson::array({std::move(choice)});
  if (include_usage) out["usage"] = nullptr;
  return out;
}

const char* ObjectName(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

}  // namespace

// --- Errors ---

nlohmann::ordered_json ApiError::ToJson() const {
  OJson param_json = param.empty() ? OJson(nullptr) : OJson(param);
  OJson code_json = code.empty() ? OJson(nullptr) : OJson(code);
  return OJson{
      {"error",
       {{"message", message}, {"type", type}, {"param", param_json}, {"code", code_json}}}};
}

ApiError InvalidRequestError(std::string param, std::string message) {
  return ApiError{.status = 400,
                  .type = "invalid_request_error",
                  .message = std::move(message),
                  .param = std::move(param)};
}

ApiError ModelNotFoundError(std::string_view model) {
  return ApiError{.status = 404,
                  .type = "invalid_request_error",
                  .message = "The model `" + std::string(model) +
                             "` does not exist or you do not have access to it.",
                  .param = "model",
                  .code = "model_not_found"};
}

ApiError QueueFullError(size_t max_waiting_requests) {
  return ApiError{.status = 429,
                  .type = "requests",
                  .message = "The server is at capacity: " + std::to_string(max_waiting_requests) +
                             " requests are already waiting. Retry after a short delay.",
                  .code = "rate_limit_exceeded"};
}

ApiError ContextLengthError(Endpoint endpoint, int64_t max_model_len, int64_t prompt_tokens,
                            std::optional<int64_t> completion_tokens) {
  const std::string what = endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
  std::string message = "This model's maximum context length is " + std::to_string(max_model_len) +
                        " tokens. However, ";
  if (completion_tokens) {
    message += "you requested " + std::to_string(prompt_tokens + *completion_tokens) + " tokens (" +
               std::to_string(prompt_tokens) + " in the " + what + ", " +
               std::to_string(*completion_tokens) + " in the completion). Please reduce the " +
               "length of the " + what + " or completion.";
  } else {
    message += "your " + what + " resulted in " + std::to_string(prompt_tokens) +
               " tokens. Please reduce the length of the " + what + ".";
  }
  return ApiError{.status = 400,
                  .type = "invalid_request_error",
                  .message = std::move(message),
                  .param = what,
                  .code = "context_length_exceeded"};
}

ApiError InternalServerError(std::string message) {
  return ApiError{.status = 500, .type = "server_error", .message = std::move(message)};
}

ApiError ModelLoadingError(std::string_view model) {
  return ApiError{.status = 503,
                  .type = "server_error",
                  .message = "The model `" + std::string(model) +
                             "` is still loading. Retry in a few seconds."};
}

ApiError ApiErrorFromStatus(const base::Status& status, std::string param) {
  SOVAI_CHECK(!status.ok()) << "ApiErrorFromStatus(OK)";
  ApiError e{.message = status.message(), .param = std::move(param)};
  using base::StatusCode;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented:
      e.status = 400;
      break;
    case StatusCode::kNotFound:
      e.status = 404;
      break;
    case StatusCode::kAlreadyExists:
      e.status = 409;
      break;
    case StatusCode::kPermissionDenied:
      e.status = 403;
      break;
    case StatusCode::kUnauthenticated:
      e.status = 401;
      e.code = "invalid_api_key";
      break;
    case StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "requests";
      e.code = "rate_limit_exceeded";
      break;
    case StatusCode::kUnavailable:
      e.status = 503;
      e.type = "server_error";
      break;
    case StatusCode::kDeadlineExceeded:
      e.status = 504;
      e.type = "server_error";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

ApiError ApiErrorFromHttpStatus(int http_status, std::string message) {
  ApiError e{.status = http_status, .message = std::move(message)};
  if (http_status == 429) {
    e.type = "requests";
    e.code = "rate_limit_exceeded";
  } else if (http_status >= 400 && http_status < 500) {
    e.type = "invalid_request_error";
    if (http_status == 413) e.code = "request_too_large";
  } else {
    e.type = "server_error";
  }
  return e;
}

// --- Responses ---

std::string NewResponseId(Endpoint endpoint) {
  return base::RandomToken(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-", 12);
}

nlohmann::ordered_json ChatCompletionResponse(const ResponseMeta& meta,
                                              const std::vector<ChoiceResult>& choices,
                                              const Usage& usage) {
  OJson out = Header(meta, ObjectName(Endpoint::kChatCompletions, false), false);
  OJson list = OJson::array();
  for (const ChoiceResult& c : choices) {
    list.push_back({{"index", c.index},
                    {"message", {{"role", "assistant"}, {"content", c.text}}},
                    {"logprobs", ChatLogprobs(c.logprobs)},
                    {"finish_reason", FinishReasonJson(c.finish_reason)}});
  }
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  if (!meta.system_fingerprint.empty()) out["system_fingerprint"] = meta.system_fingerprint;
  return out;
}

nlohmann::ordered_json CompletionResponse(const ResponseMeta& meta,
                                          const std::vector<ChoiceResult>& choices,
                                          const Usage& usage) {
  OJson out = Header(meta, ObjectName(Endpoint::kCompletions, false), false);
  OJson list = OJson::array();
  for (const ChoiceResult& c : choices) {
    list.push_back({{"text", c.text},
                    {"index", c.index},
                    {"logprobs", CompletionLogprobs(c)},
                    {"finish_reason", FinishReasonJson(c.finish_reason)}});
  }
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  if (!meta.system_fingerprint.empty()) out["system_fingerprint"] = meta.system_fingerprint;
  return out;
}

nlohmann::ordered_json ChatCompletionRoleChunk(const ResponseMeta& meta, int32_t index,
                                               bool include_usage) {
  OJson choice = {{"index", index},
                  {"delta", {{"role", "assistant"}, {"content", ""}}},
                  {"logprobs", nullptr},
                  {"finish_reason", nullptr}};
  return Chunk(meta, ObjectName(Endpoint::kChatCompletions, true), std::move(choice),
               include_usage);
}

nlohmann::ordered_json ChatCompletionChunk(const ResponseMeta& meta, const ChoiceResult& delta,
                                           bool include_usage) {
  OJson delta_json = OJson::object();
  if (!delta.text.empty() || delta.finish_reason == FinishReason::kNone) {
    delta_json["content"] = delta.text;
  }
  OJson choice = {{"index", delta.index},
                  {"delta", std::move(delta_json)},
                  {"logprobs", ChatLogprobs(delta.logprobs)},
                  {"finish_reason", FinishReasonJson(delta.finish_reason)}};
  return Chunk(meta, ObjectName(Endpoint::kChatCompletions, true), std::move(choice),
               include_usage);
}

nlohmann::ordered_json CompletionChunk(const ResponseMeta& meta, const ChoiceResult& delta,
                                       bool include_usage) {
  OJson choice = {{"text", delta.text},
                  {"index", delta.index},
                  {"logprobs", CompletionLogprobs(delta)},
                  {"finish_reason", FinishReasonJson(delta.finish_reason)}};
  return Chunk(meta, ObjectName(Endpoint::kCompletions, true), std::move(choice), include_usage);
}

nlohmann::ordered_json UsageChunk(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage) {
  OJson out = Header(meta, ObjectName(endpoint, true), /*fingerprint_here=*/true);
  out["choices"] = OJson::array();
  out["usage"] = UsageJson(usage);
  return out;
}

std::string UsageComment(const Usage& usage) {
  OJson out;
  out["usage"] = UsageJson(usage);
  return out.dump();
}

nlohmann::ordered_json ModelList(const std::vector<ModelCard>& models) {
  OJson data = OJson::array();
  for (const ModelCard& m : models) {
    data.push_back({{"id", m.id},
                    {"object", "model"},
                    {"created", m.created},
                    {"owned_by", "sovai"},
                    {"root", m.root},
                    {"parent", m.parent.empty() ? OJson(nullptr) : OJson(m.parent)},
                    {"max_model_len", m.max_model_len}});
    if (!m.kind.empty()) data.back()["kind"] = m.kind;
    if (m.embedding_dimension > 0) data.back()["embedding_dimension"] = m.embedding_dimension;
  }
  return OJson{{"object", "list"}, {"data", std::move(data)}};
}

std::string SerializeJson(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, OJson::error_handler_t::replace);
}

}  // namespace sovai::serve
