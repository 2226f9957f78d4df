// The training loop behind `sovai-engine train`: LoRA, QLoRA and full training of a Llama-family
// model on a JSONL dataset, with evaluation, early stopping, checkpoints and exact resume.
//
// A run: load the model directory and the data; split off a validation set (seeded); then, per
// optimizer step, pack `micro_batch_rows` rows of `seq_len` tokens, run forward and backward
// `grad_accum` times, clip the global gradient norm, update with AdamW at the schedule's rate.
// Every `log_interval` steps a progress line goes to the log and a JSON object to
// <output>/metrics.jsonl; every `eval_interval` steps the validation loss is computed (and
// training stops after `early_stopping_patience` evaluations without improvement); every
// `checkpoint_interval` steps — and when `stop` becomes true (SIGTERM) — a checkpoint is written.
// At the end: <output>/adapter (PEFT) for LoRA methods, <output>/merged (an HF directory) when
// asked or for full training (<output>/model).
//
// The order of examples in epoch e is a permutation seeded by (seed, e), and dropout is seeded by
// (seed, step), so a run resumed from a checkpoint computes bit-identical losses.
//
// Thread-safety: one Trainer per thread; `stop` may be set from a signal handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "base/env.h"
#include "base/status.h"
#include "kernels/backend.h"
#include "model/llama.h"
#include "train/dataset.h"
#include "train/schedule.h"

namespace sovai::train {

enum class Method : uint8_t { kLora, kQlora, kFull };
std::optional<Method> ParseMethod(std::string_view name);  // "lora", "qlora", "full"

struct TrainOptions {
  std::string model_dir;   // an HF directory; for full training from scratch, config.json only
  std::string data_path;   // a .jsonl file or a directory of them
  std::string output_dir;  // created if missing
  Method method = Method::kLora;
  bool from_scratch = false;  // full training from random initialisation
  model::LoraOptions lora;

  Schedule schedule;          // total_steps is filled in by the trainer
  double warmup_ratio = 0.0;  // used when schedule.warmup_steps is 0
  int64_t epochs = 1;
  int64_t max_steps = 0;  // > 0: stop there (overrides epochs)
  int64_t seq_len = 512;
  int64_t micro_batch_rows = 4;
  int64_t grad_accum = 1;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  uint64_t seed = 42;

  double eval_fraction = 0.1;           // of the examples, at least one when there are two or more
  int64_t eval_interval = 0;            // steps; 0: only at the end
  int64_t early_stopping_patience = 0;  // evaluations without improvement; 0: never stop early
  int64_t checkpoint_interval = 0;      // steps; 0: only at the end and on stop
  int keep_checkpoints = 2;
  bool resume = false;
  int64_t log_interval = 1;

  bool skip_bad_lines = false;
  bool write_merged = false;
  int threads = 0;  // 0: all cores
};

struct TrainResult {
  int64_t steps = 0;
  int64_t tokens = 0;
  double first_loss = 0;
  double last_loss = 0;
  double eval_loss = 0;        // the last validation loss (0 without a validation set)
  double base_eval_loss = 0;   // the validation loss before the first step
  bool stopped_early = false;  // early stopping
  bool interrupted = false;    // `stop` was set: a checkpoint was written, no final outputs
};

// Runs a training as `options` say, logging progress lines through `log`.
base::Result<TrainResult> Train(base::Env& env, kernels::Backend& backend,
                                const TrainOptions& options,
                                const std::function<void(const std::string&)>& log,
                                const std::atomic<bool>& stop);

}  // namespace sovai::train
