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

std::vector<std::string_view> SplitPath(std::string_view path) {
  // "/a/b" → {"a", "b"}; "/" → {""}; "/a/" → {"a", ""}.
  std::vector<std::string_view> out;
  path.remove_prefix(1);
  for (;;) {
    size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

}  // namespace

struct Router::Impl {
  struct Route {
    std::string method;
    std::string pattern;
    std::vector<Segment> segments;
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
  std::vector<std::string_view> parts = SplitPath(pattern);
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
  std::vector<std::string_view> parts = SplitPath(raw_path);

  // Score: per segment, literal=3, param=2, catch-all=1, compared lexicographically, so literal
  // segments win over parameters and parameters over catch-alls, position by position.
  struct Candidate {
    int index;
    std::vector<int> score;
  };
  std::vector<Candidate> path_matches;
  for (size_t ri = 0; ri < impl_->routes.size(); ++ri) {
    const auto& segs = impl_->routes[ri].segments;
    std::vector<int> score;
    bool ok = true;
    size_t i = 0;
    for (; i < segs.size() && ok; ++i) {
      const Segment& s = segs[i];
      if (s.kind == Segment::kCatchAll) {
        score.push_back(1);
        i = segs.size();
        break;
      }
      if (i >= parts.size()) {
        ok = false;
        break;
      }
      if (s.kind == Segment::kParam) {
        ok = !parts[i].empty();
        score.push_back(2);
      } else {
        auto decoded = PercentDecode(parts[i]);
        ok = decoded.ok() && *decoded == s.text;
        score.push_back(3);
      }
    }
    bool ends_with_catch_all = !segs.empty() && segs.back().kind == Segment::kCatchAll;
    if (ok &&
        (ends_with_catch_all ? parts.size() + 1 >= segs.size() : parts.size() == segs.size())) {
      path_matches.push_back({static_cast<int>(ri), std::move(score)});
    }
  }
  if (path_matches.empty()) return use_fallback();

  std::stable_sort(path_matches.begin(), path_matches.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
  // The most specific route for this method; HEAD falls back to GET.
  const Candidate* chosen = nullptr;
  for (std::string_view m :
       {method, method == "HEAD" ? std::string_view("GET") : std::string_view()}) {
    if (m.empty()) continue;
    for (const auto& c : path_matches) {
      if (impl_->routes[static_cast<size_t>(c.index)].method == m) {
        chosen = &c;
        break;
      }
    }
    if (chosen != nullptr) break;
  }
  if (chosen == nullptr) {
    std::vector<std::string> allow;
    for (const auto& c : path_matches) {
      const std::string& m = impl_->routes[static_cast<size_t>(c.index)].method;
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

  const auto& route = impl_->routes[static_cast<size_t>(chosen->index)];
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
  match.route_index = chosen->index;
  return match;
}

}  // namespace sovai::net
