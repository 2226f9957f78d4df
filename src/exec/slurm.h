// The Slurm executor's side of the cluster: the batch script a workload becomes, and the Slurm
// commands that submit, watch and signal it (sbatch, squeue, scontrol, sacct, scancel).
//
//   SlurmClient slurm(env, options);
//   SOVAI_ASSIGN_OR_RETURN(std::string script, BuildBatchScript(batch));
//   SOVAI_ASSIGN_OR_RETURN(std::string slurm_id, slurm.Submit(script));
//   ... SOVAI_ASSIGN_OR_RETURN(SlurmJobInfo info, slurm.Query(slurm_id)); ...
//   slurm.Signal(slurm_id, SIGTERM);  // the job's steps, not its batch step
//
// What runs inside the allocation is `sovai slurm-agent run` (src/exec/slurm_agent.cc): it stages
// the volumes on the node, starts one task per GPU (or the requested tasks) with `srun`, each in
// the same bubblewrap sandbox as the local executor, ships the log back through the object store
// and syncs writable volumes up. This file knows nothing of that beyond the agent's command line
// and its environment.
//
// State: squeue answers for jobs Slurm still holds in memory; scontrol show job answers until
// MinJobAge after the end; sacct answers when accounting storage is configured. Query asks them in
// that order and maps Slurm's state names onto SlurmPhase.
//
// Thread-safety: the pure functions are; a SlurmClient may be used from several threads (each
// call runs its own child process).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace sovai::exec {

// What one Slurm job asks for and runs. Every name and value ends up in a shell script: the
// validation in BuildBatchScript refuses what could break out of its line.
struct SlurmBatch {
  std::string job_name;             // --job-name ("sovai-job_01J…")
  std::string partition;            // --partition; "" = the cluster's default
  std::string account;              // --account; "" = the user's default
  int nodes = 1;                    // --nodes
  int tasks_per_node = 1;           // --ntasks-per-node (one per GPU for GPU jobs)
  int cpus_per_task = 1;            // --cpus-per-task
  int gpus_per_node = 0;            // --gres=gpu[:TYPE]:N when > 0
  std::string gres_type;            // "h100"; "" = any GPU
  uint64_t memory_mb_per_node = 0;  // --mem (MiB); 0 = the partition's default
  int64_t time_minutes = 0;         // --time; 0 = the partition's limit
  std::string output_path;          // --output: the batch step's own stdout/stderr on the node
  // Exported by the script before it execs the agent. Values may hold any byte but NUL and are
  // single-quoted; names are [A-Z_][A-Z0-9_]*.
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> agent_argv;  // exec'd by the script; argv[0] an absolute path
};

// The `#!/bin/bash` script for sbatch: #SBATCH lines, the exports, `exec` of the agent.
// Errors: InvalidArgument naming the field (a name with a newline or space, counts below 1, an
// environment name that is not a shell name, an empty or relative agent program).
base::Result<std::string> BuildBatchScript(const SlurmBatch& batch);

// Slurm's job states, grouped by what the platform does with them.
enum class SlurmPhase : uint8_t {
  kPending,      // PENDING, REQUEUED, RESV_DEL_HOLD, REQUEUE_HOLD, SUSPENDED, ...: waiting
  kRunning,      // RUNNING, CONFIGURING, COMPLETING, SIGNALING, STAGE_OUT
  kCompleted,    // COMPLETED
  kFailed,       // FAILED, BOOT_FAIL, DEADLINE
  kCancelled,    // CANCELLED (scancel, or an administrator)
  kTimeout,      // TIMEOUT: hit --time
  kNodeFail,     // NODE_FAIL: a node of the allocation died
  kOutOfMemory,  // OUT_OF_MEMORY
  kPreempted,    // PREEMPTED
  kUnknown,      // a name this version does not know; treated as still running
};
SlurmPhase SlurmPhaseOf(std::string_view state);  // "PENDING", "CANCELLED by 0" → kCancelled
bool IsFinal(SlurmPhase phase);                   // the job left the cluster

struct SlurmJobInfo {
  std::string id;
  std::string state;  // as Slurm names it: "PENDING", "RUNNING", "FAILED", ...
  SlurmPhase phase = SlurmPhase::kUnknown;
  std::string reason;  // "Resources", "Priority", "NonZeroExitCode", "None"
  std::string nodes;   // "node[01-02]"; "" while pending
  // From ExitCode=CODE:SIGNAL, once final (the batch step's: the agent exits as the workload).
  std::optional<base::ExitStatus> exit;
};

// `sbatch --parsable` output: "123" or "123;cluster". Errors: InvalidArgument for anything else.
base::Result<std::string> ParseSbatchJobId(std::string_view output);
// One line of `squeue -h -o '%i|%T|%r|%N'`. Errors: InvalidArgument for another shape.
base::Result<SlurmJobInfo> ParseSqueueLine(std::string_view line);
// `scontrol show job -o ID` (one line of Key=Value pairs). Errors: InvalidArgument without
// JobId/JobState, or with an ExitCode that is not CODE:SIGNAL.
base::Result<SlurmJobInfo> ParseScontrolJob(std::string_view text);
// The batch line of `sacct -n -P -X -o JobID,State,ExitCode,Reason -j ID`.
base::Result<SlurmJobInfo> ParseSacctLine(std::string_view line);

struct SlurmClientOptions {
  // Where the Slurm commands are: "" = looked up on PATH.
  std::string bin_dir;
  // SLURM_CONF for the commands; "" = Slurm's own default (/etc/slurm/slurm.conf).
  std::string slurm_conf;
  int64_t command_timeout_ms = 30'000;
};

class SlurmClient {
 public:
  SlurmClient(base::Env& env, SlurmClientOptions options)
      : env_(env), options_(std::move(options)) {}

  // sbatch --parsable with the script on stdin. Errors: FailedPrecondition quoting sbatch
  // ("sbatch: error: Batch job submission failed: Requested node configuration is not
  // available"); NotFound when sbatch is not installed; DeadlineExceeded.
  base::Result<std::string> Submit(const std::string& script);
  // The job's state from squeue, else scontrol, else sacct. NotFound when none knows it.
  base::Result<SlurmJobInfo> Query(const std::string& id);
  // scancel --signal=SIG: every step of the job (the workload), not the batch step (the agent
  // that finalizes). FailedPrecondition quoting scancel.
  base::Status Signal(const std::string& id, int signal);
  // scancel: the whole job, batch step included.
  base::Status Cancel(const std::string& id);
  // `sinfo --version`: OK when the cluster's commands answer; the error says what is missing.
  base::Status Check();

 private:
  base::Result<base::CapturedRun> Run(std::vector<std::string> argv, std::string_view stdin_data);

  base::Env& env_;
  const SlurmClientOptions options_;
};

// The operator's Slurm settings: `sovai server --executor slurm --slurm-config FILE`
// (docs/formats/slurm-config.md). Every field is optional.
struct SlurmConfig {
  SlurmClientOptions client;  // "bin_dir", "slurm_conf"
  std::string partition;      // "partition": the default partition
  std::string account;        // "account"
  // "flavors": {"h100-1-gpu": {"partition": "gpu", "gres": "h100"}, ...}
  std::map<std::string, std::pair<std::string, std::string>> flavors;
  std::string agent_binary;   // "agent_binary": sovai on the nodes ("" = this server's path)
  std::string engine_binary;  // "engine_binary": sovai-engine on the nodes ("" = the server's)
  std::string scratch_dir = "/tmp";  // "scratch_dir": node-local, absolute
  std::string s3_endpoint;           // "s3_endpoint": the platform's S3 as nodes reach it
  int64_t staging_minutes = 30;      // "staging_minutes"
  int64_t poll_ms = 1000;            // "poll_ms"
};
// Errors: InvalidArgument naming the field (an unknown one included, so that a typo is not
// silently ignored), for a value of the wrong type, a relative path, a partition or gres that is
// not a plain Slurm value, or an endpoint that is not http(s)://.
base::Result<SlurmConfig> ParseSlurmConfig(std::string_view json);

// Environment of one task of a distributed job, from Slurm's: RANK (SLURM_PROCID), LOCAL_RANK
// (SLURM_LOCALID), WORLD_SIZE (SLURM_NTASKS), LOCAL_WORLD_SIZE (tasks on this node), NODE_RANK
// (SLURM_NODEID), MASTER_ADDR (`first_host`, the first node of the allocation) and MASTER_PORT.
// Errors: InvalidArgument naming a missing or malformed Slurm variable.
base::Result<std::vector<std::pair<std::string, std::string>>> DistributedEnv(
    const std::map<std::string, std::string>& slurm_env, std::string_view first_host,
    int master_port);

// The first host of a Slurm node list ("gpu[03-05,09],cpu01" → "gpu03"). Errors: InvalidArgument
// for a malformed list.
base::Result<std::string> FirstHostOf(std::string_view node_list);

}  // namespace sovai::exec
