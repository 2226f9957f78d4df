// Private to the cpu backend: its threads, its scratch memory and its sgemm.
//
// Threading: one pool, OpenMP's. Every op opens its own parallel regions with `threads` threads
// (never nested); OpenBLAS is told to use one thread and is called from inside those regions on
// slices that the threads split among themselves, so the two libraries never oversubscribe the
// cores and a result does not depend on OpenBLAS' own partitioning. Work is split into contiguous
// ranges in a fixed order, so the same inputs and thread count give the same bits every time.
//
// Scratch: buffers that grow to the largest size an op asked for and are then reused, so ops do
// not allocate in the steady state (backend.h). Per-thread scratch is reserved before a parallel
// region and only read through its pointer inside it.
//
// Thread-safety: a Context is used by one op at a time (a Backend is used from one thread at a
// time); its methods are called outside parallel regions unless they say otherwise.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/options.h"
#include "kernels/cpu/vec_math.h"

namespace sovai::kernels::cpu {

// OpenBLAS (Debian's build: MAX_THREADS=64) keeps a fixed pool of 2 * MAX_THREADS memory buffers
// for concurrent callers; more concurrent single-threaded calls than that abort the process. We
// never run more threads than this.
inline constexpr int kMaxThreads = 64;

class Context {
 public:
  // threads <= 0: every processor this process may run on (at most kMaxThreads). isa: the widest
  // instruction set hand-specialized kernels may use (lowered to what the CPU supports; tests pass
  // a lower one to run the other variants).
  explicit Context(int threads, Isa isa = CpuIsa(),
                   Q8_0Activations q8_0_activations = Q8_0Activations::kInt8);

  int threads() const { return threads_; }
  Isa isa() const { return isa_; }
  Q8_0Activations q8_0_activations() const { return q8_0_activations_; }

  // Makes ThreadScratch(t) hold at least `floats` floats for every thread t.
  void ReserveThreadScratch(size_t floats);
  // The calling thread's scratch (t = omp_get_thread_num()); safe inside parallel regions.
  float* ThreadScratch(int thread) { return thread_scratch_[static_cast<size_t>(thread)].data(); }

  // A shared buffer of at least `floats` floats; `slot` tells apart buffers that one op needs at
  // the same time. The pointer is valid until the next call with the same slot.
  // kD: the int8 Q8_0 product's quantized activations.
  enum class Slot : uint8_t { kA, kB, kC, kD, kCount };
  float* Shared(Slot slot, size_t floats);

 private:
  int threads_;
  Isa isa_;
  Q8_0Activations q8_0_activations_;
  std::vector<std::vector<float>> thread_scratch_;
  std::vector<float> shared_[static_cast<int>(Slot::kCount)];
};

// Calls body(begin, end, thread) over [0, count) split into one contiguous range per thread, in
// parallel when count is at least 2 * min_per_thread (otherwise on the calling thread as thread 0).
// Ranges are multiples of `align` (except the last), e.g. to keep NF4 blocks or SIMD widths whole.
template <typename Body>
void ParallelRanges(const Context& context, int64_t count, int64_t min_per_thread, Body&& body,
                    int64_t align = 1) {
  if (count <= 0) return;
  const int64_t by_work = min_per_thread > 0 ? count / min_per_thread : count;
  const int threads =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(context.threads(), by_work)));
  if (threads == 1) {
    body(int64_t{0}, count, 0);
    return;
  }
  const int64_t units = (count + align - 1) / align;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    const int n = omp_get_num_threads();
    const int64_t begin = std::min(count, units * t / n * align);
    const int64_t end = std::min(count, units * (t + 1) / n * align);
    if (begin < end) body(begin, end, t);
  }
}

// Calls body(task, thread) for every task in [0, count), tasks handed out one at a time to the
// first free thread (for tasks of unequal cost, such as causal attention tiles).
template <typename Body>
void ParallelTasks(const Context& context, int64_t count, Body&& body) {
  if (count <= 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(context.threads(), count));
  if (threads == 1) {
    for (int64_t task = 0; task < count; ++task) body(task, 0);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t task = 0; task < count; ++task) body(task, omp_get_thread_num());
}

// A row-major sgemm with leading dimensions, as cblas_sgemm:
//   c[M, N] (row stride ldc) = alpha * op(a) @ op(b) + beta * c,
// op(a) = a[M, K] (row stride lda) or, when trans_a, the transpose of a[K, M] (row stride lda);
// likewise op(b) from b[K, N] or b[N, K]. beta == 0 does not read c. Any of m, n, k may be 0.
struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  float alpha = 1;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float beta = 0;
  float* c = nullptr;
  int64_t ldc = 0;
};
// On the calling thread only (safe inside a parallel region).
void SgemmSerial(const GemmArgs& args);
// Split over the context's threads along the larger of M and N (so every thread reads all of the
// other operand once); small products run on the calling thread.
void Sgemm(const Context& context, const GemmArgs& args);

// OpenBLAS's name for the kernels it picked for this machine ("Haswell", "SkylakeX", ...).
const char* BlasCoreName();

}  // namespace sovai::kernels::cpu
