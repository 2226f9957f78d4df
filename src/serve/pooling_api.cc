#include "serve/pooling_api.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/crypto.h"
#include "base/json.h"

namespace sovai::serve {

namespace {

using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;

std::string Quote(std::string_view name) { return "'" + std::string(name) + "'"; }

// The body as a JSON object, or the 400 for malformed JSON (param null), as the completion
// routes answer it.
ApiResult<Json> ParseBody(std::string_view body) {
  auto parsed =
      base::ParseJson(body, {.max_bytes = kMaxRequestBodyBytes, .max_depth = kMaxRequestJsonDepth});
  if (!parsed.ok()) return ApiErrorFromStatus(parsed.status());
  if (!parsed->is_object()) {
    return InvalidRequestError("", "The request body must be a JSON object.");
  }
  return std::move(*parsed);
}

const Json* Find(const Json& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError WrongType(std::string_view param, std::string_view expected) {
  return InvalidRequestError(std::string(param), "Invalid type for " + Quote(param) +
                                                     ": expected " + std::string(expected) + ".");
}

// `model`: a non-empty string of at most kMaxModelNameBytes.
std::optional<ApiError> ReadModel(const Json& body, std::string& out) {
  const Json* model = Find(body, "model");
  if (model == nullptr) {
    return InvalidRequestError("model", "Missing required parameter: 'model'.");
  }
  if (!model->is_string()) return WrongType("model", "a string");
  out = model->get<std::string>();
  if (out.empty() || out.size() > kMaxModelNameBytes) {
    return InvalidRequestError(
        "model", "'model' must be 1 to " + std::to_string(kMaxModelNameBytes) + " bytes long.");
  }
  return std::nullopt;
}

// An optional positive integer field.
std::optional<ApiError> ReadPositive(const Json& body, std::string_view key,
                                     std::optional<int64_t>& out) {
  const Json* value = Find(body, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number_integer()) return WrongType(key, "an integer");
  const bool in_range = value->is_number_unsigned()
                            ? value->get<uint64_t>() >= 1 && value->get<uint64_t>() <= INT64_MAX
                            : value->get<int64_t>() >= 1;
  if (!in_range) {
    return InvalidRequestError(std::string(key),
                               "Invalid value for " + Quote(key) + ": must be at least 1.");
  }
  out = value->get<int64_t>();
  return std::nullopt;
}

std::string DocumentText(const Json& document) {
  return document.is_string() ? document.get<std::string>() : document["text"].get<std::string>();
}

}  // namespace

ApiResult<EmbeddingRequest> ParseEmbeddingRequest(std::string_view body,
                                                  const ParseOptions& options) {
  ApiResult<Json> parsed = ParseBody(body);
  if (!parsed.ok()) return parsed.error();
  const Json& j = *parsed;
  EmbeddingRequest out;
  out.cache_control = options.cache_control;
  if (auto error = ReadModel(j, out.model)) return *error;
  ApiResult<std::vector<CompletionPrompt>> inputs =
      ParsePromptBatch(Find(j, "input"), "input", kMaxEmbeddingInputs);
  if (!inputs.ok()) return inputs.error();
  out.inputs = std::move(*inputs);
  for (size_t i = 0; i < out.inputs.size(); ++i) {
    if (!out.inputs[i].token_ids && out.inputs[i].text.empty()) {
      const std::string param = out.inputs.size() == 1 && Find(j, "input")->is_string()
                                    ? "input"
                                    : "input[" + std::to_string(i) + "]";
      return InvalidRequestError(param, Quote(param) + " must not be an empty string.");
    }
  }
  if (const Json* format = Find(j, "encoding_format")) {
    if (!format->is_string()) return WrongType("encoding_format", "a string");
    if (*format == "float") {
      out.encoding_format = EncodingFormat::kFloat;
    } else if (*format == "base64") {
      out.encoding_format = EncodingFormat::kBase64;
    } else {
      return InvalidRequestError("encoding_format",
                                 "Invalid value for 'encoding_format': must be 'float' or "
                                 "'base64', got " +
                                     base::DumpJson(*format) + ".");
    }
  }
  if (auto error = ReadPositive(j, "dimensions", out.dimensions)) return *error;
  if (const Json* user = Find(j, "user"); user != nullptr && !user->is_string()) {
    return WrongType("user", "a string");
  }
  return out;
}

std::vector<float> FinishEmbedding(std::vector<float> pooled, std::optional<int64_t> dimensions,
                                   bool normalize) {
  if (dimensions && *dimensions < static_cast<int64_t>(pooled.size())) {
    pooled.resize(static_cast<size_t>(*dimensions));
    normalize = true;
  }
  if (!normalize) return pooled;
  double sum = 0;
  for (float v : pooled) sum += double{v} * v;
  // sentence-transformers' Normalize: x / max(||x||, 1e-12).
  const double norm = std::max(std::sqrt(sum), 1e-12);
  for (float& v : pooled) v = static_cast<float>(v / norm);
  return pooled;
}

nlohmann::ordered_json EmbeddingResponse(const std::string& model,
                                         const std::vector<std::vector<float>>& embeddings,
                                         EncodingFormat format, int64_t prompt_tokens) {
  OJson data = OJson::array();
  for (size_t i = 0; i < embeddings.size(); ++i) {
    const std::vector<float>& e = embeddings[i];
    OJson item = {{"object", "embedding"}, {"index", i}};
    if (format == EncodingFormat::kBase64) {
      // The float32 bytes as numpy's frombuffer(dtype="float32") reads them (little-endian).
      std::string bytes(e.size() * sizeof(float), '\0');
      for (size_t k = 0; k < e.size(); ++k) {
        uint32_t bits;
        std::memcpy(&bits, &e[k], sizeof bits);
        for (int b = 0; b < 4; ++b) bytes[k * 4 + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
      }
      item["embedding"] = base::Base64Encode(bytes);
    } else {
      item["embedding"] = e;
    }
    data.push_back(std::move(item));
  }
  return OJson{{"object", "list"},
               {"data", std::move(data)},
               {"model", model},
               {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

std::string EmbeddingCacheKey(const EmbeddingRequest& request, std::string_view adapter_hash) {
  Json inputs = Json::array();
  for (const CompletionPrompt& input : request.inputs) {
    inputs.push_back(input.token_ids ? Json(*input.token_ids) : Json(input.text));
  }
  const Json canonical = {
      {"route", "embeddings"},
      {"model", request.model},
      {"adapter", adapter_hash},
      {"input", std::move(inputs)},
      {"encoding_format", request.encoding_format == EncodingFormat::kBase64 ? "base64" : "float"},
      {"dimensions", request.dimensions ? Json(*request.dimensions) : Json(nullptr)}};
  return base::HexEncode(base::Sha256(base::DumpJson(canonical)));
}

ApiResult<RerankRequest> ParseRerankRequest(std::string_view body, const ParseOptions& options) {
  ApiResult<Json> parsed = ParseBody(body);
  if (!parsed.ok()) return parsed.error();
  const Json& j = *parsed;
  RerankRequest out;
  out.cache_control = options.cache_control;
  if (auto error = ReadModel(j, out.model)) return *error;
  const Json* query = Find(j, "query");
  if (query == nullptr) return InvalidRequestError("query", "Missing required parameter: 'query'.");
  if (!query->is_string()) return WrongType("query", "a string");
  out.query = query->get<std::string>();
  if (out.query.size() > kMaxRerankQueryBytes) {
    return InvalidRequestError(
        "query", "'query' is longer than " + std::to_string(kMaxRerankQueryBytes) + " bytes.");
  }
  const Json* documents = Find(j, "documents");
  if (documents == nullptr) {
    return InvalidRequestError("documents", "Missing required parameter: 'documents'.");
  }
  if (!documents->is_array()) return WrongType("documents", "an array");
  if (documents->empty()) {
    return InvalidRequestError("documents", "'documents' must not be an empty list.");
  }
  if (documents->size() > kMaxRerankDocuments) {
    return InvalidRequestError("documents",
                               "'documents' holds " + std::to_string(documents->size()) +
                                   " documents; at most " + std::to_string(kMaxRerankDocuments) +
                                   " may be sent in one request.");
  }
  for (size_t i = 0; i < documents->size(); ++i) {
    const Json& d = (*documents)[i];
    const std::string param = "documents[" + std::to_string(i) + "]";
    const bool text_object = d.is_object() && d.contains("text") && d["text"].is_string();
    if (!d.is_string() && !text_object) {
      return WrongType(param, "a string or an object with a string 'text'");
    }
    out.documents.push_back(DocumentText(d));
    if (out.documents.back().size() > kMaxRerankDocumentBytes) {
      return InvalidRequestError(param, Quote(param) + " is longer than " +
                                            std::to_string(kMaxRerankDocumentBytes) + " bytes.");
    }
  }
  if (auto error = ReadPositive(j, "top_n", out.top_n)) return *error;
  if (const Json* value = Find(j, "return_documents")) {
    if (!value->is_boolean()) return WrongType("return_documents", "a boolean");
    out.return_documents = value->get<bool>();
  }
  if (const Json* value = Find(j, "instruction")) {
    if (!value->is_string()) return WrongType("instruction", "a string");
    out.instruction = value->get<std::string>();
    if (out.instruction.size() > kMaxRerankInstructionBytes) {
      return InvalidRequestError(
          "instruction",
          "'instruction' is longer than " + std::to_string(kMaxRerankInstructionBytes) + " bytes.");
    }
  }
  return out;
}

std::string RerankPrompt(std::string_view instruction, std::string_view query,
                         std::string_view document) {
  std::string out =
      "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
      "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\"."
      "<|im_end|>\n<|im_start|>user\n";
  out += "<Instruct>: ";
  out += instruction;
  out += "\n<Query>: ";
  out += query;
  out += "\n<Document>: ";
  out += document;
  out += "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  return out;
}

nlohmann::ordered_json RerankResponse(const RerankRequest& request,
                                      const std::vector<float>& scores, int64_t prompt_tokens) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (request.top_n && static_cast<size_t>(*request.top_n) < order.size()) {
    order.resize(static_cast<size_t>(*request.top_n));
  }
  OJson results = OJson::array();
  for (size_t i : order) {
    OJson result = {{"index", i}, {"relevance_score", scores[i]}};
    if (request.return_documents) result["document"] = {{"text", request.documents[i]}};
    results.push_back(std::move(result));
  }
  return OJson{{"id", base::RandomToken("rerank-", 12)},
               {"model", request.model},
               {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}},
               {"results", std::move(results)}};
}

std::string RerankCacheKey(const RerankRequest& request, std::string_view adapter_hash) {
  const Json canonical = {{"route", "rerank"},
                          {"model", request.model},
                          {"adapter", adapter_hash},
                          {"query", request.query},
                          {"documents", request.documents},
                          {"top_n", request.top_n ? Json(*request.top_n) : Json(nullptr)},
                          {"return_documents", request.return_documents},
                          {"instruction", request.instruction}};
  return base::HexEncode(base::Sha256(base::DumpJson(canonical)));
}

}  // namespace sovai::serve
