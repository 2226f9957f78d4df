#include "serve/text_stream.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/env.h"
#include "base/json.h"

namespace sovai::serve {
namespace {

using model::TokenId;
using model::Tokenizer;
using nlohmann::json;
using Ids = std::vector<TokenId>;

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
const std::string kEmoji = "\xF0\x9F\x98\x80";    // U+1F600, four bytes

const Tokenizer& Shipped() {
  static const Tokenizer* tokenizer = [] {
    auto loaded =
        Tokenizer::FromFile(base::Env::Default(), std::string(SOVAI_SOURCE_DIR) +
                                                      "/models/sovai-tiny-llama/tokenizer.json");
    SOVAI_CHECK(loaded.ok()) << loaded.status();
    return new Tokenizer(std::move(loaded).value());
  }();
  return *tokenizer;
}

// GPT-2's byte alphabet (the byte-level spelling of byte b), written out independently of the
// tokenizer's own table.
std::string ByteSpelling(int b) {
  int cp = b;
  if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
    int shifted = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) {
        ++shifted;
      }
    }
    cp = 256 + shifted;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

// Byte-level: token b (0..255) is the byte b, so multi-byte characters always come in pieces;
// 256 is "ab"; 300 a special added token, 301 a plain one; 257..299 have no token.
constexpr TokenId kAb = 256;
constexpr TokenId kEot = 300;
constexpr TokenId kTool = 301;
const Tokenizer& Bytes() {
  static const Tokenizer* tokenizer = [] {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[ByteSpelling(b)] = b;
    vocab["ab"] = kAb;
    json config = {
        {"added_tokens",
         {{{"id", kEot}, {"content", "<|eot|>"}, {"special", true}},
          {{"id", kTool}, {"content", "<tool>"}, {"special", false}}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}},
    };
    auto loaded = Tokenizer::FromJson(base::DumpJson(config));
    SOVAI_CHECK(loaded.ok()) << loaded.status();
    return new Tokenizer(std::move(loaded).value());
  }();
  return *tokenizer;
}

// The byte tokens of `text`.
Ids ByteIds(std::string_view text) {
  Ids ids;
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

Ids Encode(const Tokenizer& tokenizer, std::string_view text) {
  auto ids = tokenizer.Encode(text);
  SOVAI_CHECK(ids.ok()) << ids.status();
  return *ids;
}

bool IsValidUtf8(std::string_view text) {
  // DumpJson replaces invalid bytes with U+FFFD, so only valid text survives the round trip.
  auto parsed = base::ParseJson(base::DumpJson(json(std::string(text))));
  return parsed.ok() && parsed->get<std::string>() == text;
}

struct Streamed {
  std::string text;
  bool stopped = false;
  int32_t stop_index = -1;
  std::vector<std::string> deltas;  // one per Add, then Finish's
};

Streamed Stream(const TokenTable& table, const Ids& ids, TextStreamOptions options = {}) {
  auto decoder = IncrementalDecoder::Create(table, std::move(options));
  SOVAI_CHECK(decoder.ok()) << decoder.status();
  Streamed out;
  auto take = [&](const TextDelta& delta) {
    out.text += delta.text;
    out.deltas.push_back(delta.text);
    out.stopped = delta.stopped;
    out.stop_index = delta.stop_index;
  };
  for (TokenId id : ids) take(decoder->Add(id));
  take(decoder->Finish());
  return out;
}

TextStreamOptions Stops(std::vector<std::string> stop) { return {.stop = std::move(stop)}; }

TEST(TextStreamTest, StreamingReproducesDecodeOnTheShippedTokenizer) {
  const Tokenizer& tokenizer = Shipped();
  TokenTable table(tokenizer);
  EXPECT_EQ(table.size(), tokenizer.vocab_size());
  for (std::string text :
       {std::string("Hello world! The quick brown fox jumps over the lazy dog.\n\n  Indented."),
        std::string(
            "Caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9, \xE4\xB8\xAD\xE6\x96\x87\xE5\xAD"
            "\x97, ") +
            kEmoji + kEmoji + " \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 done",
        std::string("<|eot_id|>special<|begin_of_text|> in the middle"), std::string(""),
        std::string("\xCE\xB1\xCE\xB2\xCE\xB3 \xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \t\r\n")}) {
    Ids ids = Encode(tokenizer, text);
    Streamed streamed = Stream(table, ids);
    EXPECT_EQ(streamed.text, *tokenizer.Decode(ids, {.skip_special_tokens = true})) << text;
    EXPECT_FALSE(streamed.stopped);
    for (const std::string& delta : streamed.deltas) EXPECT_TRUE(IsValidUtf8(delta)) << delta;
    // Keeping special tokens gives Decode's full text, which here is the input.
    Streamed all = Stream(table, ids, {.skip_special_tokens = false});
    EXPECT_EQ(all.text, *tokenizer.Decode(ids));
    EXPECT_EQ(all.text, text);
  }
  // The table holds what TokenBytes gives, for every id.
  for (TokenId id = 0; id < static_cast<TokenId>(table.size()); ++id) {
    ASSERT_EQ(table.Bytes(id), tokenizer.TokenBytes(id).value_or("")) << id;
  }
  TokenId eot = tokenizer.TokenToId("<|eot_id|>").value();
  EXPECT_TRUE(table.IsSpecial(eot));
  EXPECT_EQ(table.TokenText(eot), "<|eot_id|>");
}

TEST(TextStreamTest, SplitCharactersAreNeverEmittedHalf) {
  TokenTable table(Bytes());
  Streamed emoji = Stream(table, ByteIds("a" + kEmoji + "b"));
  EXPECT_EQ(emoji.deltas, (std::vector<std::string>{"a", "", "", "", kEmoji, "b", ""}));
  // A special token between the pieces is dropped before decoding: the character joins up.
  Ids around_special = {0xF0, 0x9F, kEot, 0x98, 0x80};
  EXPECT_EQ(Stream(table, around_special).text, kEmoji);
  EXPECT_EQ(Stream(table, around_special).text,
            *Bytes().Decode(around_special, {.skip_special_tokens = true}));
  // A token without text between them (an id with no token) changes nothing either.
  EXPECT_EQ(Stream(table, {0xF0, 0x9F, 280, 0x98, 0x80, -1, 99999}).text, kEmoji);
}

TEST(TextStreamTest, InvalidBytesBecomeReplacementCharactersAsDecodeDoes) {
  TokenTable table(Bytes());
  std::vector<Ids> cases = {
      {0xF0, 0x9F},                               // never completed: flushed by Finish
      {'a', 0xFF, 'b'},                           // never valid
      {0xF0, 0x9F, 'x', 0x80},                    // cut short, then a stray continuation
      {0xE0, 0x80, 0x80},                         // overlong: each byte on its own
      {0xED, 0xA0, 0x80},                         // a surrogate
      {0xF4, 0x90, 0x80, 0x80},                   // above U+10FFFF
      {0xF0, 0x9F, kTool, 0x98, 0x80},            // a plain added token cuts the character
      {0xC3, 0xC3, 0xA9, 0xEF, 0xBB, 0xBF, 'z'},  // a lead byte after a lead byte; a BOM stays
  };
  for (const Ids& ids : cases) {
    Streamed streamed = Stream(table, ids, {.skip_special_tokens = false});
    EXPECT_EQ(streamed.text, *Bytes().Decode(ids)) << ::testing::PrintToString(ids);
    for (const std::string& delta : streamed.deltas) EXPECT_TRUE(IsValidUtf8(delta));
  }
  // The incomplete end stays held until Finish.
  Streamed cut = Stream(table, {'a', 0xF0, 0x9F});
  EXPECT_EQ(cut.deltas, (std::vector<std::string>{"a", "", "", kReplacement}));
}

TEST(TextStreamTest, StopStringSplitAcrossTokens) {
  TokenTable table(Bytes());
  Streamed streamed = Stream(table, ByteIds("hello world!"), Stops({"world"}));
  EXPECT_EQ(streamed.text, "hello ");
  EXPECT_TRUE(streamed.stopped);
  EXPECT_EQ(streamed.stop_index, 0);
  // "w", "o", "r", "l" are held back, then dropped with "d".
  EXPECT_EQ(streamed.deltas[6], "");
  EXPECT_EQ(streamed.deltas[10], "");
  // A stop string made of a character cut across tokens.
  Streamed emoji = Stream(table, ByteIds("hi " + kEmoji + " there"), Stops({kEmoji}));
  EXPECT_EQ(emoji.text, "hi ");
  EXPECT_TRUE(emoji.stopped);
  // A false start is released as soon as it stops matching.
  Streamed false_start = Stream(table, ByteIds("wow"), Stops({"wx"}));
  EXPECT_EQ(false_start.deltas, (std::vector<std::string>{"", "wo", "", "w"}));
  EXPECT_FALSE(false_start.stopped);
  EXPECT_EQ(false_start.stop_index, -1);
}

TEST(TextStreamTest, StopStringAtTheVeryStart) {
  TokenTable table(Bytes());
  Streamed streamed = Stream(table, ByteIds("Hello"), Stops({"He"}));
  EXPECT_EQ(streamed.text, "");
  EXPECT_TRUE(streamed.stopped);
  Streamed one_token = Stream(table, {kAb, 'c'}, Stops({"ab"}));
  EXPECT_EQ(one_token.text, "");
  EXPECT_TRUE(one_token.stopped);
}

TEST(TextStreamTest, OverlappingStopPrefixes) {
  TokenTable table(Bytes());
  EXPECT_EQ(Stream(table, ByteIds("aab"), Stops({"ab"})).text, "a");
  EXPECT_EQ(Stream(table, ByteIds("xababc"), Stops({"abc"})).text, "xab");
  EXPECT_EQ(Stream(table, ByteIds("aaab"), Stops({"aab"})).text, "a");
  Streamed aab = Stream(table, ByteIds("aab"), Stops({"ab"}));
  EXPECT_EQ(aab.deltas, (std::vector<std::string>{"", "a", "", ""}));
  // A prefix still held at the end is text after all.
  Streamed held = Stream(table, ByteIds("xab"), Stops({"abc"}));
  EXPECT_EQ(held.deltas, (std::vector<std::string>{"x", "", "", "ab"}));
  EXPECT_FALSE(held.stopped);
}

TEST(TextStreamTest, TheFirstStopInTheTextWins) {
  TokenTable table(Bytes());
  Streamed later_listed = Stream(table, ByteIds("abc"), Stops({"c", "b"}));
  EXPECT_EQ(later_listed.text, "a");
  EXPECT_EQ(later_listed.stop_index, 1);
  // Both in one token: the one that starts first, then the first listed.
  Streamed starts_first = Stream(table, {kAb}, Stops({"b", "ab"}));
  EXPECT_EQ(starts_first.text, "");
  EXPECT_EQ(starts_first.stop_index, 1);
  Streamed same_start = Stream(table, {kAb}, Stops({"ab", "a"}));
  EXPECT_EQ(same_start.stop_index, 0);
}

TEST(TextStreamTest, MinTokensKeepsStopStringsOutOfTheFirstTokens) {
  TokenTable table(Bytes());
  const TextStreamOptions stop_b_after_3{.stop = {"b"}, .min_tokens = 3};
  // "b" in the first 3 tokens is text, streamed at once; the next "b" stops.
  Streamed streamed = Stream(table, ByteIds("abcab"), stop_b_after_3);
  EXPECT_EQ(streamed.deltas, (std::vector<std::string>{"a", "b", "c", "a", "", ""}));
  EXPECT_EQ(streamed.text, "abca");
  EXPECT_TRUE(streamed.stopped);
  // A stop string must start after them: "bc" begun in token 3 does not match.
  Streamed straddling = Stream(table, ByteIds("aabcd"), {.stop = {"bc"}, .min_tokens = 3});
  EXPECT_EQ(straddling.text, "aabcd");
  EXPECT_FALSE(straddling.stopped);
  // Every Add counts, special tokens too.
  Streamed special = Stream(table, {kEot, kEot, kEot, 'b'}, stop_b_after_3);
  EXPECT_EQ(special.text, "");
  EXPECT_TRUE(special.stopped);
  // A character split across the boundary is emitted whole once it completes.
  const Ids emoji = ByteIds(kEmoji);
  Ids split = {'x', 'y', emoji[0]};
  split.insert(split.end(), emoji.begin() + 1, emoji.end());
  EXPECT_EQ(Stream(table, split, {.stop = {"z"}, .min_tokens = 3}).text, "xy" + kEmoji);
}

TEST(TextStreamTest, AfterAStopNothingMoreComes) {
  TokenTable table(Bytes());
  auto decoder = IncrementalDecoder::Create(table, Stops({"b"}));
  ASSERT_TRUE(decoder.ok());
  EXPECT_EQ(decoder->Add('a').text, "a");
  TextDelta stop = decoder->Add(kAb);
  EXPECT_EQ(stop.text, "a");
  EXPECT_TRUE(stop.stopped);
  EXPECT_TRUE(decoder->stopped());
  TextDelta after = decoder->Add('c');
  EXPECT_EQ(after.text, "");
  EXPECT_TRUE(after.stopped);
  EXPECT_EQ(after.stop_index, 0);
  TextDelta finish = decoder->Finish();
  EXPECT_EQ(finish.text, "");
  EXPECT_TRUE(finish.stopped);
}

TEST(TextStreamTest, AStopStringCompletedByFinish) {
  // U+FFFD as a stop string: the flushed incomplete character completes it.
  TokenTable table(Bytes());
  Streamed streamed = Stream(table, {'a', 0xF0}, Stops({kReplacement}));
  EXPECT_EQ(streamed.text, "a");
  EXPECT_TRUE(streamed.stopped);
}

TEST(TextStreamTest, SpecialTokensAreSkippedUnlessAsked) {
  TokenTable table(Bytes());
  Ids ids = {'a', kEot, 'b', kTool, 'c'};
  EXPECT_EQ(Stream(table, ids).text, "ab<tool>c") << "only special added tokens are skipped";
  EXPECT_EQ(Stream(table, ids, {.skip_special_tokens = false}).text, "a<|eot|>b<tool>c");
  // Stop strings see the text as emitted.
  EXPECT_EQ(Stream(table, ids, Stops({"ab"})).text, "");
  EXPECT_EQ(Stream(table, ids, {.stop = {"ab"}, .skip_special_tokens = false}).text,
            "a<|eot|>b<tool>c");
}

TEST(TextStreamTest, TokenTextAndBytes) {
  TokenTable table(Bytes());
  EXPECT_EQ(table.size(), 302u);
  EXPECT_EQ(table.Bytes(0xF0), "\xF0");
  EXPECT_EQ(table.TokenText(0xF0), kReplacement);
  EXPECT_EQ(table.TokenText(kAb), "ab");
  EXPECT_EQ(table.TokenText(' '), " ");
  EXPECT_EQ(table.TokenText(kEot), "<|eot|>");
  EXPECT_TRUE(table.IsSpecial(kEot));
  EXPECT_FALSE(table.IsSpecial(kTool));
  for (TokenId missing : {257, 299, 302, -1}) {
    EXPECT_FALSE(table.Contains(missing));
    EXPECT_EQ(table.Bytes(missing), "");
    EXPECT_EQ(table.TokenText(missing), "");
  }
  auto decoder = IncrementalDecoder::Create(table, {});
  ASSERT_TRUE(decoder.ok());
  EXPECT_EQ(decoder->TokenText(0xC3), kReplacement);
}

TEST(TextStreamTest, StopStringsAreValidated) {
  TokenTable table(Bytes());
  struct Case {
    std::vector<std::string> stop;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"a", "b", "c", "d", "e"}, "at most 4"},
      {{"a", ""}, "stop[1] is empty"},
      {{std::string(kMaxStopStringBytes + 1, 'x')}, "the limit is"},
      {{"ok", "\xC3"}, "stop[1] is not valid UTF-8"},
      {{"\xED\xA0\x80"}, "not valid UTF-8"},
  };
  for (const Case& c : cases) {
    base::Status status = ValidateStopStrings(c.stop);
    EXPECT_EQ(status.code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status;
    auto decoder = IncrementalDecoder::Create(table, Stops(c.stop));
    EXPECT_EQ(decoder.status().code(), base::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(ValidateStopStrings(std::vector<std::string>{
                                      "a", std::string(kMaxStopStringBytes, 'x'), kEmoji, "\n"})
                  .ok());
}

TEST(TextStreamDeathTest, AddAfterFinishIsABug) {
  TokenTable table(Bytes());
  auto decoder = IncrementalDecoder::Create(table, {});
  ASSERT_TRUE(decoder.ok());
  (void)decoder->Finish();
  EXPECT_DEATH((void)decoder->Add('a'), "Add after Finish");
}

// Every delta is final: the text so far is always a prefix of the reference, which is Decode of
// everything cut before the first stop string.
TEST(TextStreamTest, RandomTextsAndStopsAgreeWithTheReference) {
  const Tokenizer& tokenizer = Shipped();
  TokenTable table(tokenizer);
  const std::vector<std::string> pieces = {"the", " ",  "e", "th",         "\xC3\xA9",     kEmoji,
                                           "\n",  "ab", "a", "<|eot_id|>", "\xE4\xB8\xAD", "."};
  uint64_t state = 12345;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  for (int round = 0; round < 300; ++round) {
    std::string text;
    for (uint64_t i = 0, n = next(30); i < n; ++i) text += pieces[next(pieces.size())];
    std::vector<std::string> stop;
    for (uint64_t i = 0, n = next(kMaxStopStrings + 1); i < n; ++i) {
      std::string s;
      for (uint64_t j = 0, m = 1 + next(3); j < m; ++j) s += pieces[next(pieces.size())];
      if (s.find("<|eot_id|>") == std::string::npos) stop.push_back(s);
    }
    Ids ids = Encode(tokenizer, text);
    std::string reference = *tokenizer.Decode(ids, {.skip_special_tokens = true});
    size_t first = std::string::npos;
    for (const std::string& s : stop) first = std::min(first, reference.find(s));
    if (first != std::string::npos) reference.resize(first);

    auto decoder = IncrementalDecoder::Create(table, Stops(stop));
    ASSERT_TRUE(decoder.ok());
    std::string so_far;
    for (TokenId id : ids) {
      so_far += decoder->Add(id).text;
      ASSERT_TRUE(reference.starts_with(so_far)) << "round " << round;
    }
    TextDelta last = decoder->Finish();
    so_far += last.text;
    EXPECT_EQ(so_far, reference) << "round " << round << " text " << text;
    EXPECT_EQ(last.stopped, first != std::string::npos) << "round " << round;
  }
}

}  // namespace
}  // namespace sovai::serve
