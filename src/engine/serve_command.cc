// `sovai-engine serve` (docs/engine.md, docs/api/openai.md): an OpenAI-compatible inference
// server for one model and its LoRA adapters.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "engine/backend_choice.h"
#include "engine/commands.h"
#include "serve/server.h"

namespace sovai::engine {

int RunServeCommand(const std::vector<std::string>& args) {
  serve::ServeOptions o;
  base::FlagSet flags(
      "sovai-engine serve",
      "Serves a Llama-family model (and LoRA adapters) with OpenAI's API: /v1/models,\n"
      "/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/rerank; /health and\n"
      "/metrics. SIGTERM stops it.");
  std::vector<std::string> loras;
  std::string dtype = "q8_0", api_key_env, backend_name = "cpu", task = "auto";
  int64_t threads = 0, kv_cache_mb = serve::kDefaultKvCacheBytes >> 20;
  int64_t max_num_seqs = o.engine.max_num_seqs, max_batched = o.engine.max_num_batched_tokens;
  int64_t max_waiting = o.engine.max_waiting, max_model_len = 0, block_size = o.engine.block_size;
  int64_t response_cache_mb = static_cast<int64_t>(o.response_cache_bytes >> 20);
  bool no_prefix_caching = false;
  int64_t heartbeat_ms = o.heartbeat_interval.count();
  flags.String("model", &o.engine.model_dir, "Hugging Face model directory (required)", "DIR");
  flags.String("served-model-name", &o.engine.served_model_name,
               "the model id clients use (default: the directory's name)", "NAME");
  flags.StringList("lora", &loras, "a PEFT adapter served as model NAME (repeatable)", "NAME=DIR");
  flags.String("listen", &o.listen, "address to listen on", "HOST:PORT");
  flags.String("task", &task,
               "auto, generate, embed (/v1/embeddings) or rerank (/v1/rerank); auto: embed for a "
               "directory with a sentence-transformers pooling (modules.json), else generate",
               "TASK");
  std::string rerank_tokens;
  flags.String("rerank-tokens", &rerank_tokens,
               "with --task rerank: the vocabulary's tokens whose logits score relevant and not "
               "relevant (default: config.json's classifier_from_token, else yes,no)",
               "YES,NO");
  flags.String("dtype", &dtype, "weights in memory: q8_0, bf16 or f32", "TYPE");
  flags.Int("threads", &threads, "CPU threads (0: all cores)");
  flags.String("backend", &backend_name,
               "cpu, strict (cpu behind checks that every op reads only the backend's buffers) "
               "or cuda (a GPU; sovai-engine built with CUDA)",
               "NAME");
  flags.Int("kv-cache-mb", &kv_cache_mb, "memory for the paged KV cache");
  flags.Int("block-size", &block_size, "tokens per KV cache block");
  flags.Int("max-num-seqs", &max_num_seqs, "most sequences in one step");
  flags.Int("max-num-batched-tokens", &max_batched, "most tokens in one step");
  flags.Int("max-waiting", &max_waiting, "queued sequences before answering 429");
  flags.Int("max-model-len", &max_model_len, "context length (0: the model's)");
  flags.Bool("no-prefix-caching", &no_prefix_caching, "do not reuse KV blocks across requests");
  flags.Int("response-cache-mb", &response_cache_mb,
            "memory for cached responses of deterministic requests (0: off)");
  flags.Int("heartbeat-ms", &heartbeat_ms,
            "how often every response writes (a client that left is noticed by the write)");
  flags.String("api-key-env", &api_key_env,
               "environment variable holding the Bearer token clients must send", "NAME");
  base::Status parsed = flags.Parse(args);
  if (!parsed.ok()) return UsageError("serve", parsed.message());
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (!flags.positional().empty()) {
    return UsageError("serve", "unexpected argument " + flags.positional()[0]);
  }
  if (o.engine.model_dir.empty()) return UsageError("serve", "--model is required");
  for (const std::string& spec : loras) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return UsageError("serve", "--lora takes NAME=DIR, got '" + spec + "'");
    }
    o.engine.adapters.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
  }
  if (dtype == "q8_0") {
    o.engine.weights = model::BaseWeights::kQ8_0;
  } else if (dtype == "bf16") {
    o.engine.weights = model::BaseWeights::kBF16;
  } else if (dtype == "f32") {
    o.engine.weights = model::BaseWeights::kF32;
  } else {
    return UsageError("serve", "--dtype must be q8_0, bf16 or f32");
  }
  if (task == "auto") {
    o.task = serve::ModelTask::kAuto;
  } else if (task == "generate") {
    o.task = serve::ModelTask::kGenerate;
  } else if (task == "embed") {
    o.task = serve::ModelTask::kEmbed;
  } else if (task == "rerank") {
    o.task = serve::ModelTask::kRerank;
  } else {
    return UsageError("serve", "--task must be auto, generate, embed or rerank");
  }
  if (!rerank_tokens.empty()) {  // empty: the model directory's (ServeOptions)
    const size_t comma = rerank_tokens.find(',');
    if (comma == std::string::npos || comma == 0 || comma + 1 == rerank_tokens.size()) {
      return UsageError("serve", "--rerank-tokens takes YES,NO, got '" + rerank_tokens + "'");
    }
    o.rerank_yes_token = rerank_tokens.substr(0, comma);
    o.rerank_no_token = rerank_tokens.substr(comma + 1);
  }
  if (kv_cache_mb < 1 || response_cache_mb < 0) {
    return UsageError("serve",
                      "--kv-cache-mb must be positive and --response-cache-mb not negative");
  }
  if (heartbeat_ms < serve::kMinHeartbeatInterval.count() ||
      heartbeat_ms > serve::kMaxHeartbeatInterval.count()) {
    return UsageError("serve", "--heartbeat-ms must be from " +
                                   std::to_string(serve::kMinHeartbeatInterval.count()) + " to " +
                                   std::to_string(serve::kMaxHeartbeatInterval.count()));
  }
  o.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
  o.engine.threads = static_cast<int>(threads);
  if (backend_name != "cpu" && backend_name != "strict" && backend_name != "cuda") {
    return UsageError("serve", "--backend must be cpu, strict or cuda");
  }
  o.engine.strict_backend = backend_name == "strict";
  if (backend_name == "cuda") o.engine.make_backend = CudaBackendFactory("serve");
  o.engine.kv_cache_bytes = kv_cache_mb << 20;
  o.engine.block_size = block_size;
  o.engine.max_num_seqs = max_num_seqs;
  o.engine.max_num_batched_tokens = max_batched;
  o.engine.max_waiting = max_waiting;
  o.engine.max_model_len = max_model_len;
  o.engine.enable_prefix_caching = !no_prefix_caching;
  o.response_cache_bytes = static_cast<size_t>(response_cache_mb) << 20;
  if (!api_key_env.empty()) {
    const char* key = std::getenv(api_key_env.c_str());
    if (key == nullptr || *key == '\0') {
      return UsageError("serve", "--api-key-env names " + api_key_env + ", which is not set");
    }
    o.api_key = key;
  }

  std::atomic<bool>& stop = InstallStopSignalHandlers();
  auto server = serve::InferenceServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "sovai-engine serve: %s\n", server.status().ToString().c_str());
    return kExitFailure;
  }
  std::fprintf(stderr, "sovai-engine serve: listening on port %u, loading %s\n",
               static_cast<unsigned>((*server)->port()), o.engine.model_dir.c_str());
  base::Status ready = (*server)->WaitReady();
  if (!ready.ok()) {
    std::fprintf(stderr, "sovai-engine serve: %s\n", ready.ToString().c_str());
    return kExitFailure;
  }
  std::fprintf(stderr, "sovai-engine serve: ready\n");
  while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fprintf(stderr, "sovai-engine serve: stopping\n");
  (*server)->Stop();
  return kExitOk;
}

}  // namespace sovai::engine
