// The one response-cache policy of Sovai's OpenAI endpoints (docs/api/openai.md, "Response
// cache"): which completion requests may be answered from a cache of earlier answers, and which
// answers may be kept. The engine (`sovai-engine serve`, src/serve) and the gateway in front of
// it (src/gateway) each keep their own cache and key, but decide with these functions, so a
// request is treated the same at both. It lives in base: the engine's API layer
// (sovai_serve_api) links nothing else that the gateway links.
//
//   ResponseCacheUse use = DecideResponseCache(CompletionCacheable(facts),
//                                              ParseCacheControl(header value or ""));
//   if (use.lookup && (hit = cache.Get(key))) ... answer it; X-Sovai-Cache: hit ...
//   ... generate; X-Sovai-Cache: use.MissStatus(); on a complete 200 answer and use.store: store.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace sovai::base {

// The response header that tells where an answer came from: "hit" (the cache), "miss" (generated
// and stored) or "bypass" (generated, not stored: not cacheable, or the client opted out).
inline constexpr std::string_view kCacheStatusHeader = "X-Sovai-Cache";

// What a request's Cache-Control header asks of the cache.
enum class CacheControl {
  kDefault,  // neither directive below
  kNoCache,  // "no-cache": do not answer from the cache; the fresh answer may be stored
  kNoStore,  // "no-store": neither answer from nor store in the cache (wins over no-cache)
};

// The directives of a Cache-Control value: comma-separated, case-insensitive, surrounding
// whitespace and any "=argument" ignored; unknown directives (max-age=0, private) are ignored.
// An empty value is kDefault.
CacheControl ParseCacheControl(std::string_view header_value);

// What of a completion request (/v1/chat/completions, /v1/completions) decides whether its answer
// is deterministic, and so may be answered again.
struct CompletionCacheFacts {
  bool stream = false;  // streamed answers are never cached
  bool greedy = false;  // temperature 0, or top_k 1
  bool seeded = false;  // an explicit (non-null) seed
};

// The facts of a request body as sent (the gateway, which does not parse requests further).
// nullopt when `body` is not an object or "stream" is neither absent, null nor a boolean (the
// engine answers such bodies 400). A "temperature" or "top_k" that is not a number is not greedy.
std::optional<CompletionCacheFacts> CompletionCacheFactsOf(const nlohmann::json& body);

struct ResponseCacheUse {
  bool lookup = false;  // the request may be answered from the cache
  bool store = false;   // its complete 200 answer may be stored
  // The X-Sovai-Cache value of a generated answer: "miss" when it is stored, else "bypass".
  std::string_view MissStatus() const { return store ? "miss" : "bypass"; }
  friend bool operator==(const ResponseCacheUse&, const ResponseCacheUse&) = default;
};

// The determinism rule: not streamed, and greedy or seeded (with any `n`: greedy choices are all
// the same, and each choice of a seeded request draws from its own seed derived from it). nullopt
// (a body the engine refuses) is not cacheable.
bool CompletionCacheable(const std::optional<CompletionCacheFacts>& facts);

// Embedding and rerank requests (POST /v1/embeddings, /v1/rerank) are never streamed and always
// deterministic: every one is cacheable (its Cache-Control still applies).
inline bool PoolingCacheable() { return true; }

// The Cache-Control rule: a cacheable request is looked up and stored, unless the client said
// no-cache (stored, not looked up) or no-store (neither). One that is not cacheable is neither.
ResponseCacheUse DecideResponseCache(bool cacheable, CacheControl cache_control);

}  // namespace sovai::base
