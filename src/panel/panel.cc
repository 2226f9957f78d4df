#include "panel/panel.h"

#include <utility>

#include "base/strings.h"

namespace sovai::panel {
namespace {

// Whether `path` is `prefix` or below it ("/v1", "/v1/jobs"; not "/v1x").
bool Under(std::string_view path, std::string_view prefix) {
  return path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

// If-None-Match: "*" or a list of (possibly weak) entity tags; weak comparison, as RFC 9110 asks
// for GET.
bool EtagMatches(std::string_view if_none_match, std::string_view etag) {
  for (std::string_view tag : base::Split(if_none_match, ',', /*skip_empty=*/true)) {
    tag = base::Trim(tag);
    if (tag == "*") return true;
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == etag) return true;
  }
  return false;
}

net::Response NoRoute(const net::Request& request) {
  // The server's own answer for an unmatched route, word for word.
  return net::Response::Error(
      404, "no route for " + std::string(request.method()) + " " + std::string(request.raw_path()));
}

}  // namespace

std::string PanelCsp(std::string_view connect_origins) {
  std::string connect = "'self'";
  if (!base::Trim(connect_origins).empty()) connect += " " + std::string(connect_origins);
  return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
         "font-src 'self'; manifest-src 'self'; connect-src " +
         connect + "; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
}

std::string_view ContentTypeOf(std::string_view path) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".map", "application/json"},
      {".webmanifest", "application/manifest+json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
      {".txt", "text/plain; charset=utf-8"},
  };
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
    return "application/octet-stream";
  }
  const std::string extension = base::AsciiToLower(path.substr(dot));
  for (const auto& [ext, type] : kTypes) {
    if (extension == ext) return type;
  }
  return "application/octet-stream";
}

PanelHandler::PanelHandler(std::span<const Asset> assets, PanelOptions options)
    : assets_(assets), options_(std::move(options)) {}

const Asset* PanelHandler::Find(std::string_view path) const {
  for (const Asset& asset : assets_) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

net::Response PanelHandler::Serve(const net::Request& request, const Asset& asset,
                                  bool immutable) const {
  net::Response response;
  if (auto tags = request.header("If-None-Match"); tags && EtagMatches(*tags, asset.etag)) {
    response = net::Response::Empty(304);
  } else {
    response =
        net::Response::Text(200, std::string(asset.data), std::string(ContentTypeOf(asset.path)));
  }
  response.headers.Set("ETag", std::string(asset.etag));
  response.headers.Set("Cache-Control",
                       immutable
                           ? "public, max-age=" + std::to_string(kImmutableMaxAgeS) + ", immutable"
                           : "no-cache");
  const std::string origins = options_.connect_origins ? options_.connect_origins(request) : "";
  response.headers.Set("Content-Security-Policy", PanelCsp(origins));
  response.headers.Set("X-Content-Type-Options", "nosniff");
  response.headers.Set("X-Frame-Options", "DENY");
  response.headers.Set("Referrer-Policy", "no-referrer");
  return response;
}

net::Response PanelHandler::Handle(const net::Request& request) const {
  if (request.method() != "GET" && request.method() != "HEAD") return NoRoute(request);
  const std::string& path = request.path();
  for (std::string_view prefix : kReservedPrefixes) {
    if (Under(path, prefix)) return NoRoute(request);
  }
  if (Under(path, "/assets")) {
    const Asset* asset = Find(path);
    return asset ? Serve(request, *asset, /*immutable=*/true) : NoRoute(request);
  }
  // "/index.html" itself is served as a page (no-cache), like "/".
  if (path != "/index.html") {
    if (const Asset* asset = Find(path)) return Serve(request, *asset, /*immutable=*/false);
  }
  const Asset* index = Find("/index.html");
  return index ? Serve(request, *index, /*immutable=*/false) : NoRoute(request);
}

void InstallPanel(net::Router& router, std::span<const Asset> assets, PanelOptions options) {
  auto handler = std::make_shared<const PanelHandler>(assets, std::move(options));
  // In-memory answers: cheap enough for the I/O thread.
  router.SetFallback([handler](net::Request& request) { return handler->Handle(request); },
                     {.inline_handler = true});
}

}  // namespace sovai::panel
