// Tensors as the ops see them: storing f32 values in any storage type (the block formats need the
// quantizers of nf4.h and q8_0.h, which is why this lives here and not in src/tensor), reading any
// tensor back as f32, and the WeightRef view that the ops read.
//
//   SOVAI_ASSIGN_OR_RETURN(tensor::Tensor w, QuantizeTensor(values, {O, I}, StorageType::kNF4));
//   backend.LinearForward(out, x, WeightOf(w), nullptr, n);   // out[N, O] = x[N, I] @ w[O, I]^T
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "kernels/backend.h"
#include "tensor/tensor.h"

namespace sovai::kernels {

// The WeightRef format of a storage type; nullopt for f16, which no op reads.
std::optional<WeightRef::Format> WeightFormatOf(tensor::StorageType type);
tensor::StorageType StorageTypeOf(WeightRef::Format format);

// values[shape] (f32, row-major) stored as `type`:
//   f32, f16, bf16  rounded to nearest even (tensor::Tensor::FromF32);
//   Q8_0            each row of the last dimension quantized by QuantizeRowQ8_0;
//   NF4             the whole tensor quantized by QuantizeNf4 as one sequence of values.
// Errors (InvalidArgument): the shape breaks a limit of tensor.h or does not fit the format
// (Q8_0: the last dimension a multiple of 32; NF4: numel a positive multiple of 64, at most
// kMaxNf4Elements), values.size() is not the shape's numel, or (NF4) a value is not finite.
base::Result<tensor::Tensor> QuantizeTensor(std::span<const float> values,
                                            std::vector<int64_t> shape, tensor::StorageType type);
// The same for an f32 tensor (another type is a bug, checked); the result keeps its name and its
// errors name it.
base::Result<tensor::Tensor> QuantizeTensor(const tensor::Tensor& values, tensor::StorageType type);

// The f32 values of any tensor, row-major: element types converted exactly, Q8_0 by
// DequantizeRowQ8_0, NF4 by DequantizeNf4 (bit-identical to the ops' dequantization).
std::vector<float> DequantizeToF32(const tensor::Tensor& t);

// A view of t for the ops: rows = the product of every dimension but the last, cols = the last
// (an NF4 tensor with any rank >= 1). The pointers address t's storage: the view is valid while t
// lives, including after t is moved. t must have rank >= 1 and a type with a WeightRef format
// (f32, bf16, Q8_0, NF4); anything else is a bug (checked).
WeightRef WeightOf(const tensor::Tensor& t);
// The same view of a copy of t's bytes at `storage` (a backend's buffer that t was uploaded to):
// every pointer addresses the copy, at the offsets it has in t; what the view holds by value
// (NF4's absmax_offset) is read from t.
WeightRef WeightOf(const tensor::Tensor& t, const void* storage);

}  // namespace sovai::kernels
