// sovai bucket ls|mb|rb|cp|sync|rm, through exec::S3Client with the config's S3 key.
#include <stdlib.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <set>

#include "base/strings.h"
#include "base/time.h"
#include "cli/client/bucket_ops.h"
#include "cli/client/command_util.h"
#include "cli/client/progress.h"
#include "cli/client/table.h"
#include "exec/s3_client.h"
#include "exec/volume_spec.h"

namespace sovai::cli::client {
namespace {

using base::Status;
using Json = nlohmann::json;

// `bucket cp s3://b/k -` copies the object to stdout in pieces of this size.
constexpr size_t kStdoutChunkBytes = 256 * 1024;

// The S3 client options of the config. FailedPrecondition when login set up no S3 key.
base::Result<exec::S3ClientOptions> S3Options(CommandLine& cmd, base::Env* env) {
  SOVAI_ASSIGN_OR_RETURN(ClientConfig config, cmd.Config());
  if (!config.has_s3() || config.region.empty()) {
    return base::FailedPreconditionError(
        "no S3 endpoint or key in the config: run 'sovai login' with a token that may create S3 "
        "keys (role operator or admin, no label selector)");
  }
  exec::S3ClientOptions options;
  options.endpoint = config.s3_url;
  // Sovai's S3 side names the region in lowercase (EU-WEST-LOCAL signs as eu-west-local).
  options.region = base::AsciiToLower(config.region);
  options.access_key = config.s3_access_key_id;
  options.secret_key = config.s3_secret_access_key;
  options.env = env;
  return options;
}

// "dir" → "dir/", "" stays "": the key prefix of a directory.
std::string DirPrefix(std::string_view key) {
  std::string prefix(key);
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  return prefix;
}

exec::VolumeSpec DirSpec(const std::string& bucket, std::string_view prefix) {
  exec::VolumeSpec spec;
  spec.bucket = bucket;
  spec.prefix = std::string(prefix);
  while (!spec.prefix.empty() && spec.prefix.back() == '/') spec.prefix.pop_back();
  return spec;
}

Json ObjectJson(const exec::S3Object& object) {
  Json j = {{"key", object.key}, {"size_bytes", object.size_bytes}, {"etag", object.etag}};
  j["last_modified"] = object.last_modified_unix_micros > 0
                           ? Json(base::FormatRfc3339(object.last_modified_unix_micros))
                           : Json();
  return j;
}

// What a transfer command did, printed at the end.
struct TransferReport {
  Json uploaded = Json::array();
  Json downloaded = Json::array();
  Json deleted = Json::array();
  size_t unchanged = 0;
  uint64_t bytes = 0;
};

class Transfer {
 public:
  Transfer(CommandLine& cmd, bool progress_enabled)
      : cmd_(cmd),
        progress_(cmd.ctx().console, cmd.ctx().env,
                  progress_enabled && !cmd.json() && cmd.ctx().console.ErrIsTerminal()),
        env_(cmd.ctx().env, progress_) {}

  Status Open() {
    SOVAI_ASSIGN_OR_RETURN(exec::S3ClientOptions options, S3Options(cmd_, &env_));
    s3_ = std::make_unique<exec::S3Client>(options);
    return s3_->status();
  }
  exec::S3Client& s3() { return *s3_; }
  Progress& progress() { return progress_; }
  TransferReport& report() { return report_; }
  // The object goes to stdout: no per-file lines there.
  void set_stdout_is_data() { stdout_is_data_ = true; }

  // One line per file in table mode (the bar is cleared first so they do not mix).
  void Line(const std::string& text) {
    if (cmd_.json() || stdout_is_data_) return;
    progress_.Finish();
    cmd_.ctx().console.Out(text + "\n");
  }

  Status Upload(const std::string& path, const S3Location& to, uint64_t size_bytes) {
    progress_.BeginFile(path, size_bytes);
    SOVAI_ASSIGN_OR_RETURN(exec::S3Object put, s3_->PutObjectFromFile(to.bucket, to.key, path));
    progress_.EndFile();
    Line("upload: " + path + " to " + S3Uri(to));
    report_.uploaded.push_back(
        {{"source", path}, {"destination", S3Uri(to)}, {"size_bytes", put.size_bytes}});
    report_.bytes += put.size_bytes;
    return Status();
  }

  Status Download(const S3Location& from, const std::string& path, uint64_t size_bytes) {
    progress_.BeginFile(from.key, size_bytes);
    SOVAI_RETURN_IF_ERROR(cmd_.ctx().env.CreateDirs(base::DirName(path)));
    SOVAI_ASSIGN_OR_RETURN(exec::S3Object got, s3_->GetObjectToFile(from.bucket, from.key, path));
    progress_.EndFile();
    Line("download: " + S3Uri(from) + " to " + path);
    report_.downloaded.push_back(
        {{"source", S3Uri(from)}, {"destination", path}, {"size_bytes", got.size_bytes}});
    report_.bytes += got.size_bytes;
    return Status();
  }

  int Finish(Status status) {
    progress_.Finish();
    if (!status.ok()) return cmd_.Fail(status);
    if (cmd_.json()) {
      cmd_.PrintJson({{"uploaded", report_.uploaded},
                      {"downloaded", report_.downloaded},
                      {"deleted", report_.deleted},
                      {"unchanged", report_.unchanged},
                      {"bytes", report_.bytes}});
      return kExitOk;
    }
    const size_t copied = report_.uploaded.size() + report_.downloaded.size();
    std::string summary = std::to_string(copied) + (copied == 1 ? " file" : " files") + " (" +
                          base::HumanBytes(report_.bytes) + ") copied";
    if (report_.unchanged > 0) summary += ", " + std::to_string(report_.unchanged) + " unchanged";
    if (!report_.deleted.empty())
      summary += ", " + std::to_string(report_.deleted.size()) + " deleted";
    cmd_.ctx().console.Err(summary + "\n");
    return kExitOk;
  }

 private:
  CommandLine& cmd_;
  Progress progress_;
  ProgressEnv env_;
  std::unique_ptr<exec::S3Client> s3_;
  TransferReport report_;
  bool stdout_is_data_ = false;
};

// Downloads an object to stdout: through a private temporary file (the S3 client writes files,
// atomically, and checks the bytes before the file is complete), streamed out, then removed.
Status DownloadToStdout(CommandContext& ctx, Transfer& transfer, const S3Location& from,
                        uint64_t size_bytes) {
  auto tmp = ctx.vars.find("TMPDIR");
  std::string tmpl =
      (tmp != ctx.vars.end() && !tmp->second.empty() ? tmp->second : "/tmp") + "/sovai-cp-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return base::ErrnoToStatus(errno, "mkdtemp '" + tmpl + "'");
  const std::string path = base::JoinPath(tmpl, "object");
  Status status = transfer.Download(from, path, size_bytes);
  if (status.ok()) {
    auto file = ctx.env.NewRandomAccessFile(path);
    status = file.status();
    std::string buf(kStdoutChunkBytes, '\0');
    for (uint64_t offset = 0; status.ok() && file.ok();) {
      auto got = (*file)->ReadAt(offset, std::span<char>(buf.data(), buf.size()));
      if (!got.ok()) {
        status = got.status();
        break;
      }
      if (*got == 0) break;
      ctx.console.Out(std::string_view(buf.data(), *got));
      offset += *got;
    }
  }
  ctx.env.DeleteDirRecursive(tmpl).IgnoreError();
  return status;
}

int RunBucketLs(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai bucket ls",
                  "Lists your buckets, or the objects of BUCKET under PREFIX (one level, with\n"
                  "'sub/' for deeper keys; -r for every key).");
  bool recursive = false;
  cmd.flags().Positional("[BUCKET[/PREFIX]]");
  cmd.flags().Bool("recursive", &recursive, "list every key under the prefix");
  cmd.flags().Short('r', "recursive");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 1)) return *code;
  auto options = S3Options(cmd, nullptr);
  if (!options.ok()) return cmd.Fail(options.status());

  if (cmd.flags().positional().empty()) {
    exec::S3Client s3(*options);
    auto buckets = s3.ListBuckets();
    if (!buckets.ok()) return cmd.Fail(buckets.status());
    if (cmd.json()) {
      Json out = Json::array();
      for (const exec::S3Bucket& b : *buckets) {
        out.push_back({{"name", b.name},
                       {"created", b.created_unix_micros > 0
                                       ? Json(base::FormatRfc3339(b.created_unix_micros))
                                       : Json()}});
      }
      cmd.PrintJson(out);
      return kExitOk;
    }
    Table table({"NAME", "CREATED"});
    for (const exec::S3Bucket& b : *buckets)
      table.AddRow({b.name, FormatTime(b.created_unix_micros)});
    ctx.console.Out(table.Render());
    return kExitOk;
  }

  auto location = ParseBucketPath(cmd.flags().positional()[0]);
  if (!location.ok()) return cmd.Usage(location.status().message());
  exec::S3Client s3(*options);
  auto objects = s3.ListObjects(location->bucket, location->key);
  if (!objects.ok()) return cmd.Fail(objects.status());
  // Names are shown relative to the prefix's directory: "data/ds" lists "ds.txt" and "ds/".
  const std::string& prefix = location->key;
  const size_t dir_length = prefix.rfind('/') == std::string::npos ? 0 : prefix.rfind('/') + 1;
  std::set<std::string> dirs;
  std::vector<const exec::S3Object*> files;
  for (const exec::S3Object& object : *objects) {
    size_t slash = object.key.find('/', prefix.size());
    if (!recursive && slash != std::string::npos) {
      dirs.insert(object.key.substr(0, slash + 1));
    } else {
      files.push_back(&object);
    }
  }
  if (cmd.json()) {
    Json out = Json::array();
    for (const std::string& dir : dirs) out.push_back({{"prefix", dir}});
    for (const exec::S3Object* object : files) out.push_back(ObjectJson(*object));
    cmd.PrintJson(out);
    return kExitOk;
  }
  Table table({"MODIFIED", "SIZE", "NAME"});
  for (const std::string& dir : dirs) table.AddRow({"", "DIR", dir.substr(dir_length)});
  for (const exec::S3Object* object : files) {
    table.AddRow({FormatTime(object->last_modified_unix_micros),
                  base::HumanBytes(object->size_bytes),
                  recursive ? object->key : object->key.substr(dir_length)});
  }
  ctx.console.Out(table.Render());
  return kExitOk;
}

// A bucket name argument: "name" or "s3://name".
base::Result<std::string> BucketName(std::string_view text) {
  SOVAI_ASSIGN_OR_RETURN(S3Location location, ParseBucketPath(text));
  if (!location.key.empty()) {
    return base::InvalidArgumentError("'" + std::string(text) +
                                      "' is not a bucket name (it has a key)");
  }
  return location.bucket;
}

int RunBucketMb(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai bucket mb", "Creates a bucket in the server's region.");
  cmd.flags().Positional("BUCKET");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto bucket = BucketName(cmd.flags().positional()[0]);
  if (!bucket.ok()) return cmd.Usage(bucket.status().message());
  auto options = S3Options(cmd, nullptr);
  if (!options.ok()) return cmd.Fail(options.status());
  exec::S3Client s3(*options);
  if (Status st = s3.CreateBucket(*bucket); !st.ok()) return cmd.Fail(st);
  ctx.console.Out("Created bucket " + *bucket + ".\n");
  return kExitOk;
}

int RunBucketRb(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai bucket rb",
                  "Deletes an empty bucket; --force deletes its objects first.");
  bool force = false;
  cmd.flags().Positional("BUCKET");
  cmd.flags().Bool("force", &force, "delete every object of the bucket, then the bucket");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto bucket = BucketName(cmd.flags().positional()[0]);
  if (!bucket.ok()) return cmd.Usage(bucket.status().message());
  auto options = S3Options(cmd, nullptr);
  if (!options.ok()) return cmd.Fail(options.status());
  if (force) {
    exec::S3Client s3(*options);
    auto objects = s3.ListObjects(*bucket, "");
    if (!objects.ok()) return cmd.Fail(objects.status());
    for (const exec::S3Object& object : *objects) {
      if (Status st = s3.DeleteObject(*bucket, object.key); !st.ok()) return cmd.Fail(st);
    }
    if (!objects->empty()) {
      ctx.console.Err("Deleted " + std::to_string(objects->size()) + " objects.\n");
    }
  }
  exec::S3Client admin(*options);
  if (Status st = admin.DeleteBucket(*bucket); !st.ok()) {
    if (st.code() == base::StatusCode::kFailedPrecondition) {
      return cmd.Fail(
          Status(st.code(), st.message() + " (delete its objects first, or use --force)"));
    }
    return cmd.Fail(st);
  }
  ctx.console.Out("Deleted bucket " + *bucket + ".\n");
  return kExitOk;
}

// Whether a local path names a directory to copy into: it exists as one, or ends with '/'.
bool IsLocalDir(base::Env& env, const std::string& path) {
  if (path.ends_with('/')) return true;
  auto stat = env.Stat(path);
  return stat.ok() && stat->type == base::FileType::kDirectory;
}

int RunBucketCp(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai bucket cp",
                  "Copies a local file to s3://bucket/key or back; -r copies a directory's files\n"
                  "to a prefix, or a prefix's objects to a directory. A destination ending in\n"
                  "'/' (or an existing directory) receives the file under its own name; '-'\n"
                  "writes an object to stdout.");
  bool recursive = false;
  bool progress = true;
  cmd.flags().Positional("SOURCE DESTINATION");
  cmd.flags().Bool("recursive", &recursive, "copy directories / prefixes");
  cmd.flags().Bool("progress", &progress, "show a progress bar when stderr is a terminal");
  cmd.flags().Short('r', "recursive");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 2, 2)) return *code;
  const std::string& source = cmd.flags().positional()[0];
  const std::string& destination = cmd.flags().positional()[1];
  auto from = ParseS3Uri(source);
  auto to = ParseS3Uri(destination);
  if (!from.ok()) return cmd.Usage(from.status().message());
  if (!to.ok()) return cmd.Usage(to.status().message());
  if (from->has_value() == to->has_value()) {
    return cmd.Usage("copy between a local path and s3://bucket/key: one side must be each");
  }
  base::Env& env = ctx.env;
  Transfer transfer(cmd, progress);

  if (to->has_value()) {  // upload
    if (source == "-")
      return cmd.Usage("uploading from stdin is not supported; write a file first");
    S3Location target = **to;
    if (!recursive) {
      auto stat = env.Stat(source);
      if (!stat.ok()) return cmd.Fail(stat.status());
      if (stat->type == base::FileType::kDirectory) {
        return cmd.Usage("'" + source + "' is a directory; use -r to copy its files");
      }
      if (target.key.empty() || target.key.ends_with('/')) target.key += base::BaseName(source);
      if (Status st = transfer.Open(); !st.ok()) return transfer.Finish(st);
      transfer.progress().Start(1, stat->size_bytes);
      return transfer.Finish(transfer.Upload(source, target, stat->size_bytes));
    }
    std::vector<std::string> warnings;
    auto files = ListLocalFiles(source, &warnings);
    if (!files.ok()) return cmd.Fail(files.status());
    for (const std::string& w : warnings) cmd.Warn(w);
    if (Status st = transfer.Open(); !st.ok()) return transfer.Finish(st);
    uint64_t total = 0;
    for (const auto& [rel, entry] : *files) total += entry.size_bytes;
    transfer.progress().Start(files->size(), total);
    const exec::VolumeSpec spec = DirSpec(target.bucket, target.key);
    for (const auto& [rel, entry] : *files) {
      auto key = exec::KeyForRelativePath(spec, rel);
      if (!key.ok()) {
        cmd.Warn("skipped " + rel + ": " + key.status().message());
        continue;
      }
      Status st =
          transfer.Upload(base::JoinPath(source, rel), {target.bucket, *key}, entry.size_bytes);
      if (!st.ok()) return transfer.Finish(st);
    }
    return transfer.Finish(Status());
  }

  // download
  if (recursive && destination == "-")
    return cmd.Usage("-r copies into a directory, not to stdout");
  const S3Location origin = **from;
  if (Status st = transfer.Open(); !st.ok()) return transfer.Finish(st);
  if (!recursive) {
    if (origin.key.empty() || origin.key.ends_with('/')) {
      return cmd.Usage("'" + source +
                       "' names no object; give s3://bucket/key, or -r for a prefix");
    }
    auto listed = transfer.s3().ListObjects(origin.bucket, origin.key);
    if (!listed.ok()) return transfer.Finish(listed.status());
    const exec::S3Object* found = nullptr;
    bool is_prefix = false;
    for (const exec::S3Object& object : *listed) {
      if (object.key == origin.key) found = &object;
      if (object.key.starts_with(DirPrefix(origin.key))) is_prefix = true;
    }
    if (found == nullptr) {
      return transfer.Finish(base::NotFoundError(S3Uri(origin) + " does not exist" +
                                                 (is_prefix ? " (it is a prefix: use -r)" : "")));
    }
    transfer.progress().Start(1, found->size_bytes);
    if (destination == "-") {
      transfer.set_stdout_is_data();
      return transfer.Finish(DownloadToStdout(ctx, transfer, origin, found->size_bytes));
    }
    std::string path = destination;
    if (IsLocalDir(env, path)) path = base::JoinPath(path, base::BaseName(origin.key));
    return transfer.Finish(transfer.Download(origin, path, found->size_bytes));
  }
  auto listed = transfer.s3().ListObjects(origin.bucket, DirPrefix(origin.key));
  if (!listed.ok()) return transfer.Finish(listed.status());
  std::vector<std::string> warnings;
  SyncListing objects = RelativeObjects(origin.bucket, origin.key, *listed, &warnings);
  for (const std::string& w : warnings) cmd.Warn(w);
  uint64_t total = 0;
  for (const auto& [rel, entry] : objects) total += entry.size_bytes;
  transfer.progress().Start(objects.size(), total);
  const std::string prefix = DirPrefix(DirSpec(origin.bucket, origin.key).prefix);
  for (const auto& [rel, entry] : objects) {
    Status st = transfer.Download({origin.bucket, prefix + rel}, base::JoinPath(destination, rel),
                                  entry.size_bytes);
    if (!st.ok()) return transfer.Finish(st);
  }
  return transfer.Finish(Status());
}

int RunBucketSync(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai bucket sync",
                  "Makes a prefix match a local directory, or a directory match a prefix: copies\n"
                  "the files the destination lacks, whose size differs, or whose source is newer;\n"
                  "--delete also removes what the source does not have.");
  bool delete_extra = false;
  bool dry_run = false;
  bool progress = true;
  cmd.flags().Positional("SOURCE DESTINATION");
  cmd.flags().Bool("delete", &delete_extra, "remove destination files the source does not have");
  cmd.flags().Bool("dry-run", &dry_run, "print what would be done, do nothing");
  cmd.flags().Bool("progress", &progress, "show a progress bar when stderr is a terminal");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 2, 2)) return *code;
  const std::string& source = cmd.flags().positional()[0];
  const std::string& destination = cmd.flags().positional()[1];
  auto from = ParseS3Uri(source);
  auto to = ParseS3Uri(destination);
  if (!from.ok()) return cmd.Usage(from.status().message());
  if (!to.ok()) return cmd.Usage(to.status().message());
  if (from->has_value() == to->has_value()) {
    return cmd.Usage("sync a local directory with s3://bucket/prefix: one side must be each");
  }
  const bool upload = to->has_value();
  const S3Location remote = upload ? **to : **from;
  const std::string local = upload ? source : destination;
  const exec::VolumeSpec spec = DirSpec(remote.bucket, remote.key);

  Transfer transfer(cmd, progress);
  if (Status st = transfer.Open(); !st.ok()) return transfer.Finish(st);
  std::vector<std::string> warnings;
  SyncListing local_files;
  if (upload || ctx.env.FileExists(local)) {
    auto listed = ListLocalFiles(local, &warnings);
    if (!listed.ok()) return transfer.Finish(listed.status());
    local_files = std::move(*listed);
  }
  auto objects = transfer.s3().ListObjects(remote.bucket, spec.KeyPrefix());
  if (!objects.ok()) return transfer.Finish(objects.status());
  SyncListing remote_files = RelativeObjects(remote.bucket, spec.prefix, *objects, &warnings);
  for (const std::string& w : warnings) cmd.Warn(w);
  const SyncListing& src = upload ? local_files : remote_files;
  const SyncListing& dst = upload ? remote_files : local_files;
  SyncPlan plan = PlanSync(src, dst, delete_extra);
  transfer.report().unchanged = plan.unchanged;

  auto key_of = [&](const std::string& rel) {
    return S3Location{remote.bucket, spec.KeyPrefix() + rel};
  };
  if (dry_run) {
    for (const std::string& rel : plan.copy) {
      transfer.Line(
          upload
              ? "(dry run) upload: " + base::JoinPath(local, rel) + " to " + S3Uri(key_of(rel))
              : "(dry run) download: " + S3Uri(key_of(rel)) + " to " + base::JoinPath(local, rel));
    }
    for (const std::string& rel : plan.remove) {
      transfer.Line("(dry run) delete: " +
                    (upload ? S3Uri(key_of(rel)) : base::JoinPath(local, rel)));
    }
    if (cmd.json()) {
      cmd.PrintJson({{"dry_run", true},
                     {"copy", plan.copy},
                     {"delete", plan.remove},
                     {"unchanged", plan.unchanged}});
    } else {
      ctx.console.Err(std::to_string(plan.copy.size()) + " to copy (" +
                      base::HumanBytes(plan.copy_bytes) + "), " +
                      std::to_string(plan.remove.size()) + " to delete, " +
                      std::to_string(plan.unchanged) + " unchanged\n");
    }
    return kExitOk;
  }

  transfer.progress().Start(plan.copy.size(), plan.copy_bytes);
  for (const std::string& rel : plan.copy) {
    const uint64_t size = src.at(rel).size_bytes;
    Status st = upload ? transfer.Upload(base::JoinPath(local, rel), key_of(rel), size)
                       : transfer.Download(key_of(rel), base::JoinPath(local, rel), size);
    if (!st.ok()) return transfer.Finish(st);
  }
  for (const std::string& rel : plan.remove) {
    std::string what;
    if (upload) {
      what = S3Uri(key_of(rel));
      if (Status st = transfer.s3().DeleteObject(remote.bucket, key_of(rel).key); !st.ok()) {
        return transfer.Finish(st);
      }
    } else {
      what = base::JoinPath(local, rel);
      if (Status st = ctx.env.DeleteFile(what); !st.ok()) return transfer.Finish(st);
    }
    transfer.Line("delete: " + what);
    transfer.report().deleted.push_back(what);
  }
  return transfer.Finish(Status());
}

int RunBucketRm(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai bucket rm",
                  "Deletes an object; -r deletes every object under the prefix (as a directory:\n"
                  "s3://b/data removes data and data/..., not data2).");
  bool recursive = false;
  cmd.flags().Positional("s3://BUCKET/KEY");
  cmd.flags().Bool("recursive", &recursive, "delete every object under the prefix");
  cmd.flags().Short('r', "recursive");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  auto location = ParseS3Uri(cmd.flags().positional()[0]);
  if (!location.ok()) return cmd.Usage(location.status().message());
  if (!location->has_value()) return cmd.Usage("give an s3://bucket/key to delete");
  const S3Location target = **location;
  if (!recursive && (target.key.empty() || target.key.ends_with('/'))) {
    return cmd.Usage("'" + S3Uri(target) + "' names no object; use -r to delete a prefix");
  }
  auto options = S3Options(cmd, nullptr);
  if (!options.ok()) return cmd.Fail(options.status());
  exec::S3Client s3(*options);
  std::vector<std::string> keys;
  if (recursive) {
    auto objects = s3.ListObjects(target.bucket, target.key);
    if (!objects.ok()) return cmd.Fail(objects.status());
    const std::string dir = DirPrefix(target.key);
    for (const exec::S3Object& object : *objects) {
      if (object.key == target.key || object.key.starts_with(dir)) keys.push_back(object.key);
    }
  } else {
    keys.push_back(target.key);
  }
  Json deleted = Json::array();
  for (const std::string& key : keys) {
    if (Status st = s3.DeleteObject(target.bucket, key); !st.ok()) return cmd.Fail(st);
    deleted.push_back(S3Uri({target.bucket, key}));
    if (!cmd.json()) ctx.console.Out("delete: " + S3Uri({target.bucket, key}) + "\n");
  }
  if (cmd.json()) cmd.PrintJson({{"deleted", deleted}});
  return kExitOk;
}

}  // namespace

int RunBucketCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"ls", "list buckets, or objects under a prefix", &RunBucketLs},
      {"mb", "make a bucket", &RunBucketMb},
      {"rb", "remove a bucket (--force: with its objects)", &RunBucketRb},
      {"cp", "copy files to or from a bucket (-r for directories)", &RunBucketCp},
      {"sync", "copy only new and changed files (--delete to mirror)", &RunBucketSync},
      {"rm", "delete an object (-r: a prefix)", &RunBucketRm},
  };
  return RunGroup(ctx, "bucket",
                  "Object storage with the S3 key of 'sovai login' (any S3 tool works too).",
                  kSubcommands, args);
}

}  // namespace sovai::cli::client
