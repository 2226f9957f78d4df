#include "train/dataset.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace sovai::train {
namespace {

// A stand-in renderer that marks assistant content; the real one is the model's chat template.
RenderChat TestChat() {
  return [](const nlohmann::json& messages) -> base::Result<std::vector<TextPiece>> {
    std::vector<TextPiece> pieces;
    for (const auto& m : messages) {
      std::string role = m["role"];
      pieces.push_back({"<" + role + ">", false});
      pieces.push_back({m["content"].get<std::string>(), role == "assistant"});
    }
    return pieces;
  };
}

TEST(DatasetTest, EachFormatMarksWhatIsTrained) {
  LoadOptions options;
  options.eos_text = "</s>";
  auto chat = ParseRecord(
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]})",
      TestChat(), options);
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_EQ(chat->pieces.size(), 4u);
  EXPECT_FALSE(chat->pieces[1].trained);
  EXPECT_TRUE(chat->pieces[3].trained);
  EXPECT_EQ(chat->pieces[3].text, "hello");

  auto completion = ParseRecord(R"({"prompt":"2+2=","completion":"4"})", TestChat(), options);
  ASSERT_TRUE(completion.ok());
  ASSERT_EQ(completion->pieces.size(), 2u);
  EXPECT_FALSE(completion->pieces[0].trained);
  EXPECT_EQ(completion->pieces[1].text, "4</s>");
  EXPECT_TRUE(completion->pieces[1].trained);

  auto alpaca =
      ParseRecord(R"({"instruction":"Add","input":"2 and 2","output":"4"})", TestChat(), options);
  ASSERT_TRUE(alpaca.ok());
  EXPECT_EQ(alpaca->pieces[0].text, AlpacaPrompt("Add", "2 and 2"));
  EXPECT_NE(alpaca->pieces[0].text.find("### Input:\n2 and 2\n\n### Response:\n"),
            std::string::npos);
  EXPECT_EQ(AlpacaPrompt("Add", "").find("### Input"), std::string::npos);

  auto text = ParseRecord(R"({"text":"once upon a time"})", TestChat(), options);
  ASSERT_TRUE(text.ok());
  ASSERT_EQ(text->pieces.size(), 1u);
  EXPECT_TRUE(text->pieces[0].trained);
}

TEST(DatasetTest, MalformedExamplesAreRefusedWithAReason) {
  LoadOptions options;
  const char* bad[] = {
      "{not json",
      "[1, 2]",
      R"({"messages": []})",
      R"({"messages": [{"role": "user", "content": "only a question"}]})",
      R"({"messages": [{"content": "no role"}]})",
      R"({"prompt": "p"})",
      R"({"prompt": "p", "completion": 4})",
      R"({"instruction": "i", "output": ""})",
      R"({"label": "unknown format"})",
  };
  for (const char* line : bad) {
    auto r = ParseRecord(line, TestChat(), options);
    EXPECT_FALSE(r.ok()) << line;
    EXPECT_EQ(r.status().code(), base::StatusCode::kInvalidArgument) << line;
  }
}

class DatasetFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sovai_dataset_test_XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string dir_;
};

TEST_F(DatasetFileTest, ABadLineNamesFileAndLineOrIsSkippedAndCounted) {
  Write("train.jsonl", "{\"text\":\"a\"}\n\n{\"text\":\"b\"}\r\n{oops\n{\"text\":\"c\"}");
  LoadOptions options;
  auto strict = LoadJsonl(base::Env::Default(), dir_ + "/train.jsonl", TestChat(), options);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("train.jsonl:4:"), std::string::npos) << strict.status();
  options.skip_bad_lines = true;
  auto lenient = LoadJsonl(base::Env::Default(), dir_ + "/train.jsonl", TestChat(), options);
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ(lenient->records.size(), 3u);
  EXPECT_EQ(lenient->skipped_lines, 1);
  EXPECT_NE(lenient->first_skip_reason.find(":4:"), std::string::npos);
}

TEST_F(DatasetFileTest, ADirectoryLoadsEveryJsonlFileInNameOrder) {
  Write("b.jsonl", "{\"text\":\"second\"}\n");
  Write("a.jsonl", "{\"text\":\"first\"}\n");
  Write("notes.txt", "not data");
  auto data = LoadJsonl(base::Env::Default(), dir_, TestChat(), {});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->records.size(), 2u);
  EXPECT_EQ(data->records[0].pieces[0].text, "first");
  std::filesystem::remove(dir_ + "/a.jsonl");
  std::filesystem::remove(dir_ + "/b.jsonl");
  EXPECT_FALSE(LoadJsonl(base::Env::Default(), dir_, TestChat(), {}).ok())
      << "a directory without .jsonl files is an error";
}

}  // namespace
}  // namespace sovai::train
