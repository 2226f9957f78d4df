#include "base/response_cache_policy.h"

#include "base/strings.h"

namespace sovai::base {

CacheControl ParseCacheControl(std::string_view header_value) {
  CacheControl out = CacheControl::kDefault;
  for (std::string_view directive : Split(header_value, ',')) {
    directive = Trim(directive.substr(0, directive.find('=')));
    if (EqualsIgnoreCase(directive, "no-store")) return CacheControl::kNoStore;
    if (EqualsIgnoreCase(directive, "no-cache")) out = CacheControl::kNoCache;
  }
  return out;
}

std::optional<CompletionCacheFacts> CompletionCacheFactsOf(const nlohmann::json& body) {
  if (!body.is_object()) return std::nullopt;
  CompletionCacheFacts facts;
  if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return std::nullopt;
    facts.stream = it->get<bool>();
  }
  auto number_is = [&](std::string_view field, double value) {
    auto it = body.find(field);
    return it != body.end() && it->is_number() && it->get<double>() == value;
  };
  facts.greedy = number_is("temperature", 0) || number_is("top_k", 1);
  auto seed = body.find("seed");
  facts.seeded = seed != body.end() && !seed->is_null();
  return facts;
}

bool CompletionCacheable(const std::optional<CompletionCacheFacts>& facts) {
  return facts && !facts->stream && (facts->greedy || facts->seeded);
}

ResponseCacheUse DecideResponseCache(bool cacheable, CacheControl cache_control) {
  if (!cacheable) return {};
  switch (cache_control) {
    case CacheControl::kDefault:
      return {.lookup = true, .store = true};
    case CacheControl::kNoCache:
      return {.lookup = false, .store = true};
    case CacheControl::kNoStore:
      return {};
  }
  return {};
}

}  // namespace sovai::base
