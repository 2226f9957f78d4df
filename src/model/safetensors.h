// safetensors: reading (memory-mapped) and writing the tensor files of Hugging Face checkpoints,
// single files and sharded ones (model.safetensors.index.json). Format and error behaviour:
// docs/formats/safetensors.md; limits: model/limits.h.
//
// A file is an 8-byte little-endian header length N, N bytes of a JSON object
//   {"__metadata__": {str: str}, "<tensor>": {"dtype": "BF16", "shape": [..], "data_offsets": [b,
//   e]}}
// and the data buffer, in which each tensor's bytes lie at [b, e) (C order, little endian).
//
// Reading follows the reference library (huggingface/safetensors) and is stricter where it is
// lenient: the header must start with '{' and be valid JSON (UTF-8; trailing spaces allowed); the
// tensors must tile the data buffer exactly, from 0 to its end, in data_offsets order (no gap, no
// overlap, no trailing bytes); each tensor's byte size must equal its shape times its dtype's
// size; and duplicate keys (tensor names, metadata keys, fields of an entry) are refused rather
// than resolved silently. Unknown fields of a tensor entry are ignored, as the reference does.
// Every declared size is checked before it is used, so malformed input is an error, never a crash
// or an out-of-bounds read.
//
// Errors name the file, and the tensor or the byte offset where one applies: DataLoss for a
// malformed or truncated file, ResourceExhausted for a limit of limits.h, NotFound for a tensor
// that is not there, Unimplemented when a tensor of a dtype the engine does not compute in
// (anything but F32, F16, BF16) is asked for as a computable tensor; errors of the OS (open,
// mmap) as base::ErrnoToStatus makes them.
//
// Memory: SafetensorsFile::Open maps the file read-only (a 16 GB checkpoint is never copied) and
// the tensor views point into the mapping for as long as the SafetensorsFile lives. The file must
// not be truncated or rewritten in place while it is open (the OS would fault on the lost pages);
// replacing it by rename, as every writer here does, is safe. Tensor bytes may be unaligned (a
// header length that is not a multiple of 8): read them with memcpy or ConvertElements.
//
// Writing (SafetensorsWriter) lays out files as the reference writer does: tensors sorted by
// dtype alignment (largest first) then by name, the header JSON padded with spaces to a multiple
// of 8 bytes, "__metadata__" first. Files are written through base::AtomicFileWriter, so a crash
// never leaves a partial file visible.
//
// Thread-safety: a SafetensorsFile / SafetensorsSet is immutable after opening; its const methods
// may be called from any number of threads. A SafetensorsWriter is used from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "model/limits.h"
#include "tensor/dtype.h"

namespace sovai::model {

// Element types of the format, in the reference library's order (increasing alignment), which is
// also the writer's sort order.
enum class SafetensorsDType : uint8_t {
  kBool,
  kF4,      // 4 bits
  kF6E2M3,  // 6 bits
  kF6E3M2,  // 6 bits
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
};

// The spelling in files: "BOOL", "F4", "F6_E2M3", ..., "BF16", "F32", "U64".
std::string_view SafetensorsDTypeName(SafetensorsDType dtype);
// Parses that spelling (case-sensitive, as the reference); nullopt for anything else.
std::optional<SafetensorsDType> ParseSafetensorsDType(std::string_view name);
// Bits per element (4 and 6 for the sub-byte float types).
size_t SafetensorsDTypeBits(SafetensorsDType dtype);
// The engine's element type for F32, F16 and BF16; nullopt for the others.
std::optional<tensor::DType> ComputableDType(SafetensorsDType dtype);
SafetensorsDType ToSafetensorsDType(tensor::DType dtype);
// Elements of a shape (1 for a scalar, shape []); nullopt when the product overflows 64 bits.
std::optional<uint64_t> ShapeElements(std::span<const uint64_t> shape);
// Bytes of a tensor; nullopt when the size overflows 64 bits or, for a sub-byte dtype, is not a
// whole number of bytes (the reference refuses those too).
std::optional<uint64_t> TensorByteSize(SafetensorsDType dtype, std::span<const uint64_t> shape);
// "[2, 3]".
std::string ShapeToString(std::span<const uint64_t> shape);

// One tensor of an open file: what its header entry says, and a view of its bytes.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<uint64_t> shape;
  // [data_begin, data_end) within the data buffer (which starts at file offset 8 + N).
  uint64_t data_begin = 0;
  uint64_t data_end = 0;
  // Exactly data_end - data_begin bytes, inside the file's mapping (possibly unaligned).
  std::span<const std::byte> bytes;

  std::string_view dtype_name() const { return SafetensorsDTypeName(dtype); }
  // The engine's type for F32/F16/BF16; nullopt for the others (see RequireComputable).
  std::optional<tensor::DType> computable_dtype() const { return ComputableDType(dtype); }
  // The product of the shape (validated not to overflow when the file was opened).
  uint64_t num_elements() const;
};

// What ParseSafetensors finds in a file image.
struct SafetensorsContents {
  uint64_t header_bytes = 0;  // N, the JSON header's length
  // In data_offsets order (ties, i.e. empty tensors at one offset, by name).
  std::vector<SafetensorsTensor> tensors;
  // "__metadata__"; empty when absent (or null).
  std::map<std::string, std::string> metadata;
};

// What a reader accepts; the defaults are limits.h's. Lower them to bound the work on input from
// a smaller trust domain (and in tests).
struct SafetensorsLimits {
  uint64_t max_header_bytes = kMaxSafetensorsHeaderBytes;
  size_t max_tensors = kMaxSafetensorsTensors;
  size_t max_rank = kMaxTensorRank;
  size_t max_name_bytes = kMaxTensorNameBytes;
  size_t max_metadata_entries = kMaxSafetensorsMetadataEntries;
  int max_depth = kMaxSafetensorsHeaderDepth;
};

// Parses and validates a complete file image held in memory (the mapped reader and the fuzz
// target both go through this). The tensor views point into `image`. `file` names the file in
// error messages.
base::Result<SafetensorsContents> ParseSafetensors(std::span<const std::byte> image,
                                                   std::string_view file,
                                                   const SafetensorsLimits& limits = {});

// Checks that `tensor` is of a type the engine computes in and returns that type. Error:
// Unimplemented naming the tensor, its dtype and `file`.
base::Result<tensor::DType> RequireComputable(const SafetensorsTensor& tensor,
                                              std::string_view file);

// An open, validated safetensors file.
class SafetensorsFile {
 public:
  // Maps `path` read-only and validates it. Errors: those of open/fstat/mmap (NotFound...),
  // InvalidArgument when it is not a regular file, and the parse errors above.
  static base::Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path,
                                                             const SafetensorsLimits& limits = {});
  // The same over a copy held in memory; `name` stands for the path in messages.
  static base::Result<std::unique_ptr<SafetensorsFile>> FromBytes(
      std::string bytes, std::string name, const SafetensorsLimits& limits = {});
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size_bytes() const { return image_.size(); }
  uint64_t header_bytes() const { return contents_.header_bytes; }
  // In data order.
  const std::vector<SafetensorsTensor>& tensors() const { return contents_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return contents_.metadata; }

  // nullptr when there is no such tensor.
  const SafetensorsTensor* Find(std::string_view name) const;
  // Error: NotFound naming the tensor and the file.
  base::Result<const SafetensorsTensor*> Get(std::string_view name) const;
  // The tensor's elements converted to f32. Errors: those of Get and RequireComputable.
  base::Result<std::vector<float>> ReadF32(std::string_view name) const;

 private:
  struct Mapping;  // munmaps on destruction
  SafetensorsFile(std::string path, std::unique_ptr<Mapping> mapping, std::string owned);
  base::Status Init(const SafetensorsLimits& limits);

  std::string path_;
  std::unique_ptr<Mapping> mapping_;  // set for Open
  std::string owned_;                 // set for FromBytes
  std::span<const std::byte> image_;
  SafetensorsContents contents_;
  std::vector<uint32_t> by_name_;  // indices into contents_.tensors, sorted by name
};

// The tensors of a checkpoint: one file, or the shards named by a model.safetensors.index.json.
class SafetensorsSet {
 public:
  struct Entry {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
  };

  // One file (model.safetensors, adapter_model.safetensors).
  static base::Result<std::unique_ptr<SafetensorsSet>> OpenFile(const std::string& path);
  // An index {"metadata": {...}, "weight_map": {"<tensor>": "<shard file>"}} and every shard it
  // names, which must lie in the index's directory (a shard name with a '/' is refused). Checks
  // that each tensor of weight_map is in the shard it names and that each tensor of each shard is
  // in weight_map with that shard. Errors: DataLoss naming the tensor, the shard and the index;
  // those of opening each shard. The index's "total_size" is kept but not checked (hub
  // checkpoints disagree on what it counts).
  static base::Result<std::unique_ptr<SafetensorsSet>> OpenIndex(base::Env& env,
                                                                 const std::string& index_path);

  // The file or index path the set was opened from (for messages).
  const std::string& source() const { return source_; }
  bool sharded() const { return sharded_; }
  // Shards in index order of their names (one file when not sharded).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // Every tensor, sorted by name.
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* Find(std::string_view name) const;
  // Error: NotFound naming the tensor and source().
  base::Result<Entry> Get(std::string_view name) const;
  // The index's "metadata" object; an empty object for a single file.
  const nlohmann::json& index_metadata() const { return index_metadata_; }
  // The sum of all tensors' byte sizes (what transformers writes as "total_size").
  uint64_t total_tensor_bytes() const;

 private:
  SafetensorsSet() = default;
  void IndexEntries();

  std::string source_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<Entry> entries_;
  nlohmann::json index_metadata_ = nlohmann::json::object();
};

// --- Writing ---

// Where a tensor's bytes go while a file is written.
class TensorSink {
 public:
  virtual ~TensorSink() = default;
  virtual base::Status Write(std::span<const std::byte> bytes) = 0;
};

// Produces a tensor's bytes in order, in pieces of any size. It must write exactly the tensor's
// byte size; the writer fails with InvalidArgument naming the tensor otherwise. Its own errors are
// passed through (and abandon the file).
using TensorFill = std::function<base::Status(TensorSink& sink)>;

// A tensor to write: its bytes as a borrowed span, or a callback that produces them while the
// file is written (so that a 16 GB merged model never has to be held in memory).
struct TensorToWrite {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;  // used when `fill` is empty; must outlive the write
  TensorFill fill;
};

// A view of a stored tensor as a TensorToWrite (to copy tensors between files). The view borrows
// the file's mapping.
TensorToWrite ToWrite(const SafetensorsTensor& tensor);

class SafetensorsWriter {
 public:
  // The file's "__metadata__" (omitted when empty). Keys and values must be valid UTF-8.
  // transformers refuses checkpoints without {"format": "pt"}; model_dir and peft_adapter set it.
  base::Status SetMetadata(std::map<std::string, std::string> metadata);
  // Adds a tensor. Errors (InvalidArgument): an empty name, a name that is not valid UTF-8, is
  // longer than kMaxTensorNameBytes, is "__metadata__" or was added before; a rank above
  // kMaxTensorRank; a size that overflows or is not whole bytes; a `data` span of the wrong size.
  // ResourceExhausted beyond kMaxSafetensorsTensors.
  base::Status Add(TensorToWrite tensor);

  size_t tensor_count() const { return tensors_.size(); }
  // Bytes of the data buffer (the sum of the tensors' sizes).
  uint64_t data_bytes() const { return data_bytes_; }
  // The first 8 + N bytes of the file: the length and the padded JSON header.
  std::string HeaderBytes() const;

  // Writes the file atomically: through base::AtomicFileWriter, visible at `path` only once
  // complete and synced. On any error (including a failing TensorFill) `path` is untouched.
  base::Status WriteFile(base::Env& env, const std::string& path) const;
  // The whole file in memory (tests and small files).
  base::Result<std::string> Serialize() const;
  // Streams the file to any sink.
  base::Status WriteTo(TensorSink& out) const;

 private:
  struct Planned {
    size_t index;         // into tensors_
    uint64_t begin, end;  // data_offsets
  };
  std::vector<Planned> Plan() const;

  std::map<std::string, std::string> metadata_;
  std::vector<TensorToWrite> tensors_;
  std::vector<uint64_t> sizes_;  // byte size of each tensor of tensors_
  std::map<std::string, size_t, std::less<>> names_;
  uint64_t data_bytes_ = 0;
};

// The file names of shard `index` (1-based) of `count`: "model-00001-of-00003.safetensors".
std::string ShardFileName(size_t index, size_t count);

// What WriteShardedSafetensors wrote.
struct ShardedWrite {
  // The safetensors files written into the directory: "model.safetensors" when everything fit
  // into one shard, else ShardFileName(1..n).
  std::vector<std::string> files;
  bool indexed = false;  // whether model.safetensors.index.json was written
};

// Writes a checkpoint into the existing directory `dir` as transformers' save_pretrained does:
// tensors are assigned to shards in the given order, a new shard starting when the next tensor
// would push the current one past `max_shard_bytes` (a tensor larger than that gets a shard of
// its own). One shard is written as "model.safetensors" without an index; several as
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json ({"metadata": {"total_size":
// <tensor bytes>}, "weight_map": {...}}, sorted, indented as transformers writes it). Each file is
// written atomically; the index last. Every shard carries `metadata`. Errors: those of
// SafetensorsWriter::Add and the writes; InvalidArgument for max_shard_bytes 0 or duplicate names.
base::Result<ShardedWrite> WriteShardedSafetensors(
    base::Env& env, const std::string& dir, std::vector<TensorToWrite> tensors,
    uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata);

}  // namespace sovai::model
