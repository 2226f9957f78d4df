// The aws-chunked content encoding of S3 streaming uploads, as a pure, incremental decoder: bytes
// in, events out. No crypto and no I/O: signature checks live in PayloadReader (sigv4.h), which
// drives this decoder, so the framing can be fuzzed on its own.
//
// The grammar (every line ends in CRLF unless noted):
//   chunk        = hex-size *( ";" ext-name [ "=" ext-value ] ) CRLF data CRLF
//   last-chunk   = "0" *( ";" ext ) CRLF                       ; no data, no data CRLF
//   trailer      = *( field-name ":" field-value LF )          ; CR before LF optional
//   body         = *chunk last-chunk trailer ( CRLF | LF )
// Signed uploads carry "chunk-signature=<hex>" as an extension; unsigned-trailer uploads carry
// none. Trailer fields hold checksums ("x-amz-checksum-crc32:...") and, for signed-trailer
// uploads, "x-amz-trailer-signature:...".
//
//   AwsChunkedDecoder d;
//   for (;;) {
//     AwsChunkedDecoder::Event e = d.Next(input);   // input: unread bytes
//     input.remove_prefix(e.consumed);
//     switch (e.kind) { case kNeedMore: ...read more...; case kData: ...e.data...; ... }
//   }
//
// Limits (each exceeded limit is a kError): a chunk-size line of at most kMaxChunkLineBytes, a
// chunk of at most kMaxAwsChunkBytes, a trailer section of at most kMaxTrailerSectionBytes and
// kMaxTrailerFields fields. Memory is bounded by those limits whatever the input.
//
// Thread-safety: none; one decoder per body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sovai::objstore {

// A chunk-size line ("10000;chunk-signature=<64 hex>\r\n"), CRLF included.
inline constexpr size_t kMaxChunkLineBytes = 4 << 10;  // 4 KiB
// One chunk's data. SDKs send 8 KiB .. 1 MiB chunks; 64 MiB leaves room for any client.
inline constexpr uint64_t kMaxAwsChunkBytes = 64ull << 20;  // 64 MiB
// The trailer section after the last chunk, every line and line end included.
inline constexpr size_t kMaxTrailerSectionBytes = 16 << 10;  // 16 KiB
// Trailer fields, x-amz-trailer-signature included.
inline constexpr size_t kMaxTrailerFields = 16;

class AwsChunkedDecoder {
 public:
  enum class EventKind : uint8_t {
    // Every byte of the input was consumed and no event completed: call again with more input,
    // or Finish() at the end of the body.
    kNeedMore,
    // A chunk-size line: chunk_size(), chunk_signature(). Data follows (none for the last chunk).
    kChunkHeader,
    // Payload bytes of the current chunk: `data`, a non-empty view into the input.
    kData,
    // The current chunk is complete (data and its CRLF read). For the last (empty) chunk it comes
    // right after the kChunkHeader. last_chunk() says which.
    kChunkEnd,
    // One trailer field: trailer_name() (lowercased) and trailer_value() (trimmed).
    kTrailer,
    // The terminating empty line: the encoding is complete. Input after it is an error.
    kDone,
    // Malformed input or an exceeded limit: error() says what. Every later call returns kError.
    kError,
  };

  struct Event {
    EventKind kind = EventKind::kNeedMore;
    // Bytes of the input this call used; the caller drops them before the next call.
    size_t consumed = 0;
    // For kData: the payload bytes, a view into the input passed to Next().
    std::string_view data;
  };

  AwsChunkedDecoder() = default;

  // Decodes from `input` until one event completes or the input is used up. An empty input is
  // fine (it returns pending events, else kNeedMore). Never reads past `input`.
  Event Next(std::string_view input);

  // The body ended (no more input will come). Returns kDone when the encoding is complete — or
  // when it ended at a line boundary inside the trailer section, i.e. only the final empty line is
  // missing, which some clients omit — and kError (truncated, error() says where) otherwise.
  // Events not yet returned by Next() must be drained first (Next until kNeedMore).
  Event Finish();

  // For kChunkHeader and later events of the same chunk.
  uint64_t chunk_size() const { return chunk_size_; }
  // The chunk-signature extension of the current chunk; empty when it had none.
  const std::string& chunk_signature() const { return chunk_signature_; }
  bool has_chunk_signature() const { return has_signature_; }
  bool last_chunk() const { return last_chunk_; }
  // For kTrailer.
  const std::string& trailer_name() const { return trailer_name_; }
  const std::string& trailer_value() const { return trailer_value_; }
  // For kError.
  const std::string& error() const { return error_; }

  bool done() const { return state_ == State::kDone; }
  // Payload bytes returned so far (the decoded length).
  uint64_t decoded_bytes() const { return decoded_bytes_; }
  // Chunks whose header has been read (the last, empty one included).
  uint64_t chunk_count() const { return chunk_count_; }

 private:
  enum class State : uint8_t {
    kSizeLine,      // reading a chunk-size line into line_
    kData,          // data_left_ payload bytes to go
    kDataCr,        // expecting the CR after the data
    kDataLf,        // expecting the LF after the data
    kLastChunkEnd,  // kChunkEnd of the last chunk is pending
    kTrailerLine,   // reading a trailer line into line_
    kDone,
    kError,
  };

  Event Fail(std::string message, size_t consumed);
  // Parses line_ (CRLF stripped) as a chunk-size line.
  bool ParseSizeLine(std::string_view line);
  // Parses one trailer line (line end stripped); false with error_ set when malformed.
  bool ParseTrailerLine(std::string_view line);

  State state_ = State::kSizeLine;
  std::string line_;  // the partial line being read (size line or trailer line)
  uint64_t chunk_size_ = 0;
  uint64_t data_left_ = 0;
  std::string chunk_signature_;
  bool has_signature_ = false;
  bool last_chunk_ = false;
  std::string trailer_name_;
  std::string trailer_value_;
  size_t trailer_bytes_ = 0;
  size_t trailer_fields_ = 0;
  uint64_t decoded_bytes_ = 0;
  uint64_t chunk_count_ = 0;
  std::string error_;
};

}  // namespace sovai::objstore
