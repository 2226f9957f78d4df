#include "control/job_restart.h"

#include <gtest/gtest.h>

#include "control/jobs.h"

namespace sovai::control {
namespace {

using exec::WorkloadEnd;
using exec::WorkloadPhase;

JobSpec OnFailure(int max_retries, std::string image = std::string(kShellImage)) {
  JobSpec spec;
  spec.image = std::move(image);
  spec.command = {"sh", "-c", "train"};
  spec.restart = RestartPolicy::kOnFailure;
  spec.max_retries = max_retries;
  return spec;
}

TryEnd Ended(WorkloadEnd end, std::string reason) {
  TryEnd t;
  t.outcome.end = end;
  t.outcome.reason = std::move(reason);
  return t;
}

TEST(JobRestartTest, AFailedCommandIsRestartedWhileRetriesAreLeft) {
  const TryEnd failed = Ended(WorkloadEnd::kFailed, "exited with code 3");
  EXPECT_EQ(RestartCause(OnFailure(2), 0, failed), "exited with code 3");
  EXPECT_EQ(RestartCause(OnFailure(2), 1, failed), "exited with code 3");
  EXPECT_EQ(RestartCause(OnFailure(2), 2, failed), std::nullopt) << "no retries left";
  JobSpec never = OnFailure(0);
  never.restart = RestartPolicy::kNever;
  EXPECT_EQ(RestartCause(never, 0, failed), std::nullopt);
}

TEST(JobRestartTest, ASignalFromOutsideIsAFailureThatIsRestarted) {
  TryEnd killed = Ended(WorkloadEnd::kFailed, "killed by signal 9");
  killed.outcome.exit_signal = 9;
  EXPECT_EQ(RestartCause(OnFailure(1), 0, killed), "killed by signal 9");
}

TEST(JobRestartTest, AStopIsNeverRestarted) {
  // A user's stop ends a try INTERRUPTED; a stop that raced the command's own failure too.
  TryEnd stopped = Ended(WorkloadEnd::kInterrupted, "stopped by a user");
  stopped.stop_requested = true;
  EXPECT_EQ(RestartCause(OnFailure(3), 0, stopped), std::nullopt);
  TryEnd failed_while_stopping = Ended(WorkloadEnd::kFailed, "killed by signal 15");
  failed_while_stopping.stop_requested = true;
  EXPECT_EQ(RestartCause(OnFailure(3), 0, failed_while_stopping), std::nullopt);
  // A stop during the recovery of a try lost with its server.
  TryEnd lost = Ended(WorkloadEnd::kInterrupted, "the server restarted while the job was RUNNING");
  lost.lost_with_server_in = WorkloadPhase::kRunning;
  lost.stop_requested = true;
  EXPECT_EQ(RestartCause(OnFailure(3), 0, lost), std::nullopt);
}

TEST(JobRestartTest, ATryLostWithItsServerMidRunIsRestarted) {
  for (WorkloadPhase phase :
       {WorkloadPhase::kInitializing, WorkloadPhase::kPending, WorkloadPhase::kRunning}) {
    const std::string reason =
        "the server restarted while the job was " + std::string(WorkloadPhaseName(phase));
    TryEnd lost = Ended(WorkloadEnd::kInterrupted, reason);
    lost.lost_with_server_in = phase;
    EXPECT_EQ(RestartCause(OnFailure(1), 0, lost), reason);
    EXPECT_EQ(RestartCause(OnFailure(1), 1, lost), std::nullopt) << "no retries left";
  }
  // FINALIZING: the command had ended; it is not run again.
  TryEnd finalizing =
      Ended(WorkloadEnd::kInterrupted, "the server restarted while the job was FINALIZING");
  finalizing.lost_with_server_in = WorkloadPhase::kFinalizing;
  EXPECT_EQ(RestartCause(OnFailure(1), 0, finalizing), std::nullopt);
  // The same INTERRUPTED end without a lost server is a stop (a budget cap): no restart.
  EXPECT_EQ(RestartCause(OnFailure(1), 0, Ended(WorkloadEnd::kInterrupted, "budget")),
            std::nullopt);
}

TEST(JobRestartTest, TimeoutsAndPlatformErrorsAreNotRestartedButALostNodeIs) {
  EXPECT_EQ(RestartCause(OnFailure(1), 0, Ended(WorkloadEnd::kTimeout, "ran longer")),
            std::nullopt);
  EXPECT_EQ(RestartCause(OnFailure(1), 0, Ended(WorkloadEnd::kError, "bucket missing")),
            std::nullopt);
  EXPECT_EQ(RestartCause(OnFailure(1), 0, Ended(WorkloadEnd::kDone, "exited with code 0")),
            std::nullopt);
  TryEnd node = Ended(WorkloadEnd::kError, "Slurm job 12 ended NODE_FAIL");
  node.outcome.node_lost = true;
  EXPECT_EQ(RestartCause(OnFailure(1), 0, node), "Slurm job 12 ended NODE_FAIL");
}

TEST(JobRestartTest, ARerunOfFinetuneResumesFromItsNewestCheckpoint) {
  JobSpec finetune = OnFailure(2, std::string(kFinetuneImage));
  finetune.command = {"--model", "/workspace/model", "--output", "/workspace/output"};
  EXPECT_EQ(CommandForTry(finetune, 0), finetune.command) << "a user's first try is unchanged";
  std::vector<std::string> resumed = finetune.command;
  resumed.push_back("--resume");
  EXPECT_EQ(CommandForTry(finetune, 1), resumed);
  EXPECT_EQ(CommandForTry(finetune, 2), resumed);
  finetune.command = resumed;
  EXPECT_EQ(CommandForTry(finetune, 1), resumed) << "--resume once";
  // Other images run what the user wrote on every try.
  JobSpec shell = OnFailure(2);
  EXPECT_EQ(CommandForTry(shell, 1), shell.command);
}

TEST(JobRestartTest, TheNoteOfARerunSaysWhichTryAndWhy) {
  EXPECT_EQ(TryNote(OnFailure(2), 0, "x"), "");
  EXPECT_EQ(TryNote(OnFailure(2), 1, "restart policy: killed by signal 9; try 2 of 3"),
            "restart policy: killed by signal 9; try 2 of 3");
  EXPECT_EQ(TryNote(OnFailure(2), 2, ""), "try 3 of 3");
  const std::string note = TryNote(OnFailure(1, std::string(kFinetuneImage)), 1, "why");
  EXPECT_NE(note.find("newest complete checkpoint"), std::string::npos) << note;
}

TEST(JobRestartTest, EndStates) {
  EXPECT_EQ(StateOf(WorkloadEnd::kDone), JobState::kDone);
  EXPECT_EQ(StateOf(WorkloadEnd::kFailed), JobState::kFailed);
  EXPECT_EQ(StateOf(WorkloadEnd::kError), JobState::kError);
  EXPECT_EQ(StateOf(WorkloadEnd::kInterrupted), JobState::kInterrupted);
  EXPECT_EQ(StateOf(WorkloadEnd::kTimeout), JobState::kTimeout);
}

}  // namespace
}  // namespace sovai::control
