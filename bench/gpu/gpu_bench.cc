// gpu_bench: the two ceilings of this GPU, measured, for the engine's GPU numbers to be read
// against (see bench/gpu/README.md):
//   matrix rate   a large square bf16 product (f32 accumulation, bf16 out) through
//                 kernels/cuda/matmul.h's MatmulPlanner, as the engine will call cuBLASLt: the
//                 denominator of MFU (model FLOPs/token x tokens/s / matrix rate);
//   bandwidth     a read kernel and a copy kernel over buffers far larger than L2 (and
//                 cudaMemcpy device-to-device as the peer): the denominator of the decode bound
//                 (bytes read per token / bandwidth).
// plus the products of a Llama-3-8B layer at 4096 tokens (training, prefill) and at one token
// (decode, where the weight bytes read per second is the number to compare with the bandwidth).
//
// Every number is the median of --runs timed repetitions (CUDA events) after warm-up, on random
// data; the large product is spot-checked against a host double reference. Prints a table and
// writes JSON (--json PATH). Asserts nothing; exits 1 only when something fails to run.
//
// Usage: gpu_bench [--json PATH] [--size 8192] [--runs 30] [--buffer-mib 2048] [--quick]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_kernels.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/matmul.h"
#include "tensor/dtype.h"

namespace {

using sovai::kernels::cuda::GemmArgs;
using sovai::kernels::cuda::MatmulPlanner;
using sovai::kernels::cuda::Stream;

// Buffers rotated through so that repeated products over small weights are not served from L2:
// at least this many bytes of distinct weights per timed shape.
constexpr int64_t kRotationBytes = int64_t{1} << 30;
constexpr int kMaxRotation = 64;
// A timed batch should last at least this long, so that event resolution and launch gaps vanish.
constexpr double kMinBatchSeconds = 2e-3;
constexpr int kWarmupRuns = 3;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "gpu_bench: %s\n", what.c_str());
  std::exit(1);
}
void CudaCheck(cudaError_t error, const char* what) {
  if (error != cudaSuccess) Fail(std::string(what) + ": " + cudaGetErrorString(error));
}
void StatusCheck(const sovai::base::Status& status, const std::string& what) {
  if (!status.ok()) Fail(what + ": " + status.ToString());
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    CudaCheck(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  uint16_t* bf16() const { return static_cast<uint16_t*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Times `body(i)` (which enqueues work on `stream`): warm-up, then `runs` batches of `inner`
// calls, each batch between two events; returns the seconds of one call per batch. `inner` is
// chosen from one warm call so that a batch lasts at least kMinBatchSeconds.
template <typename Body>
std::vector<double> TimeRuns(cudaStream_t stream, int runs, Body body) {
  cudaEvent_t start, stop;
  CudaCheck(cudaEventCreate(&start), "cudaEventCreate");
  CudaCheck(cudaEventCreate(&stop), "cudaEventCreate");
  int64_t call = 0;
  for (int i = 0; i < kWarmupRuns; ++i) body(call++);
  CudaCheck(cudaEventRecord(start, stream), "cudaEventRecord");
  body(call++);
  CudaCheck(cudaEventRecord(stop, stream), "cudaEventRecord");
  CudaCheck(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float one_ms = 0;
  CudaCheck(cudaEventElapsedTime(&one_ms, start, stop), "cudaEventElapsedTime");
  const int inner = static_cast<int>(
      std::clamp(std::ceil(kMinBatchSeconds / std::max(one_ms * 1e-3, 1e-7)), 1.0, 1000.0));
  std::vector<double> seconds;
  for (int r = 0; r < runs; ++r) {
    CudaCheck(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < inner; ++i) body(call++);
    CudaCheck(cudaEventRecord(stop, stream), "cudaEventRecord");
    CudaCheck(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    CudaCheck(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    seconds.push_back(ms * 1e-3 / inner);
  }
  CudaCheck(cudaGetLastError(), "timed work");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return seconds;
}

struct GemmResult {
  std::string name;
  int64_t m = 0, n = 0, k = 0;
  int rotation = 1;
  double median_s = 0, min_s = 0, max_s = 0;
  double tflops() const { return 2.0 * m * n * k / median_s / 1e12; }
  // Bytes of B (the weight) read per second: the figure of merit of a decode product.
  double weight_gbps() const { return 2.0 * n * k / median_s / 1e9; }
  double check_error = -1;  // max |error| / S over sampled elements; -1: not checked
};

// C[M, N] = A[M, K] @ B[N, K]^T, bf16 out, rotating over copies of B when it is small.
GemmResult TimeGemm(MatmulPlanner& planner, const std::string& name, int64_t m, int64_t n,
                    int64_t k, int runs, int multiprocessors, cudaStream_t stream, bool check) {
  const int64_t b_bytes = 2 * n * k;
  const int rotation =
      static_cast<int>(std::clamp<int64_t>(kRotationBytes / b_bytes, 1, kMaxRotation));
  DeviceBuffer a(2 * m * k), c(2 * m * n);
  std::vector<std::unique_ptr<DeviceBuffer>> b;
  uint32_t seed = 1;
  CudaCheck(sovai::bench::FillRandomBf16(a.bf16(), m * k, seed++, multiprocessors, stream), "fill");
  for (int i = 0; i < rotation; ++i) {
    b.push_back(std::make_unique<DeviceBuffer>(b_bytes));
    CudaCheck(
        sovai::bench::FillRandomBf16(b.back()->bf16(), n * k, seed++, multiprocessors, stream),
        "fill");
  }
  auto product = [&](int64_t call) {
    const GemmArgs args{
        .m = m, .n = n, .k = k, .a = a.bf16(), .b = b[call % rotation]->bf16(), .c = c.get()};
    StatusCheck(planner.Gemm(args, Stream{stream}), name);
  };
  const std::vector<double> seconds = TimeRuns(stream, runs, product);
  GemmResult result{.name = name, .m = m, .n = n, .k = k, .rotation = rotation};
  result.median_s = Median(seconds);
  result.min_s = *std::min_element(seconds.begin(), seconds.end());
  result.max_s = *std::max_element(seconds.begin(), seconds.end());

  if (check) {
    // The last call used b[(calls - 1) % rotation]; recompute it with b[0] to know which.
    product(0);
    CudaCheck(cudaStreamSynchronize(stream), "product");
    std::vector<uint16_t> ha(m * k), hb(n * k), hc(m * n);
    CudaCheck(cudaMemcpy(ha.data(), a.get(), ha.size() * 2, cudaMemcpyDeviceToHost), "download");
    CudaCheck(cudaMemcpy(hb.data(), b[0]->get(), hb.size() * 2, cudaMemcpyDeviceToHost),
              "download");
    CudaCheck(cudaMemcpy(hc.data(), c.get(), hc.size() * 2, cudaMemcpyDeviceToHost), "download");
    std::mt19937_64 rng(7);
    double worst = 0;
    for (int sample = 0; sample < 64; ++sample) {
      const int64_t i = static_cast<int64_t>(rng() % m), j = static_cast<int64_t>(rng() % n);
      double sum = 0, scale = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double term = double{sovai::tensor::BF16ToFloat(ha[i * k + l])} *
                            sovai::tensor::BF16ToFloat(hb[j * k + l]);
        sum += term;
        scale += std::fabs(term);
      }
      const double got = sovai::tensor::BF16ToFloat(hc[i * n + j]);
      // bf16 output: half an ulp of |sum| is inherent; measure the rest against the terms' size.
      const double error = std::max(0.0, std::fabs(got - sum) - std::ldexp(std::fabs(sum), -9));
      worst = std::max(worst, std::isnan(got) ? INFINITY : error / scale);
    }
    result.check_error = worst;
  }
  return result;
}

struct BandwidthResult {
  std::string name;
  int64_t bytes_moved = 0;  // per run: read + written
  double median_s = 0, min_s = 0, max_s = 0;
  double gbps() const { return bytes_moved / median_s / 1e9; }
};

BandwidthResult Summarize(const std::string& name, int64_t bytes_moved,
                          const std::vector<double>& seconds) {
  return BandwidthResult{.name = name,
                         .bytes_moved = bytes_moved,
                         .median_s = Median(seconds),
                         .min_s = *std::min_element(seconds.begin(), seconds.end()),
                         .max_s = *std::max_element(seconds.begin(), seconds.end())};
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

// JSON has no inf or nan: a value that is not finite (a NaN in the spot check) is null.
std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int64_t size = 8192;
  int runs = 30;
  int64_t buffer_mib = 2048;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Fail("missing value after " + arg);
      return argv[++i];
    };
    if (arg == "--json") {
      json_path = next();
    } else if (arg == "--size") {
      size = std::atoll(next().c_str());
    } else if (arg == "--runs") {
      runs = std::atoi(next().c_str());
    } else if (arg == "--buffer-mib") {
      buffer_mib = std::atoll(next().c_str());
    } else if (arg == "--quick") {
      quick = true;
    } else {
      Fail("unknown argument " + arg +
           " (usage: gpu_bench [--json PATH] [--size N] [--runs R] [--buffer-mib MIB] [--quick])");
    }
  }
  if (quick) {
    size = std::min<int64_t>(size, 2048);
    runs = std::min(runs, 5);
    buffer_mib = std::min<int64_t>(buffer_mib, 256);
  }
  if (size <= 0 || runs <= 0 || buffer_mib <= 0) Fail("sizes and runs must be positive");

  auto devices = sovai::kernels::cuda::ListCudaDevices();
  if (!devices.ok() || devices->empty()) {
    Fail("no CUDA device: " +
         (devices.ok() ? std::string("none visible") : devices.status().ToString()));
  }
  const auto& device = devices->front();
  CudaCheck(cudaSetDevice(device.index), "cudaSetDevice");
  cudaDeviceProp prop{};
  CudaCheck(cudaGetDeviceProperties(&prop, device.index), "cudaGetDeviceProperties");
  const int sms = prop.multiProcessorCount;
  std::printf("device %d: %s sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", device.index, prop.name,
              prop.major, prop.minor, sms, prop.totalGlobalMem / 1073741824.0,
              prop.l2CacheSize / 1048576.0);
  cudaStream_t stream = nullptr;
  CudaCheck(cudaStreamCreate(&stream), "cudaStreamCreate");
  auto planner_or = MatmulPlanner::Create();
  StatusCheck(planner_or.status(), "MatmulPlanner::Create");
  MatmulPlanner& planner = **planner_or;

  // --- matrix rate ---
  const GemmResult square =
      TimeGemm(planner, "square", size, size, size, runs, sms, stream, /*check=*/true);
  std::printf(
      "matrix rate: %lld^3 bf16 (f32 accumulate, bf16 out) via cuBLASLt: median %.1f "
      "TFLOP/s (%.3f ms; min %.3f, max %.3f ms), spot check max error/scale %.2g\n",
      static_cast<long long>(size), square.tflops(), square.median_s * 1e3, square.min_s * 1e3,
      square.max_s * 1e3, square.check_error);

  // --- memory bandwidth ---
  const int64_t buffer_bytes = buffer_mib << 20;
  const int64_t chunks = buffer_bytes / 16;
  std::vector<BandwidthResult> bandwidth;
  {
    DeviceBuffer src(buffer_bytes), dst(buffer_bytes), sink(sizeof(uint32_t));
    CudaCheck(sovai::bench::FillRandomBf16(src.bf16(), buffer_bytes / 2, 99, sms, stream), "fill");
    CudaCheck(sovai::bench::FillRandomBf16(dst.bf16(), buffer_bytes / 2, 98, sms, stream), "fill");
    bandwidth.push_back(Summarize("read kernel", buffer_bytes, TimeRuns(stream, runs, [&](int64_t) {
                                    CudaCheck(sovai::bench::ReadChunks(
                                                  src.get(), chunks,
                                                  static_cast<uint32_t*>(sink.get()), sms, stream),
                                              "read kernel");
                                  })));
    bandwidth.push_back(
        Summarize("copy kernel", 2 * buffer_bytes, TimeRuns(stream, runs, [&](int64_t) {
                    CudaCheck(sovai::bench::CopyChunks(src.get(), dst.get(), chunks, sms, stream),
                              "copy kernel");
                  })));
    bandwidth.push_back(Summarize(
        "cudaMemcpy D2D", 2 * buffer_bytes, TimeRuns(stream, runs, [&](int64_t) {
          CudaCheck(
              cudaMemcpyAsync(dst.get(), src.get(), buffer_bytes, cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync");
        })));
  }
  for (const auto& b : bandwidth) {
    std::printf(
        "bandwidth: %-15s %.0f GB/s (bytes read + written %.2f GB per run, median %.3f ms)\n",
        b.name.c_str(), b.gbps(), b.bytes_moved / 1e9, b.median_s * 1e3);
  }

  // --- the products of a Llama-3-8B layer (C 4096, F 14336, V 128256) ---
  struct Shape {
    const char* name;
    int64_t m, n, k;
  };
  std::vector<Shape> shapes = {
      {"train/prefill q_proj, o_proj 4096 tok", 4096, 4096, 4096},
      {"train/prefill k_proj, v_proj 4096 tok", 4096, 1024, 4096},
      {"train/prefill gate/up 4096 tok", 4096, 14336, 4096},
      {"train/prefill down 4096 tok", 4096, 4096, 14336},
      {"train/prefill lm_head 4096 tok", 4096, 128256, 4096},
      {"decode q_proj 1 tok", 1, 4096, 4096},
      {"decode gate/up 1 tok", 1, 14336, 4096},
      {"decode down 1 tok", 1, 4096, 14336},
      {"decode lm_head 1 tok", 1, 128256, 4096},
  };
  if (quick) shapes.resize(2);
  std::vector<GemmResult> layer;
  for (const Shape& shape : shapes) {
    layer.push_back(TimeGemm(planner, shape.name, shape.m, shape.n, shape.k, runs, sms, stream,
                             /*check=*/false));
    const GemmResult& r = layer.back();
    std::printf("  %-40s M=%-5lld N=%-6lld K=%-5lld %8.1f TFLOP/s %8.0f GB/s of weights  %.4f ms\n",
                r.name.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.n),
                static_cast<long long>(r.k), r.tflops(), r.weight_gbps(), r.median_s * 1e3);
  }

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) Fail("cannot write " + json_path);
    std::fprintf(f,
                 "{\n  \"device\": {\"name\": %s, \"compute_capability\": \"%d.%d\", "
                 "\"multiprocessors\": %d, \"memory_bytes\": %zu, \"l2_bytes\": %d},\n",
                 JsonString(prop.name).c_str(), prop.major, prop.minor, sms, prop.totalGlobalMem,
                 prop.l2CacheSize);
    std::fprintf(f, "  \"runs\": %d,\n", runs);
    std::fprintf(f,
                 "  \"matrix\": {\"what\": \"bf16 x bf16, f32 accumulate, bf16 out, cuBLASLt "
                 "through MatmulPlanner\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"median_s\": "
                 "%s, \"min_s\": %s, \"max_s\": %s, \"median_tflops\": %s, "
                 "\"check_max_error_over_scale\": %s},\n",
                 static_cast<long long>(square.m), static_cast<long long>(square.n),
                 static_cast<long long>(square.k), JsonNumber(square.median_s).c_str(),
                 JsonNumber(square.min_s).c_str(), JsonNumber(square.max_s).c_str(),
                 JsonNumber(square.tflops()).c_str(), JsonNumber(square.check_error).c_str());
    std::fprintf(f, "  \"bandwidth\": {\"buffer_bytes\": %lld, \"results\": [\n",
                 static_cast<long long>(buffer_bytes));
    for (size_t i = 0; i < bandwidth.size(); ++i) {
      const auto& b = bandwidth[i];
      std::fprintf(f,
                   "    {\"name\": %s, \"bytes_moved\": %lld, \"median_s\": %s, \"min_s\": "
                   "%s, \"max_s\": %s, \"gbps\": %s}%s\n",
                   JsonString(b.name).c_str(), static_cast<long long>(b.bytes_moved),
                   JsonNumber(b.median_s).c_str(), JsonNumber(b.min_s).c_str(),
                   JsonNumber(b.max_s).c_str(), JsonNumber(b.gbps()).c_str(),
                   i + 1 < bandwidth.size() ? "," : "");
    }
    std::fprintf(f, "  ], \"read_gbps\": %s, \"copy_gbps\": %s},\n",
                 JsonNumber(bandwidth[0].gbps()).c_str(), JsonNumber(bandwidth[1].gbps()).c_str());
    std::fprintf(f, "  \"shapes\": [\n");
    for (size_t i = 0; i < layer.size(); ++i) {
      const auto& r = layer[i];
      std::fprintf(f,
                   "    {\"name\": %s, \"m\": %lld, \"n\": %lld, \"k\": %lld, \"rotation\": %d, "
                   "\"median_s\": %s, \"tflops\": %s, \"weight_gbps\": %s}%s\n",
                   JsonString(r.name).c_str(), static_cast<long long>(r.m),
                   static_cast<long long>(r.n), static_cast<long long>(r.k), r.rotation,
                   JsonNumber(r.median_s).c_str(), JsonNumber(r.tflops()).c_str(),
                   JsonNumber(r.weight_gbps()).c_str(), i + 1 < layer.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    if (std::fclose(f) != 0) Fail("cannot write " + json_path);
    std::printf("wrote %s\n", json_path.c_str());
  }
  planner_or.value().reset();
  CudaCheck(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return 0;
}
