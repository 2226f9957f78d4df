// libFuzzer target for S3's browser form uploads: the streaming multipart/form-data reader and
// the POST policy document. The first byte picks what the rest goes to (an ASCII digit, so corpus
// files stay readable):
//   '0' MultipartFormReader over the rest (boundary "b"), fed in pieces of 1..16 bytes chosen by
//       the second byte, every part read to its end
//   '1' ParsePostPolicy, then CheckPostPolicy against a few forms
// Beyond "no crash, no leak, no UB", it checks the contracts: errors are InvalidArgument or
// ResourceExhausted (the form's own), a part read to 0 is followed by another part or the end,
// a value never exceeds its limit, and policy errors carry InvalidPolicyDocument and a message.
//
// Build: cmake --preset fuzz && cmake --build build-fuzz --target s3_post_form_fuzzer
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.h"
#include "net/http.h"
#include "objstore/limits.h"
#include "objstore/post_form.h"
#include "objstore/post_policy.h"

namespace {

using namespace sovai;
using namespace sovai::objstore;

void FuzzForm(std::string_view input) {
  if (input.empty()) return;
  const size_t piece = 1 + static_cast<unsigned char>(input[0]) % 16;
  net::StringBodyReader raw(std::string(input.substr(1)), piece);
  MultipartFormReader form(raw, "b");
  for (size_t parts = 0;; ++parts) {
    SOVAI_CHECK(parts <= kMaxPostFormFields + 1);
    auto part = form.NextPart();
    if (!part.ok()) {
      SOVAI_CHECK(form.form_error());
      SOVAI_CHECK(part.status().code() == base::StatusCode::kInvalidArgument ||
                  part.status().code() == base::StatusCode::kResourceExhausted)
          << part.status();
      return;
    }
    if (!part->has_value()) return;
    SOVAI_CHECK(!(*part)->name.empty());
    auto value = form.ReadPartValue(64);
    if (!value.ok()) {
      SOVAI_CHECK(form.form_error());
      return;
    }
    SOVAI_CHECK(value->size() <= 64);
  }
}

void FuzzPolicy(std::string_view text) {
  auto policy = ParsePostPolicy(text);
  if (!policy.ok()) {
    SOVAI_CHECK(policy.error().code == S3Code::kInvalidPolicyDocument);
    SOVAI_CHECK(!policy.error().message.empty());
    return;
  }
  for (const PostCondition& c : policy->conditions) SOVAI_CHECK(!c.text.empty());
  if (policy->length_range)
    SOVAI_CHECK(policy->length_range->first <= policy->length_range->second);
  const PostFields forms[] = {
      {},
      {{"bucket", "photos"}, {"key", "user/alice/a.png"}, {"acl", "public-read"}},
      {{"bucket", "photos"}, {"key", ""}, {"x-ignore-a", "1"}, {"policy", "x"}},
  };
  for (const PostFields& f : forms) {
    S3Status st = CheckPostPolicy(*policy, f, 0);
    if (st) SOVAI_CHECK(st->code == S3Code::kAccessDenied && !st->message.empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == '0') FuzzForm(rest);
  if (data[0] == '1') FuzzPolicy(rest);
  return 0;
}
