// The multipart/form-data reader (post_form.h): parts and values, a file streamed through a
// window smaller than itself and read one byte at a time, and the malformed bodies and limits.
#include "objstore/post_form.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "objstore/limits.h"

namespace sovai::objstore {
namespace {

constexpr char kBoundary[] = "----formboundary7MA4YWxkTrZu0gW";

std::string Part(const std::string& disposition, const std::string& body,
                 const std::string& extra_headers = "") {
  return std::string("--") + kBoundary + "\r\nContent-Disposition: form-data; " + disposition +
         "\r\n" + extra_headers + "\r\n" + body + "\r\n";
}
std::string Close() { return std::string("--") + kBoundary + "--\r\n"; }

struct ReadForm {
  std::vector<FormPart> parts;
  std::vector<std::string> values;
  base::Status status;
};

// Every part and its bytes, the reader fed `piece_bytes` at a time.
ReadForm ReadAll(const std::string& body, size_t piece_bytes = SIZE_MAX, size_t read_bytes = 7) {
  net::StringBodyReader raw(body, piece_bytes);
  MultipartFormReader form(raw, kBoundary);
  ReadForm out;
  for (;;) {
    auto part = form.NextPart();
    if (!part.ok()) {
      out.status = part.status();
      return out;
    }
    if (!part->has_value()) return out;
    out.parts.push_back(**part);
    std::string value;
    std::vector<char> buf(read_bytes);
    for (;;) {
      auto n = form.ReadPart(buf.data(), buf.size());
      if (!n.ok()) {
        out.status = n.status();
        return out;
      }
      if (*n == 0) break;
      value.append(buf.data(), *n);
    }
    out.values.push_back(value);
  }
}

TEST(FormBoundaryTest, TakesTheBoundaryQuotedOrNot) {
  EXPECT_EQ(*FormBoundary("multipart/form-data; boundary=abc"), "abc");
  EXPECT_EQ(*FormBoundary("Multipart/Form-Data;boundary=\"a b:c\""), "a b:c");
  EXPECT_EQ(*FormBoundary("multipart/form-data; charset=utf-8; boundary=x-y"), "x-y");
  EXPECT_FALSE(FormBoundary("application/x-www-form-urlencoded").ok());
  EXPECT_FALSE(FormBoundary("multipart/form-data").ok());
  EXPECT_FALSE(FormBoundary("multipart/form-data; boundary=").ok());
  EXPECT_FALSE(FormBoundary("multipart/form-data; boundary=\"unterminated").ok());
  EXPECT_FALSE(FormBoundary("multipart/form-data; boundary=" + std::string(71, 'a')).ok());
  EXPECT_FALSE(FormBoundary("multipart/form-data; boundary=a<b").ok());
}

TEST(MultipartFormReaderTest, ReadsFieldsAndTheFile) {
  std::string file = "line one\r\n--not-the-boundary\r\n-" + std::string(70000, 'x') + "\r\n";
  std::string body = Part("name=\"key\"", "uploads/${filename}") +
                     Part("name=\"Content-Type\"", "text/plain") +
                     Part("name=\"file\"; filename=\"notes.txt\"", file,
                          "Content-Type: application/octet-stream\r\n") +
                     Close();
  for (size_t piece : {size_t{1}, size_t{3}, size_t{4096}, SIZE_MAX}) {
    ReadForm r = ReadAll(body, piece, piece == 1 ? 1 : 7);
    ASSERT_TRUE(r.status.ok()) << piece << ": " << r.status;
    ASSERT_EQ(r.parts.size(), 3u);
    EXPECT_EQ(r.parts[0].name, "key");
    EXPECT_FALSE(r.parts[0].filename.has_value());
    EXPECT_EQ(r.values[0], "uploads/${filename}");
    EXPECT_EQ(r.parts[1].name, "Content-Type");
    EXPECT_EQ(r.values[1], "text/plain");
    EXPECT_EQ(r.parts[2].filename, "notes.txt");
    EXPECT_EQ(r.parts[2].content_type, "application/octet-stream");
    EXPECT_EQ(r.values[2], file);  // the CRLF before the boundary is not the file's
  }
}

TEST(MultipartFormReaderTest, EmptyValuesPreambleAndPadding) {
  std::string body = "a preamble line\r\n" + Part("name=\"empty\"", "") + "--" + kBoundary +
                     " \t\r\nContent-Disposition: form-data; name=\"a\\\"b\"\r\n\r\nv\r\n" +
                     Close() + "an epilogue";
  ReadForm r = ReadAll(body);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.parts.size(), 2u);
  EXPECT_EQ(r.values[0], "");
  EXPECT_EQ(r.parts[1].name, "a\"b");
  EXPECT_EQ(r.values[1], "v");
}

TEST(MultipartFormReaderTest, SkipsUnreadParts) {
  std::string body =
      Part("name=\"a\"", std::string(100000, 'a')) + Part("name=\"b\"", "bee") + Close();
  net::StringBodyReader raw(body);
  MultipartFormReader form(raw, kBoundary);
  ASSERT_EQ((*form.NextPart())->name, "a");
  auto b = form.NextPart();
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->name, "b");
  EXPECT_EQ(*form.ReadPartValue(10), "bee");
  auto end = form.NextPart();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

TEST(MultipartFormReaderTest, RefusesMalformedBodies) {
  const std::string ok_part = Part("name=\"a\"", "1");
  struct Case {
    const char* what;
    std::string body;
  } cases[] = {
      {"no boundary at all", "just some bytes"},
      {"empty body", ""},
      {"another boundary",
       "--other\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--other--"},
      {"no closing boundary", ok_part},
      {"ends inside a part", "--" + std::string(kBoundary) +
                                 "\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nhalf"},
      {"ends inside headers",
       "--" + std::string(kBoundary) + "\r\nContent-Disposition: form-data; name=\"a\""},
      {"ends after a boundary", "--" + std::string(kBoundary)},
      {"boundary line without CRLF", "--" + std::string(kBoundary) + "x\r\n"},
      {"no Content-Disposition",
       "--" + std::string(kBoundary) + "\r\nContent-Type: a/b\r\n\r\n1\r\n" + Close()},
      {"no headers", "--" + std::string(kBoundary) + "\r\n\r\n1\r\n" + Close()},
      {"not form-data", "--" + std::string(kBoundary) +
                            "\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\n1\r\n" +
                            Close()},
      {"no name", "--" + std::string(kBoundary) +
                      "\r\nContent-Disposition: form-data; filename=\"f\"\r\n\r\n1\r\n" + Close()},
      {"header line without colon",
       "--" + std::string(kBoundary) + "\r\nContent-Disposition form-data\r\n\r\n1\r\n" + Close()},
      {"unterminated quote", "--" + std::string(kBoundary) +
                                 "\r\nContent-Disposition: form-data; name=\"a\r\n\r\n1\r\n" +
                                 Close()},
  };
  for (const Case& c : cases) {
    ReadForm r = ReadAll(c.body);
    EXPECT_EQ(r.status.code(), base::StatusCode::kInvalidArgument) << c.what << ": " << r.status;
  }
}

TEST(MultipartFormReaderTest, EnforcesItsLimits) {
  std::string big_headers = "--" + std::string(kBoundary) +
                            "\r\nContent-Disposition: form-data; name=\"a\"\r\nX-Pad: " +
                            std::string(kMaxFormPartHeaderBytes, 'p') + "\r\n\r\n1\r\n" + Close();
  EXPECT_EQ(ReadAll(big_headers).status.code(), base::StatusCode::kResourceExhausted);

  std::string long_preamble =
      std::string(kMaxFormPreambleBytes + 10, 'p') + "\r\n" + Part("name=\"a\"", "1") + Close();
  EXPECT_EQ(ReadAll(long_preamble).status.code(), base::StatusCode::kResourceExhausted);

  std::string many;
  for (size_t i = 0; i < kMaxPostFormFields + 2; ++i)
    many += Part("name=\"f" + std::to_string(i) + "\"", "v");
  ReadForm r = ReadAll(many + Close());
  EXPECT_EQ(r.status.code(), base::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.parts.size(), kMaxPostFormFields + 1);

  std::string body = Part("name=\"a\"", std::string(100, 'v')) + Close();
  net::StringBodyReader raw(body);
  MultipartFormReader form(raw, kBoundary);
  ASSERT_TRUE(form.NextPart().ok());
  auto value = form.ReadPartValue(99);
  EXPECT_EQ(value.status().code(), base::StatusCode::kResourceExhausted);
  EXPECT_TRUE(form.form_error());
  EXPECT_FALSE(form.NextPart().ok());  // errors are sticky
}

TEST(MultipartFormReaderTest, PassesTheConnectionsErrorsThrough) {
  class Failing final : public net::BodyReader {
   public:
    base::Result<size_t> Read(char*, size_t) override {
      return base::UnavailableError("client went away");
    }
  } raw;
  MultipartFormReader form(raw, kBoundary);
  auto part = form.NextPart();
  EXPECT_EQ(part.status().code(), base::StatusCode::kUnavailable);
  EXPECT_FALSE(form.form_error());
}

}  // namespace
}  // namespace sovai::objstore
