#include "objstore/aws_chunked.h"

#include <algorithm>
#include <utility>

#include "base/strings.h"

namespace sovai::objstore {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsTokenChar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Optional whitespace (spaces and tabs) around extension and trailer parts.
std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A short, printable excerpt of untrusted input for error messages.
std::string Excerpt(std::string_view s) {
  constexpr size_t kMaxExcerptBytes = 64;
  std::string out;
  for (char c : s.substr(0, kMaxExcerptBytes)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (s.size() > kMaxExcerptBytes) out += "...";
  return out;
}

}  // namespace

AwsChunkedDecoder::Event AwsChunkedDecoder::Fail(std::string message, size_t consumed) {
  state_ = State::kError;
  error_ = std::move(message);
  line_.clear();
  return Event{EventKind::kError, consumed, {}};
}

AwsChunkedDecoder::Event AwsChunkedDecoder::Next(std::string_view input) {
  size_t pos = 0;
  for (;;) {
    switch (state_) {
      case State::kError:
        return Event{EventKind::kError, 0, {}};

      case State::kDone:
        if (pos == input.size()) return Event{EventKind::kDone, pos, {}};
        return Fail("data after the end of the aws-chunked body", pos);

      case State::kLastChunkEnd:
        state_ = State::kTrailerLine;
        return Event{EventKind::kChunkEnd, pos, {}};

      case State::kSizeLine: {
        if (pos == input.size()) return Event{EventKind::kNeedMore, pos, {}};
        std::string_view rest = input.substr(pos);
        size_t lf = rest.find('\n');
        size_t take = lf == std::string_view::npos ? rest.size() : lf + 1;
        if (line_.size() + take > kMaxChunkLineBytes) {
          return Fail(
              "chunk-size line longer than " + std::to_string(kMaxChunkLineBytes) + " bytes", pos);
        }
        line_.append(rest.substr(0, take));
        pos += take;
        if (lf == std::string_view::npos) return Event{EventKind::kNeedMore, pos, {}};
        if (line_.size() < 2 || line_[line_.size() - 2] != '\r') {
          return Fail("chunk-size line does not end in CRLF: '" + Excerpt(line_) + "'", pos);
        }
        std::string line = std::move(line_);
        line_.clear();
        if (!ParseSizeLine(std::string_view(line).substr(0, line.size() - 2))) {
          return Fail(std::move(error_), pos);
        }
        ++chunk_count_;
        if (chunk_size_ == 0) {
          last_chunk_ = true;
          state_ = State::kLastChunkEnd;
        } else {
          data_left_ = chunk_size_;
          state_ = State::kData;
        }
        return Event{EventKind::kChunkHeader, pos, {}};
      }

      case State::kData: {
        if (pos == input.size()) return Event{EventKind::kNeedMore, pos, {}};
        size_t n = static_cast<size_t>(std::min<uint64_t>(data_left_, input.size() - pos));
        std::string_view data = input.substr(pos, n);
        pos += n;
        data_left_ -= n;
        decoded_bytes_ += n;
        if (data_left_ == 0) state_ = State::kDataCr;
        return Event{EventKind::kData, pos, data};
      }

      case State::kDataCr:
        if (pos == input.size()) return Event{EventKind::kNeedMore, pos, {}};
        if (input[pos] != '\r') return Fail("chunk data is not followed by CRLF", pos);
        ++pos;
        state_ = State::kDataLf;
        break;

      case State::kDataLf:
        if (pos == input.size()) return Event{EventKind::kNeedMore, pos, {}};
        if (input[pos] != '\n') return Fail("chunk data is not followed by CRLF", pos);
        ++pos;
        state_ = State::kSizeLine;
        return Event{EventKind::kChunkEnd, pos, {}};

      case State::kTrailerLine: {
        if (pos == input.size()) return Event{EventKind::kNeedMore, pos, {}};
        std::string_view rest = input.substr(pos);
        size_t lf = rest.find('\n');
        size_t take = lf == std::string_view::npos ? rest.size() : lf + 1;
        if (trailer_bytes_ + take > kMaxTrailerSectionBytes) {
          return Fail(
              "trailer section longer than " + std::to_string(kMaxTrailerSectionBytes) + " bytes",
              pos);
        }
        trailer_bytes_ += take;
        line_.append(rest.substr(0, take));
        pos += take;
        if (lf == std::string_view::npos) return Event{EventKind::kNeedMore, pos, {}};
        std::string line = std::move(line_);
        line_.clear();
        std::string_view content(line);
        content.remove_suffix(1);  // LF
        if (!content.empty() && content.back() == '\r') content.remove_suffix(1);
        if (content.empty()) {
          state_ = State::kDone;
          return Event{EventKind::kDone, pos, {}};
        }
        if (trailer_fields_ == kMaxTrailerFields) {
          return Fail("more than " + std::to_string(kMaxTrailerFields) + " trailer fields", pos);
        }
        if (!ParseTrailerLine(content)) return Fail(std::move(error_), pos);
        ++trailer_fields_;
        return Event{EventKind::kTrailer, pos, {}};
      }
    }
  }
}

AwsChunkedDecoder::Event AwsChunkedDecoder::Finish() {
  switch (state_) {
    case State::kDone:
      return Event{EventKind::kDone, 0, {}};
    case State::kError:
      return Event{EventKind::kError, 0, {}};
    case State::kTrailerLine:
      if (line_.empty()) {
        // Only the terminating empty line is missing: every chunk and trailer line is complete.
        state_ = State::kDone;
        return Event{EventKind::kDone, 0, {}};
      }
      return Fail("the body ended inside a trailer line", 0);
    case State::kSizeLine:
      return Fail(line_.empty() ? "the body ended before the last (zero-size) chunk"
                                : "the body ended inside a chunk-size line",
                  0);
    case State::kData:
      return Fail("the body ended inside chunk data (" + std::to_string(data_left_) +
                      " more bytes were announced)",
                  0);
    case State::kDataCr:
    case State::kDataLf:
      return Fail("the body ended before the CRLF after chunk data", 0);
    case State::kLastChunkEnd:
      // The kChunkEnd of the last chunk was never returned: a caller bug, but fail safe (its
      // signature would go unchecked) rather than report completion.
      return Fail("Finish() called with an undelivered kChunkEnd event", 0);
  }
  return Fail("unreachable decoder state", 0);
}

bool AwsChunkedDecoder::ParseSizeLine(std::string_view line) {
  chunk_signature_.clear();
  has_signature_ = false;
  uint64_t size = 0;
  size_t i = 0;
  for (; i < line.size(); ++i) {
    int v = HexValue(line[i]);
    if (v < 0) break;
    // size <= kMaxAwsChunkBytes before the shift, so this never overflows.
    size = size * 16 + static_cast<uint64_t>(v);
    if (size > kMaxAwsChunkBytes) {
      error_ = "chunk size '" + Excerpt(line.substr(0, i + 1)) + "...' exceeds " +
               std::to_string(kMaxAwsChunkBytes) + " bytes";
      return false;
    }
  }
  if (i == 0) {
    error_ = "chunk size is not hexadecimal: '" + Excerpt(line) + "'";
    return false;
  }
  std::string_view rest = TrimOws(line.substr(i));
  while (!rest.empty()) {
    if (rest.front() != ';') {
      error_ = "unexpected characters after the chunk size: '" + Excerpt(line) + "'";
      return false;
    }
    rest.remove_prefix(1);
    size_t semi = rest.find(';');
    std::string_view ext = rest.substr(0, semi);
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi);
    size_t eq = ext.find('=');
    std::string_view name = TrimOws(ext.substr(0, eq));
    std::string_view value =
        eq == std::string_view::npos ? std::string_view() : TrimOws(ext.substr(eq + 1));
    if (name.empty()) {
      error_ = "empty chunk extension in '" + Excerpt(line) + "'";
      return false;
    }
    if (name == "chunk-signature") {
      if (has_signature_) {
        error_ = "more than one chunk-signature in '" + Excerpt(line) + "'";
        return false;
      }
      if (value.empty()) {
        error_ = "empty chunk-signature in '" + Excerpt(line) + "'";
        return false;
      }
      chunk_signature_ = std::string(value);
      has_signature_ = true;
    }
    // Other extensions carry nothing S3 defines; they are ignored, as HTTP/1.1 requires.
  }
  chunk_size_ = size;
  return true;
}

bool AwsChunkedDecoder::ParseTrailerLine(std::string_view line) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    error_ = "trailer line is not 'name:value': '" + Excerpt(line) + "'";
    return false;
  }
  std::string_view name = line.substr(0, colon);
  for (char c : name) {
    if (!IsTokenChar(c)) {
      error_ = "invalid trailer field name '" + Excerpt(name) + "'";
      return false;
    }
  }
  std::string_view value = TrimOws(line.substr(colon + 1));
  for (char c : value) {
    unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) {
      error_ = "control character in the value of trailer '" + Excerpt(name) + "'";
      return false;
    }
  }
  trailer_name_ = base::AsciiToLower(name);
  trailer_value_ = std::string(value);
  return true;
}

}  // namespace sovai::objstore
