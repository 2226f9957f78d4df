#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "base/unit_manifest.h"
#include "kernels/backend.h"

namespace sovai::train {
namespace {

using Floats = std::vector<float>;

// Parameters and moments live in a backend's memory; the strict backend refuses any transfer
// that does not go through its own buffers.
model::Parameter Param(kernels::Backend& backend, std::string name, std::vector<uint64_t> shape,
                       const Floats& values) {
  auto p = model::NewParameter(backend, std::move(name), std::move(shape), values, true);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(*p);
}

kernels::DeviceBuffer Buffer(kernels::Backend& backend, const Floats& values) {
  auto buffer = kernels::UploadNew<float>(backend, values);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  return std::move(*buffer);
}

Floats Values(const kernels::DeviceBuffer& buffer) { return kernels::DownloadAll<float>(buffer); }

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sovai_checkpoint_test_XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    a_ = Param(*backend_, kA, {2, 3}, {1, 2, 3, 4, 5, 6});
    b_ = Param(*backend_, kB, {3, 2}, {-1, -2, -3, -4, -5, -6});
    moments_.push_back(Moments{Buffer(*backend_, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}),
                               Buffer(*backend_, {1, 1, 1, 1, 1, 1})});
    moments_.push_back(
        Moments{Buffer(*backend_, {7, 8, 9, 10, 11, 12}), Buffer(*backend_, {2, 2, 2, 2, 2, 2})});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<model::Parameter*> Params() { return {&a_, &b_}; }

  static constexpr const char* kA =
      "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
  static constexpr const char* kB =
      "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";
  std::unique_ptr<kernels::Backend> backend_ =
      kernels::NewStrictBackend(kernels::NewReferenceBackend());
  std::string dir_;
  model::Parameter a_, b_;
  std::vector<Moments> moments_;
};

TEST_F(CheckpointTest, RoundTripsParametersMomentsAndState) {
  base::Env& env = base::Env::Default();
  TrainState state;
  state.step = 42;
  state.epoch = 1;
  state.next_example = 17;
  state.seed = 1234567890123ull;
  state.tokens_seen = 9000;
  state.best_eval_loss = 2.5;
  state.evals_without_improvement = 1;
  auto path = SaveCheckpoint(env, dir_, Params(), moments_, state);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir_ + "/checkpoints/step-00000042");
  auto latest = LatestCheckpoint(env, dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value_or(""), *path);

  model::Parameter a = Param(*backend_, kA, {2, 3}, Floats(6, 0.0f));
  model::Parameter b = Param(*backend_, kB, {3, 2}, Floats(6, 0.0f));
  std::vector<Moments> moments;
  auto loaded = LoadCheckpoint(env, *path, {&a, &b}, moments);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Values(a.value), Values(a_.value));
  EXPECT_EQ(Values(b.value), Values(b_.value));
  ASSERT_EQ(moments.size(), 2u);
  EXPECT_EQ(Values(moments[1].exp_avg), Values(moments_[1].exp_avg));
  EXPECT_EQ(Values(moments[0].exp_avg_sq), Values(moments_[0].exp_avg_sq));
  // The moments were allocated in the parameters' backend.
  EXPECT_EQ(moments[0].exp_avg.backend(), backend_.get());
  EXPECT_EQ(loaded->step, 42);
  EXPECT_EQ(loaded->next_example, 17u);
  EXPECT_EQ(loaded->seed, 1234567890123ull);
  EXPECT_EQ(loaded->best_eval_loss, 2.5);
}

TEST_F(CheckpointTest, TheNewestCompleteCheckpointWinsAndPruneKeepsTheNewest) {
  base::Env& env = base::Env::Default();
  for (int64_t step : {5, 100, 20}) {
    TrainState state;
    state.step = step;
    ASSERT_TRUE(SaveCheckpoint(env, dir_, Params(), moments_, state).ok());
  }
  // A temporary directory left by a crash is not a checkpoint.
  std::filesystem::create_directories(dir_ + "/checkpoints/.tmp-step-00000200-1");
  auto latest = LatestCheckpoint(env, dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value_or(""), dir_ + "/checkpoints/step-00000100");
  ASSERT_TRUE(PruneCheckpoints(env, dir_, 2).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/checkpoints/step-00000005"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/checkpoints/step-00000020"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/checkpoints/step-00000100"));
}

TEST_F(CheckpointTest, ACheckpointThatDoesNotMatchItsUnitManifestIsSkipped) {
  base::Env& env = base::Env::Default();
  for (int64_t step : {10, 20}) {
    TrainState state;
    state.step = step;
    ASSERT_TRUE(SaveCheckpoint(env, dir_, Params(), moments_, state).ok());
  }
  // step 20 came back from a bucket with a manifest of an upload that never completed.
  const std::string newest = dir_ + "/checkpoints/step-00000020";
  base::UnitManifest incomplete;
  ASSERT_TRUE(env.WriteFileAtomically(newest + "/" + std::string(base::kUnitManifestName),
                                      incomplete.ToJson())
                  .ok());
  auto latest = LatestCheckpoint(env, dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value_or(""), dir_ + "/checkpoints/step-00000010");
  // Its complete manifest, listing the files as they are: trusted again.
  base::UnitManifest complete;
  complete.complete = true;
  for (const char* name : {"optimizer.safetensors", "state.json", "trainable.safetensors"}) {
    auto size = env.GetFileSize(newest + "/" + name);
    ASSERT_TRUE(size.ok());
    complete.files.push_back({name, *size, ""});
  }
  ASSERT_TRUE(env.WriteFileAtomically(newest + "/" + std::string(base::kUnitManifestName),
                                      complete.ToJson())
                  .ok());
  latest = LatestCheckpoint(env, dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value_or(""), newest);
}

TEST_F(CheckpointTest, AFailedWriteLeavesNoCheckpointVisible) {
  base::FaultInjectionEnv env(base::Env::Default());
  TrainState state;
  state.step = 7;
  for (base::FaultOp op : {base::FaultOp::kAppend, base::FaultOp::kSync, base::FaultOp::kRename}) {
    env.FailNth(op, 1);
    EXPECT_FALSE(SaveCheckpoint(env, dir_, Params(), moments_, state).ok());
    env.ClearFaults();
    auto latest = LatestCheckpoint(env, dir_);
    ASSERT_TRUE(latest.ok());
    EXPECT_FALSE(latest->has_value()) << "fault " << static_cast<int>(op);
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/checkpoints")) {
      ADD_FAILURE() << "left behind: " << entry.path();
    }
  }
}

TEST_F(CheckpointTest, ACheckpointOfAnotherShapeIsRefused) {
  base::Env& env = base::Env::Default();
  TrainState state;
  auto path = SaveCheckpoint(env, dir_, Params(), moments_, state);
  ASSERT_TRUE(path.ok());
  model::Parameter a = Param(*backend_, kA, {2, 4}, Floats(8, 0.0f));
  std::vector<Moments> moments;
  auto loaded = LoadCheckpoint(env, *path, {&a, &b_}, moments);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("another model"), std::string::npos) << loaded.status();
  // A damaged state file is data loss, not a crash.
  std::filesystem::resize_file(*path + "/state.json", 10);
  EXPECT_EQ(LoadCheckpoint(env, *path, Params(), moments).status().code(),
            base::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace sovai::train
