#include "model/tokenizer_pipeline.h"

#include <gtest/gtest.h>

namespace sovai::model {
namespace {

using nlohmann::json;
using Pieces = std::vector<std::string>;

std::string Normalize(const json& config, std::string text) {
  auto normalizer = ParseNormalizer(config, "normalizer");
  EXPECT_TRUE(normalizer.ok()) << normalizer.status();
  if (!normalizer.ok()) return "<error>";
  base::Status s = (*normalizer)->Apply(&text);
  EXPECT_TRUE(s.ok()) << s;
  return text;
}

Pieces PreTokenize(const json& config, std::string text, size_t section_index = 0) {
  auto pre = ParsePreTokenizer(config, "pre_tokenizer");
  EXPECT_TRUE(pre.ok()) << pre.status();
  if (!pre.ok()) return {};
  Pieces pieces = {std::move(text)};
  base::Status s = (*pre)->Apply(&pieces, section_index);
  EXPECT_TRUE(s.ok()) << s;
  return pieces;
}

std::string Decode(const json& config, Pieces tokens,
                   const std::unordered_set<std::string>& added = {}) {
  auto decoder = ParseDecoder(config, "decoder");
  EXPECT_TRUE(decoder.ok()) << decoder.status();
  if (!decoder.ok()) return "<error>";
  DecodeContext context{&added};
  base::Status s = (*decoder)->Apply(&tokens, context);
  EXPECT_TRUE(s.ok()) << s;
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

json Split(std::string string_pattern, std::string behavior, bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"String", string_pattern}}},
          {"behavior", behavior},
          {"invert", invert}};
}

TEST(TokenizerPipelineTest, SentencePieceStyleNormalizer) {
  // Llama 2 / Mistral: prepend "▁", then every space becomes "▁".
  json llama2 = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  EXPECT_EQ(Normalize(llama2, "Hello  world"), "\xE2\x96\x81Hello\xE2\x96\x81\xE2\x96\x81world");
  json regex_replace = {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", "_"}};
  EXPECT_EQ(Normalize(regex_replace, "a \t b\nc"), "a_b_c");
  EXPECT_EQ(Normalize({{"type", "NFC"}}, "e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(Normalize({{"type", "NFKC"}}, "\xEF\xAC\x81"), "fi");
  EXPECT_EQ(Normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, "  x  "),
            "x  ");
}

// The Hugging Face documentation's example for SplitDelimiterBehavior: "the-final--countdown".
TEST(TokenizerPipelineTest, SplitBehaviorsFollowTheHuggingFaceDefinition) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(PreTokenize(Split("-", "Removed"), text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(PreTokenize(Split("-", "Isolated"), text),
            (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(PreTokenize(Split("-", "MergedWithPrevious"), text),
            (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(PreTokenize(Split("-", "MergedWithNext"), text),
            (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(PreTokenize(Split("-", "Contiguous"), text),
            (Pieces{"the", "-", "final", "--", "countdown"}));
  // Inverted: the matches are the content, what lies between them the delimiters.
  json words = {{"type", "Split"},
                {"pattern", {{"Regex", "\\w+"}}},
                {"behavior", "Removed"},
                {"invert", true}};
  EXPECT_EQ(PreTokenize(words, "Hello, world!"), (Pieces{"Hello", "world"}));
}

TEST(TokenizerPipelineTest, ByteLevelMapsBytesAndSplitsLikeGpt2) {
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(PreTokenize(byte_level, "Hello world!\n"),
            (Pieces{"Hello", "\xC4\xA0world", "!", "\xC4\x8A"}));  // Ġworld, Ċ
  json prefixed = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  EXPECT_EQ(PreTokenize(prefixed, "hi there"), (Pieces{"\xC4\xA0hi\xC4\xA0there"}));
  EXPECT_EQ(PreTokenize(prefixed, " hi"), (Pieces{"\xC4\xA0hi"})) << "no second space";
}

TEST(TokenizerPipelineTest, MetaspaceSchemes) {
  const std::string sp = "\xE2\x96\x81";
  json always = {
      {"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(PreTokenize(always, "Hey friend"), (Pieces{sp + "Hey", sp + "friend"}));
  EXPECT_EQ(PreTokenize(always, "a  b"), (Pieces{sp + "a", sp, sp + "b"}));
  json whole = always;
  whole["split"] = false;
  EXPECT_EQ(PreTokenize(whole, "Hey friend"), (Pieces{sp + "Hey" + sp + "friend"}));
  json first = whole;
  first["prepend_scheme"] = "first";
  EXPECT_EQ(PreTokenize(first, "x", 0), (Pieces{sp + "x"}));
  EXPECT_EQ(PreTokenize(first, "x", 2), (Pieces{"x"}));
  json legacy = {{"type", "Metaspace"}, {"replacement", sp}, {"add_prefix_space", false}};
  EXPECT_EQ(PreTokenize(legacy, "x y"), (Pieces{"x", sp + "y"}));
}

TEST(TokenizerPipelineTest, DigitsAndWhitespace) {
  EXPECT_EQ(PreTokenize({{"type", "Digits"}, {"individual_digits", false}}, "abc123d4"),
            (Pieces{"abc", "123", "d", "4"}));
  EXPECT_EQ(PreTokenize({{"type", "Digits"}, {"individual_digits", true}}, "a12"),
            (Pieces{"a", "1", "2"}));
  EXPECT_EQ(PreTokenize({{"type", "Whitespace"}}, "Hey, friend!  ok_1"),
            (Pieces{"Hey", ",", "friend", "!", "ok_1"}));
  EXPECT_EQ(PreTokenize({{"type", "WhitespaceSplit"}},
                        " a  b\tc\xC2\xA0"
                        "d "),
            (Pieces{"a", "b", "c", "d"}));
  json sequence = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(PreTokenize(sequence, "ab12 c"), (Pieces{"ab", "1", "2", "c"}));
}

TEST(TokenizerPipelineTest, Decoders) {
  const std::string sp = "\xE2\x96\x81";
  // Llama 2's decoder chain.
  json llama2 = {{"type", "Sequence"},
                 {"decoders",
                  {{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}},
                   {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(Decode(llama2, {sp + "Hello", sp + "w", "<0xC3>", "<0xA9>", "rld"}),
            "Hello w\xC3\xA9rld");
  // A cut multi-byte character becomes U+FFFD; a leading BOM of a byte run is dropped.
  EXPECT_EQ(Decode({{"type", "ByteFallback"}}, {"<0xC3>", "x"}), "\xEF\xBF\xBDx");
  EXPECT_EQ(Decode({{"type", "ByteFallback"}}, {"<0xEF>", "<0xBB>", "<0xBF>", "<0x61>"}), "a");
  EXPECT_EQ(Decode({{"type", "ByteFallback"}}, {"<0xZZ>", "<0x4>"}), "<0xZZ><0x4>");
  // Byte level: bytes back to text; added tokens pass through untouched.
  EXPECT_EQ(Decode({{"type", "ByteLevel"}}, {"Hello", "\xC4\xA0world", "\xC4\x8A"}),
            "Hello world\n");
  EXPECT_EQ(Decode({{"type", "ByteLevel"}}, {"a", "<|x|>", "\xC3\x83", "\xC2\xA9"}, {"<|x|>"}),
            "a<|x|>\xC3\xA9");
  EXPECT_EQ(Decode({{"type", "ByteLevel"}}, {"\xC3\x83"}), "\xEF\xBF\xBD") << "cut character";
  json metaspace = {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "always"}};
  EXPECT_EQ(Decode(metaspace, {sp + "Hey", sp + "friend"}), "Hey friend");
  json never = {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "never"}};
  EXPECT_EQ(Decode(never, {sp + "Hey"}), " Hey");
  EXPECT_EQ(Decode({{"type", "Strip"}, {"content", "x"}, {"start", 2}, {"stop", 1}}, {"xxxaxx"}),
            "xax");
}

TEST(TokenizerPipelineTest, TemplatePostProcessor) {
  json llama2 = {{"type", "TemplateProcessing"},
                 {"single",
                  {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                   {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                   {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                 {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  auto lookup = [](std::string_view token) -> std::optional<TokenId> {
    if (token == "</s>") return 2;
    return std::nullopt;
  };
  auto post = ParsePostProcessor(llama2, "post_processor", lookup);
  ASSERT_TRUE(post.ok()) << post.status();
  std::vector<TokenId> ids = {7, 8};
  (*post)->Apply(&ids, true);
  EXPECT_EQ(ids, (std::vector<TokenId>{1, 7, 8, 2}));
  std::vector<TokenId> plain = {7};
  (*post)->Apply(&plain, false);
  EXPECT_EQ(plain, (std::vector<TokenId>{7}));

  json missing = llama2;
  missing["single"][2]["SpecialToken"]["id"] = "<nope>";
  auto bad = ParsePostProcessor(missing, "post_processor", lookup);
  EXPECT_EQ(bad.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("<nope>"), std::string::npos) << bad.status();
}

TEST(TokenizerPipelineTest, UnsupportedTypesAreNamedWithTheirPath) {
  json normalizer = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFC"}}, {{"type", "BertNormalizer"}}}}};
  auto n = ParseNormalizer(normalizer, "normalizer");
  EXPECT_EQ(n.status().code(), base::StatusCode::kUnimplemented);
  EXPECT_EQ(n.status().message(),
            "normalizer type 'BertNormalizer' (at normalizer.normalizers[1]) is not supported");
  EXPECT_EQ(ParsePreTokenizer({{"type", "Punctuation"}}, "pre_tokenizer").status().code(),
            base::StatusCode::kUnimplemented);
  EXPECT_EQ(ParseDecoder({{"type", "WordPiece"}}, "decoder").status().code(),
            base::StatusCode::kUnimplemented);
  auto no_lookup = [](std::string_view) -> std::optional<TokenId> { return std::nullopt; };
  EXPECT_EQ(ParsePostProcessor({{"type", "Weird"}}, "post_processor", no_lookup).status().code(),
            base::StatusCode::kUnimplemented);
  // Malformed components.
  auto no_type = ParsePreTokenizer({{"pattern", 1}}, "pre_tokenizer");
  EXPECT_EQ(no_type.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(no_type.status().message().find("pre_tokenizer"), std::string::npos);
  auto bad_behavior = ParsePreTokenizer(Split("-", "Sideways"), "pre_tokenizer");
  EXPECT_NE(bad_behavior.status().message().find("Sideways"), std::string::npos);
  auto bad_regex = ParsePreTokenizer(
      {{"type", "Split"}, {"pattern", {{"Regex", "(("}}}, {"behavior", "Isolated"}}, "p");
  EXPECT_EQ(bad_regex.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_regex.status().message().find("p.pattern"), std::string::npos)
      << bad_regex.status();
  json too_many = {{"type", "Sequence"}, {"decoders", json::array()}};
  for (int i = 0; i < 100; ++i) too_many["decoders"].push_back({{"type", "Fuse"}});
  EXPECT_EQ(ParseDecoder(too_many, "decoder").status().code(),
            base::StatusCode::kResourceExhausted);
  EXPECT_EQ(ParseDecoder({{"type", "Metaspace"}, {"replacement", "ab"}}, "decoder").status().code(),
            base::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sovai::model
