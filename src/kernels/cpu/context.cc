#include "kernels/cpu/context.h"

#include <cblas.h>
#include <strings.h>  // strcasecmp

#include <algorithm>
#include <mutex>

#include "base/check.h"
#include "base/log.h"

namespace sovai::kernels::cpu {
namespace {

// Products below this many multiply-adds run on one thread: a parallel region costs a few
// microseconds, about what one core needs for 2^17 multiply-adds.
constexpr int64_t kParallelGemmMinFlops = int64_t{1} << 17;
// The smallest slice of M or N a thread gets: OpenBLAS' kernels work on register blocks of up to
// 16 rows or columns, and packing the other operand is amortized over the slice.
constexpr int64_t kMinGemmSlice = 32;

// OpenBLAS' DYNAMIC_ARCH picks kernels by CPU model number and falls back to SSE3 ("Prescott")
// kernels on a model it was built before (OpenBLAS 0.3.21 on Sapphire/Emerald Rapids, for one),
// which makes sgemm about 4x slower. Say so, with the fix.
void WarnIfBlasKernelsAreOld() {
#if defined(__x86_64__) && defined(__GNUC__)
  // Once per process: the condition is a property of the process, not of a backend.
  static std::once_flag warned;
  std::call_once(warned, [] {
    if (!__builtin_cpu_supports("avx2")) return;
    const char* core = BlasCoreName();
    static constexpr const char* kAvx2Cores[] = {
        "haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"};
    for (const char* name : kAvx2Cores) {
      if (strcasecmp(core, name) == 0) return;
    }
    SOVAI_LOG(WARNING).With("openblas_core", core)
        << "OpenBLAS does not recognize this CPU and uses kernels without AVX2, so matrix products "
           "run several times slower than they could; set OPENBLAS_CORETYPE=SkylakeX (CPUs with "
           "AVX-512) or OPENBLAS_CORETYPE=Haswell (AVX2) in the environment of this process";
  });
#endif
}

CBLAS_TRANSPOSE Trans(bool transposed) { return transposed ? CblasTrans : CblasNoTrans; }

}  // namespace

Context::Context(int threads, Isa isa, Q8_0Activations q8_0_activations)
    : isa_(std::min(isa, CpuIsa())), q8_0_activations_(q8_0_activations) {
  if (threads <= 0) threads = omp_get_num_procs();
  threads_ = std::clamp(threads, 1, kMaxThreads);
  thread_scratch_.resize(static_cast<size_t>(threads_));
  // Process-wide, and meant so: every sgemm of this process runs inside our own threads.
  openblas_set_num_threads(1);
  WarnIfBlasKernelsAreOld();
}

void Context::ReserveThreadScratch(size_t floats) {
  for (auto& scratch : thread_scratch_) {
    if (scratch.size() < floats) scratch.resize(floats);
  }
}

float* Context::Shared(Slot slot, size_t floats) {
  std::vector<float>& buffer = shared_[static_cast<int>(slot)];
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

void SgemmSerial(const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return;
  if (g.k <= 0) {
    // BLAS rejects a zero leading dimension, so the empty sum is done here: c = beta * c.
    for (int64_t i = 0; i < g.m; ++i) {
      float* row = g.c + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) row[j] = g.beta == 0 ? 0.0f : g.beta * row[j];
    }
    return;
  }
  SOVAI_CHECK(g.m <= INT32_MAX && g.n <= INT32_MAX && g.k <= INT32_MAX && g.lda <= INT32_MAX &&
              g.ldb <= INT32_MAX && g.ldc <= INT32_MAX)
      << "sgemm dimensions beyond BLAS' 32-bit int: " << g.m << " x " << g.n << " x " << g.k;
  cblas_sgemm(CblasRowMajor, Trans(g.trans_a), Trans(g.trans_b), static_cast<int>(g.m),
              static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, g.a, static_cast<int>(g.lda),
              g.b, static_cast<int>(g.ldb), g.beta, g.c, static_cast<int>(g.ldc));
}

void Sgemm(const Context& context, const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return;
  const int64_t split = std::max(g.m, g.n);
  if (context.threads() == 1 || g.m * g.n * std::max<int64_t>(g.k, 1) < kParallelGemmMinFlops ||
      split < 2 * kMinGemmSlice) {
    SgemmSerial(g);
    return;
  }
  const bool split_m = g.m >= g.n;
  ParallelRanges(
      context, split, kMinGemmSlice,
      [&](int64_t begin, int64_t end, int) {
        GemmArgs slice = g;
        if (split_m) {
          // Rows [begin, end) of op(a) and of c.
          slice.m = end - begin;
          slice.a = g.a + (g.trans_a ? begin : begin * g.lda);
          slice.c = g.c + begin * g.ldc;
        } else {
          // Columns [begin, end) of op(b) and of c.
          slice.n = end - begin;
          slice.b = g.b + (g.trans_b ? begin * g.ldb : begin);
          slice.c = g.c + begin;
        }
        SgemmSerial(slice);
      },
      /*align=*/16);
}

const char* BlasCoreName() { return openblas_get_corename(); }

}  // namespace sovai::kernels::cpu
