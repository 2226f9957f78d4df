#include "model/tokenizer_trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "base/json.h"
#include "model/tokenizer.h"

namespace sovai::model {
namespace {

using Ids = std::vector<TokenId>;

Tokenizer LoadTrained(const TrainedTokenizer& trained) {
  auto tok = Tokenizer::FromJson(trained.tokenizer_json);
  SOVAI_CHECK(tok.ok()) << tok.status();
  return std::move(tok).value();
}

// "aaab aaab aaab" pre-tokenizes (GPT-2) into "aaab" once and " aaab" twice. By hand:
//   counts: (a,a) 1*2 + 2*2 = 6, (a,b) 3, (' ',a) 2      -> merge a+a = "aa" (id 256)
//   words [aa,a,b] x1, [' ',aa,a,b] x2: (aa,a) 3, (a,b) 3  -> tie: (97,98) < (256,97): "ab" (257)
//   [aa,ab] x1, [' ',aa,ab] x2: (aa,ab) 3, (' ',aa) 2       -> "aaab" (258)
//   [aaab] x1, [' ',aaab] x2: (' ',aaab) 2                  -> " aaab" (259); then no pairs.
TEST(TokenizerTrainerTest, LearnsMergesByCountWithDeterministicTies) {
  BpeTrainer trainer({.vocab_size = 300});
  ASSERT_TRUE(trainer.AddText("aaab aaab aaab").ok());
  auto trained = trainer.Train();
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_EQ(trained->merges, 4u);
  EXPECT_EQ(trained->vocab_size, 256u + 4 + 5);

  auto json = base::ParseJson(trained->tokenizer_json);
  ASSERT_TRUE(json.ok()) << json.status();
  const auto& merges = (*json)["model"]["merges"];
  ASSERT_EQ(merges.size(), 4u);
  EXPECT_EQ(merges[0], nlohmann::json::array({"a", "a"}));
  EXPECT_EQ(merges[1], nlohmann::json::array({"a", "b"}));
  EXPECT_EQ(merges[2], nlohmann::json::array({"aa", "ab"}));
  EXPECT_EQ(merges[3], nlohmann::json::array({"\xC4\xA0", "aaab"}));  // Ġ + aaab

  Tokenizer tok = LoadTrained(*trained);
  EXPECT_EQ(tok.TokenToId("aa"), 256);
  EXPECT_EQ(tok.TokenToId("\xC4\xA0"
                          "aaab"),
            259);
  EXPECT_EQ(tok.TokenToId("<|begin_of_text|>"), 260);
  EXPECT_EQ(tok.TokenToId("<|eot_id|>"), 264);
  EXPECT_EQ(tok.TokenToId("\xC4\xA0"), 32) << "byte tokens are in byte order";
  EXPECT_EQ(*tok.Encode("aaab aaab"), (Ids{258, 259}));
  EXPECT_EQ(*tok.Encode("aaab", {.add_special_tokens = true}), (Ids{260, 258}));
  EXPECT_EQ(*tok.Encode("<|start_header_id|>ba"), (Ids{262, 'b', 'a'}));
}

TEST(TokenizerTrainerTest, StopsAtTheVocabularySize) {
  BpeTrainer trainer({.vocab_size = 256 + 5 + 2});
  ASSERT_TRUE(trainer.AddText("aaab aaab aaab").ok());
  auto trained = trainer.Train();
  ASSERT_TRUE(trained.ok());
  EXPECT_EQ(trained->merges, 2u);
  EXPECT_EQ(trained->vocab_size, 263u);
  Tokenizer tok = LoadTrained(*trained);
  EXPECT_EQ(*tok.Encode("aaab"), (Ids{256, 257}));
  EXPECT_EQ(tok.TokenToId("<|end_of_text|>"), 259);
}

TEST(TokenizerTrainerTest, DeterministicAndRoundTrips) {
  std::string text;
  uint64_t state = 7;
  const char* words[] = {"the", "tokenizer", "Größe", "数据", "😀",    "  ",  "\n",
                         "123", "4567",      "don't", "\t",   "x=y;", "ŁÓDŹ"};
  for (int i = 0; i < 4000; ++i) {
    state = state * 6364136223846793005ull + 1;
    text += words[(state >> 33) % 13];
    text += (state >> 20) % 3 == 0 ? "" : " ";
  }
  auto train = [&] {
    BpeTrainer trainer({.vocab_size = 400});
    SOVAI_CHECK(trainer.AddText(text).ok());
    auto trained = trainer.Train();
    SOVAI_CHECK(trained.ok()) << trained.status();
    return std::move(trained).value();
  };
  TrainedTokenizer a = train();
  TrainedTokenizer b = train();
  EXPECT_EQ(a.tokenizer_json, b.tokenizer_json);
  EXPECT_EQ(a.vocab_size, 400u);
  Tokenizer tok = LoadTrained(a);
  auto ids = tok.Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_LT(ids->size(), text.size() / 3) << "merges should compress the text they came from";
  EXPECT_EQ(*tok.Decode(*ids), text);
  for (const std::string probe : {"unseen words ŽŽŽ 🚀🚀", "<|eot_id|> x", ""}) {
    auto probe_ids = tok.Encode(probe);
    ASSERT_TRUE(probe_ids.ok());
    EXPECT_EQ(*tok.Decode(*probe_ids), probe);
  }
  auto config = base::ParseJson(a.tokenizer_config_json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ((*config)["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ((*config)["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ((*config)["added_tokens_decoder"]["399"]["content"], "<|eot_id|>");
}

// Pre-tokenizing in small pieces must count exactly the pre-tokens of the whole text.
TEST(TokenizerTrainerTest, ChunkingDoesNotChangeTheResult) {
  std::string text;
  uint64_t state = 99;
  const char* words[] = {"foo", " bar", "\n", "\n\n", "  ", "x1",   "12",   " 7",
                         "'s",  "é",    "\t", "!?",   " ",  "\r\n", "don't"};
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ull + 1;
    text += words[(state >> 33) % 15];
  }
  auto train = [&](size_t chunk_bytes) {
    BpeTrainer trainer({.vocab_size = 500, .chunk_bytes = chunk_bytes});
    SOVAI_CHECK(trainer.AddText(text).ok());
    auto trained = trainer.Train();
    SOVAI_CHECK(trained.ok()) << trained.status();
    return trained->tokenizer_json;
  };
  const std::string whole = train(1u << 30);
  EXPECT_EQ(train(1), whole);
  EXPECT_EQ(train(100), whole);
  EXPECT_EQ(train(4096), whole);
}

TEST(TokenizerTrainerTest, Errors) {
  BpeTrainer trainer({.vocab_size = 100});
  base::Status bad = trainer.AddText("ok\xC3", "input 'x.txt'");
  EXPECT_EQ(bad.code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("input 'x.txt' is not valid UTF-8"), std::string::npos) << bad;
  EXPECT_EQ(trainer.Train().status().code(), base::StatusCode::kInvalidArgument)
      << "vocab size below 261";
  auto& env = base::Env::Default();
  EXPECT_EQ(TrainTokenizerFiles(env, {}, "/tmp/x", {}).status().code(),
            base::StatusCode::kInvalidArgument);
  auto missing = TrainTokenizerFiles(env, {"/nonexistent/a.txt"}, "/tmp/x", {});
  EXPECT_EQ(missing.status().code(), base::StatusCode::kNotFound);
}

TEST(TokenizerTrainerTest, TrainFilesWritesBothFiles) {
  auto& env = base::Env::Default();
  char dir[] = "/tmp/sovai-trainer-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string input = std::string(dir) + "/in.txt";
  ASSERT_TRUE(env.WriteFileAtomically(input, "hello hello world\nhello world\n").ok());
  std::string out = std::string(dir) + "/out/nested";
  auto trained = TrainTokenizerFiles(env, {input, input}, out, {.vocab_size = 280});
  ASSERT_TRUE(trained.ok()) << trained.status();
  auto tok = Tokenizer::FromFile(env, out + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*tok->Decode(*tok->Encode("hello world")), "hello world");
  EXPECT_TRUE(env.FileExists(out + "/tokenizer_config.json"));
  ASSERT_TRUE(env.DeleteDirRecursive(dir).ok());
}

}  // namespace
}  // namespace sovai::model
