// libFuzzer target for src/registry's parsers of untrusted bytes: manifests and indexes
// (ParseManifest), and the names a /v2/ path carries (ParseV2Path, ParseDigest, repository names,
// tags, Accept negotiation). The first byte picks the Content-Type the manifest is parsed under
// (as an ASCII digit, so corpus files stay readable):
//   '0' none  '1' OCI manifest  '2' OCI index  '3' Docker schema 2  '4' Docker list
//   '5' the rest is a /v2/ path and an Accept header, one per line
// Beyond "no crash, no leak, no UB", it checks the contracts: an accepted manifest has one of the
// four media types, at most kMaxManifestReferences descriptors with valid digests, and an index
// has no blobs; errors carry a message.
//
// Build: cmake --preset fuzz && cmake --build build-fuzz --target registry_manifest_fuzzer
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.h"
#include "registry/limits.h"
#include "registry/manifest.h"
#include "registry/names.h"

namespace {

using namespace sovai::registry;

void CheckDescriptor(const Descriptor& d) {
  SOVAI_CHECK(ParseDigest(d.digest.ToString()).ok()) << d.digest.ToString();
}

void FuzzPath(std::string_view text) {
  size_t nl = text.find('\n');
  std::string_view path = text.substr(0, nl);
  std::string_view accept = nl == std::string_view::npos ? "" : text.substr(nl + 1);
  V2Path p = ParseV2Path(path);
  if (p.kind != V2Path::kUnknown && !p.repository.empty()) {
    auto valid = ValidateRepositoryName(p.repository);
    if (valid.ok()) {
      SOVAI_CHECK(p.repository.size() <= kMaxRepositoryNameBytes);
      SOVAI_CHECK(!ProjectOf(p.repository).empty());
    } else {
      SOVAI_CHECK(!valid.message().empty());
    }
  }
  if (auto d = ParseDigest(p.reference); d.ok()) SOVAI_CHECK(d->ToString() == p.reference);
  if (ValidateTag(p.reference).ok()) SOVAI_CHECK(p.reference.size() <= kMaxTagBytes);
  (void)AcceptAllows(accept, kOciManifestType);
  (void)BaseMediaType(accept);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  char selector = input[0];
  input.remove_prefix(1);
  if (selector == '5') {
    FuzzPath(input);
    return 0;
  }
  std::string_view content_type;
  switch (selector) {
    case '1':
      content_type = kOciManifestType;
      break;
    case '2':
      content_type = kOciIndexType;
      break;
    case '3':
      content_type = kDockerManifestType;
      break;
    case '4':
      content_type = kDockerListType;
      break;
    default:
      break;
  }
  auto m = ParseManifest(input, content_type);
  if (!m.ok()) {
    SOVAI_CHECK(!m.status().message().empty());
    return 0;
  }
  SOVAI_CHECK(IsManifestMediaType(m->media_type)) << m->media_type;
  SOVAI_CHECK(m->index == IsIndexMediaType(m->media_type));
  SOVAI_CHECK(m->layers.size() <= kMaxManifestReferences);
  SOVAI_CHECK(m->manifests.size() <= kMaxManifestReferences);
  if (m->index) {
    SOVAI_CHECK(m->blobs().empty());
  } else {
    SOVAI_CHECK(m->config.has_value());
  }
  for (const Descriptor& d : m->blobs()) CheckDescriptor(d);
  for (const Descriptor& d : m->manifests) CheckDescriptor(d);
  return 0;
}
