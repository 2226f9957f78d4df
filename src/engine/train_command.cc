// `sovai-engine train` (docs/engine.md): LoRA, QLoRA and full training of a Llama-family model.
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/flags.h"
#include "base/strings.h"
#include "engine/backend_choice.h"
#include "engine/commands.h"
#include "kernels/backend.h"
#include "train/trainer.h"

namespace sovai::engine {
namespace {

// A decimal flag value; nullopt when it is not a finite number.
std::optional<double> ParseNumber(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// Runs the parsed training options on the named backend, printing progress and a summary.
int TrainOnBackend(const train::TrainOptions& o, const std::string& backend_name) {
  std::string backend_description;
  auto backend = MakeBackend(backend_name, o.threads, &backend_description);
  if (!backend.ok()) {
    if (backend.status().code() == base::StatusCode::kInvalidArgument) {
      return UsageError("train", backend.status().message());
    }
    std::fprintf(stderr, "sovai-engine train: %s\n", backend.status().ToString().c_str());
    return kExitFailure;
  }
  // The job log says where the work runs (a GPU flavor must never look like GPU training when
  // it is not).
  std::fprintf(stdout, "backend: %s\n", backend_description.c_str());

  std::atomic<bool>& stop = InstallStopSignalHandlers();
  auto log = [](const std::string& line) {
    std::fprintf(stdout, "%s\n", line.c_str());
    std::fflush(stdout);
  };
  auto result = train::Train(base::Env::Default(), **backend, o, log, stop);
  if (!result.ok()) {
    std::fprintf(stderr, "sovai-engine train: %s\n", result.status().ToString().c_str());
    return kExitFailure;
  }
  if (result->interrupted) return kExitOk;
  std::string summary = "done: " + std::to_string(result->steps) + " steps, loss " +
                        std::to_string(result->first_loss) + " -> " +
                        std::to_string(result->last_loss);
  if (result->base_eval_loss > 0) {
    summary += ", validation loss " + std::to_string(result->base_eval_loss) + " -> " +
               std::to_string(result->eval_loss);
  }
  log(summary);
  return kExitOk;
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& args) {
  train::TrainOptions o;
  base::FlagSet flags(
      "sovai-engine train",
      "Fine-tunes (LoRA, QLoRA) or trains (full) a Llama-family model on JSONL data.\n"
      "Data lines: {\"messages\": [...]}, {\"prompt\", \"completion\"}, Alpaca\n"
      "{\"instruction\", \"input\", \"output\"} or {\"text\"}. Writes <output>/adapter (PEFT),\n"
      "<output>/merged with --merge, <output>/model for full training, checkpoints and\n"
      "metrics.jsonl. SIGTERM saves a checkpoint and exits; --resume continues from it.");
  std::string method = "lora", targets, learning_rate = "2e-4", schedule = "cosine";
  std::string warmup_ratio = "0", alpha = "32", dropout = "0.05", weight_decay = "0";
  std::string max_grad_norm = "1.0", eval_fraction = "0.1", backend_name = "cpu";
  int64_t rank = 16, warmup_steps = 0, epochs = 1, max_steps = 0, seq_len = 512;
  int64_t batch_rows = 4, batch_tokens = 0, grad_accum = 1, seed = 42, eval_interval = 0;
  int64_t patience = 0, checkpoint_interval = 0, keep = 2, log_interval = 1, threads = 0;
  bool from_scratch = false, rslora = false, resume = false, skip_bad = false, merge = false;
  flags.String("model", &o.model_dir, "Hugging Face model directory (required)", "DIR");
  flags.String("data", &o.data_path, "a .jsonl file or a directory of them (required)", "PATH");
  flags.String("output", &o.output_dir, "where outputs and checkpoints go (required)", "DIR");
  flags.String("method", &method, "lora, qlora (NF4 base) or full", "METHOD");
  flags.Bool("from-scratch", &from_scratch,
             "full training from random weights (the model dir needs config.json and a tokenizer)");
  flags.String("target-modules", &targets,
               "comma-separated projections for LoRA (default: all seven)", "LIST");
  flags.Int("rank", &rank, "LoRA rank r");
  flags.String("alpha", &alpha, "LoRA alpha (scale = alpha / r)", "X");
  flags.String("dropout", &dropout, "LoRA dropout probability", "P");
  flags.Bool("rslora", &rslora, "rank-stabilised LoRA: scale = alpha / sqrt(r)");
  flags.String("learning-rate", &learning_rate, "peak learning rate", "LR");
  flags.String("schedule", &schedule, "cosine, linear or constant (after warmup)", "KIND");
  flags.Int("warmup-steps", &warmup_steps, "linear warmup steps");
  flags.String("warmup-ratio", &warmup_ratio, "warmup as a fraction of the steps", "X");
  flags.Int("epochs", &epochs, "passes over the training examples");
  flags.Int("max-steps", &max_steps, "stop after this many steps (0: by epochs)");
  flags.Int("seq-len", &seq_len, "tokens per row (examples are packed into rows)");
  flags.Int("batch-rows", &batch_rows, "rows per micro-batch");
  flags.Int("batch-tokens", &batch_tokens, "tokens per micro-batch (sets --batch-rows)");
  flags.Int("grad-accum", &grad_accum, "micro-batches per optimizer step");
  flags.String("weight-decay", &weight_decay, "AdamW weight decay", "X");
  flags.String("max-grad-norm", &max_grad_norm, "clip the global gradient norm (0: off)", "X");
  flags.Int("seed", &seed, "seed of the data order, the eval split, dropout and init");
  flags.String("eval-fraction", &eval_fraction, "examples held out for validation", "X");
  flags.Int("eval-interval", &eval_interval, "steps between validations (0: at the end)");
  flags.Int("early-stopping-patience", &patience,
            "stop after this many validations without improvement (0: never)");
  flags.Int("checkpoint-interval", &checkpoint_interval, "steps between checkpoints (0: end)");
  flags.Int("keep-checkpoints", &keep, "how many checkpoints to keep");
  flags.Bool("resume", &resume, "continue from the newest checkpoint under --output");
  flags.Int("log-interval", &log_interval, "steps between progress lines");
  flags.Bool("skip-bad-lines", &skip_bad, "skip (and count) malformed data lines");
  flags.Bool("merge", &merge, "also write the merged model (LoRA methods)");
  flags.Int("threads", &threads, "CPU threads (0: all cores)");
  flags.String("backend", &backend_name,
               "cpu, reference, strict (cpu behind checks that every op reads only the "
               "backend's buffers) or cuda (a GPU; sovai-engine built with CUDA)",
               "NAME");
  base::Status parsed = flags.Parse(args);
  if (!parsed.ok()) return UsageError("train", parsed.message());
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (!flags.positional().empty())
    return UsageError("train", "unexpected argument " + flags.positional()[0]);
  if (o.model_dir.empty() || o.data_path.empty() || o.output_dir.empty()) {
    return UsageError("train", "--model, --data and --output are required");
  }
  auto parsed_method = train::ParseMethod(method);
  if (!parsed_method) return UsageError("train", "--method must be lora, qlora or full");
  o.method = *parsed_method;
  o.from_scratch = from_scratch;
  if (from_scratch && o.method != train::Method::kFull) {
    return UsageError("train", "--from-scratch needs --method full");
  }
  for (std::string_view name : base::Split(targets, ',', /*skip_empty=*/true)) {
    auto projection = model::ParseLoraModule(name);
    if (!projection) {
      return UsageError("train",
                        "unknown target module '" + std::string(name) +
                            "'; known: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj");
    }
    o.lora.targets.push_back(*projection);
  }
  struct NumberFlag {
    const char* name;
    const std::string* text;
    double* out;
  };
  double alpha_value = 0, dropout_value = 0, lr = 0;
  for (const NumberFlag& f :
       {NumberFlag{"alpha", &alpha, &alpha_value}, NumberFlag{"dropout", &dropout, &dropout_value},
        NumberFlag{"learning-rate", &learning_rate, &lr},
        NumberFlag{"warmup-ratio", &warmup_ratio, &o.warmup_ratio},
        NumberFlag{"weight-decay", &weight_decay, &o.weight_decay},
        NumberFlag{"max-grad-norm", &max_grad_norm, &o.max_grad_norm},
        NumberFlag{"eval-fraction", &eval_fraction, &o.eval_fraction}}) {
    auto value = ParseNumber(*f.text);
    if (!value || *value < 0) {
      return UsageError("train", std::string("--") + f.name +
                                     " must be a non-negative number, got '" + *f.text + "'");
    }
    *f.out = *value;
  }
  if (o.eval_fraction >= 1) return UsageError("train", "--eval-fraction must be below 1");
  o.lora.rank = rank;
  o.lora.alpha = alpha_value;
  o.lora.dropout = static_cast<float>(dropout_value);
  o.lora.use_rslora = rslora;
  o.lora.seed = static_cast<uint64_t>(seed);
  auto kind = train::ParseScheduleKind(schedule);
  if (!kind) return UsageError("train", "--schedule must be cosine, linear or constant");
  o.schedule.kind = *kind;
  o.schedule.peak = lr;
  o.schedule.warmup_steps = warmup_steps;
  o.epochs = epochs;
  o.max_steps = max_steps;
  o.seq_len = seq_len;
  o.micro_batch_rows = batch_tokens > 0 ? std::max<int64_t>(1, batch_tokens / seq_len) : batch_rows;
  o.grad_accum = grad_accum;
  o.seed = static_cast<uint64_t>(seed);
  o.eval_interval = eval_interval;
  o.early_stopping_patience = patience;
  o.checkpoint_interval = checkpoint_interval;
  o.keep_checkpoints = static_cast<int>(keep);
  o.resume = resume;
  o.log_interval = log_interval;
  o.skip_bad_lines = skip_bad;
  o.write_merged = merge;
  o.threads = static_cast<int>(threads);

  return TrainOnBackend(o, backend_name);
}

}  // namespace sovai::engine
