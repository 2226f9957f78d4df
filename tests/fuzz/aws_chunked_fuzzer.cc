// libFuzzer target for the aws-chunked decoder (src/objstore/aws_chunked.h) and the PayloadReader
// that drives it. The input is the body; it is fed in small pieces whose sizes come from a PRNG
// seeded by the input, and the result must not depend on the split: the same events, the same
// data, the same error as when the body arrives in one piece. Invariants: consumed <= input,
// kData is non-empty and inside the input and the chunk, progress on every call, decoded_bytes()
// is the sum of the data.
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "base/check.h"
#include "objstore/aws_chunked.h"
#include "objstore/sigv4.h"

namespace {

using sovai::objstore::AwsChunkedDecoder;
using Kind = AwsChunkedDecoder::EventKind;

struct Outcome {
  std::string trace;  // event kinds, chunk headers and trailers
  std::string data;
  std::string error;
  bool done = false;
};

// Piece sizes: 1..16 bytes mostly, sometimes a larger piece.
class Splitter {
 public:
  explicit Splitter(uint64_t seed) : state_(seed | 1) {}
  size_t Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return (state_ % 8 == 0) ? 1 + state_ % 4096 : 1 + state_ % 16;
  }

 private:
  uint64_t state_;
};

// Decodes `body` in pieces from `split` (or whole when it is null).
Outcome Decode(std::string_view body, Splitter* split) {
  AwsChunkedDecoder d;
  Outcome out;
  uint64_t chunk_data = 0;
  size_t pos = 0;
  size_t calls = 0;
  for (;;) {
    SOVAI_CHECK_LE(++calls, 4 * body.size() + 64) << "decoder makes no progress";
    size_t piece = split ? split->Next() : body.size();
    std::string_view in = body.substr(pos, std::min(piece, body.size() - pos));
    AwsChunkedDecoder::Event e = d.Next(in);
    SOVAI_CHECK_LE(e.consumed, in.size());
    pos += e.consumed;
    switch (e.kind) {
      case Kind::kNeedMore:
        SOVAI_CHECK_EQ(e.consumed, in.size());
        if (pos < body.size()) continue;
        e = d.Finish();
        if (e.kind == Kind::kDone) {
          out.trace += "done ";
          out.done = true;
        } else {
          SOVAI_CHECK(e.kind == Kind::kError);
          out.error = d.error();
        }
        break;
      case Kind::kChunkHeader:
        SOVAI_CHECK_LE(d.chunk_size(), sovai::objstore::kMaxAwsChunkBytes);
        out.trace += "H" + std::to_string(d.chunk_size()) + ":" + d.chunk_signature() + " ";
        chunk_data = 0;
        continue;
      case Kind::kData:
        SOVAI_CHECK(!e.data.empty());
        SOVAI_CHECK(e.data.data() >= in.data() &&
                    e.data.data() + e.data.size() <= in.data() + in.size());
        chunk_data += e.data.size();
        SOVAI_CHECK_LE(chunk_data, d.chunk_size());
        out.data += e.data;
        continue;
      case Kind::kChunkEnd:
        SOVAI_CHECK_EQ(chunk_data, d.chunk_size());
        out.trace += d.last_chunk() ? "E0 " : "E ";
        continue;
      case Kind::kTrailer:
        SOVAI_CHECK(!d.trailer_name().empty());
        out.trace += "T" + d.trailer_name() + "=" + d.trailer_value() + " ";
        continue;
      case Kind::kDone:
        out.trace += "done ";
        out.done = true;
        if (pos < body.size()) {
          SOVAI_CHECK(d.Next(body.substr(pos)).kind == Kind::kError);
          out.done = false;
          out.error = d.error();
        }
        break;
      case Kind::kError:
        SOVAI_CHECK(!d.error().empty());
        SOVAI_CHECK(d.Next("x").kind == Kind::kError);  // sticky
        out.error = d.error();
        break;
    }
    break;
  }
  SOVAI_CHECK_EQ(d.decoded_bytes(), out.data.size());
  SOVAI_CHECK(out.done != !out.error.empty());
  return out;
}

// A raw body handed out in pieces.
class PieceBody : public sovai::net::BodyReader {
 public:
  PieceBody(std::string_view data, Splitter split) : data_(data), split_(split) {}
  sovai::base::Result<size_t> Read(char* buf, size_t n) override {
    size_t k = std::min({n, split_.Next(), data_.size() - pos_});
    if (k > 0) std::memcpy(buf, data_.data() + pos_, k);  // data_ may be an empty null view
    pos_ += k;
    return k;
  }

 private:
  std::string_view data_;
  Splitter split_;
  size_t pos_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(bytes), size);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) seed = seed * 131 + bytes[i];

  Outcome whole = Decode(body, nullptr);
  Splitter split(seed);
  Outcome pieces = Decode(body, &split);
  SOVAI_CHECK_EQ(whole.trace, pieces.trace);
  SOVAI_CHECK(whole.data == pieces.data);
  SOVAI_CHECK_EQ(whole.error, pieces.error);

  // The same body through PayloadReader (unsigned trailers: no signatures to get right).
  sovai::objstore::AuthResult auth;
  auth.payload = sovai::objstore::PayloadMode::kStreamingUnsignedTrailer;
  PieceBody raw(body, Splitter(seed ^ 0x5555));
  sovai::objstore::PayloadReader reader(raw, auth);
  std::string decoded;
  Splitter reads(seed ^ 0xaaaa);
  char buf[4096];
  for (;;) {
    sovai::base::Result<size_t> n = reader.Read(buf, std::min(sizeof buf, reads.Next()));
    if (!n.ok()) {
      SOVAI_CHECK(reader.s3_error().has_value());
      break;
    }
    if (*n == 0) {
      // Success needs a complete encoding whose trailers were all declared (none here).
      SOVAI_CHECK(whole.done);
      SOVAI_CHECK(decoded == whole.data);
      SOVAI_CHECK(reader.trailers().empty());
      break;
    }
    decoded.append(buf, *n);
    SOVAI_CHECK_LE(decoded.size(), whole.data.size() + (whole.done ? 0 : body.size()));
  }
  return 0;
}
