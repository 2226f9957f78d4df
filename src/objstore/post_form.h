// A streaming multipart/form-data reader (RFC 7578) for S3's browser form uploads: it hands out
// one part at a time, the small fields as values and the file as a stream, so a 5 GiB upload
// never sits in memory. Memory is bounded by kFormReadBufferBytes plus one part's header block.
//
//   auto boundary = FormBoundary(req.header("Content-Type").value_or(""));
//   MultipartFormReader form(req.body(), *boundary);
//   while (auto part = form.NextPart()) {        // Result<optional<FormPart>>
//     if (!part.ok() || !part->has_value()) break;
//     if ((*part)->name == "file") { store.Stage(form.part_body(), ...); break; }
//     auto value = form.ReadPartValue(kMaxPostFieldBytes);
//   }
//
// Errors (sticky, like net::BodyReader's): InvalidArgument for a malformed body (no boundary
// line, a part without Content-Disposition: form-data and a name, a body that ends inside a part
// or before the closing boundary); ResourceExhausted for an exceeded limit (limits.h: a part's
// headers, the preamble, more than kMaxPostFormFields parts, a value over ReadPartValue's limit).
// Errors of the underlying reader pass through unchanged; form_error() tells the two apart.
//
// Thread-safety: one reader per request, used by one thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "net/http.h"

namespace sovai::objstore {

struct FormPart {
  std::string name;                     // Content-Disposition's name, as sent
  std::optional<std::string> filename;  // set when the part is a file input (may be "")
  std::string content_type;             // the part's Content-Type; "" when absent
};

// The boundary of a "multipart/form-data; boundary=..." Content-Type (quoted or not).
// InvalidArgument for another type or a missing or invalid boundary.
base::Result<std::string> FormBoundary(std::string_view content_type);

class MultipartFormReader {
 public:
  // `body` must outlive the reader.
  MultipartFormReader(net::BodyReader& body, std::string boundary);

  // Skips what is left of the current part and returns the next part's headers; nullopt after
  // the closing boundary (the epilogue is not read).
  base::Result<std::optional<FormPart>> NextPart();
  // The current part's bytes; 0 at its end (its closing boundary has been seen, so a part read
  // to 0 is complete). Read(buf, 0) returns 0.
  base::Result<size_t> ReadPart(char* buf, size_t n);
  // The rest of the current part; ResourceExhausted once it holds more than `limit` bytes.
  base::Result<std::string> ReadPartValue(size_t limit);
  // ReadPart() as a net::BodyReader (what Store::Stage reads).
  net::BodyReader& part_body() { return part_body_; }

  // Whether the last error was the form's own (malformed, a limit), not the underlying reader's.
  bool form_error() const { return form_error_; }

 private:
  class PartBody final : public net::BodyReader {
   public:
    explicit PartBody(MultipartFormReader& form) : form_(form) {}
    base::Result<size_t> Read(char* buf, size_t n) override { return form_.ReadPart(buf, n); }

   private:
    MultipartFormReader& form_;
  };
  enum class State { kInPart, kPartEnded, kDone };

  // Reads more of the body into the window; false at its end.
  base::Result<bool> Fill();
  // Makes at least `n` unread bytes available; false when the body ends first.
  base::Result<bool> Want(size_t n);
  base::Status Fail(base::Status status);
  base::Status Malformed(std::string_view what);
  base::Result<FormPart> ParseHeaders(std::string_view block);

  net::BodyReader& body_;
  const std::string delimiter_;  // "\r\n--" + boundary
  std::string buffer_;           // unread bytes are buffer_[pos_, buffer_.size())
  size_t pos_ = 0;
  bool eof_ = false;
  State state_ = State::kInPart;  // the preamble reads as a part nobody asked for
  bool in_preamble_ = true;
  size_t preamble_bytes_ = 0;
  size_t parts_ = 0;
  bool form_error_ = false;
  std::optional<base::Status> failed_;
  PartBody part_body_{*this};
};

}  // namespace sovai::objstore
