// GGUF (ggml's model file format, version 3): a writer for the files we export to llama.cpp and a
// strict reader of their header, metadata and tensor directory. docs/formats/gguf.md describes
// the layout, what we write and every limit below.
//
// Layout (all integers little-endian):
//   "GGUF" | u32 version | u64 tensor_count | u64 metadata_kv_count
//   metadata_kv_count x { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   zero padding to `general.alignment` (default 32)
//   data section: each tensor at data_start + offset (a multiple of the alignment)
// A string is a u64 byte length and the bytes (no NUL). An array is u32 element type, u64 count,
// then the elements. ne is ggml's order: ne[0] is the innermost (contiguous) dimension, so it is
// the REVERSE of a PyTorch shape: a Linear weight of torch shape [out, in] has ne = {in, out}.
//
// GgufWriter collects metadata and tensor descriptions, then Write() streams the file through
// base::AtomicFileWriter: header first, then each tensor's bytes as its producer emits them, so a
// model of many GB is never held in memory twice, and a crash or error leaves either the old file
// or none, never a half-written one.
//
// GgufReader parses a file (memory-mapped; the tensor data is never copied) or a byte span, and
// believes nothing before checking it: every count and length against GgufLimits, every size
// computation for overflow, each tensor's byte size from its ggml type and shape, each offset
// for alignment and for lying within the data section, and tensors for not overlapping. Errors
// name the key or tensor and the byte offset: DataLoss for a corrupt or truncated file,
// ResourceExhausted for a limit (naming it), Unimplemented for GGUF version 1, big-endian files
// and unknown ggml types, InvalidArgument for a file that is not GGUF at all.
//
// Thread-safety: a GgufWriter is used from one thread. A GgufReader is immutable after Open /
// Parse: its const methods may be called from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace sovai::model {

// --- Limits of the reader (and of what the writer produces). ---

// Tensors in one file (a 405B llama has ~1,100; MoE models with split experts a few thousand).
inline constexpr uint64_t kMaxGgufTensors = 65'536;
// Metadata key-value pairs (llama.cpp files carry 20-60).
inline constexpr uint64_t kMaxGgufKvPairs = 4'096;
// A metadata key (the spec's own limit, 2^16 - 1).
inline constexpr uint64_t kMaxGgufKeyBytes = 65'535;
// A tensor name: ggml's GGML_MAX_NAME is 64 bytes including the terminating NUL.
inline constexpr uint64_t kMaxGgufTensorNameBytes = 63;
// One string value (chat templates are a few KiB; an embedded tokenizer.json several MiB).
inline constexpr uint64_t kMaxGgufStringBytes = 16ull << 20;
// Elements of one array (vocabularies reach 256K tokens and merges about as many).
inline constexpr uint64_t kMaxGgufArrayElements = 4ull << 20;
// Array elements of all metadata together: bounds the memory the parsed metadata takes.
inline constexpr uint64_t kMaxGgufTotalArrayElements = 8ull << 20;
// Arrays inside arrays (the spec allows nesting; no known file nests at all).
inline constexpr int kMaxGgufArrayDepth = 4;
// Dimensions of a tensor (ggml's GGML_MAX_DIMS).
inline constexpr uint32_t kMaxGgufDims = 4;
// general.alignment: a power of two up to this.
inline constexpr uint32_t kMaxGgufAlignment = 1u << 16;
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufVersion = 3;

struct GgufLimits {
  uint64_t max_tensors = kMaxGgufTensors;
  uint64_t max_kv_pairs = kMaxGgufKvPairs;
  uint64_t max_string_bytes = kMaxGgufStringBytes;
  uint64_t max_array_elements = kMaxGgufArrayElements;
  uint64_t max_total_array_elements = kMaxGgufTotalArrayElements;
  int max_array_depth = kMaxGgufArrayDepth;
};

// --- ggml tensor types ---

// ggml_type ids as stored in a tensor info. Only the ones we write are named; the reader knows
// the sizes of every type listed in ggml's docs/gguf.md (GgmlTypeInfo) so that it can check the
// directory of any llama.cpp file.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ8_0 = 8,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  std::string_view name;  // "F32", "Q8_0", "Q4_K", ... (ggml's spelling, upper case)
  uint32_t block_values;  // values per block (1 for plain types)
  uint32_t block_bytes;   // bytes per block
};

// The block layout of ggml type `type_id`; nullopt for an unknown or removed type.
std::optional<GgmlTypeInfo> GetGgmlTypeInfo(uint32_t type_id);
std::string_view GgmlTypeName(GgmlType type);

// Bytes of a tensor of `type` and shape `ne` (ggml order). Errors (InvalidArgument): unknown
// type, more than kMaxGgufDims dimensions, ne[0] not a multiple of the type's block size, or a
// size that overflows 64 bits.
base::Result<uint64_t> GgmlTensorBytes(uint32_t type_id, std::span<const uint64_t> ne);

// --- Metadata values ---

// gguf_metadata_value_type. The numbering is the file's; do not reorder.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
// "u8", "i8", ..., "f32", "bool", "string", "array", "u64", "i64", "f64".
std::string_view GgufValueTypeName(GgufValueType type);

struct GgufValue;

// An array: every element has `element_type` (kArray for nested arrays).
struct GgufArray {
  GgufValueType element_type = GgufValueType::kUint8;
  std::vector<GgufValue> elements;
};

// One metadata value. The variant's alternative index equals the GgufValueType number.
struct GgufValue {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;
  Storage storage;

  GgufValueType type() const { return static_cast<GgufValueType>(storage.index()); }

  static GgufValue Uint8(uint8_t v) { return {Storage(std::in_place_index<0>, v)}; }
  static GgufValue Int8(int8_t v) { return {Storage(std::in_place_index<1>, v)}; }
  static GgufValue Uint16(uint16_t v) { return {Storage(std::in_place_index<2>, v)}; }
  static GgufValue Int16(int16_t v) { return {Storage(std::in_place_index<3>, v)}; }
  static GgufValue Uint32(uint32_t v) { return {Storage(std::in_place_index<4>, v)}; }
  static GgufValue Int32(int32_t v) { return {Storage(std::in_place_index<5>, v)}; }
  static GgufValue Float32(float v) { return {Storage(std::in_place_index<6>, v)}; }
  static GgufValue Bool(bool v) { return {Storage(std::in_place_index<7>, v)}; }
  static GgufValue String(std::string v) { return {Storage(std::in_place_index<8>, std::move(v))}; }
  static GgufValue Array(GgufArray v) { return {Storage(std::in_place_index<9>, std::move(v))}; }
  static GgufValue Uint64(uint64_t v) { return {Storage(std::in_place_index<10>, v)}; }
  static GgufValue Int64(int64_t v) { return {Storage(std::in_place_index<11>, v)}; }
  static GgufValue Float64(double v) { return {Storage(std::in_place_index<12>, v)}; }
  static GgufValue StringArray(std::vector<std::string> strings);
  static GgufValue Int32Array(std::span<const int32_t> values);
  static GgufValue Float32Array(std::span<const float> values);

  // Typed access; nullptr when the value has another type.
  const std::string* AsString() const { return std::get_if<std::string>(&storage); }
  const GgufArray* AsArray() const { return std::get_if<GgufArray>(&storage); }
  // Any unsigned or non-negative signed integer type, widened; nullopt otherwise.
  std::optional<uint64_t> AsUint() const;
  // f32 or f64, widened; nullopt otherwise.
  std::optional<double> AsDouble() const;
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

// --- Writer ---

// Receives a tensor's bytes in order; a producer may call it any number of times.
using GgufChunkSink = std::function<base::Status(std::string_view bytes)>;
// Emits exactly the tensor's byte size (GgmlTensorBytes) through the sink, or fails.
using GgufTensorProducer = std::function<base::Status(const GgufChunkSink& sink)>;

class GgufWriter {
 public:
  // `alignment`: a power of two, 8..kMaxGgufAlignment (checked: a bad one is a bug). It is written
  // as general.alignment (u32).
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  // Adds a metadata pair; pairs are written in the order added. Errors (InvalidArgument): a key
  // that is empty, longer than kMaxGgufKeyBytes, not of the form `segment(.segment)*` with
  // segments of [a-z0-9_], already set, or general.alignment (the writer owns it); a string
  // longer than kMaxGgufStringBytes; an array longer than kMaxGgufArrayElements, with an element
  // of another type than its element_type, or nested deeper than kMaxGgufArrayDepth.
  base::Status Set(std::string key, GgufValue value);
  base::Status SetUint32(std::string key, uint32_t v) {
    return Set(std::move(key), GgufValue::Uint32(v));
  }
  base::Status SetFloat32(std::string key, float v) {
    return Set(std::move(key), GgufValue::Float32(v));
  }
  base::Status SetBool(std::string key, bool v) { return Set(std::move(key), GgufValue::Bool(v)); }
  base::Status SetString(std::string key, std::string v) {
    return Set(std::move(key), GgufValue::String(std::move(v)));
  }

  // Adds a tensor; tensors are laid out in the order added, each at the next aligned offset.
  // `ne` is in ggml order (innermost first: the reverse of a PyTorch shape), 1..4 dimensions.
  // `produce` is called once, during Write. Errors (InvalidArgument): a name that is empty,
  // longer than kMaxGgufTensorNameBytes or already added; a shape GgmlTensorBytes rejects; more
  // than kMaxGgufTensors tensors.
  base::Status AddTensor(std::string name, GgmlType type, std::vector<uint64_t> ne,
                         GgufTensorProducer produce);
  // The same for bytes already in memory (or mapped): they must stay valid until Write returns,
  // and their size must be the tensor's byte size.
  base::Status AddTensorBytes(std::string name, GgmlType type, std::vector<uint64_t> ne,
                              std::span<const uint8_t> bytes);

  // Writes the file atomically (see the header comment). Errors: those of the Env; a producer's
  // error (with the tensor's name); Internal when a producer emits more or fewer bytes than its
  // tensor's size. On any error `path` is left as it was.
  base::Status Write(base::Env& env, const std::string& path);

  // Bytes of the file Write would produce (header, metadata, tensor directory, data, padding).
  uint64_t FileBytes() const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    uint64_t size_bytes = 0;
    uint64_t offset = 0;  // within the data section
    GgufTensorProducer produce;
  };
  std::string SerializeHeader() const;

  uint32_t alignment_;
  std::vector<GgufKv> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;
  std::vector<PendingTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  uint64_t data_bytes_ = 0;  // data section so far, padded
};

// --- Reader ---

struct GgufTensorInfo {
  std::string name;
  uint32_t type_id = 0;      // a ggml_type known to GetGgmlTypeInfo
  std::vector<uint64_t> ne;  // ggml order, 1..4 dimensions
  uint64_t offset = 0;       // within the data section, as stored
  uint64_t file_offset = 0;  // data_offset() + offset
  uint64_t size_bytes = 0;   // GgmlTensorBytes(type_id, ne)
  uint64_t info_offset = 0;  // where its entry in the tensor directory starts

  // The PyTorch-order shape (ne reversed).
  std::vector<uint64_t> TorchShape() const { return {ne.rbegin(), ne.rend()}; }
};

class GgufReader {
 public:
  // Maps `path` read-only and parses it. Errors: those of open/mmap (with the path), or of Parse
  // (prefixed with the path).
  static base::Result<std::unique_ptr<GgufReader>> Open(const std::string& path,
                                                        const GgufLimits& limits = {});
  // Parses bytes owned by the caller, which must outlive the reader.
  static base::Result<std::unique_ptr<GgufReader>> Parse(std::span<const uint8_t> bytes,
                                                         const GgufLimits& limits = {});
  ~GgufReader();
  GgufReader(const GgufReader&) = delete;
  GgufReader& operator=(const GgufReader&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // Where the data section starts (aligned end of the tensor directory).
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_bytes() const { return bytes_.size(); }

  // Metadata in file order; keys are unique.
  const std::vector<GgufKv>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;
  // Typed lookups. Errors: NotFound for a missing key, InvalidArgument for another type (both
  // naming the key). GetUint accepts any integer type holding a non-negative value.
  base::Result<std::string> GetString(std::string_view key) const;
  base::Result<uint64_t> GetUint(std::string_view key) const;
  base::Result<double> GetFloat(std::string_view key) const;

  // Tensor directory in file order; names are unique.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The tensor's bytes inside the file (or span): no copy.
  std::span<const uint8_t> TensorData(const GgufTensorInfo& info) const {
    return bytes_.subspan(info.file_offset, info.size_bytes);
  }

 private:
  struct Mapping;  // an mmap'ed file (Open) or nothing (Parse)
  GgufReader() = default;
  base::Status ParseAll(const GgufLimits& limits);
  // Steps of ParseAll after the metadata and after the tensor directory (which ends at byte
  // `directory_end`).
  base::Status ApplyAlignment();
  base::Status PlaceTensorData(uint64_t directory_end);

  std::unique_ptr<Mapping> mapping_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace sovai::model
