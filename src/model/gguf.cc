#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "base/check.h"

namespace sovai::model {

static_assert(std::endian::native == std::endian::little,
              "GGUF files are little-endian; this code reads and writes them with memcpy");

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;
constexpr std::string_view kAlignmentKey = "general.alignment";

// The block layout of every ggml type that GGUF files may hold (ggml-common.h's block structs).
struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};
constexpr TypeRow kTypes[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};

// Bytes a value of a fixed-size type takes; 0 for string and array.
uint64_t FixedValueBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

// The fewest bytes an element of `type` can take in a file: bounds an array's count before any
// memory is reserved for it.
uint64_t MinValueBytes(GgufValueType type) {
  if (type == GgufValueType::kString) return 8;     // the length
  if (type == GgufValueType::kArray) return 4 + 8;  // element type and count
  return FixedValueBytes(type);
}

bool IsKnownValueType(uint32_t type) {
  return type <= static_cast<uint32_t>(GgufValueType::kFloat64);
}

uint64_t AlignUp(uint64_t offset, uint64_t alignment) {
  return offset + (alignment - offset % alignment) % alignment;
}

std::string Quoted(std::string_view s) {
  // Names and keys come from the file: show at most 80 bytes, with control bytes escaped.
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 80) out += "...";
  return out + "'";
}

// The writer's key rule (the spec's): dot-separated lower_snake_case segments.
bool IsValidKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxGgufKeyBytes) return false;
  size_t segment = 0;
  for (char c : key) {
    if (c == '.') {
      if (segment == 0) return false;
      segment = 0;
      continue;
    }
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
    ++segment;
  }
  return segment > 0;
}

// What the writer accepts as a value (the reader's limits at their defaults, so that every file
// we write is one we can read back).
base::Status ValidateValue(const GgufValue& value, std::string_view key, int depth) {
  if (const std::string* s = value.AsString()) {
    if (s->size() > kMaxGgufStringBytes) {
      return base::InvalidArgumentError("GGUF key '" + std::string(key) + "': a string of " +
                                        std::to_string(s->size()) + " bytes exceeds " +
                                        std::to_string(kMaxGgufStringBytes));
    }
  } else if (const GgufArray* array = value.AsArray()) {
    if (depth >= kMaxGgufArrayDepth) {
      return base::InvalidArgumentError("GGUF key '" + std::string(key) +
                                        "': arrays nest deeper than " +
                                        std::to_string(kMaxGgufArrayDepth));
    }
    if (array->elements.size() > kMaxGgufArrayElements) {
      return base::InvalidArgumentError("GGUF key '" + std::string(key) + "': an array of " +
                                        std::to_string(array->elements.size()) +
                                        " elements exceeds " +
                                        std::to_string(kMaxGgufArrayElements));
    }
    for (size_t i = 0; i < array->elements.size(); ++i) {
      const GgufValue& element = array->elements[i];
      if (element.type() != array->element_type) {
        return base::InvalidArgumentError(
            "GGUF key '" + std::string(key) + "': element " + std::to_string(i) + " is " +
            std::string(GgufValueTypeName(element.type())) + " in an array of " +
            std::string(GgufValueTypeName(array->element_type)));
      }
      SOVAI_RETURN_IF_ERROR(ValidateValue(element, key, depth + 1));
    }
  }
  return base::Status();
}

template <typename T>
void AppendScalar(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void AppendString(std::string& out, std::string_view s) {
  AppendScalar<uint64_t>(out, s.size());
  out.append(s);
}

void AppendValue(std::string& out, const GgufValue& value) {
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          AppendString(out, v);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          AppendScalar<uint32_t>(out, static_cast<uint32_t>(v.element_type));
          AppendScalar<uint64_t>(out, v.elements.size());
          for (const GgufValue& element : v.elements) AppendValue(out, element);
        } else if constexpr (std::is_same_v<T, bool>) {
          AppendScalar<uint8_t>(out, v ? 1 : 0);
        } else {
          AppendScalar<T>(out, v);
        }
      },
      value.storage);
}

// --- Parsing ---

// Reads little-endian fields from the front of a byte span, tracking the absolute offset for
// error messages. Every read checks the bytes are there first.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return bytes_.size() - offset_; }

  base::Status Truncated(std::string_view what, uint64_t need) const {
    return base::DataLossError("GGUF truncated at byte " + std::to_string(offset_) + ": " +
                               std::string(what) + " needs " + std::to_string(need) +
                               " bytes, the file has " + std::to_string(remaining()) + " left");
  }

  template <typename T>
  base::Result<T> Read(std::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(what, sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }

  // A string whose length must be within `max_bytes` (`limit_name` names that limit).
  base::Result<std::string> ReadString(std::string_view what, uint64_t max_bytes,
                                       std::string_view limit_name) {
    const uint64_t at = offset_;
    SOVAI_ASSIGN_OR_RETURN(uint64_t length, Read<uint64_t>(what));
    if (length > remaining()) {
      return base::DataLossError("GGUF: " + std::string(what) + " at byte " + std::to_string(at) +
                                 " declares " + std::to_string(length) +
                                 " bytes, beyond the end of the file (" +
                                 std::to_string(remaining()) + " bytes left)");
    }
    if (length > max_bytes) {
      return base::ResourceExhaustedError(
          "GGUF: " + std::string(what) + " at byte " + std::to_string(at) + " is " +
          std::to_string(length) + " bytes, more than the limit of " + std::to_string(max_bytes) +
          " (" + std::string(limit_name) + ")");
    }
    std::string out(reinterpret_cast<const char*>(bytes_.data() + offset_), length);
    offset_ += length;
    return out;
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t offset_ = 0;
};

struct ValueParser {
  Cursor& cursor;
  const GgufLimits& limits;
  uint64_t total_array_elements = 0;

  // `what` names the value in errors ("metadata key 'x'").
  base::Result<GgufValue> Parse(GgufValueType type, const std::string& what, int depth) {
    switch (type) {
      case GgufValueType::kUint8:
        return Scalar<uint8_t>(what, &GgufValue::Uint8);
      case GgufValueType::kInt8:
        return Scalar<int8_t>(what, &GgufValue::Int8);
      case GgufValueType::kUint16:
        return Scalar<uint16_t>(what, &GgufValue::Uint16);
      case GgufValueType::kInt16:
        return Scalar<int16_t>(what, &GgufValue::Int16);
      case GgufValueType::kUint32:
        return Scalar<uint32_t>(what, &GgufValue::Uint32);
      case GgufValueType::kInt32:
        return Scalar<int32_t>(what, &GgufValue::Int32);
      case GgufValueType::kFloat32:
        return Scalar<float>(what, &GgufValue::Float32);
      case GgufValueType::kUint64:
        return Scalar<uint64_t>(what, &GgufValue::Uint64);
      case GgufValueType::kInt64:
        return Scalar<int64_t>(what, &GgufValue::Int64);
      case GgufValueType::kFloat64:
        return Scalar<double>(what, &GgufValue::Float64);
      case GgufValueType::kBool: {
        const uint64_t at = cursor.offset();
        SOVAI_ASSIGN_OR_RETURN(uint8_t byte, cursor.Read<uint8_t>(what));
        if (byte > 1) {
          return base::DataLossError("GGUF: " + what + " at byte " + std::to_string(at) +
                                     ": a bool must be 0 or 1, not " + std::to_string(byte));
        }
        return GgufValue::Bool(byte == 1);
      }
      case GgufValueType::kString: {
        SOVAI_ASSIGN_OR_RETURN(
            std::string s, cursor.ReadString(what, limits.max_string_bytes, "max_string_bytes"));
        return GgufValue::String(std::move(s));
      }
      case GgufValueType::kArray:
        return ParseArray(what, depth);
    }
    return base::InternalError("unreachable value type");
  }

  template <typename T>
  base::Result<GgufValue> Scalar(const std::string& what, GgufValue (*make)(T)) {
    SOVAI_ASSIGN_OR_RETURN(T value, cursor.Read<T>(what));
    return make(value);
  }

  base::Result<GgufValue> ParseArray(const std::string& what, int depth) {
    const uint64_t at = cursor.offset();
    if (depth >= limits.max_array_depth) {
      return base::ResourceExhaustedError(
          "GGUF: " + what + " at byte " + std::to_string(at) + ": arrays nest deeper than " +
          std::to_string(limits.max_array_depth) + " (max_array_depth)");
    }
    SOVAI_ASSIGN_OR_RETURN(uint32_t element_type, cursor.Read<uint32_t>(what));
    if (!IsKnownValueType(element_type)) {
      return base::DataLossError("GGUF: " + what + " at byte " + std::to_string(at) +
                                 ": unknown array element type " + std::to_string(element_type));
    }
    SOVAI_ASSIGN_OR_RETURN(uint64_t count, cursor.Read<uint64_t>(what));
    if (count > limits.max_array_elements) {
      return base::ResourceExhaustedError(
          "GGUF: " + what + " at byte " + std::to_string(at) + ": an array of " +
          std::to_string(count) + " elements exceeds the limit of " +
          std::to_string(limits.max_array_elements) + " (max_array_elements)");
    }
    const auto type = static_cast<GgufValueType>(element_type);
    // count <= max_array_elements (< 2^40 in any sane configuration) and MinValueBytes <= 12, so
    // the product cannot overflow for the limits we ship; guard anyway for configured ones.
    const uint64_t min_bytes = MinValueBytes(type);
    if (count > cursor.remaining() / min_bytes) {
      return base::DataLossError(
          "GGUF: " + what + " at byte " + std::to_string(at) + ": an array of " +
          std::to_string(count) + " " + std::string(GgufValueTypeName(type)) +
          " elements cannot fit in the " + std::to_string(cursor.remaining()) + " bytes left");
    }
    total_array_elements += count;
    if (total_array_elements > limits.max_total_array_elements) {
      return base::ResourceExhaustedError("GGUF: " + what + " at byte " + std::to_string(at) +
                                          ": the metadata holds more than " +
                                          std::to_string(limits.max_total_array_elements) +
                                          " array elements in all (max_total_array_elements)");
    }
    GgufArray array;
    array.element_type = type;
    array.elements.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      SOVAI_ASSIGN_OR_RETURN(GgufValue element, Parse(type, what, depth + 1));
      array.elements.push_back(std::move(element));
    }
    return GgufValue::Array(std::move(array));
  }
};

}  // namespace

// --- Types ---

std::optional<GgmlTypeInfo> GetGgmlTypeInfo(uint32_t type_id) {
  for (const TypeRow& row : kTypes) {
    if (row.id == type_id) return row.info;
  }
  return std::nullopt;
}

std::string_view GgmlTypeName(GgmlType type) {
  std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  return info ? info->name : "?";
}

base::Result<uint64_t> GgmlTensorBytes(uint32_t type_id, std::span<const uint64_t> ne) {
  std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(type_id);
  if (!info) return base::InvalidArgumentError("unknown ggml type " + std::to_string(type_id));
  if (ne.size() > kMaxGgufDims) {
    return base::InvalidArgumentError(std::to_string(ne.size()) + " dimensions, more than " +
                                      std::to_string(kMaxGgufDims));
  }
  // ggml keeps ne as int64_t: every dimension and the element count must fit.
  constexpr uint64_t kMaxElements = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t elements = 1;
  for (uint64_t n : ne) {
    if (n > kMaxElements || (n != 0 && elements > kMaxElements / n)) {
      return base::InvalidArgumentError("the element count overflows 63 bits");
    }
    elements *= n;
  }
  const uint64_t ne0 = ne.empty() ? 1 : ne[0];
  if (ne0 % info->block_values != 0) {
    return base::InvalidArgumentError("ne[0] = " + std::to_string(ne0) + " is not a multiple of " +
                                      std::string(info->name) + "'s block of " +
                                      std::to_string(info->block_values) + " values");
  }
  const uint64_t blocks = elements / info->block_values;
  if (blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes) {
    return base::InvalidArgumentError("the byte size overflows 64 bits");
  }
  return blocks * info->block_bytes;
}

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "u8";
    case GgufValueType::kInt8:
      return "i8";
    case GgufValueType::kUint16:
      return "u16";
    case GgufValueType::kInt16:
      return "i16";
    case GgufValueType::kUint32:
      return "u32";
    case GgufValueType::kInt32:
      return "i32";
    case GgufValueType::kFloat32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "u64";
    case GgufValueType::kInt64:
      return "i64";
    case GgufValueType::kFloat64:
      return "f64";
  }
  return "?";
}

// --- Values ---

GgufValue GgufValue::StringArray(std::vector<std::string> strings) {
  GgufArray array;
  array.element_type = GgufValueType::kString;
  array.elements.reserve(strings.size());
  for (std::string& s : strings) array.elements.push_back(String(std::move(s)));
  return Array(std::move(array));
}

GgufValue GgufValue::Int32Array(std::span<const int32_t> values) {
  GgufArray array;
  array.element_type = GgufValueType::kInt32;
  array.elements.reserve(values.size());
  for (int32_t v : values) array.elements.push_back(Int32(v));
  return Array(std::move(array));
}

GgufValue GgufValue::Float32Array(std::span<const float> values) {
  GgufArray array;
  array.element_type = GgufValueType::kFloat32;
  array.elements.reserve(values.size());
  for (float v : values) array.elements.push_back(Float32(v));
  return Array(std::move(array));
}

std::optional<uint64_t> GgufValue::AsUint() const {
  return std::visit(
      [](const auto& v) -> std::optional<uint64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool> || !std::is_integral_v<T>) {
          return std::nullopt;
        } else if constexpr (std::is_signed_v<T>) {
          if (v < 0) return std::nullopt;
          return static_cast<uint64_t>(v);
        } else {
          return static_cast<uint64_t>(v);
        }
      },
      storage);
}

std::optional<double> GgufValue::AsDouble() const {
  if (const float* f = std::get_if<float>(&storage)) return *f;
  if (const double* d = std::get_if<double>(&storage)) return *d;
  return std::nullopt;
}

// --- Writer ---

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  SOVAI_CHECK(alignment >= 8 && alignment <= kMaxGgufAlignment && std::has_single_bit(alignment))
      << "GGUF alignment " << alignment;
}

base::Status GgufWriter::Set(std::string key, GgufValue value) {
  if (!IsValidKey(key)) {
    return base::InvalidArgumentError("invalid GGUF key " + Quoted(key) +
                                      ": use dot-separated segments of [a-z0-9_]");
  }
  if (key == kAlignmentKey) {
    return base::InvalidArgumentError(
        "GGUF key 'general.alignment' is written by GgufWriter from "
        "its constructor argument");
  }
  if (key_index_.contains(key)) {
    return base::InvalidArgumentError("GGUF key '" + key + "' is already set");
  }
  if (metadata_.size() + 2 > kMaxGgufKvPairs) {  // + general.alignment
    return base::InvalidArgumentError("more than " + std::to_string(kMaxGgufKvPairs) +
                                      " GGUF metadata pairs");
  }
  SOVAI_RETURN_IF_ERROR(ValidateValue(value, key, 0));
  key_index_.emplace(key, metadata_.size());
  metadata_.push_back(GgufKv{std::move(key), std::move(value)});
  return base::Status();
}

base::Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<uint64_t> ne,
                                   GgufTensorProducer produce) {
  if (name.empty() || name.size() > kMaxGgufTensorNameBytes) {
    return base::InvalidArgumentError("GGUF tensor name " + Quoted(name) + " must be 1.." +
                                      std::to_string(kMaxGgufTensorNameBytes) + " bytes");
  }
  if (tensor_index_.contains(name)) {
    return base::InvalidArgumentError("GGUF tensor '" + name + "' is already added");
  }
  if (tensors_.size() >= kMaxGgufTensors) {
    return base::InvalidArgumentError("more than " + std::to_string(kMaxGgufTensors) +
                                      " GGUF tensors");
  }
  if (ne.empty()) return base::InvalidArgumentError("GGUF tensor '" + name + "' has no dimensions");
  base::Result<uint64_t> size = GgmlTensorBytes(static_cast<uint32_t>(type), ne);
  if (!size.ok()) return size.status().WithContext("GGUF tensor '" + name + "'");
  if (data_bytes_ > std::numeric_limits<uint64_t>::max() - *size - alignment_) {
    return base::InvalidArgumentError("GGUF data section overflows 64 bits at tensor '" + name +
                                      "'");
  }
  PendingTensor tensor{std::move(name), type,        std::move(ne),
                       *size,           data_bytes_, std::move(produce)};
  data_bytes_ = AlignUp(data_bytes_ + *size, alignment_);
  tensor_index_.emplace(tensor.name, tensors_.size());
  tensors_.push_back(std::move(tensor));
  return base::Status();
}

base::Status GgufWriter::AddTensorBytes(std::string name, GgmlType type, std::vector<uint64_t> ne,
                                        std::span<const uint8_t> bytes) {
  base::Result<uint64_t> size = GgmlTensorBytes(static_cast<uint32_t>(type), ne);
  if (size.ok() && *size != bytes.size()) {
    return base::InvalidArgumentError(
        "GGUF tensor '" + name + "': " + std::to_string(bytes.size()) + " bytes given, its shape " +
        "and type need " + std::to_string(*size));
  }
  return AddTensor(std::move(name), type, std::move(ne), [bytes](const GgufChunkSink& sink) {
    return sink(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  });
}

std::string GgufWriter::SerializeHeader() const {
  std::string out;
  out.append(kMagic, 4);
  AppendScalar<uint32_t>(out, kGgufVersion);
  AppendScalar<uint64_t>(out, tensors_.size());
  AppendScalar<uint64_t>(out, metadata_.size() + 1);  // + general.alignment
  for (const GgufKv& kv : metadata_) {
    AppendString(out, kv.key);
    AppendScalar<uint32_t>(out, static_cast<uint32_t>(kv.value.type()));
    AppendValue(out, kv.value);
  }
  AppendString(out, kAlignmentKey);
  AppendScalar<uint32_t>(out, static_cast<uint32_t>(GgufValueType::kUint32));
  AppendScalar<uint32_t>(out, alignment_);
  for (const PendingTensor& t : tensors_) {
    AppendString(out, t.name);
    AppendScalar<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t n : t.ne) AppendScalar<uint64_t>(out, n);
    AppendScalar<uint32_t>(out, static_cast<uint32_t>(t.type));
    AppendScalar<uint64_t>(out, t.offset);
  }
  out.resize(AlignUp(out.size(), alignment_), '\0');
  return out;
}

uint64_t GgufWriter::FileBytes() const { return SerializeHeader().size() + data_bytes_; }

base::Status GgufWriter::Write(base::Env& env, const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(std::unique_ptr<base::AtomicFileWriter> file,
                         base::AtomicFileWriter::Open(env, path));
  SOVAI_RETURN_IF_ERROR(file->Append(SerializeHeader()));
  const std::string padding(alignment_, '\0');
  for (PendingTensor& t : tensors_) {
    uint64_t written = 0;
    const GgufChunkSink sink = [&](std::string_view bytes) -> base::Status {
      if (bytes.size() > t.size_bytes - written) {
        return base::InternalError("GGUF tensor '" + t.name +
                                   "': its producer emitted more than "
                                   "the " +
                                   std::to_string(t.size_bytes) + " bytes of its shape");
      }
      written += bytes.size();
      return file->Append(bytes);
    };
    base::Status produced = t.produce(sink);
    if (!produced.ok()) return produced.WithContext("writing GGUF tensor '" + t.name + "'");
    if (written != t.size_bytes) {
      return base::InternalError("GGUF tensor '" + t.name + "': its producer emitted " +
                                 std::to_string(written) + " of its " +
                                 std::to_string(t.size_bytes) + " bytes");
    }
    const uint64_t pad = AlignUp(t.size_bytes, alignment_) - t.size_bytes;
    if (pad > 0) SOVAI_RETURN_IF_ERROR(file->Append(std::string_view(padding.data(), pad)));
    // The producer may hold references (mapped inputs, buffers) that are no longer needed.
    t.produce = nullptr;
  }
  return file->Commit();
}

// --- Reader ---

struct GgufReader::Mapping {
  void* address = nullptr;
  size_t length = 0;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, length);
  }
};

GgufReader::~GgufReader() = default;

base::Result<std::unique_ptr<GgufReader>> GgufReader::Open(const std::string& path,
                                                           const GgufLimits& limits) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return base::ErrnoToStatus(errno, "open '" + path + "'");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return base::ErrnoToStatus(errno, "stat '" + path + "'");
  if (!S_ISREG(st.st_mode)) {
    return base::InvalidArgumentError("'" + path + "' is not a regular file");
  }
  std::unique_ptr<GgufReader> reader(new GgufReader());
  reader->mapping_ = std::make_unique<Mapping>();
  const auto length = static_cast<size_t>(st.st_size);
  if (length > 0) {
    void* address = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (address == MAP_FAILED) return base::ErrnoToStatus(errno, "mmap '" + path + "'");
    reader->mapping_->address = address;
    reader->mapping_->length = length;
    reader->bytes_ = std::span<const uint8_t>(static_cast<const uint8_t*>(address), length);
  }
  base::Status parsed = reader->ParseAll(limits);
  if (!parsed.ok()) return parsed.WithContext("'" + path + "'");
  return reader;
}

base::Result<std::unique_ptr<GgufReader>> GgufReader::Parse(std::span<const uint8_t> bytes,
                                                            const GgufLimits& limits) {
  std::unique_ptr<GgufReader> reader(new GgufReader());
  reader->bytes_ = bytes;
  SOVAI_RETURN_IF_ERROR(reader->ParseAll(limits));
  return reader;
}

base::Status GgufReader::ParseAll(const GgufLimits& limits) {
  Cursor cursor(bytes_);
  if (bytes_.size() < 4 || std::memcmp(bytes_.data(), kMagic, 4) != 0) {
    return base::InvalidArgumentError(
        "not a GGUF file: it does not start with the magic bytes 'GGUF'");
  }
  if (bytes_.size() < kHeaderBytes) {
    return base::DataLossError("GGUF truncated: the header needs " + std::to_string(kHeaderBytes) +
                               " bytes, the file has " + std::to_string(bytes_.size()));
  }
  SOVAI_RETURN_IF_ERROR(cursor.Read<uint32_t>("the magic").status());
  SOVAI_ASSIGN_OR_RETURN(version_, cursor.Read<uint32_t>("the version"));
  if (version_ == 1) {
    return base::UnimplementedError(
        "GGUF version 1 (32-bit counts and lengths) is not supported; convert the model again "
        "with a current llama.cpp");
  }
  if (version_ != 2 && version_ != 3) {
    // A big-endian file (allowed since version 3) shows its version byte-swapped.
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped == 2 || swapped == 3) {
      return base::UnimplementedError("big-endian GGUF files are not supported");
    }
    return base::UnimplementedError("GGUF version " + std::to_string(version_) +
                                    " is unknown (versions 2 and 3 are supported)");
  }
  SOVAI_ASSIGN_OR_RETURN(uint64_t tensor_count, cursor.Read<uint64_t>("the tensor count"));
  SOVAI_ASSIGN_OR_RETURN(uint64_t kv_count, cursor.Read<uint64_t>("the metadata count"));
  if (tensor_count > limits.max_tensors) {
    return base::ResourceExhaustedError("GGUF header at byte 8: " + std::to_string(tensor_count) +
                                        " tensors exceed the limit of " +
                                        std::to_string(limits.max_tensors) + " (max_tensors)");
  }
  if (kv_count > limits.max_kv_pairs) {
    return base::ResourceExhaustedError("GGUF header at byte 16: " + std::to_string(kv_count) +
                                        " metadata pairs exceed the limit of " +
                                        std::to_string(limits.max_kv_pairs) + " (max_kv_pairs)");
  }

  // Metadata.
  ValueParser values{cursor, limits};
  metadata_.reserve(std::min<uint64_t>(kv_count, cursor.remaining() / (8 + 4)));
  for (uint64_t i = 0; i < kv_count; ++i) {
    const uint64_t at = cursor.offset();
    const std::string what_key = "metadata key #" + std::to_string(i);
    SOVAI_ASSIGN_OR_RETURN(std::string key,
                           cursor.ReadString(what_key, kMaxGgufKeyBytes, "kMaxGgufKeyBytes"));
    if (key.empty())
      return base::DataLossError("GGUF: " + what_key + " at byte " + std::to_string(at) +
                                 " is empty");
    for (char c : key) {
      if (c <= 0x20 || c >= 0x7f) {
        return base::DataLossError("GGUF: " + what_key + " at byte " + std::to_string(at) + " (" +
                                   Quoted(key) + ") is not printable ASCII");
      }
    }
    if (key_index_.contains(key)) {
      return base::DataLossError("GGUF: metadata key '" + key + "' at byte " + std::to_string(at) +
                                 " appears twice");
    }
    const std::string what = "metadata key '" + key + "'";
    const uint64_t type_at = cursor.offset();
    SOVAI_ASSIGN_OR_RETURN(uint32_t type, cursor.Read<uint32_t>(what));
    if (!IsKnownValueType(type)) {
      return base::DataLossError("GGUF: " + what + " at byte " + std::to_string(type_at) +
                                 ": unknown value type " + std::to_string(type));
    }
    SOVAI_ASSIGN_OR_RETURN(GgufValue value,
                           values.Parse(static_cast<GgufValueType>(type), what, 0));
    key_index_.emplace(key, metadata_.size());
    metadata_.push_back(GgufKv{std::move(key), std::move(value)});
  }

  SOVAI_RETURN_IF_ERROR(ApplyAlignment());

  // Tensor directory.
  tensors_.reserve(std::min<uint64_t>(tensor_count, cursor.remaining() / (8 + 4 + 4 + 8)));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo info;
    info.info_offset = cursor.offset();
    const std::string at = " at byte " + std::to_string(info.info_offset);
    SOVAI_ASSIGN_OR_RETURN(info.name,
                           cursor.ReadString("tensor #" + std::to_string(i) + "'s name",
                                             kMaxGgufTensorNameBytes, "kMaxGgufTensorNameBytes"));
    if (info.name.empty()) {
      return base::DataLossError("GGUF: tensor #" + std::to_string(i) + at + " has an empty name");
    }
    const std::string what = "tensor " + Quoted(info.name);
    if (tensor_index_.contains(info.name)) {
      return base::DataLossError("GGUF: " + what + at + " appears twice");
    }
    SOVAI_ASSIGN_OR_RETURN(uint32_t n_dims, cursor.Read<uint32_t>(what));
    if (n_dims > kMaxGgufDims) {
      return base::DataLossError("GGUF: " + what + at + " has " + std::to_string(n_dims) +
                                 " dimensions; ggml allows at most " +
                                 std::to_string(kMaxGgufDims));
    }
    info.ne.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      SOVAI_ASSIGN_OR_RETURN(info.ne[d], cursor.Read<uint64_t>(what));
    }
    SOVAI_ASSIGN_OR_RETURN(info.type_id, cursor.Read<uint32_t>(what));
    if (!GetGgmlTypeInfo(info.type_id)) {
      return base::UnimplementedError("GGUF: " + what + at + " has ggml type " +
                                      std::to_string(info.type_id) +
                                      ", which this reader does not know");
    }
    SOVAI_ASSIGN_OR_RETURN(info.offset, cursor.Read<uint64_t>(what));
    base::Result<uint64_t> size = GgmlTensorBytes(info.type_id, info.ne);
    if (!size.ok()) {
      return base::DataLossError("GGUF: " + what + at + ": " + size.status().message());
    }
    info.size_bytes = *size;
    if (info.offset % alignment_ != 0) {
      return base::DataLossError("GGUF: " + what + at + ": data offset " +
                                 std::to_string(info.offset) + " is not a multiple of the " +
                                 "alignment " + std::to_string(alignment_));
    }
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  return PlaceTensorData(cursor.offset());
}

base::Status GgufReader::ApplyAlignment() {
  if (const GgufValue* alignment = Find(kAlignmentKey)) {
    const uint32_t* value = std::get_if<uint32_t>(&alignment->storage);
    if (value == nullptr) {
      return base::DataLossError("GGUF: general.alignment must be a u32, not " +
                                 std::string(GgufValueTypeName(alignment->type())));
    }
    if (*value == 0 || *value > kMaxGgufAlignment || !std::has_single_bit(*value)) {
      return base::DataLossError("GGUF: general.alignment " + std::to_string(*value) +
                                 " is not a power of two up to " +
                                 std::to_string(kMaxGgufAlignment));
    }
    alignment_ = *value;
  }
  return base::Status();
}

base::Status GgufReader::PlaceTensorData(uint64_t directory_end) {
  // Data section: it starts at the aligned end of the directory. A file without tensors may end
  // before that padding.
  data_offset_ = AlignUp(directory_end, alignment_);
  if (tensors_.empty()) return base::Status();
  if (data_offset_ > bytes_.size()) {
    return base::DataLossError("GGUF truncated: the data section would start at byte " +
                               std::to_string(data_offset_) + " but the file has " +
                               std::to_string(bytes_.size()) + " bytes");
  }
  const uint64_t data_bytes = bytes_.size() - data_offset_;
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (GgufTensorInfo& info : tensors_) {
    if (info.offset > data_bytes || info.size_bytes > data_bytes - info.offset) {
      return base::DataLossError("GGUF: tensor " + Quoted(info.name) +
                                 " (directory entry at byte " + std::to_string(info.info_offset) +
                                 "): its " + std::to_string(info.size_bytes) +
                                 " bytes at data offset " + std::to_string(info.offset) +
                                 " extend past the end of the file (the data section has " +
                                 std::to_string(data_bytes) + " bytes)");
    }
    info.file_offset = data_offset_ + info.offset;
    if (info.size_bytes > 0) by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& next = *by_offset[i];
    if (next.offset < prev.offset + prev.size_bytes) {
      return base::DataLossError(
          "GGUF: tensors " + Quoted(prev.name) + " (data offset " + std::to_string(prev.offset) +
          ", " + std::to_string(prev.size_bytes) + " bytes) and " + Quoted(next.name) +
          " (data offset " + std::to_string(next.offset) + ") overlap");
    }
  }
  return base::Status();
}

const GgufValue* GgufReader::Find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

base::Result<std::string> GgufReader::GetString(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr)
    return base::NotFoundError("GGUF key '" + std::string(key) + "' is missing");
  if (const std::string* s = value->AsString()) return *s;
  return base::InvalidArgumentError("GGUF key '" + std::string(key) + "' is " +
                                    std::string(GgufValueTypeName(value->type())) +
                                    ", not a string");
}

base::Result<uint64_t> GgufReader::GetUint(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr)
    return base::NotFoundError("GGUF key '" + std::string(key) + "' is missing");
  if (std::optional<uint64_t> v = value->AsUint()) return *v;
  return base::InvalidArgumentError("GGUF key '" + std::string(key) + "' is " +
                                    std::string(GgufValueTypeName(value->type())) +
                                    ", not a non-negative integer");
}

base::Result<double> GgufReader::GetFloat(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr)
    return base::NotFoundError("GGUF key '" + std::string(key) + "' is missing");
  if (std::optional<double> v = value->AsDouble()) return *v;
  return base::InvalidArgumentError("GGUF key '" + std::string(key) + "' is " +
                                    std::string(GgufValueTypeName(value->type())) +
                                    ", not a float");
}

const GgufTensorInfo* GgufReader::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace sovai::model
