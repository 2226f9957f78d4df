// Times LoRA training steps of sovai's engine on a model directory written by run.py, and prints
// one JSON line: tokens/s (median over rounds), peak resident memory and the step's GFLOP/s.
//
//   lora_step_bench MODEL_DIR BATCH SEQ_LEN RANK STEPS THREADS
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "base/env.h"
#include "kernels/backend.h"
#include "model/llama.h"
#include "model/model_dir.h"

namespace sovai {
namespace {

int Run(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: lora_step_bench MODEL_DIR BATCH SEQ_LEN RANK STEPS THREADS\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t batch = std::atoll(argv[2]), seq = std::atoll(argv[3]), rank = std::atoll(argv[4]);
  const int steps = std::atoi(argv[5]), threads = std::atoi(argv[6]);
  auto loaded = model::LoadModelDir(base::Env::Default(), dir);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
    return 1;
  }
  // The backend before the model, whose buffers it frees.
  auto backend = kernels::NewCpuBackend(threads);
  auto m = model::LlamaModel::Load(
      *backend, loaded->config, model::TensorSourceOf(*loaded->weights), model::BaseWeights::kF32);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    return 1;
  }
  model::LoraOptions lora;
  lora.rank = rank;
  lora.alpha = 2.0 * static_cast<double>(rank);
  lora.dropout = 0;
  if (auto st = (*m)->AddLora(lora); !st.ok()) return 1;
  const model::ModelConfig& c = loaded->config;
  const int64_t n = batch * seq;
  std::vector<int32_t> tokens(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % c.vocab_size);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729 + 1) % c.vocab_size);
  }
  model::Batch b{batch, seq, tokens, targets, {}, {}};
  std::vector<model::Parameter*> params = (*m)->TrainableParameters();
  std::vector<kernels::DeviceBuffer> m1, m2;
  for (auto* p : params) {
    auto zeros1 = kernels::AllocateZeros<float>(*backend, p->numel());
    auto zeros2 = kernels::AllocateZeros<float>(*backend, p->numel());
    if (!zeros1.ok() || !zeros2.ok()) return 1;
    m1.push_back(std::move(*zeros1));
    m2.push_back(std::move(*zeros2));
  }
  std::vector<double> seconds;
  for (int s = 0; s <= steps; ++s) {  // step 0 warms up
    auto start = std::chrono::steady_clock::now();
    auto loss = (*m)->TrainForwardBackward(*backend, b, 1.0f / static_cast<float>(n), 0);
    if (!loss.ok()) return 1;
    kernels::Backend::AdamWParams adam;
    adam.learning_rate = 1e-4f;
    adam.step = s + 1;
    for (size_t i = 0; i < params.size(); ++i) {
      backend->AdamWStep(params[i]->value.as<float>(), params[i]->grad.as<float>(),
                         m1[i].as<float>(), m2[i].as<float>(), params[i]->numel(), adam);
      backend->Zero(params[i]->grad.data(), params[i]->grad.bytes());
    }
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s > 0) seconds.push_back(elapsed);
  }
  std::sort(seconds.begin(), seconds.end());
  double median = seconds[seconds.size() / 2];
  struct rusage usage;
  ::getrusage(RUSAGE_SELF, &usage);
  std::printf("{\"tokens_per_second\": %.1f, \"step_seconds\": %.4f, \"peak_rss_mib\": %.1f}\n",
              static_cast<double>(n) / median, median, static_cast<double>(usage.ru_maxrss) / 1024);
  return 0;
}

}  // namespace
}  // namespace sovai

int main(int argc, char** argv) { return sovai::Run(argc, argv); }
