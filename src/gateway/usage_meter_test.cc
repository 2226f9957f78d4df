#include "gateway/usage_meter.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace sovai::gateway {
namespace {

constexpr std::string_view kBody =
    R"({"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":)"
    R"({"role":"assistant","content":"usage: hi"}}],)"
    R"("usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}})";

constexpr std::string_view kStream =
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n"
    ": keep-alive comment\n\n"
    "event: message\nid: 7\n"
    "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
    "\"total_tokens\":7}}\n\n"
    "data: [DONE]\n\n";

std::optional<Usage> ScanWhole(std::string_view body, bool sse) {
  UsageScanner scanner(sse);
  scanner.Feed(body);
  return scanner.usage();
}

TEST(UsageScannerTest, JsonBody) {
  std::optional<Usage> usage = ScanWhole(kBody, /*sse=*/false);
  ASSERT_TRUE(usage);
  EXPECT_EQ(*usage, (Usage{12, 3, 15}));
}

TEST(UsageScannerTest, JsonBodySplitAtEveryByte) {
  for (size_t cut = 0; cut <= kBody.size(); ++cut) {
    UsageScanner scanner(false);
    scanner.Feed(kBody.substr(0, cut));
    if (cut < kBody.size()) {
      EXPECT_FALSE(scanner.usage()) << cut;  // not complete yet
    }
    scanner.Feed(kBody.substr(cut));
    ASSERT_EQ(scanner.usage(), (Usage{12, 3, 15})) << cut;
  }
  // One byte at a time.
  UsageScanner scanner(false);
  for (char c : kBody) scanner.Feed(std::string_view(&c, 1));
  EXPECT_EQ(scanner.usage(), (Usage{12, 3, 15}));
}

TEST(UsageScannerTest, JsonBodyWithoutUsageOrMalformed) {
  EXPECT_FALSE(ScanWhole(R"({"choices":[]})", false));
  EXPECT_FALSE(ScanWhole(R"({"usage":null})", false));
  EXPECT_FALSE(ScanWhole(R"({"usage":{}})", false));
  EXPECT_FALSE(ScanWhole(R"({"usage":{"prompt_tokens":-1}})", false));
  EXPECT_FALSE(ScanWhole(R"({"usage":{"prompt_tokens":1.5}})", false));
  EXPECT_FALSE(ScanWhole(R"({"usage":{"prompt_tokens":"3"}})", false));
  EXPECT_FALSE(ScanWhole(R"({"usage":{"prompt_tokens":99999999999999999999}})", false));
  EXPECT_FALSE(ScanWhole(R"({"usage":[1,2]})", false));
  EXPECT_FALSE(ScanWhole(R"([{"usage":{"prompt_tokens":1}}])", false));
  EXPECT_FALSE(ScanWhole(R"({"usage":{"prompt_tokens":1})", false));  // cut short
  EXPECT_FALSE(ScanWhole("\xff\xfe usage", false));
  EXPECT_FALSE(ScanWhole("", false));
  // Nested "usage" does not count; only the top level.
  EXPECT_FALSE(ScanWhole(R"({"x":{"usage":{"prompt_tokens":1}}})", false));
}

TEST(UsageScannerTest, TotalDefaultsToPromptPlusCompletion) {
  EXPECT_EQ(ScanWhole(R"({"usage":{"prompt_tokens":4,"completion_tokens":6}})", false),
            (Usage{4, 6, 10}));
  // Embeddings report no completion tokens.
  EXPECT_EQ(ScanWhole(R"({"usage":{"prompt_tokens":8,"total_tokens":8}})", false),
            (Usage{8, 0, 8}));
}

TEST(UsageScannerTest, JsonBodyOverTheLimitGivesUp) {
  UsageScanner scanner(false);
  std::string filler(1 << 20, ' ');
  scanner.Feed("{\"pad\":\"");
  for (size_t fed = 0; fed <= kMaxUsageScanBodyBytes; fed += filler.size()) scanner.Feed(filler);
  scanner.Feed("\",\"usage\":{\"prompt_tokens\":1}}");
  EXPECT_TRUE(scanner.gave_up());
  EXPECT_FALSE(scanner.usage());
}

TEST(UsageScannerTest, SseStream) {
  std::optional<Usage> usage = ScanWhole(kStream, /*sse=*/true);
  ASSERT_TRUE(usage);
  EXPECT_EQ(*usage, (Usage{5, 2, 7}));
}

TEST(UsageScannerTest, SseSplitAtEveryByte) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    UsageScanner scanner(true);
    scanner.Feed(kStream.substr(0, cut));
    scanner.Feed(kStream.substr(cut));
    ASSERT_EQ(scanner.usage(), (Usage{5, 2, 7})) << cut;
  }
  for (size_t a = 0; a < kStream.size(); a += 7) {
    for (size_t b = a; b <= kStream.size(); b += 13) {
      UsageScanner scanner(true);
      scanner.Feed(kStream.substr(0, a));
      scanner.Feed(kStream.substr(a, b - a));
      scanner.Feed(kStream.substr(b));
      ASSERT_EQ(scanner.usage(), (Usage{5, 2, 7})) << a << " " << b;
    }
  }
  UsageScanner scanner(true);
  for (char c : kStream) scanner.Feed(std::string_view(&c, 1));
  EXPECT_EQ(scanner.usage(), (Usage{5, 2, 7}));
}

TEST(UsageScannerTest, SseUsageCommentOfTheEngine) {
  // A stream whose client did not ask for usage ends with it as a comment.
  constexpr std::string_view kCommented =
      "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
      ": {\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"total_tokens\":10}}\n\n"
      "data: [DONE]\n\n";
  for (size_t cut = 0; cut <= kCommented.size(); ++cut) {
    UsageScanner scanner(true);
    scanner.Feed(kCommented.substr(0, cut));
    scanner.Feed(kCommented.substr(cut));
    ASSERT_EQ(scanner.usage(), (Usage{9, 1, 10})) << cut;
  }
  // Keep-alive comments and other comments are not usage.
  UsageScanner scanner(true);
  scanner.Feed(":\n\n: keep-alive\n\n: {not json\n\n: {\"other\":1}\n\n");
  EXPECT_FALSE(scanner.usage());
}

TEST(UsageScannerTest, SseLineEndings) {
  for (std::string_view eol : {"\n", "\r\n", "\r"}) {
    std::string stream;
    for (std::string_view line : {"data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}",
                                  "", "data:{\"usage\":{\"prompt_tokens\":2,",
                                  "data: \"completion_tokens\":3}}", "", "data: [DONE]", ""}) {
      stream.append(line).append(eol);
    }
    // Every split point, so CR and LF of a CRLF land in different pieces.
    for (size_t cut = 0; cut <= stream.size(); ++cut) {
      UsageScanner scanner(true);
      scanner.Feed(std::string_view(stream).substr(0, cut));
      scanner.Feed(std::string_view(stream).substr(cut));
      // Two data lines of one event are joined with "\n": {"usage":{...,\n"completion_tokens":3}}
      ASSERT_EQ(scanner.usage(), (Usage{2, 3, 5})) << "eol " << eol.size() << " cut " << cut;
    }
  }
}

TEST(UsageScannerTest, SseKeepsTheLastNonNullUsage) {
  std::string_view stream =
      "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n"
      "data: {\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}\n\n"
      "data: {\"usage\":null}\n\n"
      "data: {\"usage\":\"bogus\"}\n\n"
      "data: [DONE]\n\n";
  EXPECT_EQ(ScanWhole(stream, true), (Usage{9, 4, 13}));
}

TEST(UsageScannerTest, SseMalformedEventsAreIgnored) {
  std::string_view stream =
      "data: {\"usage\":{\"prompt_tokens\":3}}\n\n"
      "data: {\"usage\": {not json\n\n"
      "data: usage\n\n"
      "data\n\n"
      "\xff\xfe\n\n"
      ":\n\n"
      "data: {\"usage\":{\"prompt_tokens\":3}\n";  // no blank line: never dispatched
  EXPECT_EQ(ScanWhole(stream, true), (Usage{3, 0, 3}));
  EXPECT_FALSE(ScanWhole("data: [DONE]\n\n", true));
  EXPECT_FALSE(ScanWhole("", true));
  // An event without its blank line is incomplete (as in the SSE spec).
  EXPECT_FALSE(ScanWhole("data: {\"usage\":{\"prompt_tokens\":3}}\n", true));
}

TEST(UsageScannerTest, SseGiantLinesAreSkippedAndMemoryStaysBounded) {
  UsageScanner scanner(true);
  std::string chunk(64 * 1024, 'x');
  scanner.Feed("data: {\"usage\":{\"prompt_tokens\":1},\"pad\":\"");
  for (size_t fed = 0; fed < 3 * kMaxUsageSseEventBytes; fed += chunk.size()) scanner.Feed(chunk);
  scanner.Feed("\"}\n\n");
  EXPECT_FALSE(scanner.usage());
  // An event whose lines are each short but whose data together is too long is skipped too.
  std::string line = "data: " + std::string(kMaxUsageSseEventBytes / 4, 'y') + "\n";
  for (int i = 0; i < 5; ++i) scanner.Feed(line);
  scanner.Feed("data: {\"usage\":{\"prompt_tokens\":1}}\n\n");
  EXPECT_FALSE(scanner.usage());
  // Later events still count.
  scanner.Feed(
      "data: {\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(scanner.usage(), (Usage{2, 5, 7}));
}

TEST(UsageScannerTest, IsEventStream) {
  EXPECT_TRUE(IsEventStream("text/event-stream"));
  EXPECT_TRUE(IsEventStream("Text/Event-Stream; charset=utf-8"));
  EXPECT_TRUE(IsEventStream(" text/event-stream ;x=y"));
  EXPECT_FALSE(IsEventStream("application/json"));
  EXPECT_FALSE(IsEventStream("text/event-streams"));
  EXPECT_FALSE(IsEventStream(""));
}

TEST(UsageLedgerTest, AccumulatesPerKey) {
  UsageLedger ledger;
  UsageKey a{"app_1", "tok_1", "prj_1"};
  UsageKey b{"app_1", "tok_2", "prj_1"};
  EXPECT_TRUE(ledger.Add(a, {10, 2, 12}));
  EXPECT_TRUE(ledger.Add(a, {5, 1, 6}));
  EXPECT_TRUE(ledger.Add(b, {}));  // an answer without usage still counts as a request
  std::vector<UsageRow> rows = ledger.Snapshot();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key, a);
  EXPECT_EQ(rows[0].requests, 2);
  EXPECT_EQ(rows[0].prompt_tokens, 15);
  EXPECT_EQ(rows[0].completion_tokens, 3);
  EXPECT_EQ(rows[1].key, b);
  EXPECT_EQ(rows[1].requests, 1);
  EXPECT_EQ(rows[1].prompt_tokens, 0);
  EXPECT_EQ(ledger.Snapshot().size(), 2u);  // Snapshot does not reset
}

TEST(UsageLedgerTest, TakeStartsOver) {
  UsageLedger ledger;
  UsageKey a{"app_1", "", "prj_1"};
  ASSERT_TRUE(ledger.Add(a, {1, 1, 2}));
  std::vector<UsageRow> taken = ledger.Take();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].requests, 1);
  EXPECT_TRUE(ledger.Snapshot().empty());
  ASSERT_TRUE(ledger.Add(a, {4, 0, 4}));
  taken = ledger.Take();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].prompt_tokens, 4);
}

TEST(UsageLedgerTest, RowsAreBounded) {
  UsageLedger ledger(/*max_rows=*/2);
  EXPECT_TRUE(ledger.Add({"a", "t", "p"}, {1, 0, 1}));
  EXPECT_TRUE(ledger.Add({"b", "t", "p"}, {1, 0, 1}));
  EXPECT_FALSE(ledger.Add({"c", "t", "p"}, {1, 0, 1}));
  EXPECT_TRUE(ledger.Add({"a", "t", "p"}, {1, 0, 1}));  // known keys still count
  EXPECT_EQ(ledger.dropped_requests(), 1u);
  EXPECT_EQ(ledger.Snapshot().size(), 2u);
  (void)ledger.Take();
  EXPECT_TRUE(ledger.Add({"c", "t", "p"}, {1, 0, 1}));
}

TEST(UsageLedgerTest, ConcurrentAdds) {
  UsageLedger ledger;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&ledger, t] {
      for (int i = 0; i < 1000; ++i) {
        (void)ledger.Add({"app", "tok_" + std::to_string(i % 3), "prj"}, {2, 1, 3});
        if (t == 0 && i % 100 == 0) (void)ledger.Snapshot();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int64_t requests = 0, prompt = 0;
  for (const UsageRow& row : ledger.Snapshot()) {
    requests += row.requests;
    prompt += row.prompt_tokens;
  }
  EXPECT_EQ(requests, 4000);
  EXPECT_EQ(prompt, 8000);
}

}  // namespace
}  // namespace sovai::gateway
