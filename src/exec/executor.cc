#include "exec/executor.h"

#include "base/env.h"
#include "base/strings.h"

namespace sovai::exec {

std::string_view WorkloadPhaseName(WorkloadPhase phase) {
  static constexpr std::string_view kNames[] = {"QUEUED", "INITIALIZING", "PENDING", "RUNNING",
                                                "FINALIZING"};
  return kNames[static_cast<int>(phase)];
}

std::string_view WorkloadEndName(WorkloadEnd end) {
  static constexpr std::string_view kNames[] = {"DONE", "FAILED", "ERROR", "INTERRUPTED",
                                                "TIMEOUT"};
  return kNames[static_cast<int>(end)];
}

std::string WorkloadLogPath(const std::string& dir) { return base::JoinPath(dir, "log"); }

std::string WorkloadVolumeDir(const std::string& dir, size_t i) {
  return base::JoinPath(base::JoinPath(dir, "volumes"), std::to_string(i));
}

std::string WorkloadManifestPath(const std::string& dir, size_t i) {
  return base::JoinPath(dir, "manifest-" + std::to_string(i) + ".json");
}

base::Result<std::unique_ptr<LogWriter>> OpenWorkloadLog(base::Env& env, const std::string& dir) {
  SOVAI_RETURN_IF_ERROR(exec::MakeDir(dir, 0711));
  (void)exec::MakeDir(base::JoinPath(dir, "volumes"), 0711);
  auto opened = LogWriter::Open(env, WorkloadLogPath(dir));
  if (!opened.ok()) {
    return base::Status(opened.status().code(),
                        "cannot open the job log: " + opened.status().message());
  }
  return opened;
}

base::Result<LogChunk> ReadWorkloadLog(base::Env& env, const std::string& dir, uint64_t offset,
                                       size_t max_bytes) {
  const std::string path = WorkloadLogPath(dir);
  if (!env.FileExists(path)) {
    if (offset != 0) return base::InvalidArgumentError("offset is past the end of the log");
    return LogChunk{};
  }
  return ReadLog(env, path, offset, max_bytes);
}

base::Status EnsureBucket(S3Client& s3, const std::string& bucket) {
  if (base::Status head = s3.HeadBucket(bucket); head.code() != base::StatusCode::kNotFound) {
    return base::Status();
  }
  base::Status made = s3.CreateBucket(bucket);
  if (made.code() == base::StatusCode::kAlreadyExists) return base::Status();
  return made;
}

}  // namespace sovai::exec
