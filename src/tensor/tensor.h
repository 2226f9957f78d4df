// The one tensor type of the ML engine: a row-major, contiguous array of a shape in a storage type,
// owning its storage.
//
// Storage types (StorageType) are the element types of dtype.h (f32, f16, bf16: one value per
// element, converted by ConvertElements) and two block formats, whose bytes stand for groups of
// values and whose arithmetic lives in src/kernels (quantization, dequantization, the ops):
//   * Q8_0 (ggml's, kernels/q8_0.h): the last dimension is cut into blocks of 32 values, each
//     stored as 34 bytes (an f16 scale and 32 signed bytes). The last dimension must be a multiple
//     of 32.
//   * NF4 (bitsandbytes' quantize_4bit with double quantization; kernels/nf4.h and
//     docs/formats/nf4.md): the tensor is one row-major sequence of numel values (a multiple of
//     64) in blocks of 64; the storage holds the parts listed at Nf4Layout.
// Code that deals only in elements keeps using DType (DTypeSize, ConvertElements have no meaning
// for a block format); StorageTypeOf and ElementTypeOf map between the two.
//
// Shapes are written as in llm.c and kernels/backend.h: `w[O, I]` is O rows of I values, the last
// dimension contiguous. A Tensor of rank 0 holds one element.
//
//   SOVAI_ASSIGN_OR_RETURN(Tensor w, Tensor::FromF32(values, {rows, cols}, DType::kBF16));
//   const uint16_t* bits = w.data<uint16_t>();    // [rows, cols]
//   return InvalidArgumentError("expected " + w.ShapeString());  // "[4096, 4096] bf16"
//
// Limits: at most kMaxRank dimensions and kMaxElements elements; a dimension is never negative.
// A factory given a shape outside them, or one that does not fit its block format, returns
// InvalidArgument naming the shape. Misuse (reading bf16 storage as float, ToF32 of a block
// format) is a bug and stops the process (SOVAI_CHECK).
//
// Storage is 64-byte aligned (a cache line, the widest vector load) and moves with the Tensor:
// pointers into it stay valid when the Tensor is moved, until it is destroyed or assigned to.
//
// Thread-safety: a value (move-only; Clone() copies). Const methods may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "base/status.h"
#include "tensor/dtype.h"

namespace sovai::tensor {

enum class StorageType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kNF4,
};

// "f32", "f16", "bf16", "q8_0", "nf4".
std::string_view StorageTypeName(StorageType type);
StorageType StorageTypeOf(DType dtype);
// The element type of an element storage type; nullopt for the block formats.
std::optional<DType> ElementTypeOf(StorageType type);

inline constexpr int kMaxRank = 8;
// 2^40 elements (4 TiB of f32): far above any tensor of a model, small enough that every element
// and byte count fits in int64_t and size_t with room to spare.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;
inline constexpr size_t kStorageAlignment = 64;

// Q8_0 blocks (kernels/q8_0.h has the arithmetic).
inline constexpr int64_t kQ8_0BlockValues = 32;
inline constexpr int64_t kQ8_0BlockBytes = 34;
// NF4 blocks (kernels/backend.h Nf4Weight and kernels/nf4.h have the arithmetic).
inline constexpr int64_t kNf4BlockValues = 64;       // values per absmax
inline constexpr int64_t kNf4AbsmaxBlockSize = 256;  // absmaxes per absmax scale
inline constexpr int64_t kNf4AbsmaxMapSize = 256;    // entries of the absmax code map

// Where the parts of an NF4 tensor of `numel` values lie in its storage, in this order (byte
// offsets; the f32 parts are 4-byte aligned, so they can be read in place):
//   codes          uint8[numel / 2]     two 4-bit codes a byte, element 2i in the high nibble
//   absmax_codes   uint8[numel / 64]    8-bit code of each block's absmax
//   (zero padding to a multiple of 4 bytes)
//   absmax_scales  f32[ceil(numel / 64 / 256)]
//   absmax_map     f32[256]             the values an absmax code stands for
//   absmax_offset  f32[1]               the mean subtracted before double quantization
struct Nf4Layout {
  int64_t blocks = 0;  // numel / 64
  int64_t scales = 0;  // ceil(blocks / 256)
  size_t codes_offset = 0;
  size_t absmax_codes_offset = 0;
  size_t absmax_scales_offset = 0;
  size_t absmax_map_offset = 0;
  size_t absmax_offset_offset = 0;
  size_t bytes = 0;  // the whole storage
};
// numel must be a non-negative multiple of kNf4BlockValues (checked).
Nf4Layout Nf4LayoutOf(int64_t numel);

// Pointers to the parts of an NF4 tensor's storage (see Nf4Layout).
template <typename Byte, typename Float>
struct Nf4PartsOf {
  Byte* codes = nullptr;
  Byte* absmax_codes = nullptr;
  Float* absmax_scales = nullptr;
  Float* absmax_map = nullptr;
  Float* absmax_offset = nullptr;  // one value
};
using Nf4Parts = Nf4PartsOf<uint8_t, float>;
using ConstNf4Parts = Nf4PartsOf<const uint8_t, const float>;

// "[4096, 4096]"; "[]" for rank 0.
std::string FormatShape(std::span<const int64_t> shape);

// The bytes of a tensor of `type` and `shape`. InvalidArgument when the shape breaks a limit or
// does not fit the format (Q8_0: rank >= 1 and the last dimension a multiple of 32; NF4: numel a
// multiple of 64).
base::Result<size_t> StorageBytes(StorageType type, std::span<const int64_t> shape);

class Tensor {
 public:
  // Empty: f32 of shape [0], no storage (what a weight holds before it is loaded).
  Tensor();
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  // Copies of weights are expensive and rarely meant: Clone() says so.
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() = default;

  // A tensor whose storage is all zero bytes, which stands for zeros in every type (an NF4
  // tensor's absmax map and offset are zero too). Errors: as StorageBytes.
  static base::Result<Tensor> Zeros(StorageType type, std::vector<int64_t> shape);
  // values[numel] converted to `dtype` (rounded to nearest even, as ConvertElements). Errors: as
  // StorageBytes, and InvalidArgument when values.size() is not the shape's numel.
  static base::Result<Tensor> FromF32(std::span<const float> values, std::vector<int64_t> shape,
                                      DType dtype = DType::kF32);

  Tensor Clone() const;

  // An optional name for messages and for the file it came from ("model.norm.weight").
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  StorageType type() const { return type_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  // shape()[axis]; axis in [0, rank) (checked).
  int64_t dim(int axis) const;
  int64_t numel() const { return numel_; }
  // The bytes of storage (for a block format, all of its parts).
  size_t bytes() const { return bytes_; }

  // The storage as elements: float for f32, uint16_t (the bits) for f16 and bf16, uint8_t for the
  // bytes of Q8_0 and NF4. Another pairing is a bug (checked). Null when bytes() is 0.
  template <typename T>
  T* data() {
    CheckElement<T>();
    return reinterpret_cast<T*>(storage_.get());
  }
  template <typename T>
  const T* data() const {
    CheckElement<T>();
    return reinterpret_cast<const T*>(storage_.get());
  }
  // The storage of any type, untyped.
  void* raw_data() { return storage_.get(); }
  const void* raw_data() const { return storage_.get(); }

  // The parts of an NF4 tensor (another type is a bug).
  Nf4Parts nf4();
  ConstNf4Parts nf4() const;

  // The values as f32, row-major. For element types only: a block format needs the kernels'
  // dequantization (kernels/weight.h DequantizeToF32); calling this on one is a bug.
  std::vector<float> ToF32() const;

  // "[4096, 4096] bf16".
  std::string ShapeString() const;

 private:
  struct AlignedDelete {
    void operator()(std::byte* p) const;
  };

  Tensor(StorageType type, std::vector<int64_t> shape, int64_t numel, size_t bytes);

  template <typename T>
  void CheckElement() const {
    static_assert(std::is_same_v<std::remove_cv_t<T>, float> ||
                      std::is_same_v<std::remove_cv_t<T>, uint16_t> ||
                      std::is_same_v<std::remove_cv_t<T>, uint8_t>,
                  "Tensor::data<T>: T is float, uint16_t or uint8_t");
    bool ok;
    if constexpr (std::is_same_v<std::remove_cv_t<T>, float>) {
      ok = type_ == StorageType::kF32;
    } else if constexpr (std::is_same_v<std::remove_cv_t<T>, uint16_t>) {
      ok = type_ == StorageType::kF16 || type_ == StorageType::kBF16;
    } else {
      ok = type_ == StorageType::kQ8_0 || type_ == StorageType::kNF4;
    }
    SOVAI_CHECK(ok) << "tensor '" << name_ << "' " << ShapeString()
                    << " read with the wrong element type";
  }

  std::string name_;
  StorageType type_ = StorageType::kF32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  size_t bytes_ = 0;
  std::unique_ptr<std::byte[], AlignedDelete> storage_;
};

}  // namespace sovai::tensor
