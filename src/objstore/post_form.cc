// multipart/form-data, read as it streams (see post_form.h).
#include "objstore/post_form.h"

#include <algorithm>
#include <cstring>

#include "base/strings.h"
#include "objstore/limits.h"

namespace sovai::objstore {

namespace {

// RFC 2046's bchars: what a boundary may contain (a space only inside, not last).
bool IsBoundaryChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::strchr("'()+_,-./:=? ", c) != nullptr;
}

// One parameter of a header value ("name=\"file\"", "boundary=abc"): a token or a quoted string
// (with backslash escapes). Returns the position after it, or npos when malformed.
size_t ParseParameterValue(std::string_view s, size_t i, std::string* out) {
  out->clear();
  if (i < s.size() && s[i] == '"') {
    for (++i; i < s.size(); ++i) {
      if (s[i] == '"') return i + 1;
      if (s[i] == '\\' && i + 1 < s.size()) ++i;
      out->push_back(s[i]);
    }
    return std::string_view::npos;  // no closing quote
  }
  while (i < s.size() && s[i] != ';') out->push_back(s[i++]);
  *out = std::string(base::Trim(*out));
  return i;
}

// The parameters after the first ';' of a header value, names lowercased. False when malformed.
bool ParseParameters(std::string_view value,
                     std::vector<std::pair<std::string, std::string>>* out) {
  size_t i = value.find(';');
  while (i != std::string_view::npos && i < value.size()) {
    ++i;  // past ';'
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
    if (i == value.size()) break;  // a trailing ';'
    size_t eq = value.find('=', i);
    if (eq == std::string_view::npos) return false;
    std::string name = base::AsciiToLower(base::Trim(value.substr(i, eq - i)));
    std::string v;
    i = ParseParameterValue(value, eq + 1, &v);
    if (i == std::string_view::npos || name.empty()) return false;
    out->emplace_back(std::move(name), std::move(v));
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
    if (i < value.size() && value[i] != ';') return false;
  }
  return true;
}

}  // namespace

base::Result<std::string> FormBoundary(std::string_view content_type) {
  std::string_view type = base::Trim(content_type.substr(0, content_type.find(';')));
  if (!base::EqualsIgnoreCase(type, "multipart/form-data")) {
    return base::InvalidArgumentError("the Content-Type must be multipart/form-data, not '" +
                                      std::string(type) + "'");
  }
  std::vector<std::pair<std::string, std::string>> params;
  if (!ParseParameters(content_type, &params)) {
    return base::InvalidArgumentError("malformed parameters in the Content-Type");
  }
  for (const auto& [name, value] : params) {
    if (name != "boundary") continue;
    if (value.empty() || value.size() > kMaxFormBoundaryBytes || value.back() == ' ' ||
        !std::all_of(value.begin(), value.end(), IsBoundaryChar)) {
      return base::InvalidArgumentError("the multipart boundary must be 1.." +
                                        std::to_string(kMaxFormBoundaryBytes) +
                                        " characters of RFC 2046's set");
    }
    return value;
  }
  return base::InvalidArgumentError("the multipart/form-data Content-Type has no boundary");
}

MultipartFormReader::MultipartFormReader(net::BodyReader& body, std::string boundary)
    : body_(body), delimiter_("\r\n--" + boundary) {
  // The first boundary line has no CRLF before it: reading the body as if it had one lets one
  // search find every delimiter.
  buffer_.reserve(kFormReadBufferBytes + delimiter_.size());
  buffer_ = "\r\n";
}

base::Status MultipartFormReader::Fail(base::Status status) {
  failed_ = status;
  return status;
}

base::Status MultipartFormReader::Malformed(std::string_view what) {
  form_error_ = true;
  return Fail(base::InvalidArgumentError("malformed multipart/form-data: " + std::string(what)));
}

base::Result<bool> MultipartFormReader::Fill() {
  if (eof_) return false;
  if (pos_ > 0) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t old = buffer_.size();
  const size_t room = std::max(kFormReadBufferBytes + delimiter_.size(), old + 1) - old;
  buffer_.resize(old + room);
  auto n = body_.Read(buffer_.data() + old, room);
  if (!n.ok()) {
    buffer_.resize(old);
    return Fail(n.status());
  }
  buffer_.resize(old + *n);
  if (*n == 0) eof_ = true;
  return *n > 0;
}

base::Result<bool> MultipartFormReader::Want(size_t n) {
  while (buffer_.size() - pos_ < n) {
    SOVAI_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) return false;
  }
  return true;
}

base::Result<size_t> MultipartFormReader::ReadPart(char* buf, size_t n) {
  if (failed_) return *failed_;
  if (state_ != State::kInPart || n == 0) return size_t{0};
  for (;;) {
    std::string_view window(buffer_.data() + pos_, buffer_.size() - pos_);
    size_t at = window.find(delimiter_);
    // Bytes that cannot be the start of a delimiter are the part's.
    size_t safe =
        at != std::string_view::npos
            ? at
            : (window.size() >= delimiter_.size() ? window.size() - delimiter_.size() + 1 : 0);
    if (safe > 0) {
      size_t take = std::min(safe, n);
      if (in_preamble_) {
        preamble_bytes_ += take;
        if (preamble_bytes_ > kMaxFormPreambleBytes + 2) {
          form_error_ = true;
          return Fail(base::ResourceExhaustedError("malformed multipart/form-data: more than " +
                                                   std::to_string(kMaxFormPreambleBytes) +
                                                   " bytes before the first boundary"));
        }
      }
      std::memcpy(buf, window.data(), take);
      pos_ += take;
      return take;
    }
    if (at == 0) {
      state_ = State::kPartEnded;  // pos_ is at the delimiter
      return size_t{0};
    }
    SOVAI_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) {
      return Malformed(in_preamble_ ? "no boundary line (the body does not start with '--' and "
                                      "the Content-Type's boundary)"
                                    : "the body ends inside a part, before its boundary");
    }
  }
}

base::Result<std::string> MultipartFormReader::ReadPartValue(size_t limit) {
  std::string out;
  char piece[4096];
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, ReadPart(piece, sizeof(piece)));
    if (n == 0) return out;
    if (out.size() + n > limit) {
      form_error_ = true;
      return Fail(base::ResourceExhaustedError("a form field is larger than " +
                                               std::to_string(limit) + " bytes"));
    }
    out.append(piece, n);
  }
}

base::Result<FormPart> MultipartFormReader::ParseHeaders(std::string_view block) {
  FormPart part;
  bool disposition = false;
  for (std::string_view line : base::Split(block, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return Malformed("a part header line without ':'");
    std::string_view name = base::Trim(line.substr(0, colon));
    std::string_view value = base::Trim(line.substr(colon + 1));
    if (base::EqualsIgnoreCase(name, "Content-Type")) {
      part.content_type = std::string(value);
    } else if (base::EqualsIgnoreCase(name, "Content-Disposition")) {
      std::string_view kind = base::Trim(value.substr(0, value.find(';')));
      if (!base::EqualsIgnoreCase(kind, "form-data")) {
        return Malformed("a part's Content-Disposition is not form-data");
      }
      std::vector<std::pair<std::string, std::string>> params;
      if (!ParseParameters(value, &params)) return Malformed("a malformed Content-Disposition");
      for (auto& [k, v] : params) {
        if (k == "name") part.name = std::move(v);
        if (k == "filename") part.filename = std::move(v);
      }
      disposition = true;
    }
  }
  if (!disposition || part.name.empty()) {
    return Malformed("a part without Content-Disposition: form-data; name=\"...\"");
  }
  return part;
}

base::Result<std::optional<FormPart>> MultipartFormReader::NextPart() {
  if (failed_) return *failed_;
  if (state_ == State::kDone) return std::optional<FormPart>();
  // Skip the rest of the current part (or the preamble) up to its delimiter.
  char skip[4096];
  while (state_ == State::kInPart) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, ReadPart(skip, sizeof(skip)));
    (void)n;
  }
  in_preamble_ = false;
  pos_ += delimiter_.size();
  // "--" closes the body; otherwise optional transport padding and CRLF open the next part.
  SOVAI_ASSIGN_OR_RETURN(bool have, Want(2));
  if (!have) return Malformed("the body ends after a boundary, without its CRLF or '--'");
  if (buffer_.compare(pos_, 2, "--") == 0) {
    state_ = State::kDone;
    return std::optional<FormPart>();
  }
  if (++parts_ > kMaxPostFormFields + 1) {
    form_error_ = true;
    return Fail(base::ResourceExhaustedError("more than " + std::to_string(kMaxPostFormFields) +
                                             " form fields before the file"));
  }
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(have, Want(1));
    if (!have) return Malformed("the body ends on a boundary line");
    if (buffer_[pos_] != ' ' && buffer_[pos_] != '\t') break;
    if (++pos_ > kMaxFormPartHeaderBytes) return Malformed("a boundary line padded too long");
  }
  SOVAI_ASSIGN_OR_RETURN(have, Want(2));
  if (!have || buffer_.compare(pos_, 2, "\r\n") != 0) {
    return Malformed("a boundary line not followed by CRLF");
  }
  pos_ += 2;
  // The header block ends at the first empty line; a part with no headers is refused below.
  size_t end;
  for (;;) {
    std::string_view window(buffer_.data() + pos_, buffer_.size() - pos_);
    end = window.starts_with("\r\n") ? 0 : window.find("\r\n\r\n");
    if (end != std::string_view::npos) break;
    if (window.size() > kMaxFormPartHeaderBytes) {
      form_error_ = true;
      return Fail(base::ResourceExhaustedError("a part's headers are larger than " +
                                               std::to_string(kMaxFormPartHeaderBytes) + " bytes"));
    }
    SOVAI_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) return Malformed("the body ends inside a part's headers");
  }
  if (end > kMaxFormPartHeaderBytes) {
    form_error_ = true;
    return Fail(base::ResourceExhaustedError("a part's headers are larger than " +
                                             std::to_string(kMaxFormPartHeaderBytes) + " bytes"));
  }
  std::string block = buffer_.substr(pos_, end);
  pos_ += end + (end == 0 ? 2 : 4);
  SOVAI_ASSIGN_OR_RETURN(FormPart part, ParseHeaders(block));
  state_ = State::kInPart;
  return std::optional<FormPart>(std::move(part));
}

}  // namespace sovai::objstore
