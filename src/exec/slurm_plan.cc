#include "exec/slurm_plan.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/crypto.h"
#include "exec/limits.h"

namespace sovai::exec {
namespace {

using base::Result;
using nlohmann::json;

json S3ToJson(const S3ClientOptions& s3) {
  return {{"endpoint", s3.endpoint},
          {"region", s3.region},
          {"access_key", s3.access_key},
          {"secret_key", s3.secret_key},
          {"ca_file", s3.ca_file}};
}

// Typed field access that names the field in its error.
class Reader {
 public:
  explicit Reader(const json& object, std::string path) : object_(object), path_(std::move(path)) {}

  Result<std::string> String(const char* name, bool required = true) const {
    auto it = object_.find(name);
    if (it == object_.end()) {
      if (!required) return std::string();
      return Missing(name);
    }
    if (!it->is_string()) return Wrong(name, "a string");
    return it->get<std::string>();
  }
  Result<int64_t> Int(const char* name, int64_t min, int64_t max) const {
    auto it = object_.find(name);
    if (it == object_.end()) return Missing(name);
    if (!it->is_number_integer()) return Wrong(name, "an integer");
    int64_t v = it->get<int64_t>();
    if (v < min || v > max) {
      return base::InvalidArgumentError("slurm plan: " + Path(name) + " " + std::to_string(v) +
                                        " is outside " + std::to_string(min) + ".." +
                                        std::to_string(max));
    }
    return v;
  }
  Result<bool> Bool(const char* name) const {
    auto it = object_.find(name);
    if (it == object_.end()) return Missing(name);
    if (!it->is_boolean()) return Wrong(name, "a boolean");
    return it->get<bool>();
  }
  Result<const json*> Array(const char* name, size_t max) const {
    auto it = object_.find(name);
    if (it == object_.end()) return Missing(name);
    if (!it->is_array()) return Wrong(name, "an array");
    if (it->size() > max) {
      return base::InvalidArgumentError("slurm plan: " + Path(name) + " has more than " +
                                        std::to_string(max) + " entries");
    }
    return &*it;
  }
  Result<const json*> Object(const char* name) const {
    auto it = object_.find(name);
    if (it == object_.end()) return Missing(name);
    if (!it->is_object()) return Wrong(name, "an object");
    return &*it;
  }
  std::string Path(const char* name) const { return path_.empty() ? name : path_ + "." + name; }

 private:
  base::Status Missing(const char* name) const {
    return base::InvalidArgumentError("slurm plan: " + Path(name) + " is missing");
  }
  base::Status Wrong(const char* name, const char* type) const {
    return base::InvalidArgumentError("slurm plan: " + Path(name) + " is not " + type);
  }
  const json& object_;
  std::string path_;
};

Result<S3ClientOptions> S3FromJson(const json& j, const std::string& path) {
  if (!j.is_object())
    return base::InvalidArgumentError("slurm plan: " + path + " is not an object");
  Reader r(j, path);
  S3ClientOptions s3;
  SOVAI_ASSIGN_OR_RETURN(s3.endpoint, r.String("endpoint"));
  SOVAI_ASSIGN_OR_RETURN(s3.region, r.String("region"));
  SOVAI_ASSIGN_OR_RETURN(s3.access_key, r.String("access_key"));
  SOVAI_ASSIGN_OR_RETURN(s3.secret_key, r.String("secret_key"));
  SOVAI_ASSIGN_OR_RETURN(s3.ca_file, r.String("ca_file", /*required=*/false));
  return s3;
}

Result<std::vector<std::string>> Strings(const json& array, const std::string& path) {
  std::vector<std::string> out;
  for (size_t i = 0; i < array.size(); ++i) {
    if (!array[i].is_string()) {
      return base::InvalidArgumentError("slurm plan: " + path + "[" + std::to_string(i) +
                                        "] is not a string");
    }
    out.push_back(array[i].get<std::string>());
  }
  return out;
}

}  // namespace

std::string EncodeSlurmPlan(const SlurmPlan& plan) {
  json volumes = json::array();
  for (const SlurmPlanVolume& v : plan.volumes) {
    volumes.push_back({{"spec", v.spec}, {"s3", S3ToJson(v.s3)}});
  }
  json env = json::array();
  for (const auto& [k, v] : plan.env) env.push_back({k, v});
  json mounts = json::array();
  for (const SlurmPlanMount& m : plan.extra_mounts) {
    mounts.push_back({{"host_path", m.host_path}, {"sandbox_path", m.sandbox_path}});
  }
  json j = {{"job_id", plan.job_id},
            {"log_s3", S3ToJson(plan.log_s3)},
            {"log_bucket", plan.log_bucket},
            {"log_prefix", plan.log_prefix},
            {"volumes", volumes},
            {"argv", plan.argv},
            {"env", env},
            {"extra_mounts", mounts},
            {"network_none", plan.network_none},
            {"uid", plan.uid},
            {"gid", plan.gid},
            {"scratch_dir", plan.scratch_dir},
            {"agent_binary", plan.agent_binary},
            {"master_port", plan.master_port}};
  return base::Base64Encode(j.dump());
}

Result<SlurmPlan> DecodeSlurmPlan(std::string_view encoded) {
  if (encoded.size() > kMaxSlurmPlanBytes * 4 / 3 + 4) {
    return base::InvalidArgumentError("slurm plan: larger than " +
                                      std::to_string(kMaxSlurmPlanBytes) + " bytes");
  }
  auto text = base::Base64Decode(encoded);
  if (!text.ok()) return base::InvalidArgumentError("slurm plan: not base64");
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return base::InvalidArgumentError("slurm plan: not a JSON object");
  }
  Reader r(j, "");
  SlurmPlan plan;
  SOVAI_ASSIGN_OR_RETURN(plan.job_id, r.String("job_id"));
  SOVAI_ASSIGN_OR_RETURN(const json* log_s3, r.Object("log_s3"));
  SOVAI_ASSIGN_OR_RETURN(plan.log_s3, S3FromJson(*log_s3, "log_s3"));
  SOVAI_ASSIGN_OR_RETURN(plan.log_bucket, r.String("log_bucket"));
  SOVAI_ASSIGN_OR_RETURN(plan.log_prefix, r.String("log_prefix"));
  SOVAI_ASSIGN_OR_RETURN(const json* volumes, r.Array("volumes", kMaxSandboxMounts));
  for (size_t i = 0; i < volumes->size(); ++i) {
    const std::string path = "volumes[" + std::to_string(i) + "]";
    const json& v = (*volumes)[i];
    if (!v.is_object())
      return base::InvalidArgumentError("slurm plan: " + path + " is not an object");
    Reader vr(v, path);
    SlurmPlanVolume volume;
    SOVAI_ASSIGN_OR_RETURN(volume.spec, vr.String("spec"));
    SOVAI_ASSIGN_OR_RETURN(const json* s3, vr.Object("s3"));
    SOVAI_ASSIGN_OR_RETURN(volume.s3, S3FromJson(*s3, path + ".s3"));
    plan.volumes.push_back(std::move(volume));
  }
  SOVAI_ASSIGN_OR_RETURN(const json* argv, r.Array("argv", kMaxSandboxEnvEntries));
  SOVAI_ASSIGN_OR_RETURN(plan.argv, Strings(*argv, "argv"));
  if (plan.argv.empty()) return base::InvalidArgumentError("slurm plan: argv is empty");
  SOVAI_ASSIGN_OR_RETURN(const json* env, r.Array("env", kMaxSandboxEnvEntries));
  for (size_t i = 0; i < env->size(); ++i) {
    const json& e = (*env)[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_string()) {
      return base::InvalidArgumentError("slurm plan: env[" + std::to_string(i) +
                                        "] is not [name, value]");
    }
    plan.env.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
  }
  SOVAI_ASSIGN_OR_RETURN(const json* mounts, r.Array("extra_mounts", kMaxSandboxMounts));
  for (size_t i = 0; i < mounts->size(); ++i) {
    const std::string path = "extra_mounts[" + std::to_string(i) + "]";
    const json& m = (*mounts)[i];
    if (!m.is_object())
      return base::InvalidArgumentError("slurm plan: " + path + " is not an object");
    Reader mr(m, path);
    SlurmPlanMount mount;
    SOVAI_ASSIGN_OR_RETURN(mount.host_path, mr.String("host_path"));
    SOVAI_ASSIGN_OR_RETURN(mount.sandbox_path, mr.String("sandbox_path"));
    plan.extra_mounts.push_back(std::move(mount));
  }
  SOVAI_ASSIGN_OR_RETURN(plan.network_none, r.Bool("network_none"));
  SOVAI_ASSIGN_OR_RETURN(int64_t uid, r.Int("uid", 1, UINT32_MAX));
  SOVAI_ASSIGN_OR_RETURN(int64_t gid, r.Int("gid", 1, UINT32_MAX));
  plan.uid = static_cast<uint32_t>(uid);
  plan.gid = static_cast<uint32_t>(gid);
  SOVAI_ASSIGN_OR_RETURN(plan.scratch_dir, r.String("scratch_dir"));
  if (!plan.scratch_dir.starts_with("/")) {
    return base::InvalidArgumentError("slurm plan: scratch_dir must be absolute");
  }
  SOVAI_ASSIGN_OR_RETURN(plan.agent_binary, r.String("agent_binary"));
  if (!plan.agent_binary.starts_with("/")) {
    return base::InvalidArgumentError("slurm plan: agent_binary must be absolute");
  }
  SOVAI_ASSIGN_OR_RETURN(int64_t port, r.Int("master_port", 1, 65535));
  plan.master_port = static_cast<int>(port);
  return plan;
}

std::string_view AgentPhaseName(AgentPhase phase) {
  static constexpr std::string_view kNames[] = {"initializing", "running", "finalizing", "done"};
  return kNames[static_cast<int>(phase)];
}

std::string AgentStatusToJson(const AgentStatus& status) {
  json j = {{"phase", AgentPhaseName(status.phase)},
            {"message", status.message},
            {"sync_failed", status.sync_failed},
            {"node", status.node},
            {"at_unix_micros", status.at_unix_micros}};
  if (status.exit) {
    j["exit"] = {{"exited", status.exit->exited},
                 {"code", status.exit->code},
                 {"signaled", status.exit->signaled},
                 {"signal", status.exit->signal}};
  }
  return j.dump();
}

Result<AgentStatus> AgentStatusFromJson(std::string_view text) {
  if (text.size() > 64 * 1024) return base::InvalidArgumentError("agent status: too large");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return base::InvalidArgumentError("agent status: not a JSON object");
  }
  Reader r(j, "");
  AgentStatus status;
  SOVAI_ASSIGN_OR_RETURN(std::string phase, r.String("phase"));
  bool known = false;
  for (AgentPhase p : {AgentPhase::kInitializing, AgentPhase::kRunning, AgentPhase::kFinalizing,
                       AgentPhase::kDone}) {
    if (phase == AgentPhaseName(p)) {
      status.phase = p;
      known = true;
    }
  }
  if (!known) return base::InvalidArgumentError("agent status: unknown phase \"" + phase + "\"");
  SOVAI_ASSIGN_OR_RETURN(status.message, r.String("message", /*required=*/false));
  SOVAI_ASSIGN_OR_RETURN(status.node, r.String("node", /*required=*/false));
  if (j.contains("sync_failed")) {
    SOVAI_ASSIGN_OR_RETURN(status.sync_failed, r.Bool("sync_failed"));
  }
  SOVAI_ASSIGN_OR_RETURN(status.at_unix_micros, r.Int("at_unix_micros", 0, INT64_MAX));
  if (j.contains("exit")) {
    SOVAI_ASSIGN_OR_RETURN(const json* exit, r.Object("exit"));
    Reader er(*exit, "exit");
    base::ExitStatus e;
    SOVAI_ASSIGN_OR_RETURN(e.exited, er.Bool("exited"));
    SOVAI_ASSIGN_OR_RETURN(e.signaled, er.Bool("signaled"));
    SOVAI_ASSIGN_OR_RETURN(int64_t code, er.Int("code", 0, 255));
    SOVAI_ASSIGN_OR_RETURN(int64_t signal, er.Int("signal", 0, 255));
    if (e.exited == e.signaled) {
      return base::InvalidArgumentError("agent status: exit is neither exited nor signaled");
    }
    e.code = static_cast<int>(code);
    e.signal = static_cast<int>(signal);
    status.exit = e;
  }
  return status;
}

std::string AgentLogChunkKey(std::string_view prefix, uint64_t sequence) {
  char name[32];
  std::snprintf(name, sizeof name, "log-%08llu", static_cast<unsigned long long>(sequence));
  return std::string(prefix) + name;
}

}  // namespace sovai::exec
