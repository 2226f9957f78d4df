// The CUDA implementation of kernels::Backend (built only with SOVAI_CUDA=ON).
//
// Memory is the device's: Allocate is cudaMalloc (256-byte aligned), Upload/Download/Copy/Fill are
// cudaMemcpyAsync/cudaMemsetAsync on the backend's own stream, and every op is enqueued on that
// stream, so ops run in the order they were called and return before they run. Download,
// Synchronize, CrossEntropy and SumOfSquares wait for the stream.
//
// Activations are f32 (activation_dtype() == kF32), as on the cpu backend: bf16 activation storage
// is a later step. Weights may be f32, bf16, NF4 or Q8_0; the non-f32 ones are expanded into an f32
// scratch buffer of the backend and multiplied with cuBLAS's f32 GEMM (no TF32), so products are
// f32 products, as on the cpu backend.
//
// Ops do not fail (backend.h): a CUDA error inside an op (a failed launch, a device fault, scratch
// memory that does not fit) is treated as a broken device and stops the process with CUDA's
// message (SOVAI_CHECK), as a violated contract does in the reference backend.
//
// Status: compiled in every CUDA build, NOT YET RUN ON A GPU (no device has been lent to the
// sessions that wrote it); cuda_backend_test is the check the next run with a device makes.
//
// Thread-safety: as backend.h says. Every entry point makes the backend's device current on the
// calling thread first.
#pragma once

#include <memory>

#include "base/status.h"
#include "kernels/backend.h"

namespace sovai::kernels::cuda {

// A backend on CUDA device `device_index` (after CUDA_VISIBLE_DEVICES), named "cuda". Unavailable
// when the CUDA runtime or driver cannot start, or when there is no device (the message says
// which); InvalidArgument for an index outside [0, devices); Internal when the stream, cuBLAS or
// the scratch memory cannot be created.
base::Result<std::unique_ptr<Backend>> NewCudaBackend(int device_index);

}  // namespace sovai::kernels::cuda
