// libFuzzer target for the unit manifest (src/base/unit_manifest.h), which the volume sync-down
// and the engine's --resume read from a bucket that a project's keys may write. Invariants: no
// crash, no hang; an accepted manifest has sorted, unique, safe paths, never the manifest's own
// name, at most kMaxUnitFiles of them, and re-encodes to JSON that parses to the same value.
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "base/unit_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using sovai::base::UnitManifest;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto manifest = UnitManifest::FromJson(input);
  if (!manifest.ok()) return 0;
  SOVAI_CHECK(manifest->files.size() <= sovai::base::kMaxUnitFiles);
  for (size_t i = 0; i < manifest->files.size(); ++i) {
    const std::string& path = manifest->files[i].path;
    SOVAI_CHECK(!path.empty() && path.front() != '/' && path.find("..") != 0);
    SOVAI_CHECK(path != sovai::base::kUnitManifestName);
    if (i > 0) SOVAI_CHECK(manifest->files[i - 1].path < path);
  }
  auto again = UnitManifest::FromJson(manifest->ToJson());
  SOVAI_CHECK(again.ok()) << again.status();
  SOVAI_CHECK(*again == *manifest);
  return 0;
}
