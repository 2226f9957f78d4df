#include "control/model_card.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>

#include "base/crypto.h"
#include "base/json.h"
#include "base/strings.h"
#include "base/time.h"

namespace sovai::control {

namespace {

using base::Result;
using base::Status;
using Json = nlohmann::json;

// Dataset files hashed per card, and bytes hashed in all: beyond, the SHA-256 is left out (the
// ETag still identifies the object) so a card never costs more than a few seconds.
constexpr size_t kMaxDatasetFiles = 10'000;
constexpr uint64_t kMaxHashedDatasetBytes = uint64_t{8} << 30;
// metrics.jsonl read for the card.
constexpr size_t kMaxMetricsBytes = 64u << 20;
constexpr char kCardJson[] = "model_card.json";
constexpr char kCardMarkdown[] = "MODEL_CARD.md";
constexpr char kSchema[] = "sovai.model_card/1";

// The value of `--flag VALUE` (or `--flag=VALUE`) in a command.
std::optional<std::string> FlagValue(const std::vector<std::string>& command,
                                     std::string_view flag) {
  const std::string eq = std::string(flag) + "=";
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] == flag && i + 1 < command.size()) return command[i + 1];
    if (command[i].starts_with(eq)) return command[i].substr(eq.size());
  }
  return std::nullopt;
}

// The volume holding sandbox path `path`, and the path inside it.
std::optional<std::pair<size_t, std::string>> Locate(const ModelCardInputs& in,
                                                     const std::string& path) {
  for (size_t i = 0; i < in.volumes.size(); ++i) {
    const std::string& mount = in.volumes[i].mount_path;
    if (path == mount) return std::make_pair(i, std::string());
    if (path.starts_with(mount + "/")) return std::make_pair(i, path.substr(mount.size() + 1));
  }
  return std::nullopt;
}

std::string JoinRel(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "/" + b;
}

// Every file under `dir` (relative paths, sorted), at most `limit`.
void ListFiles(base::Env& env, const std::string& dir, const std::string& rel,
               std::vector<std::string>& out, size_t limit) {
  auto names = env.ListDir(rel.empty() ? dir : base::JoinPath(dir, rel));
  if (!names.ok()) return;
  std::sort(names->begin(), names->end());
  for (const std::string& name : *names) {
    if (out.size() >= limit) return;
    const std::string child = JoinRel(rel, name);
    auto st = env.Stat(base::JoinPath(dir, child));
    if (!st.ok()) continue;
    if (st->type == base::FileType::kDirectory) {
      ListFiles(env, dir, child, out, limit);
    } else if (st->type == base::FileType::kRegular) {
      out.push_back(child);
    }
  }
}

Result<std::string> Sha256OfFile(base::Env& env, const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(auto file, env.NewRandomAccessFile(path));
  base::Sha256Hasher hasher;
  std::string buffer(1 << 20, '\0');
  for (uint64_t offset = 0; offset < file->size_bytes();) {
    SOVAI_ASSIGN_OR_RETURN(size_t n, file->ReadAt(offset, std::span<char>(buffer)));
    if (n == 0) break;
    hasher.Update(std::string_view(buffer.data(), n));
    offset += n;
  }
  return base::HexEncode(hasher.Finish());
}

// SHA-256 over "path\tsize\tetag\n" of the manifest entries under `rel`, sorted by path: the
// identity of a model as the object store holds it, without reading gigabytes of weights.
std::string ManifestHash(const exec::SyncManifest& manifest, const std::string& rel,
                         uint64_t* bytes, size_t* files) {
  std::string text;
  for (const exec::ManifestEntry& e : manifest.files) {
    if (!rel.empty() && !e.path.starts_with(rel + "/")) continue;
    text += e.path + "\t" + std::to_string(e.size_bytes) + "\t" + e.etag + "\n";
    *bytes += e.size_bytes;
    *files += 1;
  }
  return base::HexEncode(base::Sha256(text));
}

// The region of a volume's bucket ("" in the inputs means the job's own).
std::string RegionOf(const ModelCardInputs& in, const ModelCardVolume& v) {
  return v.region.empty() ? in.region : v.region;
}

// "bucket@REGION/prefix" + "/rel".
std::string SourceOf(const ModelCardVolume& v, const std::string& rel) {
  if (rel.empty()) return v.source;
  return v.source + (v.source.ends_with("/") ? "" : "/") + rel;
}

Json BaseModel(base::Env& env, const ModelCardInputs& in) {
  std::optional<std::string> path = FlagValue(in.command, "--model");
  if (!path) return nullptr;
  Json out = {{"path", *path}};
  auto at = Locate(in, *path);
  if (!at) return out;
  const ModelCardVolume& v = in.volumes[at->first];
  out["location"] = SourceOf(v, at->second);
  out["region"] = RegionOf(in, v);
  // The name the model gives itself (Hugging Face's _name_or_path), when it has one.
  if (auto config = env.ReadFile(
          base::JoinPath(base::JoinPath(v.local_dir, at->second), "config.json"), 1 << 20);
      config.ok()) {
    if (auto doc = base::ParseJson(*config); doc.ok() && doc->is_object()) {
      out["name"] = doc->value("_name_or_path", "");
      out["architecture"] = doc->contains("architectures") && (*doc)["architectures"].is_array() &&
                                    !(*doc)["architectures"].empty()
                                ? (*doc)["architectures"][0]
                                : Json("");
    }
  }
  if (v.manifest) {
    uint64_t bytes = 0;
    size_t files = 0;
    out["content_sha256"] = ManifestHash(*v.manifest, at->second, &bytes, &files);
    out["content_hash_of"] =
        "path, size and ETag of each of its " + std::to_string(files) + " objects";
    out["size_bytes"] = bytes;
  }
  return out;
}

Json Datasets(base::Env& env, const ModelCardInputs& in) {
  Json out = Json::array();
  std::optional<std::string> path = FlagValue(in.command, "--data");
  if (!path) return out;
  auto at = Locate(in, *path);
  if (!at) return out;
  const ModelCardVolume& v = in.volumes[at->first];
  const std::string local = base::JoinPath(v.local_dir, at->second);
  std::vector<std::string> files;
  auto st = env.Stat(local);
  if (st.ok() && st->type == base::FileType::kRegular) {
    files.push_back(at->second);
  } else {
    std::vector<std::string> under;
    ListFiles(env, local, "", under, kMaxDatasetFiles);
    for (const std::string& f : under) files.push_back(JoinRel(at->second, f));
  }
  auto parsed = exec::ParseVolumeSpec(v.source + ":/m");
  uint64_t hashed = 0;
  for (const std::string& rel : files) {
    const std::string file = base::JoinPath(v.local_dir, rel);
    auto size = env.GetFileSize(file);
    Json entry = {
        {"path", rel}, {"size_bytes", size.ok() ? *size : 0}, {"region", RegionOf(in, v)}};
    if (parsed.ok()) {
      entry["bucket"] = parsed->bucket;
      std::string prefix = parsed->prefix;
      if (!prefix.empty() && !prefix.ends_with("/")) prefix += "/";
      entry["key"] = prefix + rel;
    }
    const exec::ManifestEntry* m = v.manifest ? v.manifest->Find(rel) : nullptr;
    entry["etag"] = m ? Json(m->etag) : Json(nullptr);
    if (size.ok() && hashed + *size <= kMaxHashedDatasetBytes) {
      auto sha = Sha256OfFile(env, file);
      entry["sha256"] = sha.ok() ? Json(*sha) : Json(nullptr);
      hashed += *size;
    } else {
      entry["sha256"] = nullptr;
    }
    out.push_back(std::move(entry));
  }
  return out;
}

// The flags of the training command, less the paths (they are in base_model, datasets, output).
Json Hyperparameters(const ModelCardInputs& in) {
  static const std::set<std::string> kPaths = {"--model", "--data", "--output"};
  Json out = Json::object();
  for (size_t i = 0; i < in.command.size(); ++i) {
    const std::string& arg = in.command[i];
    if (!arg.starts_with("--")) continue;
    std::string name = arg, value = "true";
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (i + 1 < in.command.size() && !in.command[i + 1].starts_with("--")) {
      value = in.command[++i];
    }
    if (kPaths.contains(name)) continue;
    out[name.substr(2)] = value;
  }
  return out;
}

// From metrics.jsonl (sovai-engine train): the last training loss, the validation loss before
// and after, steps and tokens.
Json Metrics(base::Env& env, const std::string& output_dir) {
  auto text = env.ReadFile(base::JoinPath(output_dir, "metrics.jsonl"), kMaxMetricsBytes);
  if (!text.ok()) return nullptr;
  Json out = Json::object();
  for (std::string_view line : base::Split(*text, '\n')) {
    auto doc = base::ParseJson(line);
    if (!doc.ok() || !doc->is_object()) continue;
    if (doc->contains("loss")) {
      out["train_loss"] = (*doc)["loss"];
      out["steps"] = doc->value("step", Json(nullptr));
      out["tokens_seen"] = doc->value("tokens_seen", Json(nullptr));
    }
    if (doc->contains("eval_loss")) {
      if (doc->value("step", int64_t{-1}) == 0) {
        out["validation_loss_before"] = (*doc)["eval_loss"];
      } else {
        out["validation_loss"] = (*doc)["eval_loss"];
      }
    }
  }
  return out;
}

// Every region whose buckets the job mounted, with its jurisdiction: [{"region", "jurisdiction",
// "volumes": ["bucket@REGION/prefix", ...]}], the job's own region first when it mounted any.
Json DataRegions(const ModelCardInputs& in) {
  std::vector<std::string> order;
  std::map<std::string, Json> by_region;
  for (const ModelCardVolume& v : in.volumes) {
    const std::string region = RegionOf(in, v);
    auto [it, added] = by_region.try_emplace(region, Json::object());
    if (added) {
      order.push_back(region);
      const std::string& jurisdiction = v.region.empty() ? in.jurisdiction : v.jurisdiction;
      it->second = {{"region", region},
                    {"jurisdiction", jurisdiction.empty() ? Json(nullptr) : Json(jurisdiction)},
                    {"volumes", Json::array()}};
    }
    it->second["volumes"].push_back(v.source);
  }
  std::stable_partition(order.begin(), order.end(),
                        [&](const std::string& r) { return r == in.region; });
  Json out = Json::array();
  for (const std::string& r : order) out.push_back(std::move(by_region[r]));
  return out;
}

std::string Value(const Json& j) {
  if (j.is_null()) return "unknown";
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

// "2 GPU H100, 60 vCPU", or "1 vCPU" for a CPU flavor (no "0 GPU").
std::string Devices(const Json& compute) {
  const int64_t gpus = compute.value("gpus", int64_t{0});
  const std::string vcpus = Value(compute["vcpus"]) + " vCPU";
  if (gpus <= 0) return vcpus;
  const std::string model = compute.value("gpu_model", "");
  return std::to_string(gpus) + " GPU" + (model.empty() ? "" : " " + model) + ", " + vcpus;
}

}  // namespace

std::string FormatEnergy(double kwh) {
  char buf[48];
  if (!(kwh > 0)) return "0 Wh";  // also NaN
  if (kwh >= 1) {
    std::snprintf(buf, sizeof buf, "%.2f kWh", kwh);
  } else if (kwh * 1000 >= 1) {
    std::snprintf(buf, sizeof buf, "%.1f Wh", kwh * 1000);
  } else {
    std::snprintf(buf, sizeof buf, "%.3f Wh", kwh * 1000);
  }
  return buf;
}

namespace {

// The value an adapter's `base_model_name_or_path` should have so that it loads outside the job:
// the base model's own name (its config.json `_name_or_path`, e.g. "meta-llama/Llama-3.2-1B",
// what PEFT loads from the Hub) unless that is a filesystem path, else the bucket location it was
// synced from ("models@EU-WEST-LOCAL/llama"). "" when the card knows no base model.
std::string PortableBaseName(const Json& base_model) {
  if (!base_model.is_object()) return "";
  const std::string name = base_model.value("name", "");
  const bool path = name.starts_with("/") || name.starts_with("./") || name.starts_with("../");
  if (!name.empty() && !path) return name;
  return base_model.value("location", "");
}

// The trainer writes the sandbox path of --model ("/workspace/model") as the adapter's
// base_model_name_or_path: it does not know where that directory came from. Rewritten to
// PortableBaseName, which the platform knows; anything else the file says (another name the
// author set) is left as it is. Returns the value the adapter now names ("" when unchanged).
Result<std::string> FixAdapterBaseModel(base::Env& env, const std::string& adapter_dir,
                                        const Json& base_model) {
  const std::string path = base::JoinPath(adapter_dir, "adapter_config.json");
  SOVAI_ASSIGN_OR_RETURN(std::string text, env.ReadFile(path, 1 << 20));
  auto doc = base::ParseJson(text);
  if (!doc.ok() || !doc->is_object() || !base_model.is_object()) return std::string();
  const std::string sandbox_path = base_model.value("path", "");
  const std::string portable = PortableBaseName(base_model);
  auto it = doc->find("base_model_name_or_path");
  if (it == doc->end() || !it->is_string() || portable.empty() || sandbox_path.empty()) {
    return std::string();
  }
  std::string current = it->get<std::string>();
  while (current.size() > 1 && current.ends_with("/")) current.pop_back();
  if (current != sandbox_path) return std::string();
  *it = portable;
  SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(path, base::DumpJson(*doc, 2) + "\n"));
  return portable;
}

}  // namespace

int GpuWatts(std::string_view gpu_model) {
  // Board power of the SXM/PCIe parts the built-in flavors name.
  static const std::pair<std::string_view, int> kWatts[] = {
      {"H200", 700}, {"H100", 700}, {"A100", 400}, {"L40S", 350}, {"L4", 72}, {"V100S", 250}};
  for (const auto& [model, watts] : kWatts) {
    if (base::EqualsIgnoreCase(model, gpu_model)) return watts;
  }
  return 300;  // an unknown GPU: a mid-range board
}

std::vector<ModelOutput> FindModelOutputs(base::Env& env, const ModelCardInputs& in) {
  std::vector<ModelOutput> out;
  auto kind_of = [&](const std::string& dir) -> std::string {
    if (env.FileExists(base::JoinPath(dir, "adapter_config.json"))) return "peft-adapter";
    if (env.FileExists(base::JoinPath(dir, "config.json"))) {
      auto names = env.ListDir(dir);
      if (names.ok()) {
        for (const std::string& n : *names) {
          if (n.ends_with(".safetensors") || n.ends_with(".gguf")) return "model";
        }
      }
    }
    return "";
  };
  for (size_t i = 0; i < in.volumes.size(); ++i) {
    const ModelCardVolume& v = in.volumes[i];
    if (!v.writable) continue;
    if (std::string kind = kind_of(v.local_dir); !kind.empty()) {
      out.push_back({i, "", kind});
      continue;
    }
    auto names = env.ListDir(v.local_dir);
    if (!names.ok()) continue;
    std::sort(names->begin(), names->end());
    for (const std::string& name : *names) {
      const std::string dir = base::JoinPath(v.local_dir, name);
      auto st = env.Stat(dir);
      if (!st.ok() || st->type != base::FileType::kDirectory) continue;
      // Checkpoints are resumable states, not models to publish.
      if (name == "checkpoints" || name.starts_with("step-")) continue;
      if (std::string kind = kind_of(dir); !kind.empty()) out.push_back({i, name, kind});
    }
  }
  return out;
}

Result<Json> BuildModelCard(base::Env& env, const ModelCardInputs& in,
                            const std::vector<ModelOutput>& outputs) {
  Json outs = Json::array();
  std::string output_dir;
  for (const ModelOutput& o : outputs) {
    const ModelCardVolume& v = in.volumes[o.volume];
    outs.push_back({{"location", SourceOf(v, o.path)},
                    {"path", JoinRel(v.mount_path, o.path)},
                    {"kind", o.kind},
                    {"region", RegionOf(in, v)}});
    if (output_dir.empty()) output_dir = v.local_dir;
  }
  const double hours = static_cast<double>(in.running_seconds) / 3600.0;
  const int watts = in.gpus * GpuWatts(in.gpu_model) + in.vcpus * kWattsPerVcpu;
  Json card = {
      {"schema", kSchema},
      {"job", in.job_id},
      {"project", in.project},
      {"user", in.user},
      {"created_at", base::FormatRfc3339(in.finished_unix_micros)},
      {"outputs", std::move(outs)},
      {"base_model", BaseModel(env, in)},
      {"datasets", Datasets(env, in)},
      {"training", {{"image", in.image}, {"hyperparameters", Hyperparameters(in)}}},
      {"metrics", output_dir.empty() ? Json(nullptr) : Metrics(env, output_dir)},
      {"compute",
       {{"flavor", in.flavor},
        {"units", in.units},
        {"gpu_model", in.gpu_model},
        {"gpus", in.gpus},
        {"vcpus", in.vcpus},
        {"running_seconds", in.running_seconds},
        {"device_minutes", (in.gpus > 0 ? in.gpus : in.vcpus) * ((in.running_seconds + 59) / 60)},
        {"power_watts_assumed", watts},
        {"energy_kwh_estimate", static_cast<double>(watts) * hours / 1000.0}}},
      {"region", in.region},
      {"jurisdiction", in.jurisdiction},
      {"data_regions", DataRegions(in)},
      {"intended_use", nullptr},
      {"limitations", nullptr},
  };
  if (!in.image_digest.empty()) card["training"]["image_digest"] = in.image_digest;
  return card;
}

std::string RenderModelCardMarkdown(const Json& card) {
  std::string md = "# Model card\n\n";
  md += "Written by Sovai when job `" + Value(card["job"]) + "` ended (" +
        Value(card["created_at"]) +
        "), from the job's own inputs and metrics. Complete the "
        "sections marked *to be completed*.\n\n## Outputs\n\n";
  for (const Json& o : card["outputs"]) {
    md += "* `" + Value(o["location"]) + "` (" + Value(o["kind"]) + ")\n";
  }
  md += "\n## Base model\n\n";
  const Json& base = card["base_model"];
  if (base.is_null()) {
    md += "Not given to the job as `--model`.\n";
  } else {
    md += "* Location: `" + Value(base.value("location", Json(base["path"]))) + "`\n";
    if (base.contains("name")) {
      const std::string name = Value(base["name"]);
      md += "* Name: " + (name.empty() ? std::string("(config.json has no _name_or_path)") : name) +
            "\n";
    }
    if (base.contains("content_sha256")) {
      md += "* Content SHA-256: `" + Value(base["content_sha256"]) + "` (" +
            Value(base["content_hash_of"]) + ")\n";
    }
  }
  md += "\n## Training data\n\n| Object | Size | SHA-256 |\n|---|---|---|\n";
  for (const Json& d : card["datasets"]) {
    md += "| `" + Value(d.value("bucket", Json("?"))) + "/" + Value(d.value("key", d["path"])) +
          "` | " + Value(d["size_bytes"]) + " | `" + Value(d["sha256"]) + "` |\n";
  }
  md += "\n## Training\n\nImage `" + Value(card["training"]["image"]) + "`";
  if (card["training"].contains("image_digest")) {
    md += " (digest `" + Value(card["training"]["image_digest"]) + "`)";
  }
  md += ".\n\n";
  for (const auto& [k, v] : card["training"]["hyperparameters"].items()) {
    md += "* `" + k + "`: " + Value(v) + "\n";
  }
  md += "\n## Metrics\n\n";
  if (card["metrics"].is_object()) {
    for (const auto& [k, v] : card["metrics"].items()) md += "* " + k + ": " + Value(v) + "\n";
  } else {
    md += "No metrics.jsonl in the output.\n";
  }
  const Json& c = card["compute"];
  md += "\n## Compute\n\n* Flavor: " + Value(c["flavor"]) + " × " + Value(c["units"]) + " (" +
        Devices(c) + ")\n* Running time: " + Value(c["running_seconds"]) +
        " s; device-minutes: " + Value(c["device_minutes"]) + "\n* Energy (estimate at " +
        Value(c["power_watts_assumed"]) +
        " W): " + FormatEnergy(c.value("energy_kwh_estimate", 0.0)) + "\n";
  md += "\n## Where\n\nTrained in region " + Value(card["region"]) + ", jurisdiction " +
        Value(card["jurisdiction"]);
  const Json regions = card.value("data_regions", Json::array());
  bool elsewhere = false;
  for (const Json& r : regions) elsewhere = elsewhere || r.value("region", "") != card["region"];
  if (!elsewhere) {
    md += "; the data and the outputs stayed in its buckets.\n";
  } else {
    md += ". The job mounted buckets of more than one region:\n\n";
    for (const Json& r : regions) {
      std::string volumes;
      for (const Json& v : r["volumes"])
        volumes += (volumes.empty() ? "`" : ", `") + Value(v) + "`";
      md += "* " + Value(r["region"]) + " (jurisdiction " + Value(r["jurisdiction"]) +
            "): " + volumes + "\n";
    }
  }
  md += "\n## Intended use\n\n*To be completed by the author.*\n";
  md += "\n## Limitations\n\n*To be completed by the author.*\n";
  return md;
}

Result<std::vector<std::string>> WriteModelCards(base::Env& env, const ModelCardInputs& in) {
  std::vector<ModelOutput> outputs = FindModelOutputs(env, in);
  std::vector<std::string> written;
  std::set<size_t> volumes;
  for (const ModelOutput& o : outputs) volumes.insert(o.volume);
  for (size_t v : volumes) {
    std::vector<ModelOutput> here;
    for (const ModelOutput& o : outputs) {
      if (o.volume == v) here.push_back(o);
    }
    SOVAI_ASSIGN_OR_RETURN(Json card, BuildModelCard(env, in, here));
    const std::string dir = in.volumes[v].local_dir;
    for (size_t i = 0; i < here.size(); ++i) {
      if (here[i].kind != "peft-adapter") continue;
      SOVAI_ASSIGN_OR_RETURN(
          std::string base,
          FixAdapterBaseModel(env, base::JoinPath(dir, here[i].path), card["base_model"]));
      if (base.empty()) continue;
      card["outputs"][i]["base_model_name_or_path"] = base;
      written.push_back(base::JoinPath(base::JoinPath(dir, here[i].path), "adapter_config.json"));
    }
    SOVAI_RETURN_IF_ERROR(
        env.WriteFileAtomically(base::JoinPath(dir, kCardJson), base::DumpJson(card, 2) + "\n"));
    SOVAI_RETURN_IF_ERROR(
        env.WriteFileAtomically(base::JoinPath(dir, kCardMarkdown), RenderModelCardMarkdown(card)));
    written.push_back(base::JoinPath(dir, kCardJson));
    written.push_back(base::JoinPath(dir, kCardMarkdown));
  }
  return written;
}

}  // namespace sovai::control
