#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "base/json.h"
#include "base/utf8.h"
#include "model/limits.h"

namespace sovai::model {
namespace {

using base::DataLossError;
using base::InvalidArgumentError;
using base::ResourceExhaustedError;
using base::Result;
using base::Status;
using nlohmann::json;

constexpr size_t kLengthPrefixBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeInfo {
  SafetensorsDType dtype;
  std::string_view name;
  size_t bits;
};

// In enum order, so that kDTypes[static_cast<size_t>(d)].dtype == d.
constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::kBool, "BOOL", 8},      {SafetensorsDType::kF4, "F4", 4},
    {SafetensorsDType::kF6E2M3, "F6_E2M3", 6}, {SafetensorsDType::kF6E3M2, "F6_E3M2", 6},
    {SafetensorsDType::kU8, "U8", 8},          {SafetensorsDType::kI8, "I8", 8},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 8}, {SafetensorsDType::kF8E4M3, "F8_E4M3", 8},
    {SafetensorsDType::kF8E8M0, "F8_E8M0", 8}, {SafetensorsDType::kI16, "I16", 16},
    {SafetensorsDType::kU16, "U16", 16},       {SafetensorsDType::kF16, "F16", 16},
    {SafetensorsDType::kBF16, "BF16", 16},     {SafetensorsDType::kI32, "I32", 32},
    {SafetensorsDType::kU32, "U32", 32},       {SafetensorsDType::kF32, "F32", 32},
    {SafetensorsDType::kC64, "C64", 64},       {SafetensorsDType::kF64, "F64", 64},
    {SafetensorsDType::kI64, "I64", 64},       {SafetensorsDType::kU64, "U64", 64},
};

const DTypeInfo& Info(SafetensorsDType dtype) {
  size_t i = static_cast<size_t>(dtype);
  SOVAI_CHECK_LT(i, std::size(kDTypes));
  return kDTypes[i];
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// The header's JSON, streamed through nlohmann's SAX interface into tensor entries, so that
// duplicate keys are seen (a DOM parse keeps the last one silently), nothing but the schema's
// values is kept in memory, and every count is bounded while it is read.
class HeaderParser {
 public:
  HeaderParser(std::string_view file, const SafetensorsLimits& limits)
      : file_(file), limits_(limits) {}

  Status Parse(std::string_view header, SafetensorsContents* out) {
    bool ok = false;
    try {
      ok = json::sax_parse(header.begin(), header.end(), this, json::input_format_t::json,
                           /*strict=*/true, /*ignore_comments=*/false);
    } catch (const std::exception& e) {
      // nlohmann reports parse errors through parse_error(); only allocation failures and the
      // like arrive here.
      return DataLossError(Prefix() + "cannot parse the header: " + e.what());
    }
    if (!ok) {
      if (!status_.ok()) return status_;
      return DataLossError(Prefix() + "cannot parse the header");
    }
    out->tensors = std::move(tensors_);
    out->metadata = std::move(metadata_);
    return Status();
  }

  // --- nlohmann SAX interface ---

  bool null() { return Scalar("null"); }
  bool boolean(bool /*value*/) { return Scalar("a boolean"); }
  bool number_integer(json::number_integer_t value) {
    if (value < 0) return Scalar("a negative number");
    return Unsigned(static_cast<uint64_t>(value));
  }
  bool number_unsigned(json::number_unsigned_t value) { return Unsigned(value); }
  bool number_float(json::number_float_t /*value*/, const std::string& /*text*/) {
    return Scalar("a non-integer number");
  }
  bool binary(json::binary_t& /*value*/) { return Scalar("binary data"); }
  bool string(std::string& value) {
    Slot slot = TakeSlot();
    switch (slot) {
      case Slot::kIgnored:
        return true;
      case Slot::kDtype: {
        auto dtype = ParseSafetensorsDType(value);
        if (!dtype) {
          return Fail(DataLossError(TensorPrefix() + "unknown dtype " + Quote(value) +
                                    " (known: BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, "
                                    "F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, C64, "
                                    "F64, I64, U64)"));
        }
        current_.dtype = *dtype;
        return true;
      }
      case Slot::kMetadataValue:
        metadata_.emplace(std::move(pending_key_), std::move(value));
        return true;
      default:
        return Mismatch(slot, "a string");
    }
  }

  bool start_object(std::size_t /*elements*/) {
    if (!Enter()) return false;
    Slot slot = TakeSlot();
    switch (slot) {
      case Slot::kRoot:
        frames_.push_back(Frame::kTop);
        return true;
      case Slot::kEntry:
        frames_.push_back(Frame::kTensor);
        current_ = SafetensorsTensor();
        current_.name = std::move(pending_key_);
        fields_seen_ = 0;
        return true;
      case Slot::kMetadataObject:
        frames_.push_back(Frame::kMetadata);
        return true;
      case Slot::kIgnored:
        frames_.push_back(Frame::kSkip);
        return true;
      default:
        return Mismatch(slot, "an object");
    }
  }

  bool key(std::string& key) {
    switch (frames_.back()) {
      case Frame::kTop:
        if (!seen_top_keys_.insert(key).second) {
          return Fail(DataLossError(Prefix() + "duplicate key " + Quote(key) + " in the header"));
        }
        if (key == kMetadataKey) {
          next_ = Slot::kMetadataObject;
          return true;
        }
        if (key.empty()) return Fail(DataLossError(Prefix() + "a tensor has an empty name"));
        if (key.size() > limits_.max_name_bytes) {
          return Fail(ResourceExhaustedError(
              Prefix() + "a tensor name of " + std::to_string(key.size()) +
              " bytes exceeds the limit of " + std::to_string(limits_.max_name_bytes) +
              " (kMaxTensorNameBytes)"));
        }
        if (tensors_.size() >= limits_.max_tensors) {
          return Fail(ResourceExhaustedError(Prefix() + "more than " +
                                             std::to_string(limits_.max_tensors) +
                                             " tensors in one file (kMaxSafetensorsTensors)"));
        }
        pending_key_ = std::move(key);
        next_ = Slot::kEntry;
        return true;
      case Frame::kMetadata:
        if (metadata_.count(key) != 0) {
          return Fail(DataLossError(Prefix() + "duplicate key " + Quote(key) + " in " +
                                    std::string(kMetadataKey)));
        }
        if (metadata_.size() >= limits_.max_metadata_entries) {
          return Fail(ResourceExhaustedError(
              Prefix() + "more than " + std::to_string(limits_.max_metadata_entries) +
              " entries in __metadata__ (kMaxSafetensorsMetadataEntries)"));
        }
        pending_key_ = std::move(key);
        next_ = Slot::kMetadataValue;
        return true;
      case Frame::kTensor: {
        int bit = key == "dtype" ? 1 : key == "shape" ? 2 : key == "data_offsets" ? 4 : 0;
        if (bit == 0) {
          next_ = Slot::kIgnored;  // the reference ignores unknown fields
          return true;
        }
        if ((fields_seen_ & bit) != 0) {
          return Fail(DataLossError(TensorPrefix() + "duplicate field " + Quote(key)));
        }
        fields_seen_ |= bit;
        next_ = bit == 1 ? Slot::kDtype : bit == 2 ? Slot::kShape : Slot::kOffsets;
        return true;
      }
      default:  // kSkip (keys of an ignored object); arrays have no keys
        return true;
    }
  }

  bool end_object() {
    Frame frame = frames_.back();
    frames_.pop_back();
    if (frame == Frame::kTensor) {
      static constexpr std::pair<int, std::string_view> kFields[] = {
          {1, "dtype"}, {2, "shape"}, {4, "data_offsets"}};
      for (const auto& [bit, name] : kFields) {
        if ((fields_seen_ & bit) == 0) {
          return Fail(DataLossError(TensorPrefix() + "missing field " + Quote(name)));
        }
      }
      tensors_.push_back(std::move(current_));
    }
    return true;
  }

  bool start_array(std::size_t /*elements*/) {
    if (!Enter()) return false;
    Slot slot = TakeSlot();
    switch (slot) {
      case Slot::kShape:
        frames_.push_back(Frame::kShape);
        return true;
      case Slot::kOffsets:
        frames_.push_back(Frame::kOffsets);
        offsets_seen_ = 0;
        return true;
      case Slot::kIgnored:
        frames_.push_back(Frame::kSkip);
        return true;
      default:
        return Mismatch(slot, "an array");
    }
  }

  bool end_array() {
    Frame frame = frames_.back();
    frames_.pop_back();
    if (frame == Frame::kOffsets && offsets_seen_ != 2) {
      return Fail(DataLossError(TensorPrefix() + "data_offsets must hold 2 numbers, not " +
                                std::to_string(offsets_seen_)));
    }
    return true;
  }

  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) {
    if (!status_.ok()) return false;  // an error of ours stopped the parser
    std::string what = e.what();
    size_t colon = what.find(": ");
    std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    status_ = DataLossError(Prefix() + "invalid JSON in the header at file offset " +
                            std::to_string(kLengthPrefixBytes + position) + ": " + detail);
    return false;
  }

 private:
  // Containers being read.
  enum class Frame : uint8_t { kTop, kMetadata, kTensor, kShape, kOffsets, kSkip };
  // What the next value is for.
  enum class Slot : uint8_t {
    kNone,
    kRoot,
    kEntry,           // a tensor entry (object)
    kMetadataObject,  // the __metadata__ object (or null)
    kMetadataValue,   // a string
    kDtype,
    kShape,
    kOffsets,
    kShapeElement,
    kOffsetElement,
    kIgnored,  // an unknown field's value, or anything inside one
  };

  std::string Prefix() const { return std::string(file_) + ": "; }
  std::string TensorPrefix() const {
    return std::string(file_) + ": tensor " + Quote(current_.name) + ": ";
  }

  Slot TakeSlot() {
    if (!frames_.empty()) {
      switch (frames_.back()) {
        case Frame::kSkip:
          return Slot::kIgnored;
        case Frame::kShape:
          return Slot::kShapeElement;
        case Frame::kOffsets:
          return Slot::kOffsetElement;
        default:
          break;
      }
    }
    Slot slot = next_;
    next_ = Slot::kNone;
    return slot;
  }

  bool Enter() {
    if (frames_.size() + 1 > static_cast<size_t>(std::max(limits_.max_depth, 1))) {
      return Fail(ResourceExhaustedError(Prefix() + "the header nests deeper than " +
                                         std::to_string(limits_.max_depth) +
                                         " levels (kMaxSafetensorsHeaderDepth)"));
    }
    return true;
  }

  bool Unsigned(uint64_t value) {
    Slot slot = TakeSlot();
    switch (slot) {
      case Slot::kIgnored:
        return true;
      case Slot::kShapeElement:
        if (current_.shape.size() >= limits_.max_rank) {
          return Fail(ResourceExhaustedError(TensorPrefix() + "more than " +
                                             std::to_string(limits_.max_rank) +
                                             " dimensions (kMaxTensorRank)"));
        }
        current_.shape.push_back(value);
        return true;
      case Slot::kOffsetElement:
        if (offsets_seen_ >= 2) {
          return Fail(DataLossError(TensorPrefix() + "data_offsets must hold 2 numbers"));
        }
        (offsets_seen_ == 0 ? current_.data_begin : current_.data_end) = value;
        ++offsets_seen_;
        return true;
      default:
        return Mismatch(slot, "a number");
    }
  }

  // A scalar of type `what` arrived; fine where it is ignored, an error anywhere else.
  bool Scalar(std::string_view what) { return Mismatch(TakeSlot(), what); }

  // A value of type `what` arrived for `slot`: fine where it is ignored (and null for
  // __metadata__), an error anywhere else.
  bool Mismatch(Slot slot, std::string_view what) {
    std::string got = std::string(what);
    switch (slot) {
      case Slot::kIgnored:
        return true;
      case Slot::kRoot:
        return Fail(DataLossError(Prefix() + "the header is " + got + ", not a JSON object"));
      case Slot::kEntry:
        return Fail(DataLossError(Prefix() + "the entry of tensor " + Quote(pending_key_) + " is " +
                                  got + ", not an object"));
      case Slot::kMetadataObject:
        if (what == "null") return true;  // "__metadata__": null is no metadata
        return Fail(DataLossError(Prefix() + "__metadata__ is " + got + ", not an object"));
      case Slot::kMetadataValue:
        return Fail(DataLossError(Prefix() + "__metadata__ value of " + Quote(pending_key_) +
                                  " is " + got + ", not a string"));
      case Slot::kDtype:
        return Fail(DataLossError(TensorPrefix() + "dtype is " + got + ", not a string"));
      case Slot::kShape:
        return Fail(DataLossError(TensorPrefix() + "shape is " + got + ", not an array"));
      case Slot::kOffsets:
        return Fail(DataLossError(TensorPrefix() + "data_offsets is " + got + ", not an array"));
      case Slot::kShapeElement:
        return Fail(DataLossError(TensorPrefix() + "a shape dimension is " + got +
                                  ", not a non-negative integer"));
      case Slot::kOffsetElement:
        return Fail(DataLossError(TensorPrefix() + "a data offset is " + got +
                                  ", not a non-negative integer"));
      case Slot::kNone:
        break;
    }
    return Fail(DataLossError(Prefix() + "unexpected " + got + " in the header"));
  }

  bool Fail(Status status) {
    if (status_.ok()) status_ = std::move(status);
    return false;
  }

  std::string_view file_;
  const SafetensorsLimits& limits_;
  Status status_;
  std::vector<Frame> frames_;
  Slot next_ = Slot::kRoot;
  std::string pending_key_;
  SafetensorsTensor current_;
  int fields_seen_ = 0;  // bits: 1 dtype, 2 shape, 4 data_offsets
  int offsets_seen_ = 0;
  std::unordered_set<std::string> seen_top_keys_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

std::string Range(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Checks each tensor's size against its shape and dtype, and that the tensors tile the data
// buffer [0, data_size) exactly. Sorts `tensors` into data order.
Status ValidateLayout(std::vector<SafetensorsTensor>& tensors, uint64_t data_size,
                      std::string_view file) {
  std::string prefix = std::string(file) + ": ";
  for (const SafetensorsTensor& t : tensors) {
    std::string tensor = prefix + "tensor " + Quote(t.name) + ": ";
    auto elements = ShapeElements(t.shape);
    if (!elements) {
      return DataLossError(tensor + "shape " + ShapeToString(t.shape) +
                           " has more elements than fit in 64 bits");
    }
    auto bytes = TensorByteSize(t.dtype, t.shape);
    if (!bytes) {
      return DataLossError(tensor + "shape " + ShapeToString(t.shape) + " of " +
                           std::string(t.dtype_name()) +
                           " does not make a whole number of bytes that fits in 64 bits");
    }
    if (t.data_end < t.data_begin) {
      return DataLossError(tensor + "data_offsets [" + std::to_string(t.data_begin) + ", " +
                           std::to_string(t.data_end) + "] end before they begin");
    }
    if (t.data_end - t.data_begin != *bytes) {
      return DataLossError(tensor + "data_offsets [" + std::to_string(t.data_begin) + ", " +
                           std::to_string(t.data_end) + "] span " +
                           std::to_string(t.data_end - t.data_begin) + " bytes, but shape " +
                           ShapeToString(t.shape) + " of " + std::string(t.dtype_name()) +
                           " needs " + std::to_string(*bytes));
    }
    if (t.data_end > data_size) {
      return DataLossError(prefix + "truncated: tensor " + Quote(t.name) + " needs data bytes " +
                           Range(t.data_begin, t.data_end) + " but the file holds only " +
                           std::to_string(data_size) + " data bytes");
    }
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.data_begin, a.data_end, a.name) <
                     std::tie(b.data_begin, b.data_end, b.name);
            });
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& t : tensors) {
    if (t.data_begin > covered) {
      return DataLossError(prefix + "data bytes " + Range(covered, t.data_begin) +
                           " before tensor " + Quote(t.name) +
                           " belong to no tensor (the tensors must cover the data buffer)");
    }
    if (t.data_begin < covered) {
      return DataLossError(prefix + "tensor " + Quote(t.name) + " (data bytes " +
                           Range(t.data_begin, t.data_end) + ") overlaps tensor " +
                           Quote(previous->name) + " (data bytes " +
                           Range(previous->data_begin, previous->data_end) + ")");
    }
    covered = t.data_end;
    previous = &t;
  }
  if (covered != data_size) {
    return DataLossError(prefix + std::to_string(data_size - covered) +
                         " bytes after the last tensor's data belong to no tensor (data bytes " +
                         Range(covered, data_size) + ")");
  }
  return Status();
}

// Whether `name` may be used as a shard file next to its index.
bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxShardFileNameBytes && name != "." && name != ".." &&
         name.find('/') == std::string_view::npos && name.find('\\') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

std::string EscapeJsonString(std::string_view s) { return base::DumpJson(json(std::string(s))); }

// A sink into a string.
class StringSink : public TensorSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  Status Write(std::span<const std::byte> bytes) override {
    out_->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return Status();
  }

 private:
  std::string* out_;
};

// A sink into an AtomicFileWriter, gathering small pieces into larger appends.
class FileSink : public TensorSink {
 public:
  explicit FileSink(base::AtomicFileWriter& writer) : writer_(writer) {
    buffer_.reserve(kSafetensorsWriteBufferBytes);
  }
  Status Write(std::span<const std::byte> bytes) override {
    const char* data = reinterpret_cast<const char*>(bytes.data());
    if (bytes.size() >= kSafetensorsWriteBufferBytes) {
      SOVAI_RETURN_IF_ERROR(Flush());
      return writer_.Append(std::string_view(data, bytes.size()));
    }
    if (buffer_.size() + bytes.size() > kSafetensorsWriteBufferBytes) {
      SOVAI_RETURN_IF_ERROR(Flush());
    }
    buffer_.append(data, bytes.size());
    return Status();
  }
  Status Flush() {
    if (buffer_.empty()) return Status();
    Status status = writer_.Append(buffer_);
    buffer_.clear();
    return status;
  }

 private:
  base::AtomicFileWriter& writer_;
  std::string buffer_;
};

// Passes a fill's bytes on, refusing more than the tensor's size.
class CountingSink : public TensorSink {
 public:
  CountingSink(TensorSink& out, uint64_t expected, std::string_view name)
      : out_(out), expected_(expected), name_(name) {}
  Status Write(std::span<const std::byte> bytes) override {
    if (bytes.size() > expected_ - written_) {
      return InvalidArgumentError("the fill of tensor " + Quote(name_) + " wrote more than its " +
                                  std::to_string(expected_) + " bytes");
    }
    written_ += bytes.size();
    return out_.Write(bytes);
  }
  uint64_t written() const { return written_; }

 private:
  TensorSink& out_;
  uint64_t expected_;
  uint64_t written_ = 0;
  std::string_view name_;
};

}  // namespace

// --- dtypes and shapes ---

std::string_view SafetensorsDTypeName(SafetensorsDType dtype) { return Info(dtype).name; }

std::optional<SafetensorsDType> ParseSafetensorsDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

size_t SafetensorsDTypeBits(SafetensorsDType dtype) { return Info(dtype).bits; }

std::optional<tensor::DType> ComputableDType(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF32:
      return tensor::DType::kF32;
    case SafetensorsDType::kF16:
      return tensor::DType::kF16;
    case SafetensorsDType::kBF16:
      return tensor::DType::kBF16;
    default:
      return std::nullopt;
  }
}

SafetensorsDType ToSafetensorsDType(tensor::DType dtype) {
  switch (dtype) {
    case tensor::DType::kF32:
      return SafetensorsDType::kF32;
    case tensor::DType::kF16:
      return SafetensorsDType::kF16;
    case tensor::DType::kBF16:
      return SafetensorsDType::kBF16;
  }
  SOVAI_CHECK(false) << "unknown tensor::DType";
  return SafetensorsDType::kF32;
}

std::optional<uint64_t> ShapeElements(std::span<const uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d != 0 && n > UINT64_MAX / d) return std::nullopt;
    n *= d;
  }
  return n;
}

std::optional<uint64_t> TensorByteSize(SafetensorsDType dtype, std::span<const uint64_t> shape) {
  auto elements = ShapeElements(shape);
  if (!elements) return std::nullopt;
  uint64_t bits = SafetensorsDTypeBits(dtype);
  if (*elements != 0 && *elements > UINT64_MAX / bits) return std::nullopt;
  uint64_t total_bits = *elements * bits;
  if (total_bits % 8 != 0) return std::nullopt;
  return total_bits / 8;
}

std::string ShapeToString(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

uint64_t SafetensorsTensor::num_elements() const { return ShapeElements(shape).value_or(0); }

// --- Reading ---

Result<SafetensorsContents> ParseSafetensors(std::span<const std::byte> image,
                                             std::string_view file,
                                             const SafetensorsLimits& limits) {
  std::string prefix = std::string(file) + ": ";
  if (image.size() < kLengthPrefixBytes) {
    return DataLossError(prefix + "truncated: " + std::to_string(image.size()) +
                         " bytes, fewer than the 8-byte header length");
  }
  uint64_t n = 0;
  for (size_t i = 0; i < kLengthPrefixBytes; ++i) {
    n |= static_cast<uint64_t>(std::to_integer<uint8_t>(image[i])) << (8 * i);
  }
  if (n > limits.max_header_bytes) {
    return ResourceExhaustedError(
        prefix + "header length " + std::to_string(n) + " exceeds the limit of " +
        std::to_string(limits.max_header_bytes) + " bytes (kMaxSafetensorsHeaderBytes)");
  }
  if (n > image.size() - kLengthPrefixBytes) {
    return DataLossError(prefix + "truncated: the header length " + std::to_string(n) +
                         " runs past the end of the file (" + std::to_string(image.size()) +
                         " bytes)");
  }
  std::string_view header(reinterpret_cast<const char*>(image.data()) + kLengthPrefixBytes, n);
  if (header.empty() || header[0] != '{') {
    return DataLossError(prefix + "the header does not start with '{' (file offset 8)");
  }
  SafetensorsContents contents;
  contents.header_bytes = n;
  HeaderParser parser(file, limits);
  SOVAI_RETURN_IF_ERROR(parser.Parse(header, &contents));

  uint64_t data_start = kLengthPrefixBytes + n;
  uint64_t data_size = image.size() - data_start;
  SOVAI_RETURN_IF_ERROR(ValidateLayout(contents.tensors, data_size, file));
  for (SafetensorsTensor& t : contents.tensors) {
    t.bytes = image.subspan(data_start + t.data_begin, t.data_end - t.data_begin);
  }
  return contents;
}

Result<tensor::DType> RequireComputable(const SafetensorsTensor& tensor, std::string_view file) {
  auto dtype = ComputableDType(tensor.dtype);
  if (!dtype) {
    return base::UnimplementedError(
        "tensor " + Quote(tensor.name) + " in " + Quote(file) + " has dtype " +
        std::string(tensor.dtype_name()) +
        ", which the engine does not compute in (F32, F16 and BF16 only); its bytes can still "
        "be read as they are");
  }
  return *dtype;
}

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, size);
  }
};

SafetensorsFile::SafetensorsFile(std::string path, std::unique_ptr<Mapping> mapping,
                                 std::string owned)
    : path_(std::move(path)), mapping_(std::move(mapping)), owned_(std::move(owned)) {
  if (mapping_ != nullptr) {
    image_ =
        std::span<const std::byte>(static_cast<const std::byte*>(mapping_->addr), mapping_->size);
  } else {
    image_ = std::as_bytes(std::span<const char>(owned_.data(), owned_.size()));
  }
}

SafetensorsFile::~SafetensorsFile() = default;

Status SafetensorsFile::Init(const SafetensorsLimits& limits) {
  SOVAI_ASSIGN_OR_RETURN(contents_, ParseSafetensors(image_, path_, limits));
  by_name_.resize(contents_.tensors.size());
  for (uint32_t i = 0; i < by_name_.size(); ++i) by_name_[i] = i;
  std::sort(by_name_.begin(), by_name_.end(), [this](uint32_t a, uint32_t b) {
    return contents_.tensors[a].name < contents_.tensors[b].name;
  });
  return Status();
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path,
                                                               const SafetensorsLimits& limits) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below); it has no
  // effect on regular files.
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return base::ErrnoToStatus(errno, "open '" + path + "'");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return base::ErrnoToStatus(errno, "stat '" + path + "'");
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError("'" + path + "' is not a regular file");
  auto mapping = std::make_unique<Mapping>();
  mapping->size = static_cast<size_t>(st.st_size);
  if (mapping->size > 0) {
    // Read-only and private: nothing is ever written through the mapping, and the pages are the
    // page cache's (no copy).
    void* addr = ::mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (addr == MAP_FAILED) return base::ErrnoToStatus(errno, "mmap '" + path + "'");
    mapping->addr = addr;
  }
  // The mapping keeps the file's pages; the descriptor is not needed any more.
  fd.Reset();
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(path, std::move(mapping), ""));
  SOVAI_RETURN_IF_ERROR(file->Init(limits));
  return file;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::string bytes, std::string name, const SafetensorsLimits& limits) {
  std::unique_ptr<SafetensorsFile> file(
      new SafetensorsFile(std::move(name), nullptr, std::move(bytes)));
  SOVAI_RETURN_IF_ERROR(file->Init(limits));
  return file;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [this](uint32_t i, std::string_view n) {
                               return std::string_view(contents_.tensors[i].name) < n;
                             });
  if (it == by_name_.end() || contents_.tensors[*it].name != name) return nullptr;
  return &contents_.tensors[*it];
}

Result<const SafetensorsTensor*> SafetensorsFile::Get(std::string_view name) const {
  const SafetensorsTensor* t = Find(name);
  if (t == nullptr) {
    return base::NotFoundError("tensor " + Quote(name) + " is not in " + Quote(path_));
  }
  return t;
}

Result<std::vector<float>> SafetensorsFile::ReadF32(std::string_view name) const {
  SOVAI_ASSIGN_OR_RETURN(const SafetensorsTensor* t, Get(name));
  SOVAI_ASSIGN_OR_RETURN(tensor::DType dtype, RequireComputable(*t, path_));
  size_t count = static_cast<size_t>(t->num_elements());
  std::vector<float> out(count);
  if (count == 0) return out;  // memcpy must not see the null data() of empty vectors
  if (dtype == tensor::DType::kF32) {
    std::memcpy(out.data(), t->bytes.data(), t->bytes.size());
    return out;
  }
  // ConvertElements reads typed elements, and the mapped bytes may be unaligned.
  std::vector<uint16_t> aligned(count);
  std::memcpy(aligned.data(), t->bytes.data(), t->bytes.size());
  tensor::ConvertElements(dtype, aligned.data(), tensor::DType::kF32, out.data(), count);
  return out;
}

// --- SafetensorsSet ---

void SafetensorsSet::IndexEntries() {
  entries_.clear();
  for (const auto& file : files_) {
    for (const SafetensorsTensor& t : file->tensors()) entries_.push_back({file.get(), &t});
  }
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.tensor->name < b.tensor->name; });
}

Result<std::unique_ptr<SafetensorsSet>> SafetensorsSet::OpenFile(const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  std::unique_ptr<SafetensorsSet> set(new SafetensorsSet());
  set->source_ = path;
  set->files_.push_back(std::move(file));
  set->IndexEntries();
  return set;
}

Result<std::unique_ptr<SafetensorsSet>> SafetensorsSet::OpenIndex(base::Env& env,
                                                                  const std::string& index_path) {
  std::string prefix = index_path + ": ";
  SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(index_path, kMaxSafetensorsIndexBytes));
  auto parsed = base::ParseJson(text, {.max_bytes = kMaxSafetensorsIndexBytes, .max_depth = 16});
  if (!parsed.ok()) return DataLossError(prefix + parsed.status().message());
  const json& index = *parsed;
  if (!index.is_object()) return DataLossError(prefix + "the index is not a JSON object");
  auto weight_map = base::GetObject(index, "weight_map");
  if (!weight_map.ok()) return DataLossError(prefix + weight_map.status().message());

  std::unique_ptr<SafetensorsSet> set(new SafetensorsSet());
  set->source_ = index_path;
  set->sharded_ = true;
  if (index.contains("metadata") && !index["metadata"].is_null()) {
    if (!index["metadata"].is_object()) {
      return DataLossError(prefix + "field 'metadata' must be an object");
    }
    set->index_metadata_ = index["metadata"];
  }

  // shard name -> tensors the index puts there
  std::map<std::string, std::set<std::string>> shards;
  if ((*weight_map)->size() > kMaxSafetensorsTensors) {
    return ResourceExhaustedError(prefix + "more than " + std::to_string(kMaxSafetensorsTensors) +
                                  " tensors (kMaxSafetensorsTensors)");
  }
  for (const auto& [tensor, shard] : (*weight_map)->items()) {
    if (!shard.is_string()) {
      return DataLossError(prefix + "weight_map entry of tensor " + Quote(tensor) +
                           " is not a file name string");
    }
    const std::string& name = shard.get_ref<const std::string&>();
    if (!IsPlainFileName(name)) {
      return DataLossError(prefix + "weight_map entry of tensor " + Quote(tensor) + " names " +
                           Quote(name) +
                           ", which is not a plain file name in the index's directory");
    }
    auto [it, inserted] = shards.try_emplace(name);
    if (inserted && shards.size() > kMaxSafetensorsShards) {
      return ResourceExhaustedError(prefix + "more than " + std::to_string(kMaxSafetensorsShards) +
                                    " shard files (kMaxSafetensorsShards)");
    }
    it->second.insert(tensor);
  }

  std::string dir = base::DirName(index_path);
  for (const auto& [name, listed] : shards) {
    SOVAI_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(base::JoinPath(dir, name)));
    for (const SafetensorsTensor& t : file->tensors()) {
      if (listed.count(t.name) == 0) {
        auto it = (*weight_map)->find(t.name);
        if (it == (*weight_map)->end()) {
          return DataLossError(prefix + "tensor " + Quote(t.name) + " of shard " + Quote(name) +
                               " is not in weight_map");
        }
        return DataLossError(prefix + "tensor " + Quote(t.name) + " is in shard " + Quote(name) +
                             " but weight_map puts it in " +
                             Quote(it->get_ref<const std::string&>()));
      }
    }
    for (const std::string& tensor : listed) {
      if (file->Find(tensor) == nullptr) {
        return DataLossError(prefix + "weight_map puts tensor " + Quote(tensor) + " in shard " +
                             Quote(name) + ", which does not contain it");
      }
    }
    set->files_.push_back(std::move(file));
  }
  set->IndexEntries();
  return set;
}

const SafetensorsSet::Entry* SafetensorsSet::Find(std::string_view name) const {
  auto it = std::lower_bound(
      entries_.begin(), entries_.end(), name,
      [](const Entry& e, std::string_view n) { return std::string_view(e.tensor->name) < n; });
  if (it == entries_.end() || it->tensor->name != name) return nullptr;
  return &*it;
}

Result<SafetensorsSet::Entry> SafetensorsSet::Get(std::string_view name) const {
  const Entry* e = Find(name);
  if (e == nullptr) {
    return base::NotFoundError("tensor " + Quote(name) + " is not in " + Quote(source_));
  }
  return *e;
}

uint64_t SafetensorsSet::total_tensor_bytes() const {
  uint64_t total = 0;
  for (const Entry& e : entries_) total += e.tensor->bytes.size();
  return total;
}

// --- Writing ---

TensorToWrite ToWrite(const SafetensorsTensor& tensor) {
  TensorToWrite out;
  out.name = tensor.name;
  out.dtype = tensor.dtype;
  out.shape = tensor.shape;
  out.data = tensor.bytes;
  return out;
}

Status SafetensorsWriter::SetMetadata(std::map<std::string, std::string> metadata) {
  if (metadata.size() > kMaxSafetensorsMetadataEntries) {
    return ResourceExhaustedError("more than " + std::to_string(kMaxSafetensorsMetadataEntries) +
                                  " metadata entries (kMaxSafetensorsMetadataEntries)");
  }
  for (const auto& [key, value] : metadata) {
    if (!base::IsValidUtf8(key) || !base::IsValidUtf8(value)) {
      return InvalidArgumentError("metadata entry " + Quote(key) + " is not valid UTF-8");
    }
  }
  metadata_ = std::move(metadata);
  return Status();
}

Status SafetensorsWriter::Add(TensorToWrite tensor) {
  const std::string& name = tensor.name;
  if (name.empty()) return InvalidArgumentError("a tensor to write has an empty name");
  if (name.size() > kMaxTensorNameBytes) {
    return InvalidArgumentError("tensor name of " + std::to_string(name.size()) +
                                " bytes exceeds the limit of " +
                                std::to_string(kMaxTensorNameBytes) + " (kMaxTensorNameBytes)");
  }
  if (!base::IsValidUtf8(name)) return InvalidArgumentError("tensor name is not valid UTF-8");
  if (name == kMetadataKey) {
    return InvalidArgumentError("a tensor may not be named " + std::string(kMetadataKey));
  }
  if (names_.count(name) != 0) {
    return InvalidArgumentError("tensor " + Quote(name) + " is added twice");
  }
  if (tensors_.size() >= kMaxSafetensorsTensors) {
    return ResourceExhaustedError("more than " + std::to_string(kMaxSafetensorsTensors) +
                                  " tensors in one file (kMaxSafetensorsTensors)");
  }
  if (tensor.shape.size() > kMaxTensorRank) {
    return InvalidArgumentError(
        "tensor " + Quote(name) + " has " + std::to_string(tensor.shape.size()) +
        " dimensions, more than kMaxTensorRank (" + std::to_string(kMaxTensorRank) + ")");
  }
  auto bytes = TensorByteSize(tensor.dtype, tensor.shape);
  if (!bytes) {
    return InvalidArgumentError("tensor " + Quote(name) + ": shape " + ShapeToString(tensor.shape) +
                                " of " + std::string(SafetensorsDTypeName(tensor.dtype)) +
                                " is not a whole number of bytes that fits in 64 bits");
  }
  if (!tensor.fill && tensor.data.size() != *bytes) {
    return InvalidArgumentError(
        "tensor " + Quote(name) + ": " + std::to_string(tensor.data.size()) +
        " bytes of data, but shape " + ShapeToString(tensor.shape) + " of " +
        std::string(SafetensorsDTypeName(tensor.dtype)) + " needs " + std::to_string(*bytes));
  }
  if (*bytes > UINT64_MAX - data_bytes_) {
    return InvalidArgumentError("the tensors' total size overflows 64 bits");
  }
  data_bytes_ += *bytes;
  names_.emplace(name, tensors_.size());
  sizes_.push_back(*bytes);
  tensors_.push_back(std::move(tensor));
  return Status();
}

std::vector<SafetensorsWriter::Planned> SafetensorsWriter::Plan() const {
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // As the reference writer: larger alignment first (so that every tensor stays aligned to its
  // element size when the header length is a multiple of 8), then by name.
  std::sort(order.begin(), order.end(), [this](size_t a, size_t b) {
    const TensorToWrite& x = tensors_[a];
    const TensorToWrite& y = tensors_[b];
    if (x.dtype != y.dtype) return x.dtype > y.dtype;
    return x.name < y.name;
  });
  std::vector<Planned> plan;
  plan.reserve(order.size());
  uint64_t offset = 0;
  for (size_t i : order) {
    plan.push_back({i, offset, offset + sizes_[i]});
    offset += sizes_[i];
  }
  return plan;
}

std::string SafetensorsWriter::HeaderBytes() const {
  std::string header = "{";
  bool first = true;
  if (!metadata_.empty()) {
    header += EscapeJsonString(kMetadataKey) + ":{";
    bool first_entry = true;
    for (const auto& [key, value] : metadata_) {
      if (!first_entry) header += ",";
      first_entry = false;
      header += EscapeJsonString(key) + ":" + EscapeJsonString(value);
    }
    header += "}";
    first = false;
  }
  for (const Planned& p : Plan()) {
    const TensorToWrite& t = tensors_[p.index];
    if (!first) header += ",";
    first = false;
    header += EscapeJsonString(t.name) + ":{\"dtype\":\"" +
              std::string(SafetensorsDTypeName(t.dtype)) + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i > 0) header += ",";
      header += std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(p.begin) + "," + std::to_string(p.end) + "]}";
  }
  header += "}";
  // Pad with spaces (valid JSON whitespace) so that the data buffer starts 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(kLengthPrefixBytes, '\0');
  uint64_t n = header.size();
  for (size_t i = 0; i < kLengthPrefixBytes; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header;
}

Status SafetensorsWriter::WriteTo(TensorSink& out) const {
  std::string header = HeaderBytes();
  if (header.size() - kLengthPrefixBytes > kMaxSafetensorsHeaderBytes) {
    return ResourceExhaustedError("the header would be " + std::to_string(header.size() - 8) +
                                  " bytes, more than kMaxSafetensorsHeaderBytes (" +
                                  std::to_string(kMaxSafetensorsHeaderBytes) +
                                  "): split the tensors into shards");
  }
  SOVAI_RETURN_IF_ERROR(out.Write(std::as_bytes(std::span<const char>(header))));
  for (const Planned& p : Plan()) {
    const TensorToWrite& t = tensors_[p.index];
    if (!t.fill) {
      SOVAI_RETURN_IF_ERROR(out.Write(t.data));
      continue;
    }
    CountingSink counting(out, p.end - p.begin, t.name);
    SOVAI_RETURN_IF_ERROR(t.fill(counting));
    if (counting.written() != p.end - p.begin) {
      return InvalidArgumentError("the fill of tensor " + Quote(t.name) + " wrote " +
                                  std::to_string(counting.written()) + " bytes, not its " +
                                  std::to_string(p.end - p.begin));
    }
  }
  return Status();
}

Result<std::string> SafetensorsWriter::Serialize() const {
  std::string out;
  StringSink sink(&out);
  SOVAI_RETURN_IF_ERROR(WriteTo(sink));
  return out;
}

Status SafetensorsWriter::WriteFile(base::Env& env, const std::string& path) const {
  SOVAI_ASSIGN_OR_RETURN(auto writer, base::AtomicFileWriter::Open(env, path));
  FileSink sink(*writer);
  SOVAI_RETURN_IF_ERROR(WriteTo(sink).WithContext("writing '" + path + "'"));
  SOVAI_RETURN_IF_ERROR(sink.Flush());
  return writer->Commit();
}

std::string ShardFileName(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index, count);
  return buf;
}

Result<ShardedWrite> WriteShardedSafetensors(base::Env& env, const std::string& dir,
                                             std::vector<TensorToWrite> tensors,
                                             uint64_t max_shard_bytes,
                                             const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) return InvalidArgumentError("max_shard_bytes must be positive");
  // Assign tensors to shards in order, validating each through a writer.
  std::vector<SafetensorsWriter> shards(1);
  uint64_t current = 0;
  uint64_t total = 0;
  std::set<std::string, std::less<>> seen;
  json weight_map = json::object();
  std::vector<std::pair<std::string, size_t>> placement;  // tensor -> shard
  for (TensorToWrite& t : tensors) {
    if (!seen.insert(t.name).second) {
      return InvalidArgumentError("tensor " + Quote(t.name) + " is given twice");
    }
    auto bytes = TensorByteSize(t.dtype, t.shape);
    uint64_t size = bytes.value_or(0);  // an invalid size is reported by Add below
    if (shards.back().tensor_count() > 0 &&
        size > max_shard_bytes - std::min(current, max_shard_bytes)) {
      shards.emplace_back();
      current = 0;
    }
    placement.emplace_back(t.name, shards.size() - 1);
    SOVAI_RETURN_IF_ERROR(shards.back().Add(std::move(t)));
    current += size;
    total += size;
  }
  for (SafetensorsWriter& shard : shards) SOVAI_RETURN_IF_ERROR(shard.SetMetadata(metadata));

  ShardedWrite result;
  if (shards.size() == 1) {
    result.files.push_back("model.safetensors");
    SOVAI_RETURN_IF_ERROR(shards[0].WriteFile(env, base::JoinPath(dir, result.files[0])));
    return result;
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    result.files.push_back(ShardFileName(i + 1, shards.size()));
    SOVAI_RETURN_IF_ERROR(shards[i].WriteFile(env, base::JoinPath(dir, result.files.back())));
  }
  for (const auto& [name, shard] : placement) weight_map[name] = result.files[shard];
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  // transformers writes json.dumps(index, indent=2, sort_keys=True) + "\n".
  SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(base::JoinPath(dir, "model.safetensors.index.json"),
                                                base::DumpJson(index, 2) + "\n"));
  result.indexed = true;
  return result;
}

}  // namespace sovai::model
