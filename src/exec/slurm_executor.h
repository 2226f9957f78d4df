// The Slurm executor (docs/slurm.md): every workload becomes a Slurm job whose batch step is
// `sovai slurm-agent run` (slurm_agent.h), which runs the local executor on the node; Slurm
// queues and places it, the volumes are staged on the node, the log and the agent's status come
// back through the project bucket (slurm_plan.h), and this side follows both.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "base/env.h"
#include "exec/executor.h"
#include "exec/slurm.h"

namespace sovai::exec {

struct SlurmExecutorOptions {
  SlurmClient* client = nullptr;  // required
  std::string partition;          // "" = the cluster's default
  std::string account;            // "" = the submitting user's default
  // By flavor id: the partition and the gres type of its GPUs (e.g. {"gpu", "h100"}); a flavor
  // not listed runs in `partition` with untyped GPUs.
  std::map<std::string, std::pair<std::string, std::string>> flavors;
  std::string agent_binary;          // the sovai binary, at the same path on every node
  std::string engine_binary;         // sovai-engine on the nodes (sovai/finetune, sovai/serve)
  std::string scratch_dir = "/tmp";  // node-local: the volumes of a job on that node
  // The platform's S3 endpoint as the nodes reach it ("" = the address the server uses itself).
  std::string s3_endpoint;
  // Added to the job's timeout in --time, for staging volumes in and out.
  int64_t staging_minutes = 30;
  // How often a workload asks Slurm and the project bucket about its job.
  std::chrono::milliseconds poll_interval{1000};
  // SIGTERM to the job's steps, then SIGKILL after this.
  std::chrono::milliseconds stop_grace{10'000};
  // How long a failed agent report waits for Slurm's own verdict: when a node's slurmd dies,
  // the agent sees its steps vanish at once, while Slurm declares NODE_FAIL only after its
  // SlurmdTimeout. A job whose command failed by itself ends as soon as its batch step does.
  std::chrono::milliseconds verdict_grace{60'000};
  base::Env* env = nullptr;  // nullptr = base::Env::Default()
};

class SlurmExecutor final : public Executor {
 public:
  explicit SlurmExecutor(SlurmExecutorOptions options);
  base::Result<std::unique_ptr<Workload>> Start(WorkloadSpec spec,
                                                WorkloadObserver& observer) override;
  base::Result<std::unique_ptr<Workload>> Resume(WorkloadSpec spec, WorkloadResumption from,
                                                 WorkloadObserver& observer) override;
  bool runs_multi_node() const override { return true; }
  bool runs_oci_images() const override { return false; }

 private:
  SlurmExecutorOptions options_;
};

}  // namespace sovai::exec
