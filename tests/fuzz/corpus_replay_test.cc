// Replays every file of a fuzz target's corpus through the fuzz entry point, so the corpus and
// kept crash inputs run in every build (label: fuzz), even without libFuzzer.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(FuzzCorpusTest, ReplaysEveryFile) {
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(SOVAI_FUZZ_CORPUS_DIR)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream f(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string bytes = ss.str();
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
              0);
    ++files;
  }
  EXPECT_GE(files, 10u) << "seed corpus missing?";
}

}  // namespace
