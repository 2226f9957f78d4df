#include "serve/openai_api.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "base/crypto.h"
#include "base/strings.h"
#include "serve/internal/openai_json.h"

namespace sovai::serve {

namespace {

using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;
using internal::FloatForJson;

constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();

// "2", "0.5": the shortest decimal that reads back as `v`.
std::string Shortest(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  SOVAI_CHECK(ec == std::errc());
  return std::string(buf, end);
}

std::string Quote(std::string_view name) { return "'" + std::string(name) + "'"; }

// "a string", "an integer", ... for type errors.
std::string TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

// The value of object[key], or nullptr when the key is missing or null (OpenAI reads null as
// "not given"). `object` must be an object.
const Json* Find(const Json& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// Typed reads that keep the first error: later reads after a failure return std::nullopt and
// record nothing, so parsing can go on without checking after every field.
class Reader {
 public:
  bool failed() const { return error_.has_value(); }
  const ApiError& error() const { return *error_; }

  void Fail(std::string param, std::string message) {
    if (!error_) error_ = InvalidRequestError(std::move(param), std::move(message));
  }
  void Missing(std::string_view param) {
    Fail(std::string(param), "Missing required parameter: " + Quote(param) + ".");
  }
  void WrongType(std::string_view param, std::string_view expected, const Json& got) {
    Fail(std::string(param), "Invalid type for " + Quote(param) + ": expected " +
                                 std::string(expected) + ", but got " + TypeName(got) +
                                 " instead.");
  }
  void BadValue(std::string_view param, std::string_view rule, const Json& got) {
    Fail(std::string(param), "Invalid value for " + Quote(param) + ": " + std::string(rule) +
                                 ", got " + base::DumpJson(got) + ".");
  }

  std::optional<std::string> String(const Json* value, std::string_view param) {
    if (value == nullptr || failed()) return std::nullopt;
    if (!value->is_string()) return WrongTypeNull(param, "a string", *value);
    return value->get<std::string>();
  }
  std::optional<bool> Bool(const Json* value, std::string_view param) {
    if (value == nullptr || failed()) return std::nullopt;
    if (!value->is_boolean()) return WrongTypeNull(param, "a boolean", *value);
    return value->get<bool>();
  }
  // An integer JSON number (3.0 is not one) that fits in int64_t, within [min, max].
  std::optional<int64_t> Int(const Json* value, std::string_view param,
                             int64_t min = std::numeric_limits<int64_t>::min(),
                             int64_t max = std::numeric_limits<int64_t>::max()) {
    if (value == nullptr || failed()) return std::nullopt;
    if (!value->is_number_integer()) return WrongTypeNull(param, "an integer", *value);
    if (value->is_number_unsigned() &&
        value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      BadValue(param, "must fit in a signed 64-bit integer", *value);
      return std::nullopt;
    }
    int64_t v = value->get<int64_t>();
    if (v < min || v > max) {
      if (max == std::numeric_limits<int64_t>::max()) {
        BadValue(param, "must be at least " + std::to_string(min), *value);
      } else {
        BadValue(param, "must be between " + std::to_string(min) + " and " + std::to_string(max),
                 *value);
      }
      return std::nullopt;
    }
    return v;
  }
  // Any JSON number within [min, max], or (min, max] with `min_exclusive`.
  std::optional<double> Number(const Json* value, std::string_view param, double min, double max,
                               bool min_exclusive = false) {
    if (value == nullptr || failed()) return std::nullopt;
    if (!value->is_number()) return WrongTypeNull(param, "a number", *value);
    double v = value->get<double>();
    bool low = min_exclusive ? v <= min : v < min;
    if (low || v > max) {
      std::string rule =
          min_exclusive ? "must be greater than " + Shortest(min) + " and at most " + Shortest(max)
                        : "must be between " + Shortest(min) + " and " + Shortest(max);
      BadValue(param, rule, *value);
      return std::nullopt;
    }
    return v;
  }
  // A token id in [0, 2^31 - 1].
  std::optional<int32_t> TokenId(const Json& value, std::string_view param) {
    std::optional<int64_t> id = Int(&value, param, 0, kMaxTokenId);
    if (!id) return std::nullopt;
    return static_cast<int32_t>(*id);
  }

 private:
  std::nullopt_t WrongTypeNull(std::string_view param, std::string_view expected, const Json& got) {
    WrongType(param, expected, got);
    return std::nullopt;
  }

  std::optional<ApiError> error_;
};

std::string Indexed(std::string_view param, size_t i) {
  return std::string(param) + "[" + std::to_string(i) + "]";
}

// --- Fields refused because ignoring them would change the output ---

void RefuseUnsupported(const Json& body, Endpoint endpoint, Reader& r) {
  auto unsupported = [&](std::string_view name, std::string_view why) {
    r.Fail(std::string(name), Quote(name) + " is not supported by this server" + std::string(why) +
                                  "; remove it from the request.");
  };
  for (std::string_view name : {"tools", "functions"}) {
    const Json* v = Find(body, name);
    if (v == nullptr) continue;
    if (!v->is_array()) {
      r.WrongType(name, "an array", *v);
    } else if (!v->empty()) {
      unsupported(name, " (no tool calling)");
    }
  }
  // "none" and "auto" without tools are no-ops; anything else asks for a tool call.
  for (std::string_view name : {"tool_choice", "function_call"}) {
    const Json* v = Find(body, name);
    if (v == nullptr) continue;
    if (!v->is_string() || (*v != "none" && *v != "auto")) {
      unsupported(name, " (no tool calling)");
    }
  }
  if (endpoint == Endpoint::kCompletions) {
    if (const Json* v = Find(body, "suffix")) {
      if (!v->is_string()) {
        r.WrongType("suffix", "a string", *v);
      } else if (!v->get_ref<const std::string&>().empty()) {
        unsupported("suffix", " (no insertion)");
      }
    }
    std::optional<int64_t> best_of = r.Int(Find(body, "best_of"), "best_of", 1);
    if (best_of && *best_of > 1) unsupported("best_of", " above 1");
  }
  // vLLM extensions, refused unless given their no-op value (null: any value is refused).
  const std::pair<std::string_view, Json> kVllmNoOps[] = {
      {"use_beam_search", false}, {"prompt_logprobs", nullptr}, {"guided_json", nullptr},
      {"guided_regex", nullptr},  {"guided_choice", nullptr},   {"guided_grammar", nullptr},
  };
  for (const auto& [name, no_op] : kVllmNoOps) {
    const Json* v = Find(body, name);
    if (v != nullptr && *v != no_op) unsupported(name, "");
  }
}

// --- Chat messages ---

std::optional<model::ChatMessage> ParseMessage(const Json& m, const std::string& param, Reader& r) {
  if (!m.is_object()) {
    r.WrongType(param, "an object", m);
    return std::nullopt;
  }
  model::ChatMessage message;
  const std::string role_param = param + ".role";
  const Json* role = Find(m, "role");
  if (role == nullptr) {
    r.Missing(role_param);
    return std::nullopt;
  }
  std::optional<std::string> role_name = r.String(role, role_param);
  if (!role_name) return std::nullopt;
  if (*role_name == "developer") {
    message.role = "system";  // OpenAI's newer name for system instructions
  } else if (*role_name == "system" || *role_name == "user" || *role_name == "assistant" ||
             *role_name == "tool") {
    message.role = *role_name;
  } else {
    r.Fail(role_param, "Invalid value for " + Quote(role_param) + ": " + Quote(*role_name) +
                           ". Supported values are: 'system', 'developer', 'user', 'assistant' "
                           "and 'tool'.");
    return std::nullopt;
  }

  bool has_tool_calls = false;
  if (const Json* calls = Find(m, "tool_calls"); calls != nullptr && message.role == "assistant") {
    if (!calls->is_array()) {
      r.WrongType(param + ".tool_calls", "an array", *calls);
      return std::nullopt;
    }
    if (!calls->empty()) {
      message.tool_calls = OJson(*calls);
      has_tool_calls = true;
    }
  }

  const std::string content_param = param + ".content";
  const Json* content = Find(m, "content");
  if (content == nullptr) {
    if (!has_tool_calls) {
      r.Missing(content_param);
      return std::nullopt;
    }
    message.content = nullptr;
  } else if (content->is_string()) {
    message.content = content->get<std::string>();
  } else if (content->is_array()) {
    if (content->size() > kMaxContentParts) {
      r.Fail(content_param, Quote(content_param) + " has " + std::to_string(content->size()) +
                                " parts; at most " + std::to_string(kMaxContentParts) +
                                " are allowed.");
      return std::nullopt;
    }
    std::string text;
    for (size_t j = 0; j < content->size(); ++j) {
      const Json& part = (*content)[j];
      const std::string part_param = Indexed(content_param, j);
      if (!part.is_object()) {
        r.WrongType(part_param, "an object", part);
        return std::nullopt;
      }
      const Json* type = Find(part, "type");
      if (type == nullptr) {
        r.Missing(part_param + ".type");
        return std::nullopt;
      }
      std::optional<std::string> type_name = r.String(type, part_param + ".type");
      if (!type_name) return std::nullopt;
      if (*type_name != "text") {
        r.Fail(part_param + ".type", "Invalid value for " + Quote(part_param + ".type") + ": " +
                                         Quote(*type_name) +
                                         ". Only 'text' content parts are supported.");
        return std::nullopt;
      }
      const Json* part_text = Find(part, "text");
      if (part_text == nullptr) {
        r.Missing(part_param + ".text");
        return std::nullopt;
      }
      std::optional<std::string> s = r.String(part_text, part_param + ".text");
      if (!s) return std::nullopt;
      if (j > 0) text += '\n';
      text += *s;
    }
    message.content = std::move(text);
  } else {
    r.WrongType(content_param, "a string or an array of content parts", *content);
    return std::nullopt;
  }

  for (std::string_view key : {"name", "tool_call_id"}) {
    std::optional<std::string> v = r.String(Find(m, key), param + "." + std::string(key));
    if (v) {
      if (message.extra.is_null()) message.extra = OJson::object();
      message.extra[std::string(key)] = *v;
    }
  }
  if (r.failed()) return std::nullopt;
  return message;
}

void ParseMessages(const Json& body, OpenAiRequest& out, Reader& r) {
  const Json* messages = Find(body, "messages");
  if (messages == nullptr) return r.Missing("messages");
  if (!messages->is_array()) return r.WrongType("messages", "an array", *messages);
  if (messages->empty()) {
    return r.Fail("messages", "'messages' must contain at least one message.");
  }
  if (messages->size() > kMaxMessages) {
    return r.Fail("messages", "'messages' has " + std::to_string(messages->size()) +
                                  " messages; at most " + std::to_string(kMaxMessages) +
                                  " are allowed.");
  }
  out.messages.reserve(messages->size());
  for (size_t i = 0; i < messages->size(); ++i) {
    std::optional<model::ChatMessage> m = ParseMessage((*messages)[i], Indexed("messages", i), r);
    if (!m) return;
    out.messages.push_back(std::move(*m));
  }
}

// --- Completions prompt ---

std::optional<std::vector<int32_t>> ParseTokenIds(const Json& ids, std::string_view param,
                                                  Reader& r) {
  if (ids.empty()) {
    r.Fail(std::string(param), Quote(param) + " must not be an empty list of token ids.");
    return std::nullopt;
  }
  if (ids.size() > kMaxPromptTokenIds) {
    r.Fail(std::string(param), Quote(param) + " has " + std::to_string(ids.size()) +
                                   " token ids; at most " + std::to_string(kMaxPromptTokenIds) +
                                   " are allowed.");
    return std::nullopt;
  }
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::optional<int32_t> id = r.TokenId(ids[i], Indexed(param, i));
    if (!id) return std::nullopt;
    out.push_back(*id);
  }
  return out;
}

// `prompt` (`param`): a string, a list of token ids, or a batch: a list of strings or a list of
// token-id lists (not mixed), at most `max_prompts`.
void ParsePromptValue(const Json* prompt, std::string_view param, size_t max_prompts,
                      std::vector<CompletionPrompt>& out, Reader& r) {
  if (prompt == nullptr) return r.Missing(param);
  constexpr std::string_view kExpected =
      "a string, a list of strings, a list of token ids, or a list of token-id lists";
  if (prompt->is_string()) {
    out.push_back({.text = prompt->get<std::string>()});
    return;
  }
  if (!prompt->is_array()) return r.WrongType(param, kExpected, *prompt);
  if (prompt->empty())
    return r.Fail(std::string(param), Quote(param) + " must not be an empty list.");
  const Json& first = prompt->front();
  if (first.is_number()) {
    if (auto ids = ParseTokenIds(*prompt, param, r)) out.push_back({.token_ids = ids});
    return;
  }
  if (!first.is_string() && !first.is_array()) {
    return r.WrongType(Indexed(param, 0), "a string, a token id or a list of token ids", first);
  }
  if (prompt->size() > max_prompts) {
    return r.Fail(std::string(param), Quote(param) + " holds " + std::to_string(prompt->size()) +
                                          " prompts; at most " + std::to_string(max_prompts) +
                                          " may be sent in one request.");
  }
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& item = (*prompt)[i];
    const std::string item_param = Indexed(param, i);
    if (first.is_string()) {
      if (!item.is_string()) return r.WrongType(item_param, "a string, as the first item", item);
      out.push_back({.text = item.get<std::string>()});
    } else {
      if (!item.is_array()) {
        return r.WrongType(item_param, "a list of token ids, as the first item", item);
      }
      std::optional<std::vector<int32_t>> ids = ParseTokenIds(item, item_param, r);
      if (!ids) return;
      out.push_back({.token_ids = std::move(ids)});
    }
  }
}

void ParsePrompt(const Json& body, OpenAiRequest& out, Reader& r) {
  ParsePromptValue(Find(body, "prompt"), "prompt", kMaxPrompts, out.prompts, r);
}

// --- Generation fields ---

void ParseStop(const Json& body, OpenAiRequest& out, Reader& r) {
  const Json* stop = Find(body, "stop");
  if (stop == nullptr) return;
  auto add = [&](const std::string& s, std::string_view param) {
    if (s.size() > kMaxStopSequenceBytes) {
      return r.Fail(std::string(param), Quote(param) + " is " + std::to_string(s.size()) +
                                            " bytes long; stop sequences may be at most " +
                                            std::to_string(kMaxStopSequenceBytes) + " bytes.");
    }
    // An empty stop sequence would match everywhere; clients send "" to mean none.
    if (!s.empty()) out.stop.push_back(s);
  };
  if (stop->is_string()) return add(stop->get<std::string>(), "stop");
  if (!stop->is_array()) return r.WrongType("stop", "a string or an array of strings", *stop);
  if (stop->size() > kMaxStopSequences) {
    return r.Fail("stop", "'stop' has " + std::to_string(stop->size()) + " sequences; at most " +
                              std::to_string(kMaxStopSequences) + " are allowed.");
  }
  for (size_t i = 0; i < stop->size(); ++i) {
    std::optional<std::string> s = r.String(&(*stop)[i], Indexed("stop", i));
    if (!s) return;
    add(*s, Indexed("stop", i));
  }
}

void ParseStopTokenIds(const Json& body, OpenAiRequest& out, Reader& r) {
  const Json* ids = Find(body, "stop_token_ids");
  if (ids == nullptr) return;
  if (!ids->is_array()) return r.WrongType("stop_token_ids", "an array of token ids", *ids);
  if (ids->size() > kMaxStopTokenIds) {
    return r.Fail("stop_token_ids", "'stop_token_ids' has " + std::to_string(ids->size()) +
                                        " ids; at most " + std::to_string(kMaxStopTokenIds) +
                                        " are allowed.");
  }
  for (size_t i = 0; i < ids->size(); ++i) {
    std::optional<int32_t> id = r.TokenId((*ids)[i], Indexed("stop_token_ids", i));
    if (!id) return;
    out.stop_token_ids.push_back(*id);
  }
}

bool ValidSchemaName(std::string_view name) {
  if (name.empty() || name.size() > kMaxSchemaNameBytes) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

void ParseResponseFormat(const Json& body, OpenAiRequest& out, Reader& r) {
  const Json* format = Find(body, "response_format");
  if (format == nullptr) return;
  if (!format->is_object()) return r.WrongType("response_format", "an object", *format);
  const Json* type = Find(*format, "type");
  if (type == nullptr) return r.Missing("response_format.type");
  std::optional<std::string> kind = r.String(type, "response_format.type");
  if (!kind) return;
  if (*kind == "text") {
    out.response_format.kind = ResponseFormat::Kind::kText;
  } else if (*kind == "json_object") {
    out.response_format.kind = ResponseFormat::Kind::kJsonObject;
  } else if (*kind == "json_schema") {
    out.response_format.kind = ResponseFormat::Kind::kJsonSchema;
    const Json* spec = Find(*format, "json_schema");
    if (spec == nullptr) return r.Missing("response_format.json_schema");
    if (!spec->is_object()) {
      return r.WrongType("response_format.json_schema", "an object", *spec);
    }
    const Json* name = Find(*spec, "name");
    if (name == nullptr) return r.Missing("response_format.json_schema.name");
    std::optional<std::string> n = r.String(name, "response_format.json_schema.name");
    if (!n) return;
    if (!ValidSchemaName(*n)) {
      return r.BadValue("response_format.json_schema.name",
                        "must be 1 to " + std::to_string(kMaxSchemaNameBytes) +
                            " characters of a-z, A-Z, 0-9, '_' and '-'",
                        *name);
    }
    out.response_format.schema_name = *n;
    // OpenAI makes the schema optional; without one any JSON value is accepted.
    out.response_format.schema = Json::object();
    if (const Json* schema = Find(*spec, "schema")) {
      if (!schema->is_object()) {
        return r.WrongType("response_format.json_schema.schema", "an object", *schema);
      }
      out.response_format.schema = *schema;
    }
    std::optional<bool> strict =
        r.Bool(Find(*spec, "strict"), "response_format.json_schema.strict");
    out.response_format_strict = strict.value_or(false);
  } else {
    r.Fail("response_format.type", "Invalid value for 'response_format.type': " + Quote(*kind) +
                                       ". Supported values are: 'text', 'json_object' and "
                                       "'json_schema'.");
  }
}

// `logit_bias`: an object from token ids (decimal strings) to biases in [-100, 100], at most
// kMaxLogitBiasEntries of them; null or {} is none. Ids beyond the vocabulary are refused later
// (ToGenerationRequest), where the vocabulary is known.
void ParseLogitBias(const Json* v, SamplingParams& s, Reader& r) {
  if (v == nullptr || v->is_null()) return;
  if (!v->is_object()) return r.WrongType("logit_bias", "an object", *v);
  if (v->size() > kMaxLogitBiasEntries) {
    return r.Fail("logit_bias", "Invalid 'logit_bias': too many entries (" +
                                    std::to_string(v->size()) + "), at most " +
                                    std::to_string(kMaxLogitBiasEntries) + ".");
  }
  for (const auto& [key, bias] : v->items()) {
    // Digits only, no leading zero: one spelling per id ("-0" and "00" would repeat "0").
    int64_t id = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || key.find_first_not_of("0123456789") != std::string::npos ||
        (key.size() > 1 && key[0] == '0') || error != std::errc() ||
        end != key.data() + key.size() || id > kMaxTokenId) {
      return r.Fail("logit_bias", "Invalid key in 'logit_bias': " + Quote(key) +
                                      ". Keys must be token ids (non-negative integers).");
    }
    const std::string param = "logit_bias." + key;
    std::optional<double> value = r.Number(&bias, param, -kMaxAbsLogitBias, kMaxAbsLogitBias);
    if (!value) return;
    s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(*value));
  }
  // Keys are unique JSON member names, and distinct decimal spellings are refused above, so
  // sorted ids are distinct.
  std::sort(s.logit_bias.begin(), s.logit_bias.end());
}

void ParseSampling(const Json& body, Endpoint endpoint, OpenAiRequest& out, Reader& r) {
  SamplingParams& s = out.sampling;
  if (auto v = r.Number(Find(body, "temperature"), "temperature", 0, kMaxTemperature)) {
    s.temperature = static_cast<float>(*v);
  }
  if (auto v = r.Number(Find(body, "top_p"), "top_p", 0, 1, /*min_exclusive=*/true)) {
    s.top_p = static_cast<float>(*v);
  }
  if (const Json* top_k = Find(body, "top_k")) {
    std::optional<int64_t> k = r.Int(top_k, "top_k");
    if (k && (*k < -1 || *k > kMaxTokenId)) {
      r.BadValue("top_k", "must be -1 or 0 (off) or a positive integer", *top_k);
    } else if (k) {
      s.top_k = *k == -1 ? 0 : static_cast<int32_t>(*k);
    }
  }
  for (auto [name, field] : {std::pair{"presence_penalty", &s.presence_penalty},
                             std::pair{"frequency_penalty", &s.frequency_penalty}}) {
    if (auto v = r.Number(Find(body, name), name, -kMaxAbsPenalty, kMaxAbsPenalty)) {
      *field = static_cast<float>(*v);
    }
  }
  if (auto seed = r.Int(Find(body, "seed"), "seed")) s.seed = static_cast<uint64_t>(*seed);
  // vLLM's extensions.
  if (auto v = r.Number(Find(body, "repetition_penalty"), "repetition_penalty", 0,
                        kMaxRepetitionPenalty, /*min_exclusive=*/true)) {
    s.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = r.Number(Find(body, "min_p"), "min_p", 0, 1)) s.min_p = static_cast<float>(*v);
  ParseLogitBias(Find(body, "logit_bias"), s, r);

  if (endpoint == Endpoint::kChatCompletions) {
    s.logprobs = r.Bool(Find(body, "logprobs"), "logprobs").value_or(false);
    std::optional<int64_t> top =
        r.Int(Find(body, "top_logprobs"), "top_logprobs", 0, kMaxTopLogprobs);
    if (top && *top > 0 && !s.logprobs) {
      r.Fail("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.");
    }
    s.top_logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    std::optional<int64_t> k = r.Int(Find(body, "logprobs"), "logprobs", 0, kMaxCompletionLogprobs);
    s.logprobs = k.has_value();
    s.top_logprobs = static_cast<int32_t>(k.value_or(0));
  }
}

// A request body: a JSON object within the size and nesting bounds.
ApiResult<Json> ParseBody(std::string_view text) {
  base::Result<Json> parsed =
      base::ParseJson(text, {.max_bytes = kMaxRequestBodyBytes, .max_depth = kMaxRequestJsonDepth});
  if (!parsed.ok()) {
    return InvalidRequestError(
        "", "The request body is not valid JSON: " + parsed.status().message() + ".");
  }
  if (!parsed->is_object()) {
    return InvalidRequestError(
        "", "The request body must be a JSON object, got " + TypeName(*parsed) + ".");
  }
  return std::move(parsed).value();
}

// `model`: required, 1..kMaxModelNameBytes bytes.
void ParseModel(const Json& body, std::string& out, Reader& r) {
  const Json* model = Find(body, "model");
  if (model == nullptr) {
    r.Missing("model");
  } else if (std::optional<std::string> name = r.String(model, "model")) {
    if (name->empty() || name->size() > kMaxModelNameBytes) {
      r.BadValue("model", "must be 1 to " + std::to_string(kMaxModelNameBytes) + " bytes long",
                 *model);
    }
    out = std::move(*name);
  }
}

ApiResult<OpenAiRequest> Parse(std::string_view text, Endpoint endpoint,
                               const ParseOptions& options) {
  ApiResult<Json> parsed = ParseBody(text);
  if (!parsed.ok()) return parsed.error();
  const Json& body = *parsed;

  Reader r;
  OpenAiRequest out;
  out.endpoint = endpoint;
  out.cache_control = options.cache_control;
  ParseModel(body, out.model, r);

  RefuseUnsupported(body, endpoint, r);

  if (endpoint == Endpoint::kChatCompletions) {
    ParseMessages(body, out, r);
  } else {
    ParsePrompt(body, out, r);
    out.echo = r.Bool(Find(body, "echo"), "echo").value_or(false);
  }

  out.max_tokens = r.Int(Find(body, "max_tokens"), "max_tokens", 1);
  if (auto v = r.Int(Find(body, "max_completion_tokens"), "max_completion_tokens", 1)) {
    out.max_tokens = v;  // OpenAI's newer name wins over the deprecated max_tokens
  }
  if (!out.max_tokens && endpoint == Endpoint::kCompletions) {
    out.max_tokens = kDefaultCompletionMaxTokens;
  }

  ParseStop(body, out, r);
  ParseStopTokenIds(body, out, r);
  out.ignore_eos = r.Bool(Find(body, "ignore_eos"), "ignore_eos").value_or(false);
  out.min_tokens = r.Int(Find(body, "min_tokens"), "min_tokens", 0, kMaxTokenId).value_or(0);
  if (out.max_tokens && out.min_tokens > *out.max_tokens) {
    r.Fail("min_tokens", "'min_tokens' (" + std::to_string(out.min_tokens) +
                             ") must be at most 'max_tokens' (" + std::to_string(*out.max_tokens) +
                             ").");
  }
  out.n = static_cast<int32_t>(r.Int(Find(body, "n"), "n", 1, kMaxChoices).value_or(1));
  const auto batch_choices = static_cast<int64_t>(out.prompts.size()) * out.n;
  if (batch_choices > kMaxBatchChoices) {
    r.Fail("n", "'n' (" + std::to_string(out.n) + ") times the " +
                    std::to_string(out.prompts.size()) + " prompts asks for " +
                    std::to_string(batch_choices) + " choices; at most " +
                    std::to_string(kMaxBatchChoices) + " fit one request.");
  }
  ParseSampling(body, endpoint, out, r);
  ParseResponseFormat(body, out, r);

  out.stream = r.Bool(Find(body, "stream"), "stream").value_or(false);
  if (const Json* options_json = Find(body, "stream_options")) {
    if (!options_json->is_object()) {
      r.WrongType("stream_options", "an object", *options_json);
    } else if (!out.stream) {
      r.Fail("stream_options", "'stream_options' is only allowed when 'stream' is true.");
    } else {
      out.include_usage =
          r.Bool(Find(*options_json, "include_usage"), "stream_options.include_usage")
              .value_or(false);
    }
  }
  // `user` is accepted and ignored, as are all other unknown fields.

  if (r.failed()) return r.error();
  return out;
}

}  // namespace

// --- Requests ---

ApiResult<OpenAiRequest> ParseChatCompletionRequest(std::string_view body,
                                                    const ParseOptions& options) {
  return Parse(body, Endpoint::kChatCompletions, options);
}

ApiResult<OpenAiRequest> ParseCompletionRequest(std::string_view body,
                                                const ParseOptions& options) {
  return Parse(body, Endpoint::kCompletions, options);
}

namespace {

// A body with `model` and the fields `fill(body, out, reader)` reads, into a T.
template <typename T, typename Fill>
ApiResult<T> ParseModelRequest(std::string_view text, Fill fill) {
  ApiResult<Json> parsed = ParseBody(text);
  if (!parsed.ok()) return parsed.error();
  Reader r;
  T out;
  ParseModel(*parsed, out.model, r);
  fill(*parsed, out, r);
  if (r.failed()) return r.error();
  return out;
}

void ParseTokenizeFields(const Json& body, TokenizeRequest& out, Reader& r) {
  const Json* prompt = Find(body, "prompt");
  const bool has_messages = Find(body, "messages") != nullptr;
  if (prompt != nullptr && has_messages) {
    r.Fail("messages", "Send either 'prompt' or 'messages', not both.");
  } else if (has_messages) {
    OpenAiRequest chat;
    ParseMessages(body, chat, r);
    out.messages = std::move(chat.messages);
    out.chat = true;
    out.add_generation_prompt =
        r.Bool(Find(body, "add_generation_prompt"), "add_generation_prompt").value_or(true);
  } else if (prompt == nullptr) {
    r.Missing("prompt");
  } else if (std::optional<std::string> s = r.String(prompt, "prompt")) {
    out.prompt = std::move(*s);
  }
  // A rendered chat template holds its special tokens already (vLLM's defaults).
  out.add_special_tokens =
      r.Bool(Find(body, "add_special_tokens"), "add_special_tokens").value_or(!out.chat);
}

void ParseDetokenizeFields(const Json& body, DetokenizeRequest& out, Reader& r) {
  const Json* tokens = Find(body, "tokens");
  if (tokens == nullptr) {
    r.Missing("tokens");
  } else if (!tokens->is_array()) {
    r.WrongType("tokens", "a list of token ids", *tokens);
  } else if (tokens->size() > kMaxPromptTokenIds) {
    r.Fail("tokens", "'tokens' has " + std::to_string(tokens->size()) + " token ids; at most " +
                         std::to_string(kMaxPromptTokenIds) + " are allowed.");
  } else {
    for (size_t i = 0; i < tokens->size() && !r.failed(); ++i) {
      if (std::optional<int32_t> id = r.TokenId((*tokens)[i], Indexed("tokens", i))) {
        out.tokens.push_back(*id);
      }
    }
  }
}

}  // namespace

ApiResult<TokenizeRequest> ParseTokenizeRequest(std::string_view text) {
  return ParseModelRequest<TokenizeRequest>(text, ParseTokenizeFields);
}

ApiResult<DetokenizeRequest> ParseDetokenizeRequest(std::string_view text) {
  return ParseModelRequest<DetokenizeRequest>(text, ParseDetokenizeFields);
}

nlohmann::ordered_json TokenizeResponse(const std::vector<int32_t>& tokens, int64_t max_model_len) {
  return {{"count", tokens.size()}, {"max_model_len", max_model_len}, {"tokens", tokens}};
}

nlohmann::ordered_json DetokenizeResponse(const std::string& text) { return {{"prompt", text}}; }

ApiResult<std::string> RenderChatPrompt(const model::ChatTemplate& chat_template,
                                        const OpenAiRequest& request) {
  return RenderChatPrompt(chat_template, request.messages, /*add_generation_prompt=*/true);
}

ApiResult<std::string> RenderChatPrompt(const model::ChatTemplate& chat_template,
                                        const std::vector<model::ChatMessage>& messages,
                                        bool add_generation_prompt) {
  base::Result<std::string> text = chat_template.Render(messages, nullptr, add_generation_prompt);
  if (!text.ok()) {
    return InvalidRequestError(
        "messages", "The model's chat template rejected the messages: " + text.status().message());
  }
  return std::move(text).value();
}

ApiResult<std::vector<CompletionPrompt>> ParsePromptBatch(const nlohmann::json* value,
                                                          std::string_view param,
                                                          size_t max_prompts) {
  Reader r;
  std::vector<CompletionPrompt> out;
  ParsePromptValue(value != nullptr && value->is_null() ? nullptr : value, param, max_prompts, out,
                   r);
  if (r.failed()) return r.error();
  return out;
}

std::optional<ApiError> TokenOutsideVocabulary(std::span<const int32_t> ids, int64_t vocab_size,
                                               const std::string& param) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return InvalidRequestError(param, "Token id " + std::to_string(ids[i]) + " at position " +
                                            std::to_string(i) + " is outside the vocabulary [0, " +
                                            std::to_string(vocab_size) + ").");
    }
  }
  return std::nullopt;
}

ApiResult<GenerationRequest> ToGenerationRequest(const OpenAiRequest& request,
                                                 std::vector<std::vector<int32_t>> prompts,
                                                 std::string adapter, const ModelContext& context) {
  const bool batch = prompts.size() > 1;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::string prompt_param = request.endpoint == Endpoint::kChatCompletions ? "messages"
                                     : batch ? Indexed("prompt", p)
                                             : "prompt";
    const std::vector<int32_t>& tokens = prompts[p];
    if (tokens.empty()) {
      return InvalidRequestError(prompt_param,
                                 "The prompt is empty: it must hold at least one token.");
    }
    if (auto outside = TokenOutsideVocabulary(tokens, context.vocab_size, prompt_param)) {
      return *outside;
    }
  }
  SOVAI_CHECK(!prompts.empty()) << "a request without a prompt";
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id >= context.vocab_size) {
      return InvalidRequestError(
          "logit_bias", "Invalid key in 'logit_bias': " + std::to_string(id) +
                            ". Maximum value is " + std::to_string(context.vocab_size - 1) + ".");
    }
  }
  if (auto outside =
          TokenOutsideVocabulary(request.stop_token_ids, context.vocab_size, "stop_token_ids")) {
    return *outside;
  }
  // The longest prompt decides: every prompt must fit with max_tokens.
  int64_t prompt_len = 0;
  for (const std::vector<int32_t>& tokens : prompts) {
    prompt_len = std::max(prompt_len, static_cast<int64_t>(tokens.size()));
  }
  int64_t max_tokens = 0;
  if (request.max_tokens) {
    if (*request.max_tokens > context.max_model_len - prompt_len) {
      return ContextLengthError(request.endpoint, context.max_model_len, prompt_len,
                                request.max_tokens);
    }
    max_tokens = *request.max_tokens;
  } else {
    if (prompt_len >= context.max_model_len) {
      return ContextLengthError(request.endpoint, context.max_model_len, prompt_len, std::nullopt);
    }
    max_tokens = context.max_model_len - prompt_len;
  }

  GenerationRequest out;
  out.model = request.model;
  out.adapter = std::move(adapter);
  out.prompts = std::move(prompts);
  out.max_tokens = max_tokens;
  out.stop = request.stop;
  out.stop_token_ids = request.stop_token_ids;
  out.ignore_eos = request.ignore_eos;
  // Without max_tokens the rest of the context is the limit: min_tokens must fit it too.
  if (request.min_tokens > max_tokens) {
    return InvalidRequestError("min_tokens", "'min_tokens' (" + std::to_string(request.min_tokens) +
                                                 ") is more than the " +
                                                 std::to_string(max_tokens) +
                                                 " tokens the context leaves after the prompt.");
  }
  out.min_tokens = request.min_tokens;
  out.n = request.n;
  out.sampling = request.sampling;
  out.response_format = request.response_format;
  out.echo = request.echo;
  return out;
}

// --- Response cache key ---

std::string CanonicalRequest(const OpenAiRequest& request, std::string_view adapter_content_hash) {
  // nlohmann::json keeps object keys sorted, which makes the serialization canonical.
  Json c = Json::object();
  c["endpoint"] = request.endpoint == Endpoint::kChatCompletions ? "chat" : "completions";
  c["model"] = request.model;
  c["adapter_hash"] = adapter_content_hash;
  if (request.endpoint == Endpoint::kChatCompletions) {
    Json messages = Json::array();
    for (const model::ChatMessage& m : request.messages) messages.push_back(Json(m.ToJson()));
    c["messages"] = std::move(messages);
  } else {
    Json prompts = Json::array();
    for (const CompletionPrompt& prompt : request.prompts) {
      prompts.push_back(prompt.token_ids ? Json{{"token_ids", *prompt.token_ids}}
                                         : Json{{"text", prompt.text}});
    }
    c["prompts"] = std::move(prompts);
  }
  c["echo"] = request.echo;
  c["max_tokens"] = request.max_tokens ? Json(*request.max_tokens) : Json(nullptr);
  c["stop"] = request.stop;
  c["stop_token_ids"] = request.stop_token_ids;
  c["ignore_eos"] = request.ignore_eos;
  c["min_tokens"] = request.min_tokens;
  c["n"] = request.n;
  const SamplingParams& s = request.sampling;
  c["temperature"] = FloatForJson(s.temperature);
  c["top_p"] = FloatForJson(s.top_p);
  c["top_k"] = s.top_k;
  c["presence_penalty"] = FloatForJson(s.presence_penalty);
  c["frequency_penalty"] = FloatForJson(s.frequency_penalty);
  c["repetition_penalty"] = FloatForJson(s.repetition_penalty);
  c["min_p"] = FloatForJson(s.min_p);
  Json bias = Json::array();
  for (const auto& [token, value] : s.logit_bias) bias.push_back({token, FloatForJson(value)});
  c["logit_bias"] = std::move(bias);
  c["seed"] = s.seed ? Json(*s.seed) : Json(nullptr);
  c["logprobs"] = s.logprobs;
  c["top_logprobs"] = s.top_logprobs;
  Json format = Json::object();
  switch (request.response_format.kind) {
    case ResponseFormat::Kind::kText:
      format["type"] = "text";
      break;
    case ResponseFormat::Kind::kJsonObject:
      format["type"] = "json_object";
      break;
    case ResponseFormat::Kind::kJsonSchema:
      format["type"] = "json_schema";
      format["name"] = request.response_format.schema_name;
      format["schema"] = request.response_format.schema;
      format["strict"] = request.response_format_strict;
      break;
  }
  c["response_format"] = std::move(format);
  return base::DumpJson(c);
}

std::string CacheKey(const OpenAiRequest& request, std::string_view adapter_content_hash) {
  return base::HexEncode(base::Sha256(CanonicalRequest(request, adapter_content_hash)));
}

bool Cacheable(const OpenAiRequest& request) {
  return base::CompletionCacheable(
      base::CompletionCacheFacts{.stream = request.stream,
                                 .greedy = request.sampling.Greedy(),
                                 .seeded = request.sampling.seed.has_value()});
}

base::ResponseCacheUse CacheUse(const OpenAiRequest& request) {
  return base::DecideResponseCache(Cacheable(request), request.cache_control);
}

}  // namespace sovai::serve
