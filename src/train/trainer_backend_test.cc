// The trainer on the device seam: every run keeps its model, gradients, moments and activations
// in the backend's memory. On the strict backend (kernels/backend.h), which stops the process when
// an op is handed anything but its own live buffers and poisons fresh ones, LoRA, QLoRA and full
// training (gradient accumulation, clipping, AdamW, evaluation, checkpoints) must compute the cpu
// backend's losses and write its adapter bit for bit, resume from a checkpoint exactly, and free
// every buffer at the end.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/env.h"
#include "kernels/backend.h"
#include "train/trainer.h"

namespace sovai::train {
namespace {

const std::string kTinyModel = SOVAI_TINY_MODEL_DIR;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What a run computed: per-step losses and gradient norms, validation losses (all at full
// precision: metrics.jsonl holds doubles as JSON writes them, round-trip exact), and the bytes of
// what it wrote. Timings are left out.
struct Outcome {
  std::vector<double> losses, grad_norms, eval_losses;
  std::string weights;  // adapter or model safetensors
};

Outcome Collect(const std::string& out_dir, Method method) {
  Outcome o;
  std::ifstream metrics(out_dir + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) {
      o.losses.push_back(j["loss"].get<double>());
      o.grad_norms.push_back(j["grad_norm"].get<double>());
    }
    if (j.contains("eval_loss")) o.eval_losses.push_back(j["eval_loss"].get<double>());
  }
  o.weights = ReadAll(out_dir + (method == Method::kFull ? "/model/model.safetensors"
                                                         : "/adapter/adapter_model.safetensors"));
  return o;
}

class TrainerBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sovai_trainer_backend_test_XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    std::ofstream data(dir_ + "/chat.jsonl");
    const char* words[] = {"red", "green", "blue", "small", "large", "round", "square", "bright"};
    for (int i = 0; i < 16; ++i) {
      const nlohmann::json line = {
          {"messages",
           {{{"role", "user"}, {"content", std::string("name a ") + words[i % 8] + " thing"}},
            {{"role", "assistant"},
             {"content", std::string("a ") + words[(i * 3) % 8] + " " + words[(i + 5) % 8] +
                             " one, " + words[(i * 5 + 1) % 8]}}}}};
      data << line.dump() << "\n";
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  TrainOptions Options(Method method, const std::string& name) const {
    TrainOptions o;
    o.model_dir = kTinyModel;
    o.data_path = dir_ + "/chat.jsonl";
    o.output_dir = dir_ + "/" + name;
    o.method = method;
    o.from_scratch = method == Method::kFull;
    o.lora.rank = 4;
    o.lora.alpha = 8;
    o.lora.dropout = 0.1f;  // the dropout masks go through the seam too
    o.schedule.peak = 1e-3;
    o.max_steps = 4;
    o.seq_len = 32;
    o.micro_batch_rows = 2;
    o.grad_accum = 2;
    o.max_grad_norm = 0.5;  // small enough that clipping scales the gradients
    o.eval_fraction = 0.2;
    o.eval_interval = 2;
    o.checkpoint_interval = 2;
    o.threads = 2;
    return o;
  }

  // Runs `options` on `backend`; sets `stop` once the log reports step `stop_after` (0: never),
  // as SIGTERM does.
  static base::Result<TrainResult> Run(kernels::Backend& backend, const TrainOptions& options,
                                       int64_t stop_after = 0) {
    std::atomic<bool> stop{false};
    const std::string marker = "step " + std::to_string(stop_after) + "/";
    const std::function<void(const std::string&)> log = [&](const std::string& line) {
      if (stop_after > 0 && line.rfind(marker, 0) == 0) stop = true;
    };
    return Train(base::Env::Default(), backend, options, log, stop);
  }

  std::string dir_;
};

class TrainerMethodTest : public TrainerBackendTest,
                          public ::testing::WithParamInterface<Method> {};

TEST_P(TrainerMethodTest, ComputesTheCpuBackendsBitsOnTheStrictBackend) {
  const Method method = GetParam();
  auto cpu = kernels::NewCpuBackend(2);
  auto strict = kernels::NewStrictBackend(kernels::NewCpuBackend(2));
  TrainOptions options = Options(method, "cpu");
  options.max_steps = 3;
  const base::Result<TrainResult> on_cpu = Run(*cpu, options);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  options.output_dir = dir_ + "/strict";
  const base::Result<TrainResult> on_strict = Run(*strict, options);
  ASSERT_TRUE(on_strict.ok()) << on_strict.status();
  EXPECT_EQ(on_strict->steps, 3);
  const Outcome want = Collect(dir_ + "/cpu", method);
  const Outcome got = Collect(dir_ + "/strict", method);
  ASSERT_EQ(want.losses.size(), 3u);
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.grad_norms, want.grad_norms);
  EXPECT_GT(want.grad_norms[0], 0.5);  // clipping ran
  EXPECT_EQ(got.eval_losses, want.eval_losses);
  EXPECT_FALSE(want.weights.empty());
  EXPECT_TRUE(got.weights == want.weights) << "the written weights differ";
  // Everything the run allocated was freed when it returned.
  EXPECT_EQ(strict->memory_stats().live_buffers, 0);
  EXPECT_GT(strict->memory_stats().peak_bytes, 0);
  EXPECT_EQ(cpu->memory_stats().live_buffers, 0);
}

INSTANTIATE_TEST_SUITE_P(Methods, TrainerMethodTest,
                         ::testing::Values(Method::kLora, Method::kQlora, Method::kFull),
                         [](const ::testing::TestParamInfo<Method>& info) {
                           return std::string(info.param == Method::kLora    ? "lora"
                                              : info.param == Method::kQlora ? "qlora"
                                                                             : "full");
                         });

TEST_F(TrainerBackendTest, AnInterruptedRunResumesFromItsCheckpointExactly) {
  auto strict = kernels::NewStrictBackend(kernels::NewCpuBackend(2));
  const base::Result<TrainResult> whole = Run(*strict, Options(Method::kLora, "whole"));
  ASSERT_TRUE(whole.ok()) << whole.status();

  TrainOptions options = Options(Method::kLora, "resumed");
  const base::Result<TrainResult> first = Run(*strict, options, /*stop_after=*/3);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->interrupted);
  EXPECT_EQ(first->steps, 3);
  options.resume = true;
  const base::Result<TrainResult> second = Run(*strict, options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->steps, 4);

  const Outcome want = Collect(dir_ + "/whole", Method::kLora);
  const Outcome got = Collect(dir_ + "/resumed", Method::kLora);
  // metrics.jsonl is appended to by both halves: steps 1-3, then step 4.
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.grad_norms, want.grad_norms);
  EXPECT_EQ(got.eval_losses, want.eval_losses);  // before training, at step 2 and at the end
  EXPECT_TRUE(got.weights == want.weights) << "the resumed run's adapter differs";
  EXPECT_EQ(strict->memory_stats().live_buffers, 0);
}

}  // namespace
}  // namespace sovai::train
