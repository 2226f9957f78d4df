// GET /v1/tco: the query → TcoInputs (the CLI's table, control/tco.h), the catalog price, the
// project's usage history, and the JSON answer.
#include "control/tco_api.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "base/json.h"
#include "base/time.h"
#include "control/billing.h"
#include "control/problem.h"
#include "control/tco.h"

namespace sovai::control {
namespace {

using Json = nlohmann::json;

constexpr int64_t kTcoMicrosPerMinute = 60'000'000;

// A whole-number parameter within [1, max].
std::optional<int64_t> ParseCount(std::string_view text, int64_t max) {
  if (text.empty() || text.size() > 12) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > max) return std::nullopt;
  return value;
}

}  // namespace

net::Response TcoApiResponse(const net::Request& request, const TcoApiSources& sources) {
  TcoInputs in;
  std::string gpu_model = "H100";
  bool want_history = true;
  bool price_given = false;
  std::vector<FieldError> errors;
  for (const auto& [name, value] : request.query_params()) {
    if (name == "gpu_model") {
      if (value.empty() || value.size() > kTcoMaxGpuModelBytes) {
        errors.push_back({name, "gpu_model must be 1.." + std::to_string(kTcoMaxGpuModelBytes) +
                                    " characters, such as H100"});
      }
      gpu_model = value;
      continue;
    }
    if (name == "history") {
      if (value != "true" && value != "false") {
        errors.push_back({name, "history must be true or false"});
      }
      want_history = value != "false";
      continue;
    }
    if (name == TcoInputName(kTcoGpusInput, TcoNames::kQuery) ||
        name == TcoInputName(kTcoDepreciationMonthsInput, TcoNames::kQuery)) {
      const bool gpus = name == "gpus";
      const int64_t max = gpus ? kTcoMaxGpus : kTcoMaxDepreciationMonths;
      auto count = ParseCount(value, max);
      if (!count) {
        errors.push_back({name, name + " must be a whole number between 1 and " +
                                    std::to_string(max) + ", not '" + value + "'"});
        continue;
      }
      (gpus ? in.gpus : in.depreciation_months) = *count;
      continue;
    }
    const TcoDecimalInput* input = nullptr;
    for (const TcoDecimalInput& d : kTcoDecimalInputs) {
      if (name == TcoInputName(d.name, TcoNames::kQuery)) input = &d;
    }
    if (input == nullptr) {
      errors.push_back({name, "unknown parameter '" + name +
                                  "'; GET /v1/tco takes the inputs of `sovai tco` (docs/tco.md) "
                                  "with '_' for '-', gpu_model and history"});
      continue;
    }
    auto parsed = ParseTcoDecimal(name, value, input->max_units);
    if (!parsed.ok()) {
      errors.push_back({name, parsed.status().message()});
      continue;
    }
    in.*input->member = *parsed;
    if (input->member == &TcoInputs::price_per_gpu_minute_micro_eur) price_given = true;
  }
  if (errors.empty()) {
    TcoInputs check = in;
    if (!price_given) check.price_per_gpu_minute_micro_eur = 1;  // the catalog's, checked below
    std::string bad;
    if (base::Status s = ValidateTcoInputs(check, TcoNames::kQuery, &bad); !s.ok()) {
      errors.push_back({TcoInputName(bad, TcoNames::kQuery), s.message()});
    }
  }
  if (!errors.empty()) {
    return ProblemResponse(
        base::InvalidArgumentError("the query has " + std::to_string(errors.size()) +
                                   " invalid parameter" + (errors.size() == 1 ? "" : "s")),
        errors);
  }

  std::vector<TcoFlavor> gpu_flavors;
  for (const Flavor& f : sources.flavors->flavors()) {
    if (f.kind != FlavorKind::kGpu) continue;
    gpu_flavors.push_back({f.id, f.gpu_model, f.gpus_per_unit, f.price_micro_eur_per_minute});
  }
  auto catalog = FindTcoCatalogPrice(gpu_flavors, gpu_model, TcoNames::kQuery);
  if (!catalog.ok() && !price_given) {
    return ProblemResponse(catalog.status(), {{"gpu_model", catalog.status().message()}});
  }
  if (catalog.ok() && !price_given) {
    in.price_per_gpu_minute_micro_eur = catalog->price_per_gpu_minute_micro_eur;
    std::string bad;
    if (base::Status s = ValidateTcoInputs(in, TcoNames::kQuery, &bad); !s.ok()) {
      return ProblemResponse(base::InvalidArgumentError("the catalog price of " + catalog->flavor +
                                                        " is out of range: " + s.message()));
    }
  }

  // The history, as `sovai tco` derives it from GET /v1/billing/usage?group_by=flavor.
  TcoContext ctx{.gpu_model = gpu_model, .price_given = price_given};
  if (catalog.ok()) ctx.flavor = catalog->flavor;
  std::string note;
  if (!want_history) {
    note = "history=false: the assumed utilisation only";
  } else if (!catalog.ok()) {
    note = "no catalog flavor, so no usage history: " + catalog.status().message();
  } else if (!sources.history_refused.empty()) {
    note = "no usage history: " + sources.history_refused;
  } else if (sources.billing == nullptr) {
    note = "no usage history: billing is not enabled on this server";
  } else {
    const Window window{sources.now_unix_micros - kTcoHistoryDays * 24 * 3600 * 1'000'000,
                        sources.now_unix_micros};
    auto lines = sources.billing->Lines(sources.project, window, sources.now_unix_micros);
    if (!lines.ok()) {
      note = "no usage history: " + lines.status().message();
    } else {
      Json groups = Json::array();
      for (const Group& g : GroupLines(*lines, GroupBy::kFlavor)) {
        groups.push_back({{"key", g.key}, {"quantity", g.quantity}});
      }
      auto history = DeriveUsageHistory(
          Json{{"groups", std::move(groups)}}, catalog->flavor, catalog->gpus_per_unit,
          (window.to_unix_micros - window.from_unix_micros) / kTcoMicrosPerMinute);
      if (history.ok()) {
        ctx.history = *history;
        ctx.history_from = base::FormatRfc3339(window.from_unix_micros);
        ctx.history_to = base::FormatRfc3339(window.to_unix_micros);
      } else {
        note = "usage history ignored: " + history.status().message();
      }
    }
  }

  const TcoReport report = ComputeTco(in, ctx.history);
  Json body = TcoReportJson(in, report, ctx);
  Json curves = Json::array();
  for (const TcoCurvePoint& p : TcoCurves(in, report)) {
    curves.push_back({{"utilisation_ppm", p.utilisation_ppm},
                      {"owning_cents", p.owning_cents},
                      {"pay_as_you_go_cents", p.pay_as_you_go_cents}});
  }
  body["curves"] = std::move(curves);
  body["history_note"] = note;
  body["history_days"] = kTcoHistoryDays;
  return net::Response::Json(200, base::DumpJson(body) + "\n");
}

}  // namespace sovai::control
