#include "base/unit_manifest.h"

#include <algorithm>
#include <utility>

#include "base/json.h"
#include "base/strings.h"

namespace sovai::base {
namespace {

constexpr std::string_view kFormat = "sovai-unit";
constexpr int64_t kVersion = 1;

bool IsSafeRelativePath(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != std::string_view::npos) {
    return false;
  }
  for (std::string_view segment : Split(path, '/')) {
    if (segment.empty() || segment == "." || segment == "..") return false;
  }
  return true;
}

}  // namespace

const UnitFile* UnitManifest::Find(std::string_view path) const {
  auto it = std::lower_bound(files.begin(), files.end(), path,
                             [](const UnitFile& f, std::string_view p) { return f.path < p; });
  return it != files.end() && it->path == path ? &*it : nullptr;
}

std::string UnitManifest::ToJson() const {
  nlohmann::json list = nlohmann::json::array();
  for (const UnitFile& f : files) {
    list.push_back({{"path", f.path}, {"size", f.size_bytes}, {"etag", f.etag}});
  }
  return DumpJson({{"format", kFormat},
                   {"version", kVersion},
                   {"complete", complete},
                   {"files", std::move(list)}});
}

Result<UnitManifest> UnitManifest::FromJson(std::string_view json) {
  auto fail = [](std::string what) {
    return InvalidArgumentError("unit manifest: " + std::move(what));
  };
  if (json.size() > kMaxUnitManifestBytes) {
    return fail("larger than " + std::to_string(kMaxUnitManifestBytes) + " bytes");
  }
  Result<nlohmann::json> parsed = ParseJson(json, {.max_bytes = kMaxUnitManifestBytes});
  if (!parsed.ok()) return fail(parsed.status().message());
  auto format = GetString(*parsed, "format");
  if (!format.ok() || *format != kFormat) {
    return fail("not a unit manifest (\"format\" must be \"" + std::string(kFormat) + "\")");
  }
  auto version = GetInt(*parsed, "version");
  if (!version.ok()) return fail(version.status().message());
  if (*version != kVersion) {
    return fail("version " + std::to_string(*version) + " is not supported (this build reads " +
                std::to_string(kVersion) + ")");
  }
  UnitManifest manifest;
  auto complete = GetBool(*parsed, "complete");
  if (!complete.ok()) return fail(complete.status().message());
  manifest.complete = *complete;
  auto files = GetArray(*parsed, "files");
  if (!files.ok()) return fail(files.status().message());
  if ((*files)->size() > kMaxUnitFiles) {
    return fail("more than " + std::to_string(kMaxUnitFiles) + " files");
  }
  for (const nlohmann::json& item : **files) {
    const std::string where = "files[" + std::to_string(manifest.files.size()) + "]: ";
    auto path = GetString(item, "path");
    auto size = GetUint(item, "size");
    auto etag = GetString(item, "etag");
    for (const Status& st : {path.status(), size.status(), etag.status()}) {
      if (!st.ok()) return fail(where + st.message());
    }
    if (!IsSafeRelativePath(*path) || *path == kUnitManifestName) {
      return fail(where + "path '" + *path + "' is not a file of the unit");
    }
    if (!manifest.files.empty() && !(manifest.files.back().path < *path)) {
      return fail("files are not sorted by path and unique at '" + *path + "'");
    }
    manifest.files.push_back({std::move(*path), *size, std::move(*etag)});
  }
  return manifest;
}

Status CheckLocalUnit(Env& env, const std::string& dir) {
  const std::string path = JoinPath(dir, std::string(kUnitManifestName));
  if (!env.FileExists(path)) return Status();
  auto refuse = [&](const std::string& why) {
    return FailedPreconditionError("'" + dir + "' is not a complete unit: " + why);
  };
  Result<std::string> text = env.ReadFile(path, kMaxUnitManifestBytes);
  if (!text.ok()) return refuse(text.status().message());
  Result<UnitManifest> manifest = UnitManifest::FromJson(*text);
  if (!manifest.ok()) return refuse(manifest.status().message());
  if (!manifest->complete) return refuse("its manifest says it is still being written");
  for (const UnitFile& f : manifest->files) {
    Result<FileStat> st = env.Stat(JoinPath(dir, f.path));
    if (!st.ok() || st->type != FileType::kRegular) return refuse("'" + f.path + "' is missing");
    if (st->size_bytes != f.size_bytes) {
      return refuse("'" + f.path + "' has " + std::to_string(st->size_bytes) +
                    " bytes, the manifest says " + std::to_string(f.size_bytes));
    }
  }
  return Status();
}

}  // namespace sovai::base
