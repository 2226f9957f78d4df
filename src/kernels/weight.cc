#include "kernels/weight.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/nf4.h"
#include "kernels/q8_0.h"

namespace sovai::kernels {

using tensor::StorageType;
using tensor::Tensor;

// tensor.h sizes the block formats without depending on the kernels: both must agree.
static_assert(tensor::kQ8_0BlockValues == static_cast<int64_t>(kQ8_0BlockValues));
static_assert(tensor::kQ8_0BlockBytes == static_cast<int64_t>(kQ8_0BlockBytes));
static_assert(tensor::kNf4BlockValues == Nf4Weight::kBlockSize);
static_assert(tensor::kNf4AbsmaxBlockSize == Nf4Weight::kAbsmaxBlockSize);
static_assert(tensor::kNf4AbsmaxMapSize == Nf4Weight::kAbsmaxMapSize);

namespace {

Nf4Weight Nf4View(const Tensor& t) {
  const tensor::ConstNf4Parts parts = t.nf4();
  return Nf4Weight{parts.codes, parts.absmax_codes, parts.absmax_scales, parts.absmax_map,
                   *parts.absmax_offset};
}

}  // namespace

std::optional<WeightRef::Format> WeightFormatOf(StorageType type) {
  switch (type) {
    case StorageType::kF32:
      return WeightRef::Format::kF32;
    case StorageType::kBF16:
      return WeightRef::Format::kBF16;
    case StorageType::kQ8_0:
      return WeightRef::Format::kQ8_0;
    case StorageType::kNF4:
      return WeightRef::Format::kNF4;
    case StorageType::kF16:
      return std::nullopt;
  }
  return std::nullopt;
}

StorageType StorageTypeOf(WeightRef::Format format) {
  switch (format) {
    case WeightRef::Format::kF32:
      return StorageType::kF32;
    case WeightRef::Format::kBF16:
      return StorageType::kBF16;
    case WeightRef::Format::kQ8_0:
      return StorageType::kQ8_0;
    case WeightRef::Format::kNF4:
      return StorageType::kNF4;
  }
  SOVAI_CHECK(false) << "unknown WeightRef::Format " << static_cast<int>(format);
  return StorageType::kF32;
}

base::Result<Tensor> QuantizeTensor(std::span<const float> values, std::vector<int64_t> shape,
                                    StorageType type) {
  if (std::optional<tensor::DType> element = tensor::ElementTypeOf(type)) {
    return Tensor::FromF32(values, std::move(shape), *element);
  }
  // Validate the shape before quantizing, and quantize before allocating the result.
  SOVAI_RETURN_IF_ERROR(tensor::StorageBytes(type, shape).status());
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (values.size() != static_cast<size_t>(numel)) {
    return base::InvalidArgumentError("tensor " + tensor::FormatShape(shape) + " " +
                                      std::string(tensor::StorageTypeName(type)) + ": given " +
                                      std::to_string(values.size()) + " values for " +
                                      std::to_string(numel) + " elements");
  }
  if (type == StorageType::kQ8_0) {
    SOVAI_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(type, std::move(shape)));
    const int64_t cols = out.shape().back();
    if (cols == 0) return out;
    const size_t row_bytes = Q8_0Bytes(static_cast<size_t>(cols));
    uint8_t* bytes = out.data<uint8_t>();
    for (int64_t r = 0; r < numel / cols; ++r) {
      QuantizeRowQ8_0(values.subspan(static_cast<size_t>(r * cols), static_cast<size_t>(cols)),
                      {bytes + static_cast<size_t>(r) * row_bytes, row_bytes});
    }
    return out;
  }
  SOVAI_ASSIGN_OR_RETURN(Nf4Quantized q, QuantizeNf4(values));
  SOVAI_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(type, std::move(shape)));
  tensor::Nf4Parts parts = out.nf4();
  std::copy(q.codes.begin(), q.codes.end(), parts.codes);
  std::copy(q.absmax_codes.begin(), q.absmax_codes.end(), parts.absmax_codes);
  std::copy(q.absmax_scales.begin(), q.absmax_scales.end(), parts.absmax_scales);
  std::copy(q.absmax_map.begin(), q.absmax_map.end(), parts.absmax_map);
  *parts.absmax_offset = q.absmax_offset;
  return out;
}

base::Result<Tensor> QuantizeTensor(const Tensor& values, StorageType type) {
  SOVAI_CHECK(values.type() == StorageType::kF32)
      << "QuantizeTensor of '" << values.name() << "' " << values.ShapeString()
      << ": the values must be f32";
  auto out = QuantizeTensor({values.data<float>(), static_cast<size_t>(values.numel())},
                            values.shape(), type);
  if (!out.ok()) {
    if (values.name().empty()) return out.status();
    return out.status().WithContext("'" + values.name() + "'");
  }
  out->set_name(values.name());
  return out;
}

std::vector<float> DequantizeToF32(const Tensor& t) {
  if (tensor::ElementTypeOf(t.type())) return t.ToF32();
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (out.empty()) return out;
  if (t.type() == StorageType::kQ8_0) {
    DequantizeRowQ8_0({t.data<uint8_t>(), t.bytes()}, out);
  } else {
    DequantizeNf4(Nf4View(t), t.numel(), out.data());
  }
  return out;
}

WeightRef WeightOf(const Tensor& t) {
  std::optional<WeightRef::Format> format = WeightFormatOf(t.type());
  SOVAI_CHECK(format.has_value() && t.rank() >= 1)
      << "tensor '" << t.name() << "' " << t.ShapeString() << " is not a weight the ops read";
  WeightRef ref;
  ref.format = *format;
  ref.cols = t.shape().back();
  ref.rows = 1;
  for (int axis = 0; axis + 1 < t.rank(); ++axis) ref.rows *= t.dim(axis);
  if (ref.format == WeightRef::Format::kNF4) {
    ref.nf4 = Nf4View(t);
  } else {
    ref.data = t.raw_data();
  }
  return ref;
}

WeightRef WeightOf(const Tensor& t, const void* storage) {
  WeightRef ref = WeightOf(t);
  const auto* from = static_cast<const std::byte*>(t.raw_data());
  const auto* to = static_cast<const std::byte*>(storage);
  // The same byte offsets from the copy's start; the NF4 offset is a value, read from t.
  auto rebase = [&](const auto* p) {
    return reinterpret_cast<decltype(p)>(to + (reinterpret_cast<const std::byte*>(p) - from));
  };
  if (ref.format == WeightRef::Format::kNF4) {
    ref.nf4.codes = rebase(ref.nf4.codes);
    ref.nf4.absmax_codes = rebase(ref.nf4.absmax_codes);
    ref.nf4.absmax_scales = rebase(ref.nf4.absmax_scales);
    ref.nf4.absmax_map = rebase(ref.nf4.absmax_map);
  } else {
    ref.data = t.bytes() == 0 ? nullptr : storage;
  }
  return ref;
}

}  // namespace sovai::kernels
