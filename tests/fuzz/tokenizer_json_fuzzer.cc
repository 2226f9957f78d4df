// libFuzzer target for the tokenizer.json loader (src/model/tokenizer.h): the input is a
// tokenizer.json. Loading must succeed or fail with a message, never crash; a tokenizer that
// loads must encode a fixed text (or fail cleanly, e.g. for a character with no token and no
// unk_token), give the same ids with and without an EncodeCache, and decode what it encoded
// (or fail cleanly: a post-processor may name ids outside the vocabulary).
//
// Without SOVAI_FUZZ the same entry point replays the corpus (corpus_replay_test.cc).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/check.h"
#include "model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(bytes), size);
  auto tokenizer = sovai::model::Tokenizer::FromJson(input);
  if (!tokenizer.ok()) {
    SOVAI_CHECK(!tokenizer.status().message().empty());
    return 0;
  }
  static constexpr std::string_view kTexts[] = {
      "Hello world! It's 12345 o'clock.\n\n\tcode  <s> </s> <|eot_id|> <unk>",
      "Zażółć gęślą jaźń, 中文, e\xCC\x81, \xF0\x9F\x98\x80\xE2\x80\x8D\xF0\x9F\x91\xA9 ",
      "",
  };
  sovai::model::EncodeCache cache;
  for (std::string_view text : kTexts) {
    for (bool special : {false, true}) {
      auto ids = tokenizer->Encode(text, {.add_special_tokens = special});
      auto cached = tokenizer->Encode(text, {.add_special_tokens = special}, &cache);
      SOVAI_CHECK_EQ(ids.ok(), cached.ok());
      if (!ids.ok()) {
        SOVAI_CHECK(ids.status() == cached.status()) << ids.status() << " vs " << cached.status();
        continue;
      }
      SOVAI_CHECK(*ids == *cached);
      auto decoded = tokenizer->Decode(*ids);
      auto skipped = tokenizer->Decode(*ids, {.skip_special_tokens = true});
      SOVAI_CHECK_EQ(decoded.ok(), skipped.ok());
    }
  }
  return 0;
}
