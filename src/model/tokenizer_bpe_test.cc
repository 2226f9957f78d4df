#include "model/tokenizer_bpe.h"

#include <gtest/gtest.h>

namespace sovai::model {
namespace {

using Ids = std::vector<TokenId>;

// A model over the vocabulary {a:0, b:1, c:2, ab:3, bc:4, abc:5, aa:6, <unk>:7} plus `extra`.
nlohmann::json Model(nlohmann::json merges, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json model = {
      {"type", "BPE"},
      {"vocab",
       {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}, {"<unk>", 7}}},
      {"merges", std::move(merges)},
  };
  for (const auto& [key, value] : extra.items()) model[key] = value;
  return model;
}

Ids Encode(const BpeModel& model, std::vector<std::string> pieces) {
  Ids out;
  BpeModel::Cache cache;
  base::Status s = model.Encode(pieces, &out, &cache);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(TokenizerBpeTest, LowestRankMergesFirst) {
  // "abc": (a,b) has rank 0, so ab; then (ab,c) rank 2 gives abc.
  auto model = BpeModel::FromJson(Model({"a b", "b c", "ab c"}));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(Encode(*model, {"abc"}), (Ids{5}));
  // With (b,c) ranked first, bc wins and nothing merges a with bc.
  auto other = BpeModel::FromJson(Model({"b c", "a b", "ab c"}));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(Encode(*other, {"abc"}), (Ids{0, 4}));
}

TEST(TokenizerBpeTest, EqualRanksMergeLeftmostFirst) {
  auto model = BpeModel::FromJson(Model({"a a"}));
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(Encode(*model, {"aaa"}), (Ids{6, 0}));
  EXPECT_EQ(Encode(*model, {"aaaa"}), (Ids{6, 6}));
  EXPECT_EQ(Encode(*model, {"aaaaa", "ba"}), (Ids{6, 6, 0, 1, 0}));
}

TEST(TokenizerBpeTest, PairListMergesEqualStringMerges) {
  auto strings = BpeModel::FromJson(Model({"a b", "ab c"}));
  auto pairs = BpeModel::FromJson(Model(nlohmann::json::array(
      {nlohmann::json::array({"a", "b"}), nlohmann::json::array({"ab", "c"})})));
  ASSERT_TRUE(strings.ok());
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_EQ(Encode(*pairs, {"abcab"}), Encode(*strings, {"abcab"}));
  EXPECT_EQ(Encode(*pairs, {"abcab"}), (Ids{5, 3}));
}

TEST(TokenizerBpeTest, UnknownCharactersUseUnkOrFail) {
  auto unk = BpeModel::FromJson(Model({"a b"}, {{"unk_token", "<unk>"}}));
  ASSERT_TRUE(unk.ok());
  EXPECT_EQ(Encode(*unk, {"axyb"}), (Ids{0, 7, 7, 1}));
  auto fused = BpeModel::FromJson(Model({"a b"}, {{"unk_token", "<unk>"}, {"fuse_unk", true}}));
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(Encode(*fused, {"axyb", "zz"}), (Ids{0, 7, 1, 7}));
  auto none = BpeModel::FromJson(Model({"a b"}));
  ASSERT_TRUE(none.ok());
  Ids out;
  base::Status s = none->Encode({"axb"}, &out, nullptr);
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'x'"), std::string::npos) << s;
}

TEST(TokenizerBpeTest, ByteFallbackNeedsEveryByteToken) {
  // 'é' is C3 A9 in UTF-8.
  nlohmann::json model = Model({"a b"}, {{"unk_token", "<unk>"}, {"byte_fallback", true}});
  model["vocab"]["<0xC3>"] = 8;
  model["vocab"]["<0xA9>"] = 9;
  auto bpe = BpeModel::FromJson(model);
  ASSERT_TRUE(bpe.ok());
  EXPECT_EQ(Encode(*bpe, {"a\xC3\xA9"}), (Ids{0, 8, 9}));
  // 'ê' is C3 AA: no <0xAA>, so the whole character is unk.
  EXPECT_EQ(Encode(*bpe, {"\xC3\xAA"
                          "b"}),
            (Ids{7, 1}));
}

TEST(TokenizerBpeTest, IgnoreMergesTakesWholeVocabularyWords) {
  // No merge builds "abc", but with ignore_merges the word is found whole.
  auto plain = BpeModel::FromJson(Model({"a b"}));
  auto ignore = BpeModel::FromJson(Model({"a b"}, {{"ignore_merges", true}}));
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(ignore.ok());
  EXPECT_EQ(Encode(*plain, {"abc"}), (Ids{3, 2}));
  EXPECT_EQ(Encode(*ignore, {"abc"}), (Ids{5}));
  EXPECT_EQ(Encode(*ignore, {"abcc"}), (Ids{3, 2, 2}));
}

TEST(TokenizerBpeTest, AddedTokensJoinTheVocabulary) {
  auto bpe = BpeModel::FromJson(Model({"a b"}));
  ASSERT_TRUE(bpe.ok());
  bpe->AddToken("<s>", 20);
  EXPECT_EQ(bpe->TokenToId("<s>"), 20);
  ASSERT_NE(bpe->IdToToken(20), nullptr);
  EXPECT_EQ(*bpe->IdToToken(20), "<s>");
  EXPECT_EQ(bpe->IdToToken(19), nullptr);
  EXPECT_EQ(bpe->id_limit(), 21u);
}

TEST(TokenizerBpeTest, CacheGivesTheSameIds) {
  auto bpe = BpeModel::FromJson(Model({"a b", "b c", "ab c"}));
  ASSERT_TRUE(bpe.ok());
  BpeModel::Cache cache;
  Ids first;
  Ids second;
  ASSERT_TRUE(bpe->Encode({"abc", "cab", "abc"}, &first, &cache).ok());
  ASSERT_TRUE(bpe->Encode({"abc", "cab", "abc"}, &second, &cache).ok());
  EXPECT_EQ(first, (Ids{5, 2, 3, 5}));
  EXPECT_EQ(second, first);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(TokenizerBpeTest, MalformedModelsAreRejected) {
  struct Case {
    nlohmann::json model;
    base::StatusCode code;
    std::string text;
  };
  nlohmann::json dup = Model(nlohmann::json::array());
  dup["vocab"]["zz"] = 0;
  nlohmann::json negative = Model(nlohmann::json::array());
  negative["vocab"]["zz"] = -1;
  nlohmann::json long_token = Model(nlohmann::json::array());
  long_token["vocab"][std::string(2000, 'x')] = 9;
  nlohmann::json no_vocab = Model(nlohmann::json::array());
  no_vocab.erase("vocab");
  std::vector<Case> cases = {
      {Model({"ab"}), base::StatusCode::kInvalidArgument, "model.merges[0]"},
      {Model({"a b c"}), base::StatusCode::kInvalidArgument, "model.merges[0]"},
      {Model({"a b", 7}), base::StatusCode::kInvalidArgument, "model.merges[1]"},
      {Model(nlohmann::json::array({nlohmann::json::array({"a"})})),
       base::StatusCode::kInvalidArgument, "model.merges[0]"},
      {dup, base::StatusCode::kInvalidArgument, "already has"},
      {negative, base::StatusCode::kInvalidArgument, "model.vocab['zz']"},
      {long_token, base::StatusCode::kResourceExhausted, "limit is 1024"},
      {no_vocab, base::StatusCode::kInvalidArgument, "vocab"},
      {Model(nlohmann::json::array(), {{"dropout", 0.1}}), base::StatusCode::kUnimplemented,
       "dropout"},
      {Model(nlohmann::json::array(), {{"continuing_subword_prefix", "##"}}),
       base::StatusCode::kUnimplemented, "##"},
      {Model(nlohmann::json::array(), {{"byte_fallback", "yes"}}),
       base::StatusCode::kInvalidArgument, "byte_fallback"},
  };
  for (const Case& c : cases) {
    auto bpe = BpeModel::FromJson(c.model);
    EXPECT_EQ(bpe.status().code(), c.code) << bpe.status();
    EXPECT_NE(bpe.status().message().find(c.text), std::string::npos) << bpe.status();
  }
}

}  // namespace
}  // namespace sovai::model
