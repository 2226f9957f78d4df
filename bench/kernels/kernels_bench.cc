// Kernel micro-benchmark: every op of the ML engine, forward + backward, on a LoRA-training-shaped
// step, timed on the reference backend (the peer: plain loops, one thread) and on the cpu backend,
// with the speed-up; and for the ops built on sgemm, the GFLOP/s they reach against the physical
// limit measured in the same run: a large square cblas_sgemm on all threads.
//
//   kernels_bench [--threads=N] [--runs=N] [--reference-runs=N] [--tokens=N] [--only=SUBSTRING]
//   kernels_bench --q8_0 [--threads=N] [--runs=N] [--isa=avx512|avx2|baseline]
//   kernels_bench --paged [--threads=N] [--runs=N]
//   kernels_bench --peak [--threads=N]
//
// Shapes (defaults): N=1024 tokens as B=2 sequences of T=512, C=512, F=1376, V=8192, H=8 query
// heads, KV=4 key/value heads, D=64, LoRA rank 16. Prints medians over --runs (cpu, default 7) and
// --reference-runs (reference, default 3: it takes seconds per op). Asserts nothing.
//
// --q8_0 instead times inference's products with Q8_0 weights, LinearForward on the MLP shapes of
// Qwen2.5-0.5B (896 -> 4864 and 4864 -> 896) for N = 1, 8, 64 and 256 rows: f32 activations
// against activations quantized to int8 (kernels/cpu/q8_0_int8.h), side by side with the ratio and
// the GFLOP/s of each (2 N I O operations per product).
//
// --paged times inference's attention over a paged KV cache (PagedAttention) on Qwen2.5-0.5B's
// heads (14 query heads, 2 kv heads, D = 64, blocks of 16): a 44-token prefill chunk after 688
// cached positions (the prefix-cache request of bench/serve), and decoding tokens of 1 and 4
// sequences; against the reference backend (one thread), with GFLOP/s (4 D operations per query
// head and visible position) beside the sgemm peak measured in the same run.
//
// --peak prints that peak alone (GFLOP/s of a 2048^3 cblas_sgemm, median of 3), for bench/serve's
// compute bound.
#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/q8_0_int8.h"
#include "kernels/nf4.h"
#include "kernels/q8_0.h"
#include "kernels/rope.h"
#include "tensor/dtype.h"

namespace sovai::kernels {
namespace {

using Vec = std::vector<float>;

struct Options {
  int threads = 0;
  int runs = 7;
  int reference_runs = 3;
  int64_t tokens = 1024;
  std::string only;
  bool q8_0 = false;
  bool paged = false;
  bool peak = false;
  cpu::Isa isa = cpu::CpuIsa();
};

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&](const char* name) -> const char* {
      const size_t length = std::strlen(name);
      return arg.compare(0, length, name) == 0 ? argv[i] + length : nullptr;
    };
    if (const char* v = value("--threads=")) {
      options.threads = std::atoi(v);
    } else if (const char* v = value("--runs=")) {
      options.runs = std::max(1, std::atoi(v));
    } else if (const char* v = value("--reference-runs=")) {
      options.reference_runs = std::max(0, std::atoi(v));
    } else if (const char* v = value("--tokens=")) {
      options.tokens = std::max<int64_t>(2, std::atoll(v)) / 2 * 2;
    } else if (const char* v = value("--only=")) {
      options.only = v;
    } else if (arg == "--q8_0") {
      options.q8_0 = true;
    } else if (arg == "--paged") {
      options.paged = true;
    } else if (arg == "--peak") {
      options.peak = true;
    } else if (const char* v = value("--isa=")) {
      const std::string isa = v;
      options.isa = isa == "avx512" ? cpu::Isa::kAvx512
                    : isa == "avx2" ? cpu::Isa::kAvx2
                                    : cpu::Isa::kBaseline;
    } else {
      std::fprintf(stderr,
                   "usage: kernels_bench [--threads=N] [--runs=N] [--reference-runs=N] "
                   "[--tokens=N] [--only=SUBSTRING]\n"
                   "       kernels_bench --q8_0 [--threads=N] [--runs=N] "
                   "[--isa=avx512|avx2|baseline]\n"
                   "       kernels_bench --paged [--threads=N] [--runs=N]\n"
                   "       kernels_bench --peak [--threads=N]\n");
      std::exit(2);
    }
  }
  return options;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the whole process (every thread), in seconds.
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Medians of `runs` calls: wall time, and CPU time of all threads (which, on a machine shared
// with other work, shows what the op costs when the wall clock also counts time spent waiting for
// a core).
struct Timing {
  double wall_s = 0;
  double cpu_s = 0;
};

// After one untimed warm-up call when `warm_up` (the cpu backend's scratch grows on first use;
// the reference needs none and takes seconds).
Timing Measure(int runs, const std::function<void()>& body, bool warm_up = true) {
  if (warm_up) body();
  std::vector<double> walls;
  std::vector<double> cpus;
  for (int r = 0; r < runs; ++r) {
    const double wall = Now();
    const double cpu = ProcessCpuSeconds();
    body();
    cpus.push_back(ProcessCpuSeconds() - cpu);
    walls.push_back(Now() - wall);
  }
  std::sort(walls.begin(), walls.end());
  std::sort(cpus.begin(), cpus.end());
  return {walls[walls.size() / 2], cpus[cpus.size() / 2]};
}

Vec Random(std::mt19937& rng, size_t count, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  Vec v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

// One benchmarked op: what it runs (forward + backward) on a backend, and the floating-point
// operations of its sgemm-shaped part (0 when it has none).
struct Bench {
  std::string name;
  double gemm_flops;
  std::function<void(Backend&)> run;
};

// The physical limit: GFLOP/s of cblas_sgemm on an n x n x n product, OpenBLAS' own threading
// over `threads` threads (the cpu backend sets OpenBLAS to 1 thread and splits products itself;
// this measures what OpenBLAS does when left alone).
double PeakSgemmGflops(int threads, int64_t n, int runs) {
  std::mt19937 rng(1);
  const Vec a = Random(rng, static_cast<size_t>(n * n));
  const Vec b = Random(rng, static_cast<size_t>(n * n));
  Vec c(static_cast<size_t>(n * n));
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  const int size = static_cast<int>(n);
  const double seconds = Measure(runs, [&] {
                           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, size, size,
                                       1.0f, a.data(), size, b.data(), size, 0.0f, c.data(), size);
                         }).wall_s;
  openblas_set_num_threads(saved);
  return 2.0 * static_cast<double>(n * n * n) / seconds / 1e9;
}

const char* Int8KernelName(cpu::Int8Kernel kernel) {
  switch (kernel) {
    case cpu::Int8Kernel::kPlain:
      return "plain C++";
    case cpu::Int8Kernel::kAvx2:
      return "AVX2";
    case cpu::Int8Kernel::kAvx512Vnni:
      return "AVX-512 VNNI";
    case cpu::Int8Kernel::kAvx2Rows:
      return "AVX2 rows";
    case cpu::Int8Kernel::kAvx2Quads:
      return "AVX2 quads";
  }
  return "?";
}

// A Q8_0 weight [rows, cols] of random values (std 0.05, as trained weights roughly are).
std::vector<uint8_t> RandomQ8_0(std::mt19937& rng, int64_t rows, int64_t cols) {
  const Vec w = Random(rng, static_cast<size_t>(rows * cols), 0.05f);
  std::vector<uint8_t> bytes(Q8_0Bytes(w.size()));
  QuantizeRowQ8_0(w, bytes);
  return bytes;
}

// LinearForward with Q8_0 weights: f32 activations against int8 activations, same weights, same
// inputs, same threads, one after the other for each shape.
int MainQ8_0(const Options& options) {
  const int64_t hidden = 896;  // Qwen2.5-0.5B
  const int64_t intermediate = 4864;
  auto f32 = cpu::NewCpuBackendWithOptions(
      options.threads, {.isa = options.isa, .q8_0_activations = cpu::Q8_0Activations::kF32});
  auto int8 = cpu::NewCpuBackendWithOptions(
      options.threads, {.isa = options.isa, .q8_0_activations = cpu::Q8_0Activations::kInt8});
  const cpu::Isa isa = std::min(options.isa, cpu::CpuIsa());
  std::printf(
      "kernels_bench --q8_0: LinearForward, Q8_0 weights; cpu threads: %s; int8 kernel: "
      "%s; medians of %d runs\n\n",
      options.threads > 0 ? std::to_string(options.threads).c_str() : "all cores",
      Int8KernelName(cpu::Int8KernelFor(isa)), options.runs);
  std::printf("%-18s %5s %11s %11s %8s %11s %11s | %10s %10s %8s\n", "shape (I -> O)", "N",
              "f32-act ms", "int8 ms", "ratio", "f32 GF/s", "int8 GF/s", "f32 cpu-ms",
              "int8 cpu-ms", "ratio");
  std::mt19937 rng(7);
  struct Shape {
    const char* name;
    int64_t in, out;
  };
  for (const Shape shape : {Shape{"up 896 -> 4864", hidden, intermediate},
                            Shape{"down 4864 -> 896", intermediate, hidden}}) {
    const std::vector<uint8_t> bytes = RandomQ8_0(rng, shape.out, shape.in);
    const WeightRef weight{.format = WeightRef::Format::kQ8_0,
                           .data = bytes.data(),
                           .rows = shape.out,
                           .cols = shape.in};
    for (const int64_t n : {int64_t{1}, int64_t{8}, int64_t{64}, int64_t{256}}) {
      const Vec x = Random(rng, static_cast<size_t>(n * shape.in));
      Vec out(static_cast<size_t>(n * shape.out));
      // The two paths alternate run by run, so that load from other processes hits both alike.
      const auto f32_run = [&] { f32->LinearForward(out.data(), x.data(), weight, nullptr, n); };
      const auto int8_run = [&] { int8->LinearForward(out.data(), x.data(), weight, nullptr, n); };
      f32_run();
      int8_run();
      std::vector<Timing> slow_runs;
      std::vector<Timing> fast_runs;
      for (int r = 0; r < options.runs; ++r) {
        slow_runs.push_back(Measure(1, f32_run, /*warm_up=*/false));
        fast_runs.push_back(Measure(1, int8_run, /*warm_up=*/false));
      }
      const auto median = [](std::vector<Timing> runs) {
        std::vector<double> walls;
        std::vector<double> cpus;
        for (const Timing& t : runs) {
          walls.push_back(t.wall_s);
          cpus.push_back(t.cpu_s);
        }
        std::sort(walls.begin(), walls.end());
        std::sort(cpus.begin(), cpus.end());
        return Timing{walls[walls.size() / 2], cpus[cpus.size() / 2]};
      };
      const Timing slow = median(slow_runs);
      const Timing fast = median(fast_runs);
      const double flops = 2.0 * static_cast<double>(n * shape.in * shape.out);
      std::printf("%-18s %5lld %11.3f %11.3f %7.2fx %11.1f %11.1f | %10.3f %10.3f %7.2fx\n",
                  shape.name, static_cast<long long>(n), slow.wall_s * 1e3, fast.wall_s * 1e3,
                  slow.wall_s / fast.wall_s, flops / slow.wall_s / 1e9, flops / fast.wall_s / 1e9,
                  slow.cpu_s * 1e3, fast.cpu_s * 1e3, slow.cpu_s / fast.cpu_s);
      std::fflush(stdout);
    }
  }

  // The int8 kernels themselves at the batch sizes of decode: the row kernel and the quad kernel
  // (what Q8_0ProductInt8 runs below Int8KernelForRows' threshold) against the tile kernel, on
  // the same weights and rows, alternating run by run.
  const cpu::Int8Kernel widest = cpu::Int8KernelFor(isa);
  if (widest == cpu::Int8Kernel::kPlain) return 0;
  const cpu::Int8Kernel kernels[] = {cpu::Int8Kernel::kAvx2Rows, cpu::Int8Kernel::kAvx2Quads,
                                     widest};
  std::printf(
      "\nint8 small-batch kernels (%s, %s) against the tile kernel (%s); '*' marks what "
      "runs; GB/s of the weights at the fastest\n",
      Int8KernelName(kernels[0]), Int8KernelName(kernels[1]), Int8KernelName(widest));
  std::printf("%-18s %5s %11s %11s %11s %9s\n", "shape (I -> O)", "N", "rows ms", "quads ms",
              "tile ms", "GB/s");
  cpu::Context context(options.threads > 0 ? options.threads : 0, isa);
  // The output head (Qwen2.5-0.5B's tied embedding: 151936 x 896, 145 MB) does not fit any
  // cache: its GB/s is the kernel's against memory, to compare with bench/serve's membw.
  for (const Shape shape : {Shape{"up 896 -> 4864", hidden, intermediate},
                            Shape{"down 4864 -> 896", intermediate, hidden},
                            Shape{"head 896 -> 151936", hidden, 151936}}) {
    const std::vector<uint8_t> bytes = RandomQ8_0(rng, shape.out, shape.in);
    const WeightRef weight{.format = WeightRef::Format::kQ8_0,
                           .data = bytes.data(),
                           .rows = shape.out,
                           .cols = shape.in};
    for (const int64_t n :
         {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{6}, int64_t{8}}) {
      const Vec x = Random(rng, static_cast<size_t>(n * shape.in));
      Vec out(static_cast<size_t>(n * shape.out));
      const auto run_with = [&](cpu::Int8Kernel kernel) {
        return [&, kernel] {
          cpu::Q8_0ProductInt8With(kernel, context, out.data(), x.data(), weight, n, 0.0f);
        };
      };
      for (const cpu::Int8Kernel kernel : kernels) run_with(kernel)();  // warm-up
      std::vector<double> ms[3];
      for (int r = 0; r < options.runs; ++r) {
        for (int k = 0; k < 3; ++k) {
          ms[k].push_back(Measure(1, run_with(kernels[k]), /*warm_up=*/false).wall_s * 1e3);
        }
      }
      const cpu::Int8Kernel runs = cpu::Int8KernelForRows(widest, n);
      std::printf("%-18s %5lld", shape.name, static_cast<long long>(n));
      double fastest = 0;
      for (int k = 0; k < 3; ++k) {
        std::sort(ms[k].begin(), ms[k].end());
        const double median = ms[k][ms[k].size() / 2];
        fastest = k == 0 ? median : std::min(fastest, median);
        std::printf(" %10.3f%s", median, runs == kernels[k] ? "*" : " ");
      }
      std::printf(" %9.1f\n", static_cast<double>(bytes.size()) / (fastest * 1e-3) / 1e9);
      std::fflush(stdout);
    }
  }
  return 0;
}

// PagedAttention on serving shapes: the cpu backend against the reference, same inputs.
int MainPaged(const Options& options) {
  std::unique_ptr<Backend> reference = NewReferenceBackend();
  std::unique_ptr<Backend> cpu = NewCpuBackend(options.threads);
  const double peak =
      PeakSgemmGflops(options.threads > 0 ? options.threads : openblas_get_num_procs(), 2048, 3);
  std::printf(
      "kernels_bench --paged: PagedAttention, 14 query heads, 2 kv heads, D=64; cpu "
      "threads: %s; medians of %d runs; sgemm peak %.1f GFLOP/s\n\n",
      options.threads > 0 ? std::to_string(options.threads).c_str() : "all cores", options.runs,
      peak);
  std::printf("%-34s %12s %10s %9s %10s %8s\n", "case", "reference ms", "cpu ms", "speed-up",
              "cpu GF/s", "of peak");
  Backend::PagedAttentionShape s{.q_heads = 14,
                                 .kv_heads = 2,
                                 .head_dim = 64,
                                 .block_size = 16,
                                 .max_blocks = 64,
                                 .window = 0,
                                 .scale = 0.125f};
  struct Case {
    const char* name;
    int64_t sequences, tokens, first_position;  // each sequence: tokens from first_position on
  };
  std::mt19937 rng(5);
  const int64_t row = s.kv_heads * s.head_dim;
  for (const Case c : {Case{"prefill 44 after 688 cached", 1, 44, 688},
                       Case{"decode 1 sequence at 731", 1, 1, 731},
                       Case{"decode 4 sequences at 300", 4, 1, 300}}) {
    const int64_t blocks = c.sequences * s.max_blocks;
    const Vec k_cache = Random(rng, static_cast<size_t>(blocks * s.block_size * row));
    const Vec v_cache = Random(rng, static_cast<size_t>(blocks * s.block_size * row));
    std::vector<int32_t> tables(static_cast<size_t>(blocks));
    // Scattered blocks: sequence b's block i is b + sequences * (max_blocks - 1 - i).
    for (int64_t b = 0; b < c.sequences; ++b) {
      for (int64_t i = 0; i < s.max_blocks; ++i) {
        tables[static_cast<size_t>(b * s.max_blocks + i)] =
            static_cast<int32_t>(b + c.sequences * (s.max_blocks - 1 - i));
      }
    }
    std::vector<int32_t> seq_of, positions;
    double visible = 0;
    for (int64_t b = 0; b < c.sequences; ++b) {
      for (int64_t t = 0; t < c.tokens; ++t) {
        seq_of.push_back(static_cast<int32_t>(b));
        positions.push_back(static_cast<int32_t>(c.first_position + t));
        visible += static_cast<double>(c.first_position + t + 1);
      }
    }
    const int64_t n = static_cast<int64_t>(seq_of.size());
    const Vec q = Random(rng, static_cast<size_t>(n * s.q_heads * s.head_dim));
    Vec out(q.size());
    const auto run_on = [&](Backend& backend) {
      return [&] {
        backend.PagedAttention(out.data(), q.data(), k_cache.data(), v_cache.data(), seq_of.data(),
                               positions.data(), tables.data(), n, s);
      };
    };
    const double reference_s = Measure(3, run_on(*reference), /*warm_up=*/false).wall_s;
    const double cpu_s = Measure(options.runs, run_on(*cpu)).wall_s;
    const double flops = 4.0 * static_cast<double>(s.head_dim * s.q_heads) * visible;
    std::printf("%-34s %12.3f %10.3f %8.1fx %10.1f %7.1f%%\n", c.name, reference_s * 1e3,
                cpu_s * 1e3, reference_s / cpu_s, flops / cpu_s / 1e9,
                100.0 * flops / cpu_s / 1e9 / peak);
    std::fflush(stdout);
  }
  return 0;
}

int Main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  if (options.q8_0) return MainQ8_0(options);
  if (options.paged) return MainPaged(options);
  if (options.peak) {
    std::printf(
        "%.1f\n",
        PeakSgemmGflops(options.threads > 0 ? options.threads : openblas_get_num_procs(), 2048, 3));
    return 0;
  }
  std::unique_ptr<Backend> reference = NewReferenceBackend();
  std::unique_ptr<Backend> cpu = NewCpuBackend(options.threads);
  const int threads = options.threads > 0 ? options.threads : 0;

  // Shapes of one LoRA training step of a small Llama-style layer.
  const int64_t N = options.tokens;
  const int64_t B = 2;
  const int64_t T = N / B;
  const int64_t C = 512;
  const int64_t F = 1376;
  const int64_t V = 8192;
  const int64_t H = 8;
  const int64_t KV = 4;
  const int64_t D = 64;
  const int64_t R = 16;

  std::mt19937 rng(42);
  // Activations and gradients.
  const Vec x_nc = Random(rng, static_cast<size_t>(N * C));
  const Vec dout_nc = Random(rng, static_cast<size_t>(N * C));
  const Vec x_nf = Random(rng, static_cast<size_t>(N * F));
  const Vec dout_nf = Random(rng, static_cast<size_t>(N * F));
  Vec out_nc(x_nc.size()), out_nf(x_nf.size()), dx_nc(x_nc.size()), dx_nf(x_nf.size());
  Vec dx2_nf(x_nf.size());
  // Weights: the up projection C -> F in each format.
  const Vec w_fc = Random(rng, static_cast<size_t>(F * C), 1.0f / std::sqrt(static_cast<float>(C)));
  std::vector<uint16_t> w_fc_bf16;
  for (float w : w_fc) w_fc_bf16.push_back(tensor::FloatToBF16(w));
  auto quantized = QuantizeNf4(w_fc);
  if (!quantized.ok()) {
    std::fprintf(stderr, "QuantizeNf4: %s\n", quantized.status().ToString().c_str());
    return 1;
  }
  const Nf4Quantized w_fc_nf4 = std::move(*quantized);
  const WeightRef up_f32{
      .format = WeightRef::Format::kF32, .data = w_fc.data(), .rows = F, .cols = C};
  const WeightRef up_bf16{
      .format = WeightRef::Format::kBF16, .data = w_fc_bf16.data(), .rows = F, .cols = C};
  const WeightRef up_nf4{
      .format = WeightRef::Format::kNF4, .nf4 = w_fc_nf4.View(), .rows = F, .cols = C};
  // The head V x C, bf16 and frozen (LoRA does not train it).
  const Vec head = Random(rng, static_cast<size_t>(V * C), 0.05f);
  std::vector<uint16_t> head_bf16;
  for (float w : head) head_bf16.push_back(tensor::FloatToBF16(w));
  const WeightRef head_ref{
      .format = WeightRef::Format::kBF16, .data = head_bf16.data(), .rows = V, .cols = C};
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> ids(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
  for (auto& id : ids) id = token(rng);
  for (auto& t : targets) t = token(rng);
  Vec embed_table(static_cast<size_t>(V * C)), dtable(static_cast<size_t>(V * C));
  // Attention.
  const Vec q = Random(rng, static_cast<size_t>(N * H * D));
  const Vec k = Random(rng, static_cast<size_t>(N * KV * D));
  const Vec v = Random(rng, static_cast<size_t>(N * KV * D));
  const Vec dattn = Random(rng, static_cast<size_t>(N * H * D));
  Vec attn(q.size()), lse(static_cast<size_t>(B * H * T)), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<int32_t> positions(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) positions[static_cast<size_t>(n)] = static_cast<int32_t>(n % T);
  const auto inv_freq = RopeInverseFrequencies(D, 500000.0, RopeScaling{});
  Vec rope_out(q.size()), drope(q.size());
  // Norm, LoRA, optimizer.
  const Vec norm_weight = Random(rng, static_cast<size_t>(C));
  Vec rstd(static_cast<size_t>(N)), dnorm_weight(static_cast<size_t>(C));
  const Vec lora_a = Random(rng, static_cast<size_t>(R * C), 0.02f);
  const Vec lora_b = Random(rng, static_cast<size_t>(C * R), 0.02f);
  Vec xa(static_cast<size_t>(N * R)), da(lora_a.size()), db(lora_b.size());
  const int64_t params = 4 << 20;  // LoRA adapters of a 1B model at rank 16: a few million
  Vec param = Random(rng, static_cast<size_t>(params)), m(static_cast<size_t>(params)),
      vv(static_cast<size_t>(params));
  const Vec grad = Random(rng, static_cast<size_t>(params), 1e-3f);
  Vec nf4_out(w_fc.size()), dw_fc(w_fc.size());

  const Backend::AttentionShape attention{.batch = B,
                                          .seq_len = T,
                                          .q_heads = H,
                                          .kv_heads = KV,
                                          .head_dim = D,
                                          .scale = 1.0f / std::sqrt(static_cast<float>(D))};
  const double linear_flops = 2.0 * 2.0 * static_cast<double>(N * C * F);  // forward + dx
  const std::vector<Bench> benches = {
      {"linear f32 C->F fwd+dx", linear_flops,
       [&](Backend& b) {
         b.LinearForward(out_nf.data(), x_nc.data(), up_f32, nullptr, N);
         b.LinearBackwardInput(dx_nc.data(), dout_nf.data(), up_f32, N);
       }},
      {"linear bf16 C->F fwd+dx", linear_flops,
       [&](Backend& b) {
         b.LinearForward(out_nf.data(), x_nc.data(), up_bf16, nullptr, N);
         b.LinearBackwardInput(dx_nc.data(), dout_nf.data(), up_bf16, N);
       }},
      {"linear nf4 C->F fwd+dx", linear_flops,
       [&](Backend& b) {
         b.LinearForward(out_nf.data(), x_nc.data(), up_nf4, nullptr, N);
         b.LinearBackwardInput(dx_nc.data(), dout_nf.data(), up_nf4, N);
       }},
      {"dweight f32 F x C (gemm)", 2.0 * static_cast<double>(N * C * F),
       [&](Backend& b) {
         // dw[F, C] += dout^T @ x, the weight gradient of a trained f32 linear layer.
         b.Gemm(true, false, F, C, N, 1.0f, dout_nf.data(), x_nc.data(), 1.0f, dw_fc.data());
       }},
      {"attention fwd+bwd", 0,
       [&](Backend& b) {
         b.AttentionForward(attn.data(), lse.data(), q.data(), k.data(), v.data(), nullptr,
                            attention);
         b.AttentionBackward(dq.data(), dk.data(), dv.data(), dattn.data(), attn.data(), lse.data(),
                             q.data(), k.data(), v.data(), nullptr, attention);
       }},
      {"cross_entropy bf16 head fwd+bwd", 2.0 * 2.0 * static_cast<double>(N * C * V),
       [&](Backend& b) {
         b.CrossEntropy(dx_nc.data(), nullptr, x_nc.data(), head_ref, targets.data(), N,
                        1.0f / static_cast<float>(N), 256);
       }},
      {"lora r=16 C->C p=0.1 fwd+bwd", 2.0 * 6.0 * static_cast<double>(N * C * R),
       [&](Backend& b) {
         const Dropout dropout{.probability = 0.1f, .seed = 7};
         b.LoraForward(out_nc.data(), xa.data(), x_nc.data(), lora_a.data(), lora_b.data(), N, C, C,
                       R, 2.0f, dropout);
         b.LoraBackward(dx_nc.data(), da.data(), db.data(), dout_nc.data(), x_nc.data(), xa.data(),
                        lora_a.data(), lora_b.data(), N, C, C, R, 2.0f, dropout);
       }},
      {"rmsnorm fwd+bwd", 0,
       [&](Backend& b) {
         b.RmsNormForward(out_nc.data(), rstd.data(), x_nc.data(), norm_weight.data(), N, C, 1e-5f);
         b.RmsNormBackward(dx_nc.data(), dnorm_weight.data(), dout_nc.data(), x_nc.data(),
                           norm_weight.data(), rstd.data(), N, C);
       }},
      {"rope q fwd+bwd", 0,
       [&](Backend& b) {
         b.RopeForward(rope_out.data(), q.data(), positions.data(), inv_freq->data(), N, H, D);
         b.RopeBackward(drope.data(), dattn.data(), positions.data(), inv_freq->data(), N, H, D);
       }},
      {"swiglu fwd+bwd", 0,
       [&](Backend& b) {
         b.SwiGluForward(out_nf.data(), x_nf.data(), dout_nf.data(), N * F);
         b.SwiGluBackward(dx_nf.data(), dx2_nf.data(), dout_nf.data(), x_nf.data(), dout_nf.data(),
                          N * F);
       }},
      {"add (residual)", 0,
       [&](Backend& b) { b.Add(out_nf.data(), x_nf.data(), dout_nf.data(), N * F); }},
      {"embedding fwd+bwd", 0,
       [&](Backend& b) {
         const WeightRef table{
             .format = WeightRef::Format::kF32, .data = embed_table.data(), .rows = V, .cols = C};
         b.EmbeddingForward(out_nc.data(), ids.data(), table, N);
         b.EmbeddingBackward(dtable.data(), dout_nc.data(), ids.data(), N, V, C);
       }},
      {"nf4 dequantize F x C", 0,
       [&](Backend& b) { b.Nf4Dequantize(nf4_out.data(), w_fc_nf4.View(), F * C); }},
      {"adamw 4M params + norm + scale", 0,
       [&](Backend& b) {
         const double norm = std::sqrt(b.SumOfSquares(grad.data(), params));
         b.AdamWStep(param.data(), grad.data(), m.data(), vv.data(), params,
                     {.learning_rate = 1e-4f, .weight_decay = 0.01f, .step = 3});
         b.Scale(param.data(), static_cast<float>(1.0 / (1.0 + norm * 1e-9)), params);
       }},
  };

  const double peak = PeakSgemmGflops(threads > 0 ? threads : openblas_get_num_procs(), 2048, 3);
  double backend_square_gflops = 0;
  {
    // The same square product through the cpu backend's Gemm (its own split over its threads).
    const int64_t n = 2048;
    const Vec a = Random(rng, static_cast<size_t>(n * n));
    const Vec bm = Random(rng, static_cast<size_t>(n * n));
    Vec c(static_cast<size_t>(n * n));
    const double seconds =
        Measure(3, [&] {
          cpu->Gemm(false, false, n, n, n, 1.0f, a.data(), bm.data(), 0.0f, c.data());
        }).wall_s;
    backend_square_gflops = 2.0 * static_cast<double>(n * n * n) / seconds / 1e9;
  }

  std::printf(
      "kernels_bench: N=%lld (B=%lld x T=%lld) C=%lld F=%lld V=%lld H=%lld KV=%lld D=%lld "
      "R=%lld\n",
      static_cast<long long>(N), static_cast<long long>(B), static_cast<long long>(T),
      static_cast<long long>(C), static_cast<long long>(F), static_cast<long long>(V),
      static_cast<long long>(H), static_cast<long long>(KV), static_cast<long long>(D),
      static_cast<long long>(R));
  std::printf("cpu threads: %s; OpenBLAS kernels: %s; medians of %d cpu / %d reference runs\n",
              threads > 0 ? std::to_string(threads).c_str() : "all cores", openblas_get_corename(),
              options.runs, options.reference_runs);
  std::printf(
      "peak: cblas_sgemm 2048^3 on its own threads %.1f GFLOP/s; through the cpu "
      "backend's Gemm %.1f GFLOP/s\n\n",
      peak, backend_square_gflops);
  std::printf("%-32s %12s %12s %9s %10s %8s | %9s %9s %8s\n", "op (forward + backward)",
              "reference ms", "cpu ms", "speed-up", "sgemm GF/s", "of peak", "ref cpu-s",
              "cpu cpu-s", "speed-up");
  for (const Bench& bench : benches) {
    if (!options.only.empty() && bench.name.find(options.only) == std::string::npos) continue;
    const Timing fast = Measure(options.runs, [&] { bench.run(*cpu); });
    Timing slow;
    if (options.reference_runs > 0) {
      slow = Measure(
          options.reference_runs, [&] { bench.run(*reference); }, /*warm_up=*/false);
    }
    const auto ratio = [](double a, double b) {
      char text[32] = "-";
      if (a > 0 && b > 0) std::snprintf(text, sizeof text, "%.1fx", a / b);
      return std::string(text);
    };
    char gflops[32] = "-";
    char share[32] = "-";
    if (bench.gemm_flops > 0) {
      const double achieved = bench.gemm_flops / fast.wall_s / 1e9;
      std::snprintf(gflops, sizeof gflops, "%.1f", achieved);
      std::snprintf(share, sizeof share, "%.0f%%", 100.0 * achieved / peak);
    }
    std::printf("%-32s %12.1f %12.2f %9s %10s %8s | %9.3f %9.3f %8s\n", bench.name.c_str(),
                slow.wall_s * 1e3, fast.wall_s * 1e3, ratio(slow.wall_s, fast.wall_s).c_str(),
                gflops, share, slow.cpu_s, fast.cpu_s, ratio(slow.cpu_s, fast.cpu_s).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace sovai::kernels

int main(int argc, char** argv) { return sovai::kernels::Main(argc, argv); }
