// Runs sovai's Llama model on a case written by llama_golden.py and prints what the script compares
// with PyTorch, as JSON: logits, the loss, every LoRA gradient and the losses of AdamW steps.
//
//   llama_golden_driver CASE_DIR   (config.json, model.safetensors, lora.safetensors, case.json)
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/env.h"
#include "base/json.h"
#include "kernels/backend.h"
#include "model/llama.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace sovai::model {
namespace {

base::Status Run(const std::string& dir) {
  base::Env& env = base::Env::Default();
  SOVAI_ASSIGN_OR_RETURN(std::string config_text, env.ReadFile(dir + "/config.json"));
  SOVAI_ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(config_text, dir + "/config.json"));
  SOVAI_ASSIGN_OR_RETURN(std::string case_text, env.ReadFile(dir + "/case.json"));
  SOVAI_ASSIGN_OR_RETURN(nlohmann::json spec, base::ParseJson(case_text));
  SOVAI_ASSIGN_OR_RETURN(auto weights, SafetensorsSet::OpenFile(dir + "/model.safetensors"));
  SOVAI_ASSIGN_OR_RETURN(auto adapter, SafetensorsFile::Open(dir + "/lora.safetensors"));

  const nlohmann::json& options = spec["options"];
  BaseWeights storage = options["base"] == "nf4" ? BaseWeights::kNF4 : BaseWeights::kF32;
  // The backend before the model: the model's buffers are its memory, freed by it.
  auto backend = kernels::NewReferenceBackend();
  SOVAI_ASSIGN_OR_RETURN(auto model,
                         LlamaModel::Load(*backend, config, TensorSourceOf(*weights), storage));
  LoraOptions lora;
  lora.rank = options["rank"].get<int64_t>();
  lora.alpha = options["alpha"].get<double>();
  lora.dropout = 0;
  lora.use_rslora = options["rslora"].get<bool>();
  for (const auto& t : options["targets"]) {
    auto p = ParseLoraModule(t.get<std::string>());
    if (!p) return base::Status(base::StatusCode::kInvalidArgument, "bad target");
    lora.targets.push_back(*p);
  }
  SOVAI_RETURN_IF_ERROR(model->AddLora(lora));
  std::vector<Parameter*> params = model->TrainableParameters();
  for (Parameter* p : params) {
    SOVAI_ASSIGN_OR_RETURN(std::vector<float> values, adapter->ReadF32(p->name));
    if (static_cast<int64_t>(values.size()) != p->numel()) {
      return base::Status(base::StatusCode::kInvalidArgument, p->name + ": wrong size");
    }
    backend->Upload(p->value.data(), values.data(), values.size() * sizeof(float));
  }

  const nlohmann::json& b = spec["batch"];
  std::vector<int32_t> tokens = b["tokens"], targets = b["targets"], positions = b["positions"],
                       segments = b["segments"];
  for (int32_t& t : targets) t = t < 0 ? -1 : t;
  Batch batch{
      b["batch"].get<int64_t>(), b["seq_len"].get<int64_t>(), tokens, targets, positions, segments};
  int64_t counted = 0;
  for (int32_t t : targets) counted += t >= 0;

  nlohmann::json out;
  SOVAI_ASSIGN_OR_RETURN(out["logits"], model->Logits(*backend, batch));
  SOVAI_ASSIGN_OR_RETURN(
      double loss_sum,
      model->TrainForwardBackward(*backend, batch, 1.0f / static_cast<float>(counted), 0));
  out["loss_sum"] = loss_sum;
  for (Parameter* p : params) out["grads"][p->name] = kernels::DownloadAll<float>(p->grad);
  if (storage == BaseWeights::kNF4) {
    for (const ExpectedTensor& e : model->base_tensors()) {
      // Projections are NF4 and the embedding and head bf16: the reference runs on those values.
      if (e.name.ends_with("_proj.weight") || e.name == "model.embed_tokens.weight" ||
          e.name == "lm_head.weight") {
        SOVAI_ASSIGN_OR_RETURN(out["dequantized"][e.name], model->BaseTensorF32(e.name, false));
      }
    }
  }

  // AdamW from the same start (gradients above came from the first forward).
  std::vector<kernels::DeviceBuffer> m(params.size()), v(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    SOVAI_ASSIGN_OR_RETURN(m[i], kernels::AllocateZeros<float>(*backend, params[i]->numel()));
    SOVAI_ASSIGN_OR_RETURN(v[i], kernels::AllocateZeros<float>(*backend, params[i]->numel()));
  }
  kernels::Backend::AdamWParams adam;
  adam.learning_rate = options["learning_rate"].get<float>();
  adam.weight_decay = options["weight_decay"].get<float>();
  nlohmann::json losses = nlohmann::json::array();
  for (int step = 1; step <= options["steps"].get<int>(); ++step) {
    for (Parameter* p : params) backend->Zero(p->grad.data(), p->grad.bytes());
    SOVAI_ASSIGN_OR_RETURN(double sum, model->TrainForwardBackward(
                                           *backend, batch, 1.0f / static_cast<float>(counted), 0));
    losses.push_back(sum / static_cast<double>(counted));
    adam.step = step;
    for (size_t i = 0; i < params.size(); ++i) {
      backend->AdamWStep(params[i]->value.as<float>(), params[i]->grad.as<float>(),
                         m[i].as<float>(), v[i].as<float>(), params[i]->numel(), adam);
    }
  }
  out["losses"] = losses;
  std::cout << out.dump() << "\n";
  return base::Status();
}

}  // namespace
}  // namespace sovai::model

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: llama_golden_driver CASE_DIR\n");
    return 2;
  }
  sovai::base::Status st = sovai::model::Run(argv[1]);
  if (!st.ok()) {
    std::cerr << "llama_golden_driver: " << st << "\n";
    return 1;
  }
  return 0;
}
