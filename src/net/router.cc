// Router: a list of routes matched segment by segment. Route tables are small (tens of routes),
// so a linear scan with a specificity score is simpler than a trie and fast enough.
#include <algorithm>
#include <string>
#include <vector>

#include "net/http.h"

namespace sovai::net {

namespace {

struct Segment {
  enum Kind { kLiteral, kParam, kCatchAll } kind = kLiteral;
  std::string text;  // literal text, or the parameter name
};

// A path split at '/': "/a/b" → {"a", "b"}; "/" → {""}; "/a/" → {"a", ""}. Find runs on every
// request, so paths of up to kInline segments are split without allocating.
class PathParts {
 public:
  explicit PathParts(std::string_view path) {
    path.remove_prefix(1);
    for (;;) {
      size_t slash = path.find('/');
      Push(path.substr(0, slash));
      if (slash == std::string_view::npos) break;
      path.remove_prefix(slash + 1);
    }
  }
  size_t size() const { return size_; }
  std::string_view operator[](size_t i) const {
    return i < kInline ? inline_[i] : more_[i - kInline];
  }

 private:
  static constexpr size_t kInline = 16;
  void Push(std::string_view part) {
    if (size_ < kInline) {
      inline_[size_] = part;
    } else {
      more_.push_back(part);
    }
    ++size_;
  }
  std::string_view inline_[kInline];
  std::vector<std::string_view> more_;
  size_t size_ = 0;
};

// Whether a raw path segment decodes to `literal` (segments without escapes are compared as
// they are, without decoding into a new string).
bool SegmentEquals(std::string_view raw, const std::string& literal) {
  if (raw.find('%') == std::string_view::npos) return raw == literal;
  auto decoded = PercentDecode(raw);
  return decoded.ok() && *decoded == literal;
}

}  // namespace

struct Router::Impl {
  struct Route {
    std::string method;
    std::string pattern;
    std::vector<Segment> segments;
    // Specificity per segment (literal 3, parameter 2, catch-all 1), compared lexicographically
    // between matching routes: literal segments win over parameters, parameters over catch-alls,
    // position by position.
    std::vector<int> score;
    Handler handler;
    RouteOptions options;
  };
  std::vector<Route> routes;
  std::optional<Route> fallback;
};

Router::Router() : impl_(std::make_unique<Impl>()) {}
Router::~Router() = default;
Router::Router(Router&&) noexcept = default;
Router& Router::operator=(Router&&) noexcept = default;

void Router::Add(std::string method, std::string pattern, Handler handler, RouteOptions options) {
  SOVAI_CHECK(!method.empty()) << "route method is empty";
  SOVAI_CHECK(!pattern.empty() && pattern.front() == '/')
      << "route pattern must start with '/': " << pattern;
  SOVAI_CHECK(handler) << "route handler is empty: " << pattern;
  SOVAI_CHECK_LE(options.max_body_bytes, kMaxBodyBytesCeiling);
  Impl::Route route;
  const PathParts parts(pattern);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view p = parts[i];
    Segment seg;
    if (p.size() >= 2 && p.front() == '{' && p.back() == '}') {
      std::string_view name = p.substr(1, p.size() - 2);
      if (name.size() > 3 && name.substr(name.size() - 3) == "...") {
        SOVAI_CHECK(i + 1 == parts.size()) << "catch-all must be the last segment: " << pattern;
        seg.kind = Segment::kCatchAll;
        name.remove_suffix(3);
      } else {
        seg.kind = Segment::kParam;
      }
      SOVAI_CHECK(!name.empty() && name.find_first_of("{}/") == std::string_view::npos)
          << "bad parameter name in " << pattern;
      seg.text = std::string(name);
    } else {
      SOVAI_CHECK(p.find_first_of("{}") == std::string_view::npos)
          << "braces must enclose a whole segment: " << pattern;
      seg.text = std::string(p);
    }
    route.score.push_back(seg.kind == Segment::kLiteral ? 3 : seg.kind == Segment::kParam ? 2 : 1);
    route.segments.push_back(std::move(seg));
  }
  for (const auto& r : impl_->routes) {
    SOVAI_CHECK(!(r.method == method && r.pattern == pattern))
        << "duplicate route " << method << " " << pattern;
  }
  route.method = std::move(method);
  route.pattern = std::move(pattern);
  route.handler = std::move(handler);
  route.options = options;
  impl_->routes.push_back(std::move(route));
}

void Router::SetFallback(Handler handler, RouteOptions options) {
  SOVAI_CHECK(handler) << "fallback handler is empty";
  SOVAI_CHECK_LE(options.max_body_bytes, kMaxBodyBytesCeiling);
  Impl::Route route;
  route.handler = std::move(handler);
  route.options = options;
  impl_->fallback = std::move(route);
}

int Router::route_count() const { return static_cast<int>(impl_->routes.size()); }

std::pair<std::string_view, std::string_view> Router::route_key(int route_index) const {
  if (route_index >= 0 && route_index < route_count()) {
    const auto& r = impl_->routes[static_cast<size_t>(route_index)];
    return {r.pattern, r.method};
  }
  return {"", ""};
}

Router::Match Router::Find(std::string_view method, std::string_view raw_path) const {
  Match match;
  auto use_fallback = [&]() {
    if (impl_->fallback) {
      match.kind = Match::kFound;
      match.handler = &impl_->fallback->handler;
      match.options = &impl_->fallback->options;
      match.pattern = "";
      match.route_index = route_count();
    }
    return match;
  };
  if (raw_path.empty() || raw_path.front() != '/') return use_fallback();
  const PathParts parts(raw_path);
  auto path_matches = [&](const Impl::Route& route) {
    const auto& segs = route.segments;
    for (size_t i = 0; i < segs.size(); ++i) {
      const Segment& s = segs[i];
      if (s.kind == Segment::kCatchAll) return parts.size() + 1 >= segs.size();
      if (i >= parts.size()) return false;
      if (s.kind == Segment::kParam ? parts[i].empty() : !SegmentEquals(parts[i], s.text)) {
        return false;
      }
    }
    return parts.size() == segs.size();
  };

  // The most specific route for this method, the first registered among equals; HEAD falls back
  // to GET.
  const bool head = method == "HEAD";
  int chosen = -1;
  int chosen_get = -1;
  bool any_path_match = false;
  for (size_t ri = 0; ri < impl_->routes.size(); ++ri) {
    const auto& route = impl_->routes[ri];
    const bool for_method = route.method == method;
    const bool for_get = head && route.method == "GET";
    if (!for_method && !for_get) {
      // Routes for other methods matter only for the answer: 405 rather than the fallback.
      if (!any_path_match && path_matches(route)) any_path_match = true;
      continue;
    }
    if (!path_matches(route)) continue;
    any_path_match = true;
    int& best = for_method ? chosen : chosen_get;
    if (best < 0 || route.score > impl_->routes[static_cast<size_t>(best)].score) {
      best = static_cast<int>(ri);
    }
  }
  if (chosen < 0) chosen = chosen_get;
  if (!any_path_match) return use_fallback();

  if (chosen < 0) {
    std::vector<std::string> allow;
    for (const auto& route : impl_->routes) {
      if (!path_matches(route)) continue;
      const std::string& m = route.method;
      if (std::find(allow.begin(), allow.end(), m) == allow.end()) allow.push_back(m);
      if (m == "GET" && std::find(allow.begin(), allow.end(), "HEAD") == allow.end()) {
        allow.push_back("HEAD");
      }
    }
    std::sort(allow.begin(), allow.end());
    match.kind = Match::kMethodNotAllowed;
    for (const auto& m : allow) {
      if (!match.allow.empty()) match.allow += ", ";
      match.allow += m;
    }
    return match;
  }

  const auto& route = impl_->routes[static_cast<size_t>(chosen)];
  for (size_t i = 0; i < route.segments.size(); ++i) {
    const Segment& s = route.segments[i];
    if (s.kind == Segment::kLiteral) continue;
    std::string_view raw;
    if (s.kind == Segment::kCatchAll) {
      // The rest of the raw path after the first i segments.
      size_t pos = 0;
      for (size_t k = 0; k < i; ++k) pos += parts[k].size() + 1;
      raw = pos < raw_path.size() ? raw_path.substr(pos + 1) : std::string_view();
    } else {
      raw = parts[i];
    }
    auto decoded = PercentDecode(raw);
    if (!decoded.ok()) {
      Match not_found;
      match = std::move(not_found);
      return use_fallback();
    }
    match.params.emplace_back(s.text, std::move(*decoded));
  }
  match.kind = Match::kFound;
  match.handler = &route.handler;
  match.options = &route.options;
  match.pattern = route.pattern;
  match.route_index = chosen;
  return match;
}

}  // namespace sovai::net
