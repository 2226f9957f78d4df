// libFuzzer target for the object-lock and lifecycle bodies of src/objstore. The first byte
// picks the parser (an ASCII digit, so corpus files stay readable):
//   '0' ParseLifecycleConfiguration      '2' ParseRetention
//   '1' ParseObjectLockConfiguration     '3' ParseLegalHold
// Beyond "no crash, no leak, no UB": errors carry a message and are never InternalError; what a
// parser accepts is within the documented limits and survives Render -> Parse unchanged.
//
// Build: cmake --preset fuzz && cmake --build build-fuzz --target s3_data_xml_fuzzer
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "objstore/lifecycle.h"
#include "objstore/object_lock.h"

namespace {

using namespace sovai::objstore;

template <class T>
bool Accepted(const S3Result<T>& r) {
  if (r.ok()) return true;
  SOVAI_CHECK(!r.error().message.empty());
  SOVAI_CHECK(r.error().code != S3Code::kInternalError) << r.error().ToString();
  return false;
}

void FuzzLifecycle(std::string_view body) {
  auto r = ParseLifecycleConfiguration(body);
  if (!Accepted(r)) return;
  SOVAI_CHECK(!r->rules.empty() && r->rules.size() <= kMaxLifecycleRules);
  for (const LifecycleRule& rule : r->rules) {
    SOVAI_CHECK(!rule.id.empty() && rule.id.size() <= kMaxLifecycleRuleIdBytes);
    SOVAI_CHECK(rule.expiration_days >= 0 && rule.noncurrent_days >= 0);
  }
  auto again = ParseLifecycleConfiguration(RenderLifecycleConfiguration(*r));
  SOVAI_CHECK(again.ok()) << again.error().ToString();
  SOVAI_CHECK(*again == *r);
}

void FuzzLockConfiguration(std::string_view body) {
  auto r = ParseObjectLockConfiguration(body);
  if (!Accepted(r)) return;
  SOVAI_CHECK(r->enabled);
  SOVAI_CHECK(r->default_days <= kMaxDefaultRetentionDays);
  SOVAI_CHECK(r->default_years <= kMaxDefaultRetentionYears);
  auto again = ParseObjectLockConfiguration(RenderObjectLockConfiguration(*r));
  SOVAI_CHECK(again.ok() && *again == *r);
}

void FuzzRetention(std::string_view body) {
  auto r = ParseRetention(body);
  if (!Accepted(r) || r->mode.empty()) return;
  auto again = ParseRetention(RenderRetention(*r));
  SOVAI_CHECK(again.ok() && again->mode == r->mode);
  // Rendered with milliseconds: the same instant to the millisecond.
  SOVAI_CHECK(again->retain_until_micros / 1000 == r->retain_until_micros / 1000 ||
              r->retain_until_micros < 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (static_cast<uint8_t>(data[0] - '0') % 4) {
    case 0:
      FuzzLifecycle(input);
      break;
    case 1:
      FuzzLockConfiguration(input);
      break;
    case 2:
      FuzzRetention(input);
      break;
    case 3:
      if (auto r = ParseLegalHold(input); Accepted(r)) {
        SOVAI_CHECK(*ParseLegalHold(RenderLegalHold(*r)) == *r);
      }
      break;
  }
  return 0;
}
