#include "model/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "base/json.h"
#include "model/tokenizer_limits.h"
#include "model/tokenizer_unicode.h"

namespace sovai::model {
namespace {

using nlohmann::json;
using Ids = std::vector<TokenId>;

// Characters a b ' ' x y, the merge "a b", and added tokens with every flag.
json CharTokenizer() {
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 10}, {"content", "<a>"}, {"special", true}},
        {{"id", 11}, {"content", "<a><b>"}, {"special", true}},
        {{"id", 12}, {"content", "[R]"}, {"rstrip", true}},
        {{"id", 13}, {"content", "[L]"}, {"lstrip", true}},
        {{"id", 14}, {"content", "xy"}, {"single_word", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<a>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {" ", 2}, {"x", 3}, {"y", 4}, {"ab", 5}, {"<unk>", 6}}},
        {"merges", {"a b"}},
        {"unk_token", "<unk>"}}},
  };
}

Tokenizer Load(const json& config) {
  auto tok = Tokenizer::FromJson(base::DumpJson(config));
  SOVAI_CHECK(tok.ok()) << tok.status();
  return std::move(tok).value();
}

Ids Encode(const Tokenizer& tok, std::string_view text, bool add_special = false) {
  auto ids = tok.Encode(text, {.add_special_tokens = add_special});
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{-1};
}

TEST(TokenizerTest, AddedTokensAreCutOutLongestFirst) {
  Tokenizer tok = Load(CharTokenizer());
  EXPECT_EQ(Encode(tok, "x<a><b>y"), (Ids{3, 11, 4}));
  EXPECT_EQ(Encode(tok, "x<a>y<a><a>"), (Ids{3, 10, 4, 10, 10}));
  EXPECT_EQ(Encode(tok, "<a<b>ab"), (Ids{6, 0, 6, 1, 6, 5})) << "no partial matches";
  EXPECT_EQ(Encode(tok, "abab"), (Ids{5, 5}));
}

TEST(TokenizerTest, AddedTokenFlags) {
  Tokenizer tok = Load(CharTokenizer());
  // rstrip eats the whitespace after the token, lstrip the whitespace before.
  EXPECT_EQ(Encode(tok, "a  [R] \t b"), (Ids{0, 2, 2, 12, 1}));
  EXPECT_EQ(Encode(tok, "a \n [L] b"), (Ids{0, 13, 2, 1}));
  // single_word: only where no letter or digit touches it.
  EXPECT_EQ(Encode(tok, "xy"), (Ids{14}));
  EXPECT_EQ(Encode(tok, " xy "), (Ids{2, 14, 2}));
  EXPECT_EQ(Encode(tok, "axy"), (Ids{0, 3, 4}));
  EXPECT_EQ(Encode(tok, "xya"), (Ids{3, 4, 0}));
  EXPECT_EQ(Encode(tok, "xy<a>"), (Ids{14, 10}));
  ASSERT_EQ(tok.added_tokens().size(), 5u);
  EXPECT_TRUE(tok.added_tokens()[0].special);
  EXPECT_TRUE(tok.added_tokens()[2].rstrip);
  EXPECT_TRUE(tok.added_tokens()[4].single_word);
}

TEST(TokenizerTest, SpecialTokensOnlyWhenAsked) {
  Tokenizer tok = Load(CharTokenizer());
  EXPECT_EQ(Encode(tok, "ab"), (Ids{5}));
  EXPECT_EQ(Encode(tok, "ab", true), (Ids{10, 5}));
  EXPECT_EQ(Encode(tok, "", true), (Ids{10}));
  EXPECT_EQ(Encode(tok, ""), (Ids{}));
}

TEST(TokenizerTest, DecodeWithoutADecoderJoinsWithSpaces) {
  Tokenizer tok = Load(CharTokenizer());
  EXPECT_EQ(*tok.Decode(Ids{3, 11, 4}), "x <a><b> y");
  EXPECT_EQ(*tok.Decode(Ids{3, 11, 4}, {.skip_special_tokens = true}), "x y");
  EXPECT_EQ(*tok.Decode(Ids{}), "");
  auto bad = tok.Decode(Ids{3, 99});
  EXPECT_EQ(bad.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("token id 99 (at index 1)"), std::string::npos)
      << bad.status();
  EXPECT_EQ(tok.Decode(Ids{-1}).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(tok.Decode(Ids{7}).status().code(), base::StatusCode::kInvalidArgument)
      << "ids 7..9 are holes";
}

TEST(TokenizerTest, Lookups) {
  Tokenizer tok = Load(CharTokenizer());
  EXPECT_EQ(tok.vocab_size(), 15u);
  EXPECT_EQ(tok.TokenToId("ab"), 5);
  EXPECT_EQ(tok.TokenToId("<a><b>"), 11);
  EXPECT_EQ(tok.TokenToId("zz"), std::nullopt);
  EXPECT_EQ(tok.IdToToken(12), "[R]");
  EXPECT_EQ(tok.IdToToken(8), std::nullopt);
}

TEST(TokenizerTest, BadTextIsAnError) {
  Tokenizer tok = Load(CharTokenizer());
  auto invalid = tok.Encode("ab\xFF");
  EXPECT_EQ(invalid.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(invalid.status().message().find("at byte 2"), std::string::npos) << invalid.status();
  auto huge = tok.Encode(std::string(kMaxEncodeInputBytes + 1, 'a'));
  EXPECT_EQ(huge.status().code(), base::StatusCode::kResourceExhausted);
  // No byte fallback, no vocabulary entry: the unk token.
  EXPECT_EQ(Encode(tok, "a\xC3\xA9"), (Ids{0, 6}));
}

// A byte-level tokenizer: the 256 byte characters plus a few merges.
json ByteLevelTokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string token;
    unicode::AppendUtf8(&token, unicode::ByteToUnicode(static_cast<uint8_t>(b)));
    vocab[token] = b;
  }
  // "Ġ" is the space byte, "Ċ" newline.
  vocab["\xC4\xA0w"] = 256;
  vocab["\xC4\xA0wo"] = 257;
  vocab["ld"] = 258;
  return {
      {"added_tokens", {{{"id", 259}, {"content", "<|eot|>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"\xC4\xA0 w", "\xC4\xA0w o", "l d"}},
        {"ignore_merges", false}}},
  };
}

TEST(TokenizerTest, ByteLevelEncodesBytesAndRoundTrips) {
  Tokenizer tok = Load(ByteLevelTokenizer());
  // " world": one pre-token "Ġworld" -> Ġw+o -> Ġwo, r, l+d -> ld.
  EXPECT_EQ(Encode(tok, " world"), (Ids{257, 'r', 258}));
  EXPECT_EQ(Encode(tok, "\n"), (Ids{'\n'}));
  // é is C3 A9: two byte tokens.
  EXPECT_EQ(Encode(tok, "\xC3\xA9"), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(Encode(tok, "a<|eot|>b"), (Ids{'a', 259, 'b'}));
  for (std::string text : {"Hello world!\n\n  tabs\t\tand emoji \xF0\x9F\x98\x80 \xE4\xB8\xAD",
                           "<|eot|> after", "  ", "x\r\n"}) {
    auto ids = tok.Encode(text);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*tok.Decode(*ids), text);
  }
  // A cut multi-byte character decodes to U+FFFD.
  EXPECT_EQ(*tok.Decode(Ids{0xC3}), "\xEF\xBF\xBD");
}

TEST(TokenizerTest, TokenBytesOfByteLevelTokensAreRawBytes) {
  Tokenizer tok = Load(ByteLevelTokenizer());
  EXPECT_EQ(tok.TokenBytes('a'), "a");
  EXPECT_EQ(tok.TokenBytes(' '), " ") << "Ġ is the space byte";
  EXPECT_EQ(tok.TokenBytes(257), " wo");
  EXPECT_EQ(tok.TokenBytes(0xC3), "\xC3") << "half of a character, not U+FFFD";
  EXPECT_EQ(tok.TokenBytes(0xFF), "\xFF");
  EXPECT_EQ(tok.TokenBytes(259), "<|eot|>") << "an added token is its content";
  EXPECT_EQ(tok.TokenBytes(260), std::nullopt);
  EXPECT_EQ(tok.TokenBytes(-1), std::nullopt);
  // The bytes of the tokens of a text are the text, even where a token cuts a character.
  std::string text = "Hi \xF0\x9F\x98\x80 world<|eot|>\xE4\xB8\xAD\n";
  auto ids = tok.Encode(text);
  ASSERT_TRUE(ids.ok());
  std::string joined;
  for (TokenId id : *ids) joined += tok.TokenBytes(id).value();
  EXPECT_EQ(joined, text);
}

// Llama 2's layout: "▁" for spaces, <0xAB> byte fallback, and a decoder that removes the first
// space of the text.
json SentencePieceTokenizer() {
  const std::string sp = "\xE2\x96\x81";
  return {
      {"added_tokens", {{{"id", 0}, {"content", "<s>"}, {"special", true}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"vocab",
         {{"<s>", 0}, {"<0xE2>", 1}, {"<0x82>", 2}, {"<0xAC>", 3}, {sp + "Hi", 4}, {"x", 5}}},
        {"merges", json::array()},
        {"byte_fallback", true}}},
  };
}

TEST(TokenizerTest, TokenBytesOfSentencePieceTokensKeepTheirSpace) {
  Tokenizer tok = Load(SentencePieceTokenizer());
  EXPECT_EQ(*tok.Decode(Ids{4, 4}), "Hi Hi") << "Decode drops the first space of the text";
  EXPECT_EQ(tok.TokenBytes(4), " Hi") << "a token is decoded as in the middle of a text";
  EXPECT_EQ(tok.TokenBytes(1), "\xE2") << "a byte-fallback token is its byte";
  EXPECT_EQ(tok.TokenBytes(5), "x");
  EXPECT_EQ(tok.TokenBytes(0), "<s>");
  EXPECT_EQ(tok.TokenBytes(6), std::nullopt);
  // € (E2 82 AC) in three byte tokens.
  EXPECT_EQ(*tok.Decode(Ids{1, 2, 3}), "\xE2\x82\xAC");
  EXPECT_EQ(*tok.TokenBytes(1) + *tok.TokenBytes(2) + *tok.TokenBytes(3), "\xE2\x82\xAC");

  // A Metaspace decoder, which removes the first space of the first token.
  json metaspace = SentencePieceTokenizer();
  metaspace["decoder"] = {
      {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}};
  Tokenizer meta = Load(metaspace);
  EXPECT_EQ(*meta.Decode(Ids{4}), "Hi");
  EXPECT_EQ(meta.TokenBytes(4), " Hi");
}

TEST(TokenizerTest, TokenBytesWithoutADecoderIsTheSpelling) {
  Tokenizer tok = Load(CharTokenizer());
  EXPECT_EQ(tok.TokenBytes(5), "ab");
  EXPECT_EQ(tok.TokenBytes(11), "<a><b>");
  EXPECT_EQ(tok.TokenBytes(7), std::nullopt) << "ids 7..9 are holes";
}

TEST(TokenizerTest, CacheDoesNotChangeResultsAcrossTokenizers) {
  Tokenizer byte_level = Load(ByteLevelTokenizer());
  Tokenizer chars = Load(CharTokenizer());
  EncodeCache cache;
  auto a = byte_level.Encode("ab ab", {}, &cache);
  ASSERT_TRUE(a.ok());
  EXPECT_GT(cache.size(), 0u);
  auto b = chars.Encode("ab ab", {}, &cache);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, (Ids{'a', 'b', ' ', 'a', 'b'}));
  EXPECT_EQ(*b, (Ids{5, 2, 5}));
  EXPECT_EQ(*byte_level.Encode("ab ab", {}, &cache), *a);
}

TEST(TokenizerTest, LoadErrorsNameTheProblem) {
  struct Case {
    std::string text;
    base::StatusCode code;
    std::string message;
  };
  json word_piece = CharTokenizer();
  word_piece["model"]["type"] = "WordPiece";
  json unigram_normalizer = CharTokenizer();
  unigram_normalizer["normalizer"] = {{"type", "Precompiled"}};
  json bad_added = CharTokenizer();
  bad_added["added_tokens"][1]["id"] = "eleven";
  json no_model = CharTokenizer();
  no_model.erase("model");
  std::vector<Case> cases = {
      {"{", base::StatusCode::kInvalidArgument, "invalid JSON"},
      {"[]", base::StatusCode::kInvalidArgument, "must be an object"},
      {base::DumpJson(word_piece), base::StatusCode::kUnimplemented, "'WordPiece'"},
      {base::DumpJson(unigram_normalizer), base::StatusCode::kUnimplemented,
       "normalizer type 'Precompiled' (at normalizer)"},
      {base::DumpJson(bad_added), base::StatusCode::kInvalidArgument, "added_tokens[1]"},
      {base::DumpJson(no_model), base::StatusCode::kInvalidArgument, "model"},
      {std::string(70, '[') + std::string(70, ']'), base::StatusCode::kInvalidArgument, "deeper"},
  };
  for (const Case& c : cases) {
    auto tok = Tokenizer::FromJson(c.text);
    EXPECT_EQ(tok.status().code(), c.code) << tok.status();
    EXPECT_NE(tok.status().message().find(c.message), std::string::npos) << tok.status();
  }
}

TEST(TokenizerTest, FromFileNamesThePath) {
  auto& env = base::Env::Default();
  auto missing = Tokenizer::FromFile(env, "/nonexistent/tokenizer.json");
  EXPECT_EQ(missing.status().code(), base::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);

  char dir[] = "/tmp/sovai-tokenizer-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/tokenizer.json";
  ASSERT_TRUE(env.WriteFileAtomically(path, base::DumpJson(CharTokenizer())).ok());
  auto loaded = Tokenizer::FromFile(env, path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Encode(*loaded, "ab"), (Ids{5}));
  ASSERT_TRUE(env.WriteFileAtomically(path, "{\"model\": 1}").ok());
  auto bad = Tokenizer::FromFile(env, path);
  EXPECT_NE(bad.status().message().find("tokenizer file '" + path + "'"), std::string::npos)
      << bad.status();
  ASSERT_TRUE(env.DeleteDirRecursive(dir).ok());
}

}  // namespace
}  // namespace sovai::model
