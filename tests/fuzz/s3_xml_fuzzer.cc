// libFuzzer target for src/objstore's XML bodies, names and CORS matching. The first byte picks
// what the rest of the input goes to (as an ASCII digit, so corpus files stay readable):
//   '0' ParseCreateBucketConfiguration   '5' ParseVersioningConfiguration
//   '1' ParseDelete                      '6' ParseCorsConfiguration
//   '2' ParseCompleteMultipartUpload     '7' ParseTaggingHeader / FormatTaggingHeader
//   '3' ParseTagging (object)            '8' XmlWriter text round trip (through pugixml too)
//   '4' ParseTagging (bucket)            '9' ValidateBucketName, ValidateObjectKey, MatchCors
// Beyond "no crash, no leak, no UB", it checks the contracts: what a parser accepts satisfies
// the documented limits and survives Render -> Parse unchanged, errors carry a message, and the
// writer's output is always well-formed XML that reads back as the text written.
//
// Build: cmake --preset fuzz && cmake --build build-fuzz --target s3_xml_fuzzer
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <pugixml.hpp>
#include <string>
#include <string_view>

#include "base/check.h"
#include "objstore/cors.h"
#include "objstore/names.h"
#include "objstore/s3_xml.h"

namespace {

using namespace sovai::objstore;

template <class T>
void CheckError(const S3Result<T>& r) {
  if (r.ok()) return;
  SOVAI_CHECK(!r.error().message.empty());
  SOVAI_CHECK(r.error().code != S3Code::kInternalError) << r.error().ToString();
}

void CheckStatus(const S3Status& s) {
  if (!s) return;
  SOVAI_CHECK(!s->message.empty());
}

void FuzzDelete(std::string_view body) {
  auto r = ParseDelete(body);
  CheckError(r);
  if (!r.ok()) return;
  SOVAI_CHECK(!r->objects.empty() && r->objects.size() <= kMaxDeleteObjects);
  for (const ObjectToDelete& o : r->objects) SOVAI_CHECK(!o.key.empty());
}

void FuzzComplete(std::string_view body) {
  auto r = ParseCompleteMultipartUpload(body);
  CheckError(r);
  if (!r.ok()) return;
  SOVAI_CHECK(!r->parts.empty());
  int previous = 0;
  for (const CompletedPart& p : r->parts) {
    SOVAI_CHECK_GT(p.part_number, previous);
    SOVAI_CHECK_LE(p.part_number, kMaxPartNumber);
    previous = p.part_number;
  }
}

void FuzzTagging(std::string_view body, bool for_bucket) {
  auto r = ParseTagging(body, for_bucket);
  CheckError(r);
  if (!r.ok()) return;
  SOVAI_CHECK(!ValidateTags(*r, for_bucket));
  auto again = ParseTagging(RenderTagging(*r), for_bucket);
  SOVAI_CHECK(again.ok()) << again.error().ToString();
  SOVAI_CHECK(*again == *r);
}

void FuzzVersioning(std::string_view body) {
  auto r = ParseVersioningConfiguration(body);
  CheckError(r);
  if (!r.ok()) return;
  SOVAI_CHECK(r->status != VersioningStatus::kUnversioned);
  auto again = ParseVersioningConfiguration(RenderVersioningConfiguration(*r));
  SOVAI_CHECK(again.ok() && *again == *r);
}

void FuzzCors(std::string_view body) {
  auto r = ParseCorsConfiguration(body);
  CheckError(r);
  if (!r.ok()) return;
  SOVAI_CHECK(!ValidateCorsConfiguration(*r));
  auto again = ParseCorsConfiguration(RenderCorsConfiguration(*r));
  SOVAI_CHECK(again.ok()) << again.error().ToString();
  SOVAI_CHECK(*again == *r);
  // Every rule's own first origin (wildcards taken literally match themselves) and method.
  const CorsRule& first = r->rules.front();
  (void)MatchCors(*r, first.allowed_origins.front(), first.allowed_methods.front(), {});
}

void FuzzTaggingHeader(std::string_view header) {
  auto r = ParseTaggingHeader(header, /*for_bucket=*/true);
  CheckError(r);
  if (!r.ok()) return;
  auto again = ParseTaggingHeader(FormatTaggingHeader(*r), /*for_bucket=*/true);
  SOVAI_CHECK(again.ok() && *again == *r);
}

void FuzzWriter(std::string_view text) {
  XmlWriter w;
  w.Open("Root", kS3Namespace);
  w.Element("Text", text);
  w.Close();
  bool lossy = w.lossy();
  std::string xml = w.Finish();
  SOVAI_CHECK_EQ(lossy, !XmlCanRepresent(text));

  // A strict reading with pugixml: the document parses and the text comes back.
  pugi::xml_document doc;
  pugi::xml_parse_result parsed = doc.load_buffer(
      xml.data(), xml.size(), pugi::parse_default | pugi::parse_ws_pcdata, pugi::encoding_utf8);
  SOVAI_CHECK(parsed) << parsed.description();
  std::string_view read = doc.child("Root").child("Text").text().get();
  if (!lossy) SOVAI_CHECK(read == text);

  // And our own gate and parser accept the writer's output.
  if (Utf8Length(text) <= kMaxTagValueChars) {
    auto tags = ParseTagging(RenderTagging({Tag{"k", std::string(text)}}), /*for_bucket=*/false);
    SOVAI_CHECK(tags.ok()) << tags.error().ToString();
    if (!lossy) SOVAI_CHECK(tags->front().value == text);
  }
}

void FuzzNames(std::string_view input) {
  CheckStatus(ValidateBucketName(input));
  CheckStatus(ValidateObjectKey(input));
  CorsConfiguration config;
  CorsRule rule;
  rule.allowed_origins = {"https://*.example.com", "http://localhost:3000"};
  rule.allowed_methods = {"GET", "PUT"};
  rule.allowed_headers = {"x-amz-*", "content-type"};
  config.rules.push_back(rule);
  std::vector<std::string> headers = ParseAccessControlRequestHeaders(input);
  if (const CorsRule* match = MatchCors(config, input, "GET", headers)) {
    (void)CorsPreflightHeaders(*match, input, headers);
  }
  // The input as a pattern against a fixed text, and as a text against a fixed pattern.
  (void)CorsWildcardMatch(input.substr(0, 64), "https://a.example.com", true);
  (void)CorsWildcardMatch("*a*b*c*", input, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (static_cast<uint8_t>(data[0] - '0') % 10) {
    case 0:
      CheckError(ParseCreateBucketConfiguration(input));
      break;
    case 1:
      FuzzDelete(input);
      break;
    case 2:
      FuzzComplete(input);
      break;
    case 3:
      FuzzTagging(input, /*for_bucket=*/false);
      break;
    case 4:
      FuzzTagging(input, /*for_bucket=*/true);
      break;
    case 5:
      FuzzVersioning(input);
      break;
    case 6:
      FuzzCors(input);
      break;
    case 7:
      FuzzTaggingHeader(input);
      break;
    case 8:
      FuzzWriter(input);
      break;
    case 9:
      FuzzNames(input);
      break;
  }
  return 0;
}
