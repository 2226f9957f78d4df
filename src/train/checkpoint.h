// Training checkpoints: everything a run needs to continue exactly where it stopped.
//
// A checkpoint is a directory <output>/checkpoints/step-NNNNNNNN/ holding
//   trainable.safetensors   the trainable parameters (LoRA A/B, or every tensor of a full run)
//   optimizer.safetensors   AdamW's first and second moments, as "<name>.exp_avg" / ".exp_avg_sq"
//   state.json              step, epoch, data position, seed, best validation loss, ...
// It is written into a temporary sibling directory and renamed into place once every file is
// synced, so a crash or kill mid-write leaves either the previous checkpoints or the new one
// complete — never a half-visible one. LatestCheckpoint ignores temporaries.
//
// Resuming restores the parameters, the moments and the state; with the data order and dropout
// derived from (seed, epoch, step), the resumed run's losses are bit-identical to an uninterrupted
// run's. Format notes: docs/formats/checkpoint.md.
//
// Thread-safety: functions over caller-owned values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "model/llama.h"

namespace sovai::train {

struct TrainState {
  int64_t step = 0;           // optimizer steps done
  int64_t epoch = 0;          // current pass over the training set
  uint64_t next_example = 0;  // index (in the epoch's order) of the next example to pack
  uint64_t seed = 0;
  int64_t tokens_seen = 0;
  double best_eval_loss = 0;  // 0: no evaluation yet
  int64_t evals_without_improvement = 0;
};

// AdamW moments of one parameter (f32, the size of its value, in its backend's memory).
struct Moments {
  kernels::DeviceBuffer exp_avg;
  kernels::DeviceBuffer exp_avg_sq;
};

// Writes the checkpoint of `state.step` under `output_dir`/checkpoints and returns its path.
base::Result<std::string> SaveCheckpoint(base::Env& env, const std::string& output_dir,
                                         const std::vector<model::Parameter*>& params,
                                         const std::vector<Moments>& moments,
                                         const TrainState& state);

// The newest complete checkpoint under `output_dir`/checkpoints; nullopt when there is none.
base::Result<std::optional<std::string>> LatestCheckpoint(base::Env& env,
                                                          const std::string& output_dir);

// Loads a checkpoint into `params` and `moments` (which must have the same names and sizes — a
// checkpoint of another model or LoRA shape is refused naming the first mismatch) and returns
// its state. Values are downloaded (Save) from and uploaded (Load) to the parameters' backend;
// moments of the wrong size are allocated there.
base::Result<TrainState> LoadCheckpoint(base::Env& env, const std::string& checkpoint_dir,
                                        const std::vector<model::Parameter*>& params,
                                        std::vector<Moments>& moments);

// Deletes all but the newest `keep` checkpoints.
base::Status PruneCheckpoints(base::Env& env, const std::string& output_dir, int keep);

}  // namespace sovai::train
