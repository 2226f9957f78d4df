// The web control panel (web/): the files Vite builds from web/, compiled into the binary, served
// on the API listener at "/" so that `sovai server` alone serves the panel, air-gapped.
//
//   net::Router router;                      // the /v1, /apps, /health, ... routes first
//   panel::InstallPanel(router, panel::EmbeddedAssets(),
//                       {.connect_origins = [](const net::Request&) { return "http://s3:9000"; }});
//
// What answers what (GET and HEAD; any other method gets the usual 404 of an unknown route):
//   /assets/<file>        a content-hashed Vite output: Cache-Control immutable, for a year
//   /<file.ext>           another file of the build (favicon.svg): Cache-Control no-cache
//   /, /jobs/..., /<page> index.html, no-cache: the panel's own router draws the page
//   a reserved prefix     (kReservedPrefixes: /v1, /apps, /notebooks, /health, /metrics, /internal,
//                         and anything below them) is never the panel's: the 404 problem+json of
//                         an unknown route, as without the panel. So is a missing /assets/ file
//                         (never index.html for a script from another build).
// The panel installs itself as the router's fallback, so every route registered on the router
// (before or after) wins over it.
//
// Every panel answer carries a strong ETag (If-None-Match answers 304), X-Content-Type-Options:
// nosniff, Referrer-Policy: no-referrer (presigned URLs never leak through Referer), and the
// Content-Security-Policy of PanelCsp(): scripts and styles only from the panel itself (no inline
// script), fetches only to the panel's origin and the S3 endpoint, no framing.
//
// Thread-safety: the handler only reads the assets and calls `connect_origins`; any thread.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "net/http.h"

namespace sovai::panel {

// One file of the built panel, in static storage.
struct Asset {
  std::string_view path;  // from the panel root: "/index.html", "/assets/index-3fa2b1c4.js"
  std::string_view data;
  std::string_view etag;  // a quoted strong validator: "\"3fa2b1c4d5e6f708\""
};

// The files compiled into this binary by web/CMakeLists.txt (the generated panel_assets.cc, in
// the library sovai_panel_assets). When Node.js or the npm packages were missing at configure
// time, one index.html that says how to build the panel.
std::span<const Asset> EmbeddedAssets();

// Path prefixes that belong to the API, the gateway and the server: the panel never answers them.
inline constexpr std::string_view kReservedPrefixes[] = {"/v1",     "/apps",    "/notebooks",
                                                         "/health", "/metrics", "/internal"};

// Cache lifetime of the hashed files under /assets/ (a new build has new names).
inline constexpr int64_t kImmutableMaxAgeS = 365 * 24 * 3600;

struct PanelOptions {
  // The origins, besides the panel's own, that the panel's scripts fetch from (the S3 endpoint
  // as this request's client reaches it), space-separated, for the CSP's connect-src. Called per
  // request; empty = none.
  std::function<std::string(const net::Request&)> connect_origins;
};

// The Content-Security-Policy of the panel's pages: nothing inline, nothing from elsewhere but
// the fetches to `connect_origins`.
std::string PanelCsp(std::string_view connect_origins);

// "text/html; charset=utf-8" for ".html", "text/javascript; charset=utf-8" for ".js", ... by the
// extension of `path`; "application/octet-stream" for an unknown one.
std::string_view ContentTypeOf(std::string_view path);

// Answers a request for the panel as described above. The assets must outlive the handler; one
// of them should be "/index.html" (else pages are 404).
class PanelHandler {
 public:
  PanelHandler(std::span<const Asset> assets, PanelOptions options);
  net::Response Handle(const net::Request& request) const;

 private:
  const Asset* Find(std::string_view path) const;
  net::Response Serve(const net::Request& request, const Asset& asset, bool immutable) const;

  std::span<const Asset> assets_;
  PanelOptions options_;
};

// Sets `router`'s fallback to a PanelHandler over `assets`.
void InstallPanel(net::Router& router, std::span<const Asset> assets, PanelOptions options);

}  // namespace sovai::panel
