// libFuzzer target for the safetensors reader (src/model/safetensors.h): the input is a whole file
// image (length, header, data). It is read twice, from memory (ParseSafetensors over the bytes)
// and memory-mapped from a file (SafetensorsFile::Open on a memfd), and the two readings must
// agree: the same tensors, metadata and bytes, or the same error. Invariants of a successful
// reading: the tensors are in data order and tile the data buffer exactly, each view lies inside
// the image where its data_offsets say, its size is its shape times its dtype's size, names are
// unique and non-empty. And the writer round-trips it: writing the tensors and metadata that were
// read gives a file that reads back to the same tensors, metadata and bytes.
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/env.h"
#include "model/safetensors.h"

namespace {

using sovai::model::SafetensorsContents;
using sovai::model::SafetensorsTensor;

// A comparable description of a reading: every tensor with its bytes, and the metadata.
std::string Describe(const std::vector<SafetensorsTensor>& tensors,
                     const std::map<std::string, std::string>& metadata) {
  std::string out;
  for (const SafetensorsTensor& t : tensors) {
    out += t.name + "|" + std::string(t.dtype_name()) + "|" + sovai::model::ShapeToString(t.shape) +
           "|" + std::to_string(t.data_begin) + "-" + std::to_string(t.data_end) + "|" +
           std::string(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size()) + "\n";
  }
  for (const auto& [k, v] : metadata) out += "meta " + k + "=" + v + "\n";
  return out;
}

void CheckInvariants(const SafetensorsContents& c, std::span<const std::byte> image) {
  const uint64_t data_start = 8 + c.header_bytes;
  SOVAI_CHECK_LE(data_start, image.size());
  uint64_t covered = 0;
  std::set<std::string> names;
  for (const SafetensorsTensor& t : c.tensors) {
    SOVAI_CHECK(!t.name.empty());
    SOVAI_CHECK(names.insert(t.name).second) << "duplicate " << t.name;
    SOVAI_CHECK_EQ(t.data_begin, covered) << t.name;
    SOVAI_CHECK_LE(t.data_begin, t.data_end);
    covered = t.data_end;
    auto size = sovai::model::TensorByteSize(t.dtype, t.shape);
    SOVAI_CHECK(size.has_value());
    SOVAI_CHECK_EQ(*size, t.data_end - t.data_begin);
    SOVAI_CHECK_EQ(t.bytes.size(), *size);
    SOVAI_CHECK(t.bytes.data() == image.data() + data_start + t.data_begin) << t.name;
    SOVAI_CHECK_LE(t.shape.size(), sovai::model::kMaxTensorRank);
  }
  SOVAI_CHECK_EQ(data_start + covered, image.size());
}

// The input as a file: a memfd, opened by path through /proc (no disk involved).
sovai::base::Result<std::unique_ptr<sovai::model::SafetensorsFile>> OpenAsFile(
    std::string_view input) {
  sovai::base::UniqueFd fd(::memfd_create("safetensors_fuzz", MFD_CLOEXEC));
  SOVAI_CHECK(fd.valid());
  SOVAI_CHECK(sovai::base::WriteFdFully(fd.get(), input).ok());
  // Messages name the path, so the two readings are compared by status code only.
  return sovai::model::SafetensorsFile::Open("/proc/self/fd/" + std::to_string(fd.get()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(bytes), size);
  std::span<const std::byte> image = std::as_bytes(std::span<const char>(input));

  auto parsed = sovai::model::ParseSafetensors(image, "fuzz.safetensors");
  auto mapped = OpenAsFile(input);
  SOVAI_CHECK_EQ(parsed.ok(), mapped.ok()) << parsed.status() << " vs " << mapped.status();
  if (!parsed.ok()) {
    SOVAI_CHECK(!parsed.status().message().empty());
    SOVAI_CHECK(parsed.status().code() == mapped.status().code())
        << parsed.status() << " vs " << mapped.status();
    return 0;
  }
  CheckInvariants(*parsed, image);
  const SafetensorsContents& c = *parsed;
  const sovai::model::SafetensorsFile& file = **mapped;
  std::string description = Describe(c.tensors, c.metadata);
  SOVAI_CHECK_EQ(description, Describe(file.tensors(), file.metadata()));
  for (const SafetensorsTensor& t : c.tensors) {
    SOVAI_CHECK(file.Find(t.name) != nullptr) << t.name;
    auto computable = sovai::model::RequireComputable(t, "fuzz");
    SOVAI_CHECK_EQ(computable.ok(), sovai::model::ComputableDType(t.dtype).has_value());
    if (computable.ok()) {
      auto values = file.ReadF32(t.name);
      SOVAI_CHECK(values.ok()) << values.status();
      SOVAI_CHECK_EQ(values->size(), t.num_elements());
    }
  }

  // Round trip through the writer.
  sovai::model::SafetensorsWriter writer;
  SOVAI_CHECK(writer.SetMetadata(c.metadata).ok());
  for (const SafetensorsTensor& t : c.tensors) {
    auto added = writer.Add(sovai::model::ToWrite(t));
    SOVAI_CHECK(added.ok()) << added;
  }
  auto written = writer.Serialize();
  SOVAI_CHECK(written.ok()) << written.status();
  auto reread =
      sovai::model::ParseSafetensors(std::as_bytes(std::span<const char>(*written)), "rewritten");
  SOVAI_CHECK(reread.ok()) << reread.status();
  SOVAI_CHECK_EQ(reread->header_bytes % 8, 0u);
  // Offsets may differ (the writer sorts by alignment); names, dtypes, shapes and bytes may not.
  auto without_offsets = [](std::vector<SafetensorsTensor> tensors) {
    std::sort(tensors.begin(), tensors.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    for (auto& t : tensors) t.data_begin = t.data_end = 0;
    return tensors;
  };
  SOVAI_CHECK_EQ(Describe(without_offsets(c.tensors), c.metadata),
                 Describe(without_offsets(reread->tensors), reread->metadata));
  return 0;
}
