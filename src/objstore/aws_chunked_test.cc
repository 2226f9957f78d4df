#include "objstore/aws_chunked.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sovai::objstore {
namespace {

using Kind = AwsChunkedDecoder::EventKind;

// Everything a decoder reports for an input fed in pieces of `piece` bytes, as a readable trace:
// "H(10,sig)" chunk header, "D<bytes>" data (merged), "E" chunk end, "T(name=value)" trailer,
// "DONE", "ERR(<message>)".
struct Trace {
  std::string events;
  std::string data;
  std::string error;
  bool done = false;
};

Trace Decode(std::string_view input, size_t piece = SIZE_MAX, bool finish = true) {
  AwsChunkedDecoder d;
  Trace t;
  std::string pending_data;
  auto flush_data = [&] {
    if (!pending_data.empty()) t.events += "D" + std::to_string(pending_data.size()) + " ";
    pending_data.clear();
  };
  auto handle = [&](const AwsChunkedDecoder::Event& e) -> bool {  // false: stop
    switch (e.kind) {
      case Kind::kNeedMore:
        return false;
      case Kind::kChunkHeader:
        flush_data();
        t.events += "H(" + std::to_string(d.chunk_size()) +
                    (d.has_chunk_signature() ? "," + d.chunk_signature() : "") + ") ";
        return true;
      case Kind::kData:
        EXPECT_FALSE(e.data.empty());
        pending_data += e.data;
        t.data += e.data;
        return true;
      case Kind::kChunkEnd:
        flush_data();
        t.events += d.last_chunk() ? "E0 " : "E ";
        return true;
      case Kind::kTrailer:
        t.events += "T(" + d.trailer_name() + "=" + d.trailer_value() + ") ";
        return true;
      case Kind::kDone:
        t.events += "DONE";
        t.done = true;
        return false;
      case Kind::kError:
        flush_data();
        t.error = d.error();
        t.events += "ERR";
        return false;
    }
    return false;
  };
  size_t pos = 0;
  while (!t.done && t.error.empty()) {
    std::string_view in = input.substr(pos, std::min(piece, input.size() - pos));
    AwsChunkedDecoder::Event e = d.Next(in);
    EXPECT_LE(e.consumed, in.size());
    pos += e.consumed;
    if (e.kind == Kind::kNeedMore) {
      EXPECT_EQ(e.consumed, in.size());
      if (pos == input.size()) break;
      continue;
    }
    if (!handle(e)) break;
  }
  if (!t.done && t.error.empty() && finish) {
    AwsChunkedDecoder::Event e = d.Finish();
    handle(e);
  }
  if (t.done && pos < input.size()) {
    // Input after the end is an error.
    AwsChunkedDecoder::Event e = d.Next(input.substr(pos));
    EXPECT_EQ(e.kind, Kind::kError);
    t.error = d.error();
  }
  EXPECT_EQ(d.decoded_bytes(), t.data.size());
  return t;
}

const std::string kSigA(64, 'a');
const std::string kSigB(64, 'b');

TEST(AwsChunkedDecoder, SignedChunksEveryWayOfSplittingTheInput) {
  const std::string body =
      "5;chunk-signature=" + kSigA + "\r\nhello\r\n" + "0;chunk-signature=" + kSigB + "\r\n\r\n";
  for (size_t piece = 1; piece <= body.size(); ++piece) {
    Trace t = Decode(body, piece);
    EXPECT_EQ(t.events, "H(5," + kSigA + ") D5 E H(0," + kSigB + ") E0 DONE") << piece;
    EXPECT_EQ(t.data, "hello");
    EXPECT_TRUE(t.error.empty()) << t.error;
  }
}

TEST(AwsChunkedDecoder, UnsignedChunksWithTrailers) {
  const std::string body =
      "3\r\nabc\r\n"
      "A\r\n0123456789\r\n"
      "0\r\n"
      "X-Amz-Checksum-CRC32: \tsOO8/Q== \r\n"
      "x-amz-trailer-signature:" +
      kSigA +
      "\n"  // a bare LF ends a trailer line too
      "\r\n";
  for (size_t piece : {size_t{1}, size_t{2}, size_t{5}, SIZE_MAX}) {
    Trace t = Decode(body, piece);
    EXPECT_EQ(t.events,
              "H(3) D3 E H(10) D10 E H(0) E0 T(x-amz-checksum-crc32=sOO8/Q==) "
              "T(x-amz-trailer-signature=" +
                  kSigA + ") DONE")
        << piece;
    EXPECT_EQ(t.data, "abc0123456789");
  }
}

TEST(AwsChunkedDecoder, ExtensionsAndWhitespace) {
  // Unknown extensions are ignored, optional whitespace is allowed, leading zeros are fine.
  Trace t = Decode("0004 ; foo=bar ;chunk-signature = " + kSigA + " ;flag\r\nabcd\r\n0\r\n\r\n");
  EXPECT_EQ(t.events, "H(4," + kSigA + ") D4 E H(0) E0 DONE") << t.error;
  t = Decode("ff\r\n" + std::string(255, 'z') + "\r\nFF\r\n" + std::string(255, 'z') +
             "\r\n0\r\n\r\n");
  EXPECT_EQ(t.data.size(), 510u) << t.error;
}

TEST(AwsChunkedDecoder, MalformedInputs) {
  struct Case {
    std::string input;
    std::string error_part;
  };
  for (const Case& c : std::vector<Case>{
           {"\r\n", "not hexadecimal"},
           {"x\r\n", "not hexadecimal"},
           {";chunk-signature=a\r\n", "not hexadecimal"},
           {"-5\r\n", "not hexadecimal"},
           {"5 5\r\nhello\r\n", "unexpected characters"},
           {"5\nhello\r\n", "CRLF"},
           {"5\r\nhelloX\r\n", "not followed by CRLF"},
           {"5\r\nhello\rX", "not followed by CRLF"},
           {"5;\r\nhello\r\n", "empty chunk extension"},
           {"5;=x\r\nhello\r\n", "empty chunk extension"},
           {"5;chunk-signature=\r\nhello\r\n", "empty chunk-signature"},
           {"5;chunk-signature=a;chunk-signature=b\r\n", "more than one chunk-signature"},
           {"0\r\nno colon here\r\n\r\n", "not 'name:value'"},
           {"0\r\n:value\r\n\r\n", "not 'name:value'"},
           {"0\r\nbad name:value\r\n\r\n", "invalid trailer field name"},
           {"0\r\nname:va\x01lue\r\n\r\n", "control character"},
       }) {
    Trace t = Decode(c.input);
    EXPECT_NE(t.error.find(c.error_part), std::string::npos)
        << "input '" << c.input << "' gave '" << t.error << "' (" << t.events << ")";
  }
}

TEST(AwsChunkedDecoder, Limits) {
  // A chunk-size line of exactly the limit is fine; one more byte is not.
  std::string ext = ";x=" + std::string(kMaxChunkLineBytes - 6, 'e');  // "1" + ext + CRLF
  ASSERT_EQ(1 + ext.size() + 2, kMaxChunkLineBytes);
  EXPECT_TRUE(Decode("1" + ext + "\r\na\r\n0\r\n\r\n").done);
  Trace t = Decode("1" + ext + "e\r\na\r\n0\r\n\r\n");
  EXPECT_NE(t.error.find("chunk-size line longer"), std::string::npos) << t.error;
  // An endless line without LF fails as soon as it passes the limit, whatever the split.
  t = Decode(std::string(100000, '1'), 1000, /*finish=*/false);
  EXPECT_NE(t.error.find("longer than"), std::string::npos) << t.error;
  t = Decode("1;" + std::string(100000, 'x'), 1000, /*finish=*/false);
  EXPECT_NE(t.error.find("longer than"), std::string::npos) << t.error;

  // Chunk sizes: 64 MiB is the largest; larger, and huge hex numbers, fail without overflow.
  EXPECT_TRUE(Decode("4000000\r\n", SIZE_MAX, false).error.empty());
  for (std::string_view size :
       {"4000001", "ffffffffffffffff", "10000000000000000", "fffffffffffffffffffffffffffffff"}) {
    t = Decode(std::string(size) + "\r\n");
    EXPECT_NE(t.error.find("exceeds"), std::string::npos) << size << ": " << t.error;
  }

  // Trailers: at most kMaxTrailerFields fields and kMaxTrailerSectionBytes bytes.
  std::string trailers;
  for (size_t i = 0; i < kMaxTrailerFields; ++i) trailers += "t" + std::to_string(i) + ":v\r\n";
  EXPECT_TRUE(Decode("0\r\n" + trailers + "\r\n").done);
  t = Decode("0\r\n" + trailers + "one-more:v\r\n\r\n");
  EXPECT_NE(t.error.find("trailer fields"), std::string::npos) << t.error;
  t = Decode("0\r\nbig:" + std::string(kMaxTrailerSectionBytes, 'v') + "\r\n\r\n", 500);
  EXPECT_NE(t.error.find("trailer section longer"), std::string::npos) << t.error;
}

TEST(AwsChunkedDecoder, EndOfInput) {
  // Truncation anywhere before the last chunk is an error at Finish().
  const std::string body = "5\r\nhello\r\n0\r\nname:v\r\n\r\n";
  for (size_t cut = 0; cut < 13; ++cut) {
    Trace t = Decode(body.substr(0, cut));
    EXPECT_FALSE(t.done) << cut;
    EXPECT_NE(t.error.find("the body ended"), std::string::npos) << cut << ": " << t.error;
  }
  // Inside a trailer line: an error; at a trailer line boundary: complete (the final empty line
  // is optional).
  EXPECT_FALSE(Decode(body.substr(0, 15)).done);
  EXPECT_TRUE(Decode(body.substr(0, 13)).done);
  EXPECT_TRUE(Decode(body.substr(0, 21)).done);
  EXPECT_TRUE(Decode(body).done);
  // Input after the end is an error.
  Trace t = Decode(body + "x");
  EXPECT_NE(t.error.find("after the end"), std::string::npos) << t.error;
}

TEST(AwsChunkedDecoder, ErrorsAreSticky) {
  AwsChunkedDecoder d;
  EXPECT_EQ(d.Next("zz\r\n").kind, Kind::kError);
  std::string first = d.error();
  EXPECT_EQ(d.Next("5\r\nhello\r\n").kind, Kind::kError);
  EXPECT_EQ(d.Next("").kind, Kind::kError);
  EXPECT_EQ(d.Finish().kind, Kind::kError);
  EXPECT_EQ(d.error(), first);
}

TEST(AwsChunkedDecoder, EmptyInputReturnsPendingEvents) {
  AwsChunkedDecoder d;
  EXPECT_EQ(d.Next("").kind, Kind::kNeedMore);
  AwsChunkedDecoder::Event e = d.Next("0\r\n");
  EXPECT_EQ(e.kind, Kind::kChunkHeader);
  EXPECT_EQ(e.consumed, 3u);
  e = d.Next("");  // the end of the last chunk needs no input
  EXPECT_EQ(e.kind, Kind::kChunkEnd);
  EXPECT_TRUE(d.last_chunk());
  EXPECT_EQ(d.Next("").kind, Kind::kNeedMore);
  EXPECT_EQ(d.Next("\r\n").kind, Kind::kDone);
  EXPECT_EQ(d.Next("").kind, Kind::kDone);
  EXPECT_TRUE(d.done());
  EXPECT_EQ(d.chunk_count(), 1u);
}

TEST(AwsChunkedDecoder, DataNeverExceedsTheChunkOrTheInput) {
  AwsChunkedDecoder d;
  ASSERT_EQ(d.Next("a\r\n").kind, Kind::kChunkHeader);
  AwsChunkedDecoder::Event e = d.Next("0123");
  EXPECT_EQ(e.kind, Kind::kData);
  EXPECT_EQ(e.data, "0123");
  e = d.Next("456789\r\n3\r\n");
  EXPECT_EQ(e.kind, Kind::kData);
  EXPECT_EQ(e.data, "456789");
  EXPECT_EQ(e.consumed, 6u);
  e = d.Next("\r\n3\r\n");
  EXPECT_EQ(e.kind, Kind::kChunkEnd);
  EXPECT_EQ(e.consumed, 2u);
}

}  // namespace
}  // namespace sovai::objstore
