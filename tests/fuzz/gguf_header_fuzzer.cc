// libFuzzer target for the GGUF reader (src/model/gguf.h): the input is a whole GGUF file, parsed
// from a byte span as GgufReader::Parse does for a mapped file. Invariants on success: every
// tensor lies inside the input, at an aligned offset, with the byte size its type and shape give,
// at most 4 dimensions, no two tensors overlap, names and keys are unique and found by their
// lookups, and parsing is deterministic. On failure the code is one the header documents.
//
// Limits are lowered (fewer array elements in all) so that one input cannot make the parsed
// metadata large; the default limits are covered by the unit tests.
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/check.h"
#include "model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  using sovai::base::StatusCode;
  using sovai::model::GgufReader;
  using sovai::model::GgufTensorInfo;
  sovai::model::GgufLimits limits;
  limits.max_total_array_elements = 1 << 16;
  const std::span<const uint8_t> input(bytes, size);

  auto reader = GgufReader::Parse(input, limits);
  auto again = GgufReader::Parse(input, limits);
  SOVAI_CHECK_EQ(reader.ok(), again.ok());
  if (!reader.ok()) {
    const StatusCode code = reader.status().code();
    SOVAI_CHECK(code == StatusCode::kDataLoss || code == StatusCode::kInvalidArgument ||
                code == StatusCode::kResourceExhausted || code == StatusCode::kUnimplemented)
        << reader.status();
    SOVAI_CHECK(reader.status() == again.status());
    return 0;
  }
  const GgufReader& r = **reader;
  SOVAI_CHECK(r.version() == 2 || r.version() == 3);
  SOVAI_CHECK(r.alignment() > 0 && (r.alignment() & (r.alignment() - 1)) == 0);
  SOVAI_CHECK_EQ(r.data_offset() % r.alignment(), 0u);
  for (const auto& kv : r.metadata()) SOVAI_CHECK(r.Find(kv.key) == &kv.value);
  SOVAI_CHECK_EQ(r.metadata().size(), (*again)->metadata().size());
  std::vector<const GgufTensorInfo*> by_offset;
  uint64_t checksum = 0;
  for (const GgufTensorInfo& t : r.tensors()) {
    SOVAI_CHECK(r.FindTensor(t.name) == &t);
    SOVAI_CHECK(!t.name.empty() && t.name.size() <= sovai::model::kMaxGgufTensorNameBytes);
    SOVAI_CHECK_LE(t.ne.size(), sovai::model::kMaxGgufDims);
    auto expected = sovai::model::GgmlTensorBytes(t.type_id, t.ne);
    SOVAI_CHECK(expected.ok()) << expected.status();
    SOVAI_CHECK_EQ(*expected, t.size_bytes);
    SOVAI_CHECK_EQ(t.offset % r.alignment(), 0u);
    SOVAI_CHECK_EQ(t.file_offset, r.data_offset() + t.offset);
    SOVAI_CHECK_LE(t.file_offset, size);
    SOVAI_CHECK_LE(t.size_bytes, size - t.file_offset);
    auto data = r.TensorData(t);
    SOVAI_CHECK_EQ(data.size(), t.size_bytes);
    if (!data.empty()) checksum += data.front() + data.back();  // touch both ends
    if (t.size_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    SOVAI_CHECK_GE(by_offset[i]->offset, by_offset[i - 1]->offset + by_offset[i - 1]->size_bytes);
  }
  SOVAI_CHECK_LE(checksum, 2 * 255 * r.tensors().size());
  return 0;
}
