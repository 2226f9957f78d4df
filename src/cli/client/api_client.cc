#include "cli/client/api_client.h"

#include "base/json.h"
#include "base/strings.h"
#include "cli/client/limits.h"
#include "net/http.h"

namespace sovai::cli::client {
namespace {

using base::Status;
using base::StatusCode;
using Json = nlohmann::json;

constexpr std::string_view kProblemTypePrefix = "urn:sovai:problem:";
constexpr StatusCode kAllCodes[] = {
    StatusCode::kCancelled,        StatusCode::kUnknown,           StatusCode::kInvalidArgument,
    StatusCode::kDeadlineExceeded, StatusCode::kNotFound,          StatusCode::kAlreadyExists,
    StatusCode::kPermissionDenied, StatusCode::kResourceExhausted, StatusCode::kFailedPrecondition,
    StatusCode::kAborted,          StatusCode::kOutOfRange,        StatusCode::kUnimplemented,
    StatusCode::kInternal,         StatusCode::kUnavailable,       StatusCode::kDataLoss,
    StatusCode::kUnauthenticated,
};

StatusCode CodeForHttpStatus(int http_status) {
  switch (http_status) {
    case 400:
      return StatusCode::kInvalidArgument;
    case 401:
      return StatusCode::kUnauthenticated;
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 409:
      return StatusCode::kFailedPrecondition;
    case 416:
      return StatusCode::kOutOfRange;
    case 429:
      return StatusCode::kResourceExhausted;
    case 501:
      return StatusCode::kUnimplemented;
    case 503:
      return StatusCode::kUnavailable;
    case 504:
      return StatusCode::kDeadlineExceeded;
    default:
      return http_status >= 500 ? StatusCode::kInternal : StatusCode::kInvalidArgument;
  }
}

// "urn:sovai:problem:already-exists" → kAlreadyExists; nullopt for other types.
std::optional<StatusCode> CodeForProblemType(std::string_view type) {
  if (!type.starts_with(kProblemTypePrefix)) return std::nullopt;
  std::string name = base::AsciiToUpper(type.substr(kProblemTypePrefix.size()));
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  for (StatusCode code : kAllCodes) {
    if (base::StatusCodeName(code) == name) return code;
  }
  return std::nullopt;
}

std::string Shown(std::string_view body) {
  std::string text(base::Trim(body.substr(0, kMaxShownErrorBodyBytes)));
  if (body.size() > kMaxShownErrorBodyBytes) text += "...";
  return text;
}

// Whether a problem's detail already states the field error `field: text`, the `index`th of its
// `errors`: it holds those words (a spec's collected errors, "volumes[0]: bucket ...; image:
// ..."), or it is the message itself (a one-field problem), or, for the first entry, it ends
// with it ("the request has 2 invalid fields: <the first's message>").
bool DetailSays(std::string_view detail, size_t index, std::string_view field,
                std::string_view text) {
  if (detail.empty()) return false;
  if (detail.find(std::string(field) + ": " + std::string(text)) != std::string_view::npos) {
    return true;
  }
  return detail == text || (index == 0 && detail.ends_with(": " + std::string(text)));
}

}  // namespace

Status ProblemToStatus(int http_status, std::string_view body) {
  StatusCode code = CodeForHttpStatus(http_status);
  std::string message;
  auto doc = base::ParseJson(body);
  if (doc.ok() && doc->is_object()) {
    if (auto type = base::GetOptionalString(*doc, "type"); type.ok() && *type) {
      code = CodeForProblemType(**type).value_or(code);
    }
    auto detail = base::GetOptionalString(*doc, "detail");
    if (detail.ok() && *detail && !(*detail)->empty()) {
      message = **detail;
    } else if (auto title = base::GetOptionalString(*doc, "title"); title.ok() && *title) {
      message = **title;
    }
    if (auto errors = doc->find("errors"); errors != doc->end() && errors->is_array()) {
      const std::string said = message;  // the detail (or title) printed above the entries
      for (size_t i = 0; i < errors->size(); ++i) {
        const Json& error = (*errors)[i];
        if (!error.is_object()) continue;
        auto field_value = base::GetOptionalString(error, "field");
        auto text_value = base::GetOptionalString(error, "message");
        const std::string field =
            field_value.ok() && *field_value ? **field_value : std::string("(request)");
        std::string text = text_value.ok() && *text_value ? **text_value : "invalid";
        if (std::string prefix = field + ": ";
            text.starts_with(prefix) && text.size() > prefix.size()) {
          text.erase(0, prefix.size());
        }
        if (DetailSays(said, i, field, text)) continue;
        message += "\n  " + field + ": " + text;
      }
    }
  }
  if (message.empty()) {
    message = "the server answered HTTP " + std::to_string(http_status);
    if (std::string_view reason = net::HttpReasonPhrase(http_status); !reason.empty()) {
      message += " " + std::string(reason);
    }
    if (std::string shown = Shown(body); !shown.empty()) message += ": " + shown;
  }
  if (code == StatusCode::kUnauthenticated) {
    message +=
        "\n  (log in again with 'sovai login --url URL --token TOKEN', or check SOVAI_TOKEN)";
  }
  if (code == StatusCode::kOk) code = StatusCode::kUnknown;
  return Status(code, message);
}

std::string AddQuery(std::string path, std::string_view name, std::string_view value) {
  path += path.find('?') == std::string::npos ? '?' : '&';
  path += name;
  path += '=';
  path += net::PercentEncode(value);
  return path;
}

ApiClient::ApiClient(std::string url, std::string token, net::ClientOptions options)
    : url_(std::move(url)),
      token_(std::move(token)),
      options_(std::move(options)),
      http_(std::make_unique<net::HttpClient>(options_)) {}

base::Result<std::unique_ptr<ApiClient>> ApiClient::Create(std::string url, std::string token,
                                                           net::ClientOptions base) {
  SOVAI_ASSIGN_OR_RETURN(net::ClientOptions parsed, net::ClientOptionsFromUrl(url));
  base.host = parsed.host;
  base.port = parsed.port;
  base.tls = parsed.tls;
  base.user_agent = "sovai-cli";
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(url), std::move(token), base));
}

void ApiClient::SetReadTimeout(std::chrono::milliseconds timeout) {
  options_.read_timeout = timeout;
  http_ = std::make_unique<net::HttpClient>(options_);
}

net::ClientRequest ApiClient::NewRequest(std::string_view method, std::string_view path) const {
  net::ClientRequest request;
  request.method = std::string(method);
  request.target = std::string(path);
  if (!token_.empty()) request.headers.Set("Authorization", "Bearer " + token_);
  request.headers.Set("Accept", "application/json");
  return request;
}

Status ApiClient::TransportError(const Status& status) const {
  return Status(status.code(), "cannot reach the Sovai API at " + url_ + ": " + status.message());
}

base::Result<Json> ApiClient::Call(std::string_view method, std::string_view path,
                                   const Json* body) {
  net::ClientRequest request = NewRequest(method, path);
  if (body != nullptr) {
    request.body = base::DumpJson(*body);
    request.headers.Set("Content-Type", "application/json");
  }
  auto sent = http_->Send(request);
  if (!sent.ok()) return TransportError(sent.status());
  if (sent->status < 200 || sent->status >= 300) {
    return ProblemToStatus(sent->status, sent->body);
  }
  if (base::Trim(sent->body).empty()) return Json();
  auto doc = base::ParseJson(sent->body);
  if (!doc.ok()) {
    return base::InternalError(std::string(method) + " " + std::string(path) +
                               ": the server's answer is not JSON: " + doc.status().message());
  }
  return std::move(*doc);
}

base::Result<Json> ApiClient::Get(std::string_view path) { return Call("GET", path, nullptr); }

base::Result<Json> ApiClient::Post(std::string_view path, const Json& body) {
  return Call("POST", path, body.is_null() ? nullptr : &body);
}

base::Result<Json> ApiClient::Patch(std::string_view path, const Json& body) {
  return Call("PATCH", path, &body);
}

base::Result<Json> ApiClient::Delete(std::string_view path) {
  return Call("DELETE", path, nullptr);
}

base::Result<ListResult> ApiClient::List(std::string_view path, int64_t limit) {
  ListResult result;
  std::string cursor;
  while (static_cast<int64_t>(result.items.size()) < limit) {
    const int64_t want = std::min(kListPageSize, limit - static_cast<int64_t>(result.items.size()));
    std::string target = AddQuery(std::string(path), "limit", std::to_string(want));
    if (!cursor.empty()) target = AddQuery(std::move(target), "cursor", cursor);
    SOVAI_ASSIGN_OR_RETURN(Json page, Get(target));
    if (!page.is_object() || !page.contains("items") || !page["items"].is_array()) {
      return base::InternalError("GET " + std::string(path) + ": the answer has no 'items' list");
    }
    const Json& items = page["items"];
    for (const Json& item : items) {
      if (static_cast<int64_t>(result.items.size()) >= limit) {
        result.truncated = true;
        break;
      }
      result.items.push_back(item);
    }
    auto next = base::GetOptionalString(page, "next_cursor");
    if (!next.ok() || !*next || (*next)->empty()) return result;
    if (result.truncated) return result;  // the server sent more than asked: no cursor to give
    if (**next == cursor || items.empty()) {
      return base::InternalError("GET " + std::string(path) +
                                 ": the server repeated a cursor; the listing does not progress");
    }
    cursor = **next;
  }
  // `limit` items, and the last page said where the next one starts.
  result.truncated = true;
  result.next_cursor = cursor;
  return result;
}

Json ListResult::ToJson() const {
  return {{"items", Json(items)}, {"next_cursor", next_cursor ? Json(*next_cursor) : Json()}};
}

base::Result<ApiClient::RawResponse> ApiClient::GetRaw(std::string_view path,
                                                       const net::BodySink& sink) {
  net::ClientRequest request = NewRequest("GET", path);
  request.headers.Set("Accept", "*/*");
  // An error answer's body is kept (bounded) for its problem, whatever the sink does with it.
  bool error_answer = false;
  std::string error_body;
  base::Result<net::ClientResponse> sent = base::InternalError("not sent");
  if (sink) {
    // The status is known only once Send returns, so the sink buffers the first bytes and
    // forwards them; an error answer is small and its sink output is replaced by the problem.
    sent = http_->Send(request, [&](std::string_view piece) -> Status {
      if (error_body.size() < kMaxShownErrorBodyBytes * 8) error_body.append(piece);
      return sink(piece);
    });
  } else {
    sent = http_->Send(request);
  }
  if (!sent.ok()) return TransportError(sent.status());
  error_answer = sent->status < 200 || sent->status >= 300;
  if (error_answer) return ProblemToStatus(sent->status, sink ? error_body : sent->body);
  RawResponse out;
  out.status = sent->status;
  out.headers = std::move(sent->headers);
  out.body = std::move(sent->body);
  return out;
}

}  // namespace sovai::cli::client
