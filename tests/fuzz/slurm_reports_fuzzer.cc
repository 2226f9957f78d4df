// libFuzzer target for what the platform reads back from a Slurm job (src/exec/slurm.h,
// src/exec/slurm_plan.h): the agent's status.json and plan, which come from the object store
// (a project's keys may write them), and the output of squeue, scontrol, sacct and sbatch. The
// first input byte picks the parser; the rest is its input. Invariants: no crash, no hang; an
// accepted status has a known phase and an exit that is either a code or a signal; a status that
// was accepted re-encodes to one that parses to the same value; accepted Slurm answers carry a
// non-empty id and state, and an exit only in a final phase (scontrol, sacct).
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "exec/slurm.h"
#include "exec/slurm_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace sovai::exec;
  switch (selector % 7) {
    case 0: {
      auto status = AgentStatusFromJson(input);
      if (status.ok()) {
        if (status->exit) SOVAI_CHECK(status->exit->exited != status->exit->signaled);
        auto again = AgentStatusFromJson(AgentStatusToJson(*status));
        SOVAI_CHECK(again.ok()) << again.status();
        SOVAI_CHECK(again->phase == status->phase && again->exit == status->exit &&
                    again->message == status->message && again->node == status->node);
      }
      break;
    }
    case 1: {
      auto plan = DecodeSlurmPlan(input);
      if (plan.ok()) {
        SOVAI_CHECK(!plan->argv.empty() && plan->scratch_dir.starts_with("/") &&
                    plan->agent_binary.starts_with("/"));
        SOVAI_CHECK(DecodeSlurmPlan(EncodeSlurmPlan(*plan)).ok());
      }
      break;
    }
    case 2: {
      auto info = ParseSqueueLine(input);
      if (info.ok()) SOVAI_CHECK(!info->id.empty() && !info->state.empty());
      break;
    }
    case 3: {
      auto info = ParseScontrolJob(input);
      if (info.ok()) {
        SOVAI_CHECK(!info->id.empty() && !info->state.empty());
        SOVAI_CHECK(!info->exit || IsFinal(info->phase));
      }
      break;
    }
    case 4: {
      auto info = ParseSacctLine(input);
      if (info.ok()) SOVAI_CHECK(!info->exit || IsFinal(info->phase));
      break;
    }
    case 5: {
      auto id = ParseSbatchJobId(input);
      if (id.ok()) SOVAI_CHECK(!id->empty() && id->size() <= 20);
      break;
    }
    case 6: {
      auto config = ParseSlurmConfig(input);
      if (config.ok()) SOVAI_CHECK(config->scratch_dir.starts_with("/"));
      break;
    }
  }
  return 0;
}
