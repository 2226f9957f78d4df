// GET /v1/tco (docs/tco.md, "The API"): the comparison of `sovai tco` for the caller's project,
// with the monthly curves the panel draws. The inputs are the CLI's flags as query parameters
// (`purchase_eur=250000&utilisation=0.8`, same defaults, same limits, control/tco.h), the price is
// the catalog's, and the history is the project's last kTcoHistoryDays of that flavor, read from
// the billing lines as `sovai tco` reads GET /v1/billing/usage?group_by=flavor.
//
// Thread-safety: a pure function of its arguments (BillingService is thread-safe).
#pragma once

#include <cstdint>
#include <string>

#include "control/billing_service.h"
#include "control/flavors.h"
#include "net/http.h"

namespace sovai::control {

struct TcoApiSources {
  const FlavorCatalog* flavors = nullptr;  // required
  // nullptr, or `history_refused` set: no history (`actual` null, `history_note` says why).
  BillingService* billing = nullptr;
  std::string project;          // whose usage
  std::string history_refused;  // why this caller may not read the usage ("" = it may)
  int64_t now_unix_micros = 0;
};

// The answer: 200 with TcoReportJson plus `curves` (TcoCurves) and `history_note`; 400 naming
// each bad or unknown query parameter; 404 naming `gpu_model` when the catalog has no GPU flavor
// of that model and no price was given.
net::Response TcoApiResponse(const net::Request& request, const TcoApiSources& sources);

}  // namespace sovai::control
