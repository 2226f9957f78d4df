#include "tensor/tensor.h"

#include <cstring>
#include <new>
#include <utility>

namespace sovai::tensor {

namespace {

base::Status ShapeError(StorageType type, std::span<const int64_t> shape, std::string_view what) {
  return base::InvalidArgumentError("tensor " + FormatShape(shape) + " " +
                                    std::string(StorageTypeName(type)) + ": " + std::string(what));
}

size_t AlignUp4(size_t n) { return (n + 3) & ~size_t{3}; }

}  // namespace

std::string_view StorageTypeName(StorageType type) {
  switch (type) {
    case StorageType::kF32:
      return "f32";
    case StorageType::kF16:
      return "f16";
    case StorageType::kBF16:
      return "bf16";
    case StorageType::kQ8_0:
      return "q8_0";
    case StorageType::kNF4:
      return "nf4";
  }
  return "?";
}

StorageType StorageTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return StorageType::kF32;
    case DType::kF16:
      return StorageType::kF16;
    case DType::kBF16:
      return StorageType::kBF16;
  }
  SOVAI_CHECK(false) << "unknown DType " << static_cast<int>(dtype);
  return StorageType::kF32;
}

std::optional<DType> ElementTypeOf(StorageType type) {
  switch (type) {
    case StorageType::kF32:
      return DType::kF32;
    case StorageType::kF16:
      return DType::kF16;
    case StorageType::kBF16:
      return DType::kBF16;
    case StorageType::kQ8_0:
    case StorageType::kNF4:
      return std::nullopt;
  }
  return std::nullopt;
}

Nf4Layout Nf4LayoutOf(int64_t numel) {
  SOVAI_CHECK(numel >= 0 && numel <= kMaxElements && numel % kNf4BlockValues == 0)
      << "an NF4 tensor of " << numel << " values";
  Nf4Layout layout;
  layout.blocks = numel / kNf4BlockValues;
  layout.scales = (layout.blocks + kNf4AbsmaxBlockSize - 1) / kNf4AbsmaxBlockSize;
  layout.codes_offset = 0;
  layout.absmax_codes_offset = static_cast<size_t>(numel / 2);
  layout.absmax_scales_offset =
      AlignUp4(layout.absmax_codes_offset + static_cast<size_t>(layout.blocks));
  layout.absmax_map_offset =
      layout.absmax_scales_offset + static_cast<size_t>(layout.scales) * sizeof(float);
  layout.absmax_offset_offset =
      layout.absmax_map_offset + static_cast<size_t>(kNf4AbsmaxMapSize) * sizeof(float);
  layout.bytes = layout.absmax_offset_offset + sizeof(float);
  return layout;
}

std::string FormatShape(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

base::Result<size_t> StorageBytes(StorageType type, std::span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return ShapeError(type, shape,
                      "more than " + std::to_string(kMaxRank) + " dimensions; reshape it first");
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return ShapeError(type, shape, "a dimension is negative");
    // Every dimension is bounded on its own so that a zero elsewhere cannot hide a huge one.
    if (d > kMaxElements || (d > 0 && numel > kMaxElements / d)) {
      return ShapeError(type, shape,
                        "more than " + std::to_string(kMaxElements) + " elements (the limit)");
    }
    numel *= d;
  }
  if (std::optional<DType> element = ElementTypeOf(type)) {
    return static_cast<size_t>(numel) * DTypeSize(*element);
  }
  if (type == StorageType::kQ8_0) {
    if (shape.empty() || shape.back() % kQ8_0BlockValues != 0) {
      return ShapeError(type, shape,
                        "the last dimension must be whole Q8_0 blocks of " +
                            std::to_string(kQ8_0BlockValues) + " values");
    }
    return static_cast<size_t>(numel / kQ8_0BlockValues * kQ8_0BlockBytes);
  }
  if (numel % kNf4BlockValues != 0) {
    return ShapeError(type, shape,
                      "the element count must be whole NF4 blocks of " +
                          std::to_string(kNf4BlockValues) + " values");
  }
  return Nf4LayoutOf(numel).bytes;
}

void Tensor::AlignedDelete::operator()(std::byte* p) const {
  ::operator delete[](p, std::align_val_t{kStorageAlignment});
}

Tensor::Tensor() : shape_{0} {}

Tensor::Tensor(StorageType type, std::vector<int64_t> shape, int64_t numel, size_t bytes)
    : type_(type), shape_(std::move(shape)), numel_(numel), bytes_(bytes) {
  if (bytes_ == 0) return;
  // The one allocation of a tensor; owned by storage_, whose deleter frees it with the same
  // alignment.
  storage_.reset(
      static_cast<std::byte*>(::operator new[](bytes_, std::align_val_t{kStorageAlignment})));
  std::memset(storage_.get(), 0, bytes_);
}

base::Result<Tensor> Tensor::Zeros(StorageType type, std::vector<int64_t> shape) {
  SOVAI_ASSIGN_OR_RETURN(size_t bytes, StorageBytes(type, shape));
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  return Tensor(type, std::move(shape), numel, bytes);
}

base::Result<Tensor> Tensor::FromF32(std::span<const float> values, std::vector<int64_t> shape,
                                     DType dtype) {
  SOVAI_ASSIGN_OR_RETURN(Tensor t, Zeros(StorageTypeOf(dtype), std::move(shape)));
  if (values.size() != static_cast<size_t>(t.numel())) {
    return ShapeError(t.type(), t.shape(),
                      "given " + std::to_string(values.size()) + " values for " +
                          std::to_string(t.numel()) + " elements");
  }
  if (t.numel() > 0) {
    ConvertElements(DType::kF32, values.data(), dtype, t.raw_data(), values.size());
  }
  return t;
}

Tensor Tensor::Clone() const {
  Tensor copy(type_, shape_, numel_, bytes_);
  copy.name_ = name_;
  if (bytes_ > 0) std::memcpy(copy.storage_.get(), storage_.get(), bytes_);
  return copy;
}

int64_t Tensor::dim(int axis) const {
  SOVAI_CHECK(axis >= 0 && axis < rank()) << "axis " << axis << " of " << ShapeString();
  return shape_[static_cast<size_t>(axis)];
}

Nf4Parts Tensor::nf4() {
  ConstNf4Parts parts = std::as_const(*this).nf4();
  return Nf4Parts{const_cast<uint8_t*>(parts.codes), const_cast<uint8_t*>(parts.absmax_codes),
                  const_cast<float*>(parts.absmax_scales), const_cast<float*>(parts.absmax_map),
                  const_cast<float*>(parts.absmax_offset)};
}

ConstNf4Parts Tensor::nf4() const {
  SOVAI_CHECK(type_ == StorageType::kNF4)
      << "tensor '" << name_ << "' " << ShapeString() << " read as NF4";
  const Nf4Layout layout = Nf4LayoutOf(numel_);
  const std::byte* base = storage_.get();
  // The f32 parts sit at multiples of 4 bytes in 64-byte aligned storage (Nf4Layout).
  return ConstNf4Parts{
      reinterpret_cast<const uint8_t*>(base + layout.codes_offset),
      reinterpret_cast<const uint8_t*>(base + layout.absmax_codes_offset),
      reinterpret_cast<const float*>(base + layout.absmax_scales_offset),
      reinterpret_cast<const float*>(base + layout.absmax_map_offset),
      reinterpret_cast<const float*>(base + layout.absmax_offset_offset),
  };
}

std::vector<float> Tensor::ToF32() const {
  std::optional<DType> element = ElementTypeOf(type_);
  SOVAI_CHECK(element.has_value())
      << "tensor '" << name_ << "' " << ShapeString()
      << " is a block format: dequantize it with kernels::DequantizeToF32";
  std::vector<float> out(static_cast<size_t>(numel_));
  if (numel_ > 0) {
    ConvertElements(*element, storage_.get(), DType::kF32, out.data(), out.size());
  }
  return out;
}

std::string Tensor::ShapeString() const {
  return FormatShape(shape_) + " " + std::string(StorageTypeName(type_));
}

}  // namespace sovai::tensor
