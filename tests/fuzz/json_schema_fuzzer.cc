// libFuzzer target for constrained decoding (src/serve/json_constraint.h): the input is a JSON
// Schema. Compiling it must succeed or fail with a message, never crash. A schema that compiles
// drives a random generation (seeded by the input) over a small vocabulary of single bytes and
// JSON pieces, checking at every step that some token is allowed, that allowed tokens are
// accepted and a sample of the others refused; a generation that ends must be valid JSON.
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/json.h"
#include "serve/json_constraint.h"

namespace {

constexpr int kMaxSteps = 400;
constexpr int kRefusalSamples = 8;

std::shared_ptr<const sovai::serve::ConstraintVocabulary> MakeVocabulary() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* piece : {"{\"",      "\":",      "\": ",    "\",",     ", \"",
                            "\"}",      "}]",       "[]",      "{}",      "true",
                            "null",     "12",       "-0.5e+3", "\\u00e9", "\\ud83d\\ude00",
                            "\xC3\xA9", "\xE4\xB8", "\xAD\"",  " x",      "a\"",
                            "\"a"}) {
    tokens.emplace_back(piece);
  }
  tokens.emplace_back();  // a special token
  const auto eos = static_cast<int32_t>(tokens.size());
  tokens.emplace_back("<eos>");
  auto vocab = sovai::serve::ConstraintVocabulary::Create(std::move(tokens), {eos});
  SOVAI_CHECK(vocab.ok()) << vocab.status();
  return *vocab;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  static const auto* vocab =
      new std::shared_ptr<const sovai::serve::ConstraintVocabulary>(MakeVocabulary());
  std::string_view input(reinterpret_cast<const char*>(bytes), size);
  auto schema = sovai::base::ParseJson(input);
  if (!schema.ok()) return 0;
  auto grammar = sovai::serve::JsonGrammar::FromSchema(*schema);
  if (!grammar.ok()) {
    SOVAI_CHECK(!grammar.status().message().empty());
    return 0;
  }
  sovai::serve::JsonConstraint constraint(*grammar, *vocab);
  std::mt19937_64 rng(std::hash<std::string_view>()(input));
  std::vector<uint8_t> mask;
  std::string text;
  for (int step = 0; step < kMaxSteps; ++step) {
    const size_t allowed = constraint.AllowedTokens(mask);
    SOVAI_CHECK_GT(allowed, 0u) << "stuck after '" << text << "'";
    std::vector<int32_t> ids;
    for (size_t id = 0; id < mask.size(); ++id) {
      if (mask[id] != 0) ids.push_back(static_cast<int32_t>(id));
    }
    SOVAI_CHECK_EQ(ids.size(), allowed);
    for (int i = 0; i < kRefusalSamples; ++i) {
      const auto id = static_cast<int32_t>(rng() % mask.size());
      sovai::serve::JsonConstraint copy = constraint;
      SOVAI_CHECK_EQ(copy.Accept(id).ok(), mask[id] != 0)
          << "token " << id << " after '" << text << "'";
    }
    const int32_t pick = ids[rng() % ids.size()];
    const sovai::base::Status accepted = constraint.Accept(pick);
    SOVAI_CHECK(accepted.ok()) << accepted;
    if ((*vocab)->IsEos(pick)) {
      SOVAI_CHECK(nlohmann::json::accept(text)) << "not JSON: '" << text << "'";
      break;
    }
    text += (*vocab)->token_bytes(pick);
  }
  return 0;
}
