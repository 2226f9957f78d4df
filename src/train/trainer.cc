#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "base/json.h"
#include "model/model_dir.h"
#include "model/peft_adapter.h"
#include "model/tokenizer.h"
#include "train/chat_data.h"
#include "train/checkpoint.h"
#include "train/examples.h"
#include "train/packing.h"

namespace sovai::train {

using base::Result;
using base::Status;
using base::StatusCode;

namespace {

using kernels::SplitMix64;

// A permutation of [0, n) that depends only on the seed (Fisher-Yates over splitmix64).
std::vector<size_t> Permutation(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  uint64_t state = seed;
  for (size_t i = n; i > 1; --i) {
    state = SplitMix64(state);
    std::swap(order[i - 1], order[state % i]);
  }
  return order;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  char out[32];
  if (s >= 3600) {
    std::snprintf(out, sizeof out, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  } else {
    std::snprintf(out, sizeof out, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return out;
}

// One optimizer step's worth of packed rows, split into micro-batches.
struct StepData {
  std::vector<PackedRows> micro;
  int64_t counted = 0;
  int64_t tokens = 0;  // non-padding positions
};

class Run {
 public:
  Run(base::Env& env, kernels::Backend& backend, const TrainOptions& options,
      const std::function<void(const std::string&)>& log, const std::atomic<bool>& stop)
      : env_(env), backend_(backend), o_(options), log_(log), stop_(stop) {}

  Result<TrainResult> Go();

 private:
  Status LoadModelAndData();
  Status Split(std::vector<Example> examples);
  const std::vector<Example>& EpochOrder(int64_t epoch);
  // Packs the next step's rows; empty when the run's data is exhausted.
  StepData NextStep();
  int64_t CountStepsPerEpoch();
  Result<double> EvalLoss();
  Status AppendMetrics(const nlohmann::json& line);
  Status WriteOutputs();
  // Go's steps: AdamW's moments and, with --resume, the latest checkpoint; then one optimizer
  // step over a step's micro-batches (forward, backward, clipping, AdamW).
  Status StartOptimizer();
  struct StepOutcome {
    double loss_sum = 0;
    double grad_norm = 0;
    float learning_rate = 0;
  };
  Result<StepOutcome> OptimizerStep(const StepData& step, const Schedule& schedule);

  base::Env& env_;
  kernels::Backend& backend_;
  TrainOptions o_;
  const std::function<void(const std::string&)>& log_;
  const std::atomic<bool>& stop_;

  std::optional<model::ModelDir> dir_;
  model::ModelConfig config_;
  std::unique_ptr<model::LlamaModel> model_;
  std::vector<Example> train_, eval_;
  int64_t cached_epoch_ = -1;
  std::vector<Example> epoch_examples_;
  TrainState state_;
  std::vector<model::Parameter*> params_;
  std::vector<Moments> moments_;
  std::unique_ptr<base::WritableFile> metrics_;
};

Status Run::LoadModelAndData() {
  if (o_.from_scratch) {
    SOVAI_ASSIGN_OR_RETURN(std::string text, env_.ReadFile(o_.model_dir + "/config.json"));
    SOVAI_ASSIGN_OR_RETURN(config_, model::ParseModelConfig(text, o_.model_dir + "/config.json"));
    SOVAI_ASSIGN_OR_RETURN(model_, model::LlamaModel::RandomInit(backend_, config_, o_.seed));
  } else {
    SOVAI_ASSIGN_OR_RETURN(model::ModelDir dir, model::LoadModelDir(env_, o_.model_dir));
    dir_.emplace(std::move(dir));
    config_ = dir_->config;
    model::BaseWeights storage = o_.method == Method::kFull    ? model::BaseWeights::kTrainable
                                 : o_.method == Method::kQlora ? model::BaseWeights::kNF4
                                                               : model::BaseWeights::kF32;
    SOVAI_ASSIGN_OR_RETURN(
        model_,
        model::LlamaModel::Load(backend_, config_, model::TensorSourceOf(*dir_->weights), storage));
  }
  if (o_.method != Method::kFull) SOVAI_RETURN_IF_ERROR(model_->AddLora(o_.lora));

  SOVAI_ASSIGN_OR_RETURN(ChatData chat, LoadChatData(env_, o_.model_dir));
  LoadOptions load;
  load.skip_bad_lines = o_.skip_bad_lines;
  load.eos_text = chat.eos_text;
  SOVAI_ASSIGN_OR_RETURN(LoadedData data, LoadJsonl(env_, o_.data_path, chat.render, load));
  if (data.skipped_lines > 0) {
    log_("skipped " + std::to_string(data.skipped_lines) +
         " bad lines; the first: " + data.first_skip_reason);
  }
  std::vector<Example> examples;
  examples.reserve(data.records.size());
  for (const Record& record : data.records) {
    // Chat templates write their own BOS; the other formats get the tokenizer's.
    SOVAI_ASSIGN_OR_RETURN(Example e, TokenizeRecord(record, *chat.tokenizer, !record.chat));
    for (int32_t id : e.tokens) {
      if (id >= config_.vocab_size) {
        return Status(StatusCode::kInvalidArgument,
                      "the tokenizer produced id " + std::to_string(id) +
                          ", beyond the model's vocab_size " + std::to_string(config_.vocab_size));
      }
    }
    examples.push_back(std::move(e));
  }
  return Split(std::move(examples));
}

Status Run::Split(std::vector<Example> examples) {
  size_t eval_count = 0;
  if (o_.eval_fraction > 0 && examples.size() >= 2) {
    eval_count = std::max<size_t>(
        1,
        static_cast<size_t>(std::floor(o_.eval_fraction * static_cast<double>(examples.size()))));
    eval_count = std::min(eval_count, examples.size() - 1);
  }
  std::vector<size_t> order = Permutation(examples.size(), SplitMix64(o_.seed ^ 0x5e7a11ull));
  for (size_t i = 0; i < order.size(); ++i) {
    (i < eval_count ? eval_ : train_).push_back(std::move(examples[order[i]]));
  }
  return Status();
}

const std::vector<Example>& Run::EpochOrder(int64_t epoch) {
  if (epoch != cached_epoch_) {
    std::vector<size_t> order = Permutation(
        train_.size(), SplitMix64(o_.seed ^ SplitMix64(static_cast<uint64_t>(epoch) + 1)));
    epoch_examples_.clear();
    for (size_t i : order) epoch_examples_.push_back(train_[i]);
    cached_epoch_ = epoch;
  }
  return epoch_examples_;
}

int64_t Run::CountStepsPerEpoch() {
  const std::vector<Example>& examples = EpochOrder(0);
  int64_t rows = 0;
  size_t next = 0;
  while (next < examples.size()) {
    rows += PackRows(examples, next, o_.seq_len, 1 << 20, &next).rows;
  }
  int64_t per_step = o_.micro_batch_rows * o_.grad_accum;
  return std::max<int64_t>(1, (rows + per_step - 1) / per_step);
}

StepData Run::NextStep() {
  StepData step;
  while (static_cast<int64_t>(step.micro.size()) < o_.grad_accum) {
    const std::vector<Example>& examples = EpochOrder(state_.epoch);
    size_t next = state_.next_example;
    PackedRows rows = PackRows(examples, next, o_.seq_len, o_.micro_batch_rows, &next);
    if (rows.rows == 0) {
      // The epoch is done: go on with the next one unless the run is bounded by epochs.
      if (o_.max_steps == 0 && state_.epoch + 1 >= o_.epochs) break;
      ++state_.epoch;
      state_.next_example = 0;
      continue;
    }
    state_.next_example = next;
    step.counted += rows.counted_targets;
    for (int32_t s : rows.segments) step.tokens += s >= 0;
    step.micro.push_back(std::move(rows));
  }
  return step;
}

Result<double> Run::EvalLoss() {
  double sum = 0;
  int64_t counted = 0;
  size_t next = 0;
  while (next < eval_.size()) {
    PackedRows rows = PackRows(eval_, next, o_.seq_len, o_.micro_batch_rows, &next);
    model::Batch batch{rows.rows,    rows.seq_len,   rows.tokens,
                       rows.targets, rows.positions, rows.segments};
    SOVAI_ASSIGN_OR_RETURN(double loss, model_->Loss(backend_, batch));
    sum += loss;
    counted += rows.counted_targets;
  }
  return counted > 0 ? sum / static_cast<double>(counted) : 0.0;
}

Status Run::AppendMetrics(const nlohmann::json& line) {
  if (!metrics_) {
    SOVAI_ASSIGN_OR_RETURN(
        metrics_, env_.NewWritableFile(o_.output_dir + "/metrics.jsonl", base::WriteMode::kAppend));
  }
  return metrics_->Append(line.dump() + "\n");
}

Status Run::WriteOutputs() {
  const std::string base_name = dir_ ? dir_->path : o_.model_dir;
  auto replace_dir = [&](const std::string& path) -> Status {
    if (env_.FileExists(path)) return env_.DeleteDirRecursive(path);
    return Status();
  };
  std::vector<std::string> copy;
  for (std::string_view file : model::kModelAuxFiles) {
    std::string path = o_.model_dir + "/" + std::string(file);
    if (env_.FileExists(path)) copy.push_back(path);
  }
  auto write_model = [&](const std::string& path, bool merge) -> Status {
    // Weights are written as f32: a merged adapter's small deltas survive, and any reader
    // (transformers, llama.cpp's converter, ours) converts on load.
    std::vector<std::vector<float>> values;  // owned here until the write is done
    std::vector<model::TensorToWrite> tensors;
    for (const model::ExpectedTensor& e : model_->base_tensors()) {
      auto t = model_->BaseTensorF32(e.name, merge);
      if (!t.ok() && e.optional) continue;  // a tied lm_head
      if (!t.ok()) return t.status();
      values.push_back(std::move(*t));
      model::TensorToWrite w;
      w.name = e.name;
      w.dtype = model::SafetensorsDType::kF32;
      w.shape = e.shape;
      tensors.push_back(std::move(w));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      tensors[i].data = std::as_bytes(std::span<const float>(values[i]));
    }
    model::ModelConfig config = config_;
    config.torch_dtype = tensor::DType::kF32;
    model::WriteModelDirOptions options;
    options.copy_files = copy;
    SOVAI_RETURN_IF_ERROR(replace_dir(path));
    return model::WriteModelDir(env_, path, config, std::move(tensors), options);
  };
  if (o_.method == Method::kFull) return write_model(o_.output_dir + "/model", false);
  SOVAI_ASSIGN_OR_RETURN(model::LoraAdapter adapter, model_->ExportLora(base_name));
  SOVAI_RETURN_IF_ERROR(replace_dir(o_.output_dir + "/adapter"));
  SOVAI_RETURN_IF_ERROR(
      model::WriteLoraAdapter(env_, o_.output_dir + "/adapter", adapter, config_));
  if (o_.write_merged) return write_model(o_.output_dir + "/merged", true);
  return Status();
}

Status Run::StartOptimizer() {
  params_ = model_->TrainableParameters();
  moments_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    // AdamW's moments start at zero, beside their parameter in the backend's memory.
    SOVAI_ASSIGN_OR_RETURN(moments_[i].exp_avg,
                           kernels::AllocateZeros<float>(backend_, params_[i]->numel()));
    SOVAI_ASSIGN_OR_RETURN(moments_[i].exp_avg_sq,
                           kernels::AllocateZeros<float>(backend_, params_[i]->numel()));
  }
  state_.seed = o_.seed;
  if (o_.resume) {
    SOVAI_ASSIGN_OR_RETURN(std::optional<std::string> latest,
                           LatestCheckpoint(env_, o_.output_dir));
    if (latest) {
      SOVAI_ASSIGN_OR_RETURN(state_, LoadCheckpoint(env_, *latest, params_, moments_));
      if (state_.seed != o_.seed) {
        return Status(StatusCode::kFailedPrecondition,
                      *latest + " was written by a run with seed " + std::to_string(state_.seed) +
                          ", this run has " + std::to_string(o_.seed));
      }
      log_("resuming from " + *latest + " at step " + std::to_string(state_.step));
    } else {
      log_("no checkpoint under " + o_.output_dir + "/checkpoints: starting from the beginning");
    }
  }
  return Status();
}

Result<Run::StepOutcome> Run::OptimizerStep(const StepData& step, const Schedule& schedule) {
  const float grad_scale = step.counted > 0 ? 1.0f / static_cast<float>(step.counted) : 0.0f;
  StepOutcome outcome;
  for (const PackedRows& rows : step.micro) {
    model::Batch batch{rows.rows,    rows.seq_len,   rows.tokens,
                       rows.targets, rows.positions, rows.segments};
    SOVAI_ASSIGN_OR_RETURN(
        double loss, model_->TrainForwardBackward(
                         backend_, batch, grad_scale,
                         SplitMix64(o_.seed ^ SplitMix64(static_cast<uint64_t>(state_.step) + 7))));
    outcome.loss_sum += loss;
  }
  // The global norm: each parameter's sum of squares comes back to the host as a value.
  double norm_sq = 0;
  for (model::Parameter* p : params_) {
    norm_sq += backend_.SumOfSquares(p->grad.as<float>(), p->numel());
  }
  outcome.grad_norm = std::sqrt(norm_sq);
  const double grad_norm = outcome.grad_norm;
  if (o_.max_grad_norm > 0 && grad_norm > o_.max_grad_norm) {
    // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6).
    float factor = static_cast<float>(o_.max_grad_norm / (grad_norm + 1e-6));
    for (model::Parameter* p : params_) backend_.Scale(p->grad.as<float>(), factor, p->numel());
  }
  kernels::Backend::AdamWParams adam;
  adam.learning_rate = static_cast<float>(schedule.LearningRate(state_.step));
  adam.weight_decay = static_cast<float>(o_.weight_decay);
  adam.step = state_.step + 1;
  for (size_t i = 0; i < params_.size(); ++i) {
    model::Parameter& p = *params_[i];
    backend_.AdamWStep(p.value.as<float>(), p.grad.as<float>(), moments_[i].exp_avg.as<float>(),
                       moments_[i].exp_avg_sq.as<float>(), p.numel(), adam);
    backend_.Zero(p.grad.data(), p.grad.bytes());
  }
  outcome.learning_rate = adam.learning_rate;
  return outcome;
}

Result<TrainResult> Run::Go() {
  SOVAI_RETURN_IF_ERROR(env_.CreateDirs(o_.output_dir));
  SOVAI_RETURN_IF_ERROR(LoadModelAndData());
  SOVAI_RETURN_IF_ERROR(StartOptimizer());
  TrainResult result;

  const int64_t steps_per_epoch = CountStepsPerEpoch();
  Schedule schedule = o_.schedule;
  schedule.total_steps = o_.max_steps > 0 ? o_.max_steps : steps_per_epoch * o_.epochs;
  if (schedule.warmup_steps == 0 && o_.warmup_ratio > 0) {
    schedule.warmup_steps = static_cast<int64_t>(
        std::ceil(o_.warmup_ratio * static_cast<double>(schedule.total_steps)));
  }
  int64_t trainable = 0;
  for (const model::Parameter* p : params_) trainable += p->numel();
  log_("training " + std::to_string(train_.size()) + " examples (" + std::to_string(eval_.size()) +
       " held out for validation), " + std::to_string(schedule.total_steps) + " steps, " +
       std::to_string(trainable) + " trainable parameters, backend " +
       std::string(backend_.name()));

  if (!eval_.empty() && state_.step == 0) {
    SOVAI_ASSIGN_OR_RETURN(result.base_eval_loss, EvalLoss());
    log_("validation loss before training: " + std::to_string(result.base_eval_loss));
    SOVAI_RETURN_IF_ERROR(AppendMetrics({{"step", 0}, {"eval_loss", result.base_eval_loss}}));
  }

  const int64_t start_micros = env_.NowMonotonicMicros();
  const int64_t start_step = state_.step;
  double window_loss = 0;
  int64_t window_counted = 0, window_tokens = 0;
  int64_t window_start = start_micros;
  bool first = true;
  while (state_.step < schedule.total_steps) {
    if (stop_.load()) {
      SOVAI_ASSIGN_OR_RETURN(std::string path,
                             SaveCheckpoint(env_, o_.output_dir, params_, moments_, state_));
      log_("stopping: saved " + path + "; continue with --resume");
      result.interrupted = true;
      result.steps = state_.step;
      return result;
    }
    StepData step = NextStep();
    if (step.micro.empty()) break;
    SOVAI_ASSIGN_OR_RETURN(StepOutcome outcome, OptimizerStep(step, schedule));
    const double loss_sum = outcome.loss_sum;
    const double grad_norm = outcome.grad_norm;
    ++state_.step;
    state_.tokens_seen += step.tokens;
    const double step_loss = step.counted > 0 ? loss_sum / static_cast<double>(step.counted) : 0;
    if (first) result.first_loss = step_loss;
    first = false;
    result.last_loss = step_loss;
    window_loss += loss_sum;
    window_counted += step.counted;
    window_tokens += step.tokens;

    if (state_.step % std::max<int64_t>(1, o_.log_interval) == 0 ||
        state_.step == schedule.total_steps) {
      const int64_t now = env_.NowMonotonicMicros();
      const double window_seconds = static_cast<double>(now - window_start) / 1e6;
      const double tokens_per_second =
          window_seconds > 0 ? static_cast<double>(window_tokens) / window_seconds : 0;
      const double per_step = static_cast<double>(now - start_micros) / 1e6 /
                              static_cast<double>(state_.step - start_step);
      const double eta = per_step * static_cast<double>(schedule.total_steps - state_.step);
      const double loss =
          window_counted > 0 ? window_loss / static_cast<double>(window_counted) : 0;
      char line[256];
      std::snprintf(line, sizeof line,
                    "step %lld/%lld  loss %.4f  lr %.3g  grad_norm %.3f  %.0f tokens/s  eta %s",
                    static_cast<long long>(state_.step),
                    static_cast<long long>(schedule.total_steps), loss,
                    static_cast<double>(outcome.learning_rate), grad_norm, tokens_per_second,
                    FormatDuration(eta).c_str());
      log_(line);
      SOVAI_RETURN_IF_ERROR(AppendMetrics({{"step", state_.step},
                                           {"epoch", state_.epoch},
                                           {"loss", loss},
                                           {"learning_rate", outcome.learning_rate},
                                           {"grad_norm", grad_norm},
                                           {"tokens_per_second", tokens_per_second},
                                           {"tokens_seen", state_.tokens_seen},
                                           {"eta_seconds", eta}}));
      window_loss = 0;
      window_counted = window_tokens = 0;
      window_start = now;
    }

    const bool last = state_.step == schedule.total_steps;
    if (!eval_.empty() && ((o_.eval_interval > 0 && state_.step % o_.eval_interval == 0) || last)) {
      SOVAI_ASSIGN_OR_RETURN(double eval_loss, EvalLoss());
      result.eval_loss = eval_loss;
      SOVAI_RETURN_IF_ERROR(AppendMetrics({{"step", state_.step}, {"eval_loss", eval_loss}}));
      bool improved = state_.best_eval_loss == 0 || eval_loss < state_.best_eval_loss;
      if (improved) {
        state_.best_eval_loss = eval_loss;
        state_.evals_without_improvement = 0;
      } else {
        ++state_.evals_without_improvement;
      }
      log_("validation loss " + std::to_string(eval_loss) + (improved ? " (best)" : ""));
      if (o_.early_stopping_patience > 0 &&
          state_.evals_without_improvement >= o_.early_stopping_patience) {
        log_("stopping early: no improvement in " +
             std::to_string(state_.evals_without_improvement) + " evaluations");
        result.stopped_early = true;
        break;
      }
    }
    if (o_.checkpoint_interval > 0 && state_.step % o_.checkpoint_interval == 0 && !last) {
      SOVAI_ASSIGN_OR_RETURN(std::string path,
                             SaveCheckpoint(env_, o_.output_dir, params_, moments_, state_));
      SOVAI_RETURN_IF_ERROR(PruneCheckpoints(env_, o_.output_dir, o_.keep_checkpoints));
      log_("saved " + path);
    }
  }
  if (metrics_) SOVAI_RETURN_IF_ERROR(metrics_->Close());
  SOVAI_RETURN_IF_ERROR(SaveCheckpoint(env_, o_.output_dir, params_, moments_, state_).status());
  SOVAI_RETURN_IF_ERROR(PruneCheckpoints(env_, o_.output_dir, o_.keep_checkpoints));
  SOVAI_RETURN_IF_ERROR(WriteOutputs());
  result.steps = state_.step;
  result.tokens = state_.tokens_seen;
  return result;
}

}  // namespace

std::optional<Method> ParseMethod(std::string_view name) {
  if (name == "lora") return Method::kLora;
  if (name == "qlora") return Method::kQlora;
  if (name == "full") return Method::kFull;
  return std::nullopt;
}

Result<TrainResult> Train(base::Env& env, kernels::Backend& backend, const TrainOptions& options,
                          const std::function<void(const std::string&)>& log,
                          const std::atomic<bool>& stop) {
  if (options.seq_len < 2 || options.micro_batch_rows < 1 || options.grad_accum < 1 ||
      options.epochs < 1 || options.max_steps < 0) {
    return Status(
        StatusCode::kInvalidArgument,
        "seq_len >= 2, micro_batch_rows >= 1, grad_accum >= 1 and epochs >= 1 are needed");
  }
  Run run(env, backend, options, log, stop);
  return run.Go();
}

}  // namespace sovai::train
