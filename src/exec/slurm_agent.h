// `sovai slurm-agent`: what a Slurm job of the platform runs inside its allocation
// (exec/slurm.h writes the batch script, exec/slurm_plan.h the plan it carries).
//
//   sovai slurm-agent run       the batch step, on the first node: the local executor
//                               (local_executor.h) with `srun` of one `task` per Slurm task as
//                               its process: volumes down, the tasks, writable volumes up, the
//                               log and the status shipped to the project bucket all along;
//   sovai slurm-agent task      one task: the job's command in the bubblewrap sandbox, as the
//                               local executor builds it (BuildSandboxSpec), with RANK,
//                               WORLD_SIZE, MASTER_ADDR, ... set, its log records relayed on
//                               stdout to the batch step;
//   sovai slurm-agent stage-in  volumes down on one node (multi-node jobs run it on each node).
//
// The plan comes from SOVAI_SLURM_PLAN, Slurm's facts from its SLURM_* variables. Exit status of
// `run` and `task`: the workload's (128+N when a signal killed it), 1 when the agent itself could
// not do its part (the status object says why).
#pragma once

#include <string>
#include <vector>

#include "base/env.h"

namespace sovai::exec {

// `args`: "run", "task" or "stage-in". Returns the process's exit status (2 for a usage error).
int RunSlurmAgent(base::Env& env, const std::vector<std::string>& args);

}  // namespace sovai::exec
