// Our side of bench/tokenizer: encodes the documents of a corpus file with a tokenizer.json and
// prints the throughput of each round, the median, and the total token count (which run.sh
// checks against the JavaScript reference's, so both sides did the same work).
//
//   tokenizer_bench TOKENIZER_JSON CORPUS ROUNDS
//
// CORPUS holds documents separated by a line "\x1e" (ASCII record separator); each is one
// Encode call. Prints "load_ms=... tokens=... mb_per_s=r1,r2,... median_mb_per_s=..."
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/env.h"
#include "model/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER_JSON CORPUS ROUNDS\n");
    return 2;
  }
  auto& env = sovai::base::Env::Default();
  auto start = std::chrono::steady_clock::now();
  auto tokenizer = sovai::model::Tokenizer::FromFile(env, argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  auto corpus = env.ReadFile(argv[2], 1ull << 30);
  if (!corpus.ok()) {
    std::fprintf(stderr, "%s\n", corpus.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> docs;
  size_t pos = 0;
  const std::string separator = "\n\x1e\n";
  while (pos < corpus->size()) {
    size_t end = corpus->find(separator, pos);
    if (end == std::string::npos) end = corpus->size();
    docs.push_back(corpus->substr(pos, end - pos));
    pos = end + separator.size();
  }
  int rounds = std::max(1, std::atoi(argv[3]));
  std::vector<double> rates;
  size_t tokens = 0;
  // One cache for the whole run, as the reference keeps its BPE cache across calls.
  sovai::model::EncodeCache cache;
  for (int r = 0; r < rounds; ++r) {
    size_t round_tokens = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (const std::string& doc : docs) {
      auto ids = tokenizer->Encode(doc, {}, &cache);
      if (!ids.ok()) {
        std::fprintf(stderr, "%s\n", ids.status().ToString().c_str());
        return 1;
      }
      round_tokens += ids->size();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(corpus->size()) / 1e6 / s);
    tokens = round_tokens;
  }
  std::string list;
  for (double rate : rates) list += (list.empty() ? "" : ",") + std::to_string(rate);
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  std::printf("load_ms=%.0f tokens=%zu mb_per_s=%s median_mb_per_s=%.3f\n", load_ms, tokens,
              list.c_str(), sorted[sorted.size() / 2]);
  return 0;
}
