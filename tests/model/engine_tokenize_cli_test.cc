// The real `sovai-engine` binary: `tokenize` (encode and --decode), `tokenizer train`, help and
// usage errors, with their exit codes (0 ok, 1 bad input, 2 usage).
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "base/env.h"
#include "base/json.h"

namespace {

using sovai::base::Env;

struct EngineRun {
  int code = -1;
  std::string out;
  std::string err;
};

EngineRun Engine(std::vector<std::string> args, std::string_view stdin_text = "") {
  sovai::base::SpawnOptions options;
  options.argv = {SOVAI_ENGINE_BINARY};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  auto run = sovai::base::RunAndCapture(Env::Default(), options, stdin_text, 60'000);
  SOVAI_CHECK(run.ok()) << run.status();
  SOVAI_CHECK(run->exit.exited) << "killed by signal " << run->exit.signal;
  return {run->exit.code, run->stdout_text, run->stderr_text};
}

class EngineTokenizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sovai-engine-cli-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    // A tiny byte-level tokenizer: the printable ASCII bytes, one merge "h i", and <|eot|>.
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = '!'; b <= '~'; ++b) vocab[std::string(1, static_cast<char>(b))] = b;
    vocab["\xC4\xA0"] = 32;    // space
    vocab["\xC4\x8A"] = 10;    // newline
    vocab["\xC3\x83"] = 0xC3;  // the bytes of 'é' (C3 A9)
    vocab["\xC2\xA9"] = 0xA9;
    vocab["hi"] = 256;
    nlohmann::json tokenizer = {
        {"added_tokens", {{{"id", 257}, {"content", "<|eot|>"}, {"special", true}}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single",
           {{{"SpecialToken", {{"id", "<|eot|>"}, {"type_id", 0}}}},
            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"h i"}}}},
    };
    path_ = dir_ + "/tokenizer.json";
    ASSERT_TRUE(Env::Default().WriteFileAtomically(path_, sovai::base::DumpJson(tokenizer)).ok());
  }
  void TearDown() override { (void)Env::Default().DeleteDirRecursive(dir_).ok(); }

  std::string dir_;
  std::string path_;
};

TEST_F(EngineTokenizeTest, HelpAndUsageErrors) {
  EngineRun help = Engine({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("tokenize"), std::string::npos);
  EXPECT_EQ(Engine({}).code, 2);
  EngineRun unknown = Engine({"frobnicate"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("unknown command 'frobnicate'"), std::string::npos) << unknown.err;
  EngineRun tokenize_help = Engine({"tokenize", "--help"});
  EXPECT_EQ(tokenize_help.code, 0);
  EXPECT_NE(tokenize_help.out.find("--tokenizer"), std::string::npos);
  EXPECT_NE(tokenize_help.out.find("--decode"), std::string::npos);
  EXPECT_NE(tokenize_help.out.find("--add-special"), std::string::npos);
  EngineRun missing = Engine({"tokenize"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--tokenizer FILE is required"), std::string::npos) << missing.err;
  EXPECT_EQ(Engine({"tokenize", "--tokenizer", path_, "--bogus"}).code, 2);
  EXPECT_EQ(Engine({"tokenize", "--tokenizer", path_, "extra"}).code, 2);
  EXPECT_EQ(Engine({"tokenizer"}).code, 2);
  EXPECT_EQ(Engine({"tokenizer", "--help"}).code, 0);
  EXPECT_EQ(Engine({"tokenizer", "untrain"}).code, 2);
  EXPECT_EQ(Engine({"tokenizer", "train", "--help"}).code, 0);
  EXPECT_EQ(Engine({"tokenizer", "train", "--output", dir_, path_}).code, 2) << "no vocab size";
  EXPECT_EQ(Engine({"tokenizer", "train", "--vocab-size", "10", "--output", dir_, path_}).code, 2);
}

TEST_F(EngineTokenizeTest, EncodesStdinAsOneText) {
  EngineRun run = Engine({"tokenize", "--tokenizer", path_}, "hi h\n");
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.out, "[256,32,104,10]\n");
  EngineRun special = Engine({"tokenize", "--tokenizer", path_, "--add-special"}, "hi");
  EXPECT_EQ(special.out, "[257,256]\n");
  EngineRun added = Engine({"tokenize", "--tokenizer", path_}, "<|eot|>hi");
  EXPECT_EQ(added.out, "[257,256]\n");
  EngineRun empty = Engine({"tokenize", "--tokenizer", path_}, "");
  EXPECT_EQ(empty.code, 0);
  EXPECT_EQ(empty.out, "[]\n");
}

TEST_F(EngineTokenizeTest, DecodesIdsToExactText) {
  EngineRun run = Engine({"tokenize", "--tokenizer", path_, "--decode"}, "[256, 32, 195, 169, 10]");
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.out, "hi \xC3\xA9\n") << "no newline added, none removed";
  EngineRun skip =
      Engine({"tokenize", "--tokenizer", path_, "--decode", "--skip-special"}, "[257,256]");
  EXPECT_EQ(skip.out, "hi");
  EngineRun keep = Engine({"tokenize", "--tokenizer", path_, "--decode"}, "[257,256]");
  EXPECT_EQ(keep.out, "<|eot|>hi");
  // Round trip through both directions.
  std::string text = "hi\nhi  ~!";
  EngineRun ids = Engine({"tokenize", "--tokenizer", path_}, text);
  EngineRun back = Engine({"tokenize", "--tokenizer", path_, "--decode"}, ids.out);
  EXPECT_EQ(back.out, text);
}

TEST_F(EngineTokenizeTest, BadInputExitsWithOne) {
  EngineRun invalid = Engine({"tokenize", "--tokenizer", path_}, "ok\xFF");
  EXPECT_EQ(invalid.code, 1);
  EXPECT_NE(invalid.err.find("not valid UTF-8"), std::string::npos) << invalid.err;
  EXPECT_NE(invalid.err.find("at byte 2"), std::string::npos) << invalid.err;
  for (const char* bad : {"[1,", "{\"a\":1}", "[1.5]", "[-1]", "[\"1\"]", "[999]", "[1,[2]]"}) {
    EngineRun run = Engine({"tokenize", "--tokenizer", path_, "--decode"}, bad);
    EXPECT_EQ(run.code, 1) << bad;
    EXPECT_FALSE(run.err.empty()) << bad;
    EXPECT_TRUE(run.out.empty()) << bad;
  }
  EngineRun missing = Engine({"tokenize", "--tokenizer", dir_ + "/nope.json"}, "x");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("nope.json"), std::string::npos) << missing.err;
  ASSERT_TRUE(Env::Default()
                  .WriteFileAtomically(dir_ + "/wordpiece.json",
                                       R"({"model": {"type": "WordPiece", "vocab": {}}})")
                  .ok());
  EngineRun unsupported = Engine({"tokenize", "--tokenizer", dir_ + "/wordpiece.json"}, "x");
  EXPECT_EQ(unsupported.code, 1);
  EXPECT_NE(unsupported.err.find("'WordPiece'"), std::string::npos) << unsupported.err;
}

TEST_F(EngineTokenizeTest, TrainsATokenizerThatTheTokenizeCommandUses) {
  std::string corpus = dir_ + "/corpus.txt";
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  ASSERT_TRUE(Env::Default().WriteFileAtomically(corpus, text).ok());
  std::string out = dir_ + "/trained";
  EngineRun train =
      Engine({"tokenizer", "train", "--vocab-size", "300", "--input", corpus, "--output", out});
  ASSERT_EQ(train.code, 0) << train.err;
  EXPECT_NE(train.out.find("300 tokens"), std::string::npos) << train.out;
  EngineRun ids = Engine({"tokenize", "--tokenizer", out + "/tokenizer.json"}, text);
  ASSERT_EQ(ids.code, 0) << ids.err;
  EngineRun back =
      Engine({"tokenize", "--tokenizer", out + "/tokenizer.json", "--decode"}, ids.out);
  EXPECT_EQ(back.out, text);
  EngineRun bos =
      Engine({"tokenize", "--tokenizer", out + "/tokenizer.json", "--add-special"}, "the");
  EXPECT_EQ(bos.out.substr(0, 5), "[295,") << "<|begin_of_text|> follows the 295 other tokens";
  EngineRun bad_input = Engine({"tokenizer", "train", "--vocab-size", "300", "--input",
                                dir_ + "/none.txt", "--output", out});
  EXPECT_EQ(bad_input.code, 1);
  EXPECT_NE(bad_input.err.find("none.txt"), std::string::npos) << bad_input.err;
}

}  // namespace
